"""The listing rule (data.toolgate.listed) through both backends' ``listed``: the shipped
policy's answers on a listing input, None for sources that do not define it, and fail closed
(never raises, never counted as a failed decision)."""

from __future__ import annotations

import asyncio
import time
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
from tests.policy.opa_helpers import Hanging, Misbehaving, run, standin


def listing(**actor: Any) -> dict[str, Any]:
    """The listing input of BASE_INPUT's call: its tool, actor and workspace only."""
    doc = {k: BASE_INPUT[k] for k in ("tool", "actor", "workspace")}
    return {**doc, "actor": {**doc["actor"], **actor}}


ALICE, BOB, MALLORY = listing(), listing(user_id="bob"), listing(user_id="mallory")


async def ask_opa(
    sources: PolicySources, url: str, documents: list[Any], timeout: float = 0.25
) -> list[Any] | None:
    backend = OpaPolicy(sources, url, timeout=timeout)
    await backend.open()
    try:
        return await backend.listed(documents)
    finally:
        await backend.aclose()


def test_the_shipped_policy_lists_what_the_actor_could_call(policy: EmbeddedPolicy) -> None:
    answers = asyncio.run(policy.listed([ALICE, BOB, MALLORY]))
    assert answers == [Listing(True), Listing(False), Listing(False)]


def test_opa_answers_as_the_embedded_backend(shipped: PolicySources) -> None:
    with standin(shipped) as server:
        answers = run(ask_opa(shipped, server.url, [ALICE, BOB, MALLORY]))
    assert answers == [Listing(True), Listing(False), Listing(False)]


def test_sources_without_the_rule_answer_none(scratch: Any, shipped: PolicySources) -> None:
    sources = scratch('package toolgate\n\ndecision := {"result": "allow", "reasons": []}\n')
    assert asyncio.run(EmbeddedPolicy(sources).listed([ALICE])) is None
    with standin(sources) as server:
        assert run(ask_opa(sources, server.url, [ALICE])) is None


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


def test_opa_answers_each_document_in_order(shipped: PolicySources) -> None:
    documents = [ALICE, BOB, MALLORY] * 7  # more than LISTING_REQUESTS
    with standin(shipped) as server:
        answers = run(ask_opa(shipped, server.url, documents, timeout=5))
        assert server.requests == len(documents)
    assert answers == [Listing(True), Listing(False), Listing(False)] * 7
    assert run(ask_opa(shipped, "http://127.0.0.1:1", [])) == []


class HangsOnListed(Hanging):
    hangs = "/v1/data/toolgate/listed"


def test_a_hung_opa_answers_a_listing_within_one_deadline_a_few_at_a_time(
    shipped: PolicySources,
) -> None:
    # One deadline for the whole listing: neither one per document in turn (80 timeouts) nor
    # one per round of LISTING_REQUESTS (10 timeouts). The bound is far from all (no flake).
    documents, timeout = [ALICE] * 80, 0.2

    async def timed(url: str) -> tuple[float, list[Listing] | None]:
        backend = OpaPolicy(shipped, url, timeout=timeout)
        await backend.open()
        try:
            start = time.monotonic()
            answers = await backend.listed(documents)
            return time.monotonic() - start, answers
        finally:
            await backend.aclose()

    with standin(shipped, HangsOnListed) as server:
        elapsed, answers = run(timed(server.url))
        assert 0 < server.most_in_flight <= opa.LISTING_REQUESTS
    assert answers == [Listing(False, "OPA did not answer within 200 ms")] * len(documents)
    assert elapsed < 5 * timeout, elapsed


def test_a_stopped_opa_lists_nothing(shipped: PolicySources) -> None:
    (answer,) = run(ask_opa(shipped, f"http://127.0.0.1:{free_port()}", [ALICE]))
    assert answer.listed is False and "cannot reach OPA" in answer.problem


def test_a_closed_or_non_json_listing_lists_nothing(shipped: PolicySources) -> None:
    backend = EmbeddedPolicy(shipped)
    bad, good = asyncio.run(backend.listed([{**ALICE, "x": float("nan")}, ALICE]))
    assert bad.listed is False and "not JSON" in (bad.problem or "")
    assert good == Listing(True)
    asyncio.run(backend.aclose())
    closed = Listing(False, "the policy backend is closed")
    assert asyncio.run(backend.listed([ALICE, BOB])) == [closed, closed]
    opa_backend = OpaPolicy(shipped, f"http://127.0.0.1:{free_port()}")
    answers = run(opa_backend.listed([{**ALICE, "x": float("nan")}, ALICE]))
    assert "not JSON" in answers[0].problem and answers[1] == closed  # never opened


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
