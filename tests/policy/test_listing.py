"""The listing rule (data.toolgate.listed) through both backends' ``listed``: the shipped
policy's answers on a listing input, None for sources that do not define it, and fail closed
(never raises, never counted as a failed decision)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from gateway.policy import opa
from gateway.policy.embedded import EmbeddedPolicy, parse_listing
from gateway.policy.loader import PolicySources
from gateway.policy.opa import OpaPolicy
from gateway.testing import free_port
from gateway.types import Listing
from tests.policy.helpers import BASE_INPUT
from tests.policy.opa_helpers import Misbehaving, run, standin


def listing(**actor: Any) -> dict[str, Any]:
    """The listing input of BASE_INPUT's call: its tool, actor and workspace only."""
    doc = {k: BASE_INPUT[k] for k in ("tool", "actor", "workspace")}
    return {**doc, "actor": {**doc["actor"], **actor}}


ALICE, BOB, MALLORY = listing(), listing(user_id="bob"), listing(user_id="mallory")


async def ask_opa(sources: PolicySources, url: str, documents: list[Any]) -> list[Any]:
    backend = OpaPolicy(sources, url)
    await backend.open()
    try:
        return [await backend.listed(d) for d in documents]
    finally:
        await backend.aclose()


def test_the_shipped_policy_lists_what_the_actor_could_call(policy: EmbeddedPolicy) -> None:
    answers = [asyncio.run(policy.listed(d)) for d in (ALICE, BOB, MALLORY)]
    assert answers == [Listing(True), Listing(False), Listing(False)]


def test_opa_answers_as_the_embedded_backend(shipped: PolicySources) -> None:
    with standin(shipped) as server:
        answers = run(ask_opa(shipped, server.url, [ALICE, BOB, MALLORY]))
    assert answers == [Listing(True), Listing(False), Listing(False)]


def test_sources_without_the_rule_answer_none(scratch: Any, shipped: PolicySources) -> None:
    sources = scratch('package toolgate\n\ndecision := {"result": "allow", "reasons": []}\n')
    assert asyncio.run(EmbeddedPolicy(sources).listed(ALICE)) is None
    with standin(sources) as server:
        assert run(ask_opa(sources, server.url, [ALICE])) == [None]


def test_an_opa_without_the_rule_the_gateway_expects_lists_nothing(
    shipped: PolicySources,
) -> None:
    # OPA runs an older bundle (no `listed`), the gateway's sources define it: undefined.
    older = replace(shipped, modules=(("p.rego", "package toolgate\n\ndecision := {}\n"),))
    with standin(older) as server:
        (answer,) = run(ask_opa(shipped, server.url, [ALICE]))
    assert answer == Listing(False, "OPA: toolgate.listed is undefined")


@pytest.mark.parametrize(
    ("reply", "cause"),
    [
        ((500, "application/json", b'{"code": "internal_error"}'), "HTTP 500"),
        ((200, "application/json", b'{"result": "yes"}'), "not a boolean"),
        ((200, "text/html", b"<html/>"), "not JSON"),
    ],
)
def test_a_bad_opa_answer_lists_nothing_and_counts_no_failed_decision(
    shipped: PolicySources, reply: tuple[int, str, bytes], cause: str
) -> None:
    class Bad(Misbehaving):
        pass

    Bad.reply = reply
    before = dict(opa.FAILURES)
    with standin(shipped, Bad) as server:
        (answer,) = run(ask_opa(shipped, server.url, [ALICE]))
    assert answer.listed is False and cause in answer.problem
    assert dict(opa.FAILURES) == before


def test_a_stopped_opa_lists_nothing(shipped: PolicySources) -> None:
    (answer,) = run(ask_opa(shipped, f"http://127.0.0.1:{free_port()}", [ALICE]))
    assert answer.listed is False and "cannot reach OPA" in answer.problem


def test_a_closed_or_non_json_listing_lists_nothing(shipped: PolicySources) -> None:
    backend = EmbeddedPolicy(shipped)
    assert asyncio.run(backend.listed({**ALICE, "x": float("nan")})).listed is False
    asyncio.run(backend.aclose())
    assert asyncio.run(backend.listed(ALICE)) == Listing(False, "the policy backend is closed")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, Listing(True)),
        (False, Listing(False)),
        ("<undefined>", Listing(False, "data.toolgate.listed is undefined")),
        (1, Listing(False, "data.toolgate.listed is not a boolean: 1")),
        (
            {"listed": True},
            Listing(False, 'data.toolgate.listed is not a boolean: {"listed": true}'),
        ),
        (None, Listing(False, "data.toolgate.listed is not a boolean: missing")),
    ],
)
def test_only_a_boolean_is_an_answer(value: Any, expected: Listing) -> None:
    assert parse_listing(value) == expected
