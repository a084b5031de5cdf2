"""The OPA server backend (policy_backend: opa) against a real loopback server speaking OPA's
Data API: the same decisions as the embedded backend, fail closed on every kind of bad answer,
the decision cache and its revision rule."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import pytest

from gateway.errors import ConfigError, PolicyUnavailable
from gateway.policy import opa
from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import PolicySources
from gateway.policy.opa import OpaPolicy, parse_url
from gateway.policy.standin import StandIn
from gateway.testing import free_port
from gateway.types import DecisionResult
from tests.policy.helpers import BASE_INPUT, make_input
from tests.policy.opa_helpers import (
    Misbehaving,
    Recording,
    Redirecting,
    decide_all,
    run,
    standin,
)

# --- the contract: one corpus, both backends --------------------------------------------------


@pytest.fixture(scope="module")
def corpus_sources(shipped: PolicySources) -> PolicySources:
    """The shipped policy with data that reaches every shipped rule (an actor without roles,
    an admin)."""
    data = dict(shipped.data)
    data["actors"] = {**data["actors"], "dave": {"roles": []}, "erin": {"roles": ["admin"]}}
    demo = dict(data["workspaces"]["demo"])
    demo["members"] = [*demo["members"], "dave", "erin"]
    data["workspaces"] = {**data["workspaces"], "demo": demo}
    return replace(shipped, data=data)


HIGH = {"name": "proc.deploy", "risk": "high", "side_effect": "external", "tags": []}
CRITICAL = {"name": "db.drop", "risk": "critical", "reversible": False}

CORPUS: dict[str, dict[str, Any]] = {
    "allow medium": make_input(),
    "allow low read by an approver": make_input(
        tool={"risk": "low", "side_effect": "read"}, actor={"user_id": "bob"}
    ),
    "deny unknown actor": make_input(actor={"user_id": "mallory"}),
    "deny actor without roles": make_input(actor={"user_id": "dave"}),
    "deny unknown workspace": make_input(workspace={"id": "nowhere"}),
    "deny not a member": make_input(workspace={"id": "ops"}),
    "deny path outside": make_input(
        paths=[{"argument": "path", "relative": "../x", "inside_workspace": False}]
    ),
    "deny path without relative": make_input(
        paths=[{"argument": "path", "inside_workspace": True}]
    ),
    "deny protected path": make_input(
        paths=[{"argument": "path", "relative": "sub/.git/HEAD", "inside_workspace": True}]
    ),
    "allow protected path read": make_input(
        tool={"side_effect": "read"},
        paths=[{"argument": "path", "relative": ".git/HEAD", "inside_workspace": True}],
    ),
    "deny risk without rule": make_input(tool={"risk": "extreme"}),
    "deny no role for risk": make_input(actor={"user_id": "bob"}),
    "deny critical irreversible": make_input(tool=CRITICAL, actor={"user_id": "erin"}),
    "approval high": make_input(tool=HIGH),
    "approval override": make_input(tool={"name": "fs.delete_file"}),
    "approval tag": make_input(tool={"name": "proc.python", "tags": ["runs_agent_code"]}),
    "allow approved": make_input(tool=HIGH, approval={"present": True, "approved_by": "bob"}),
    "deny self approval": make_input(
        tool=HIGH, actor={"user_id": "carol"}, approval={"present": True, "approved_by": "carol"}
    ),
    "deny approver without the role": make_input(
        tool=HIGH, approval={"present": True, "approved_by": "alice"}
    ),
    "deny several reasons": make_input(
        actor={"user_id": "mallory"}, workspace={"id": "nowhere"}, tool={"risk": "extreme"}
    ),
    "edge empty document": {},
    "error paths not a list": make_input(paths="notes/a.txt"),
    "edge unicode": make_input(
        actor={"user_id": "zoë\u2028"},
        paths=[{"argument": "päth", "relative": "ü/ñ", "inside_workspace": True}],
    ),
    "edge large arguments": make_input(arguments={"content": "x" * 200_000}),
}


def test_both_backends_give_identical_decisions(corpus_sources: PolicySources) -> None:
    documents = list(CORPUS.values())
    embedded = EmbeddedPolicy(corpus_sources)
    expected = [embedded.decide_sync(d) for d in documents]
    run(embedded.aclose())
    results = {r.result for r in expected}
    assert results == set(DecisionResult)  # the corpus reaches allow, approval and deny
    with standin(corpus_sources) as server:
        got = run(decide_all(corpus_sources, server.url, documents, cache_size=0))
        assert server.requests == len(documents)
    for name, want, have in zip(CORPUS, expected, got, strict=True):
        if name.startswith("error"):  # an evaluation error: OPA answers 500, no decision
            assert want.result is DecisionResult.DENY
            assert want.reasons[0].startswith("policy error: ")
            assert isinstance(have, PolicyUnavailable) and have.cause == "status", have
            continue
        assert (have.result, have.reasons, dict(have.extra)) == (
            want.result,
            want.reasons,
            dict(want.extra),
        ), name
        assert have.decision_id, name
        assert not have.reasons[0].startswith("policy error"), name


# --- fail closed -------------------------------------------------------------------------------


BAD_ANSWERS = {
    "html": ((200, "text/html", b"<html>oops</html>"), "not_json", "text/html, not JSON"),
    "no result": ((200, "application/json", b'{"decision_id": "d1"}'), "undefined", "undefined"),
    "wrong shape": (
        (200, "application/json", b'{"result": {"result": "yes", "reasons": []}}'),
        "malformed",
        "unknown decision result",
    ),
    "reasons not strings": (
        (200, "application/json", b'{"result": {"result": "allow", "reasons": [1]}}'),
        "malformed",
        "not a list of strings",
    ),
    "a list": ((200, "application/json", b"[1]"), "not_json", "not a JSON object"),
    "broken json": ((200, "application/json", b'{"result": '), "not_json", "not JSON"),
    "500": ((500, "application/json", b'{"code": "internal_error"}'), "status", "HTTP 500"),
    "503": ((503, "text/plain", b"busy"), "status", "HTTP 503"),
}


@pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
def test_a_bad_answer_fails_closed_with_its_cause_in_the_log(
    shipped: PolicySources, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No decision from OPA (not 200, not a JSON object) refuses the call, retryably, with
    no internals in the message; a decision OPA gave but that is unusable denies it."""
    reply, kind, cause = BAD_ANSWERS[case]

    class Bad(Misbehaving):
        pass

    Bad.reply = reply
    before = opa.FAILURES[kind]
    with standin(shipped, Bad) as server:
        (decision,) = run(decide_all(shipped, server.url, [BASE_INPUT]))
    if kind in opa.UNAVAILABLE:
        assert isinstance(decision, PolicyUnavailable), decision
        assert (decision.code, decision.retryable, decision.cause) == (
            "policy_unavailable",
            True,
            kind,
        )
        assert cause not in decision.message and "OPA" not in decision.message
    else:
        assert decision.result is DecisionResult.DENY
        (reason,) = decision.reasons
        assert reason.startswith("policy error: OPA") and cause in reason
    assert opa.FAILURES[kind] == before + 1
    assert any(kind in r.getMessage() and cause in r.getMessage() for r in caplog.records)


def test_a_slow_opa_is_refused_after_the_deadline(
    shipped: PolicySources, caplog: pytest.LogCaptureFixture
) -> None:
    class Slow(Misbehaving):
        delay = 1.0

    before = opa.FAILURES["timeout"]
    with standin(shipped, Slow) as server:
        started = time.monotonic()
        (refused,) = run(decide_all(shipped, server.url, [BASE_INPUT], timeout=0.1))
        waited = time.monotonic() - started
    assert isinstance(refused, PolicyUnavailable) and refused.cause == "timeout"
    assert "OPA did not answer within 100 ms" in caplog.text
    assert opa.FAILURES["timeout"] == before + 1
    assert waited < Slow.delay  # the gateway's deadline, not the server's pace, ended it


def test_a_stopped_opa_is_refused(shipped: PolicySources, caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    before = opa.FAILURES["connection"]
    refusals = run(decide_all(shipped, url, [BASE_INPUT, BASE_INPUT]))
    for refused in refusals:
        assert isinstance(refused, PolicyUnavailable) and refused.cause == "connection"
        assert url not in refused.message  # the transport's words stay in the log
    assert f"cannot reach OPA at {url}" in caplog.text
    assert opa.FAILURES["connection"] == before + 2  # no retries, and a failure is not cached


@pytest.mark.parametrize("status", [302, 307, 308])
def test_a_redirect_is_refused_and_never_followed(shipped: PolicySources, status: int) -> None:
    """OPA (or a proxy in front of it) that redirects to another origin which would allow:
    the decision, the listing and the health probe are refused, and the other origin
    receives nothing (the policy input goes to opa_url only)."""

    class ToOther(Redirecting):
        pass

    async def ask(url: str) -> tuple[Any, Any, bool]:
        backend = OpaPolicy(shipped, url)
        await backend.open()
        try:
            healthy = await backend.available()
            listing = await backend.listed([BASE_INPUT])
            (decided,) = await decide_all(shipped, url, [BASE_INPUT])
            return decided, listing, healthy
        finally:
            await backend.aclose()

    with standin(shipped, Recording) as other:
        ToOther.status, ToOther.to = status, other.url
        with standin(shipped, ToOther) as server:
            decided, listing, healthy = run(ask(server.url))
        assert other.seen == []
    assert isinstance(decided, PolicyUnavailable) and decided.cause == "status"
    assert listing is not None and not listing[0].listed
    assert f"HTTP {status}" in (listing[0].problem or "")
    assert "not followed" in (listing[0].problem or "")
    assert not healthy


def test_readiness_comes_from_answers_and_one_probe_at_a_time(shipped: PolicySources) -> None:
    """``available`` (for /readyz): one health probe for everyone asking at once; known
    without a request while OPA answered within PROBE_INTERVAL; false once OPA is down."""

    async def go(server: Recording) -> None:
        backend = OpaPolicy(shipped, server.url)
        await backend.open()
        try:
            assert all(await asyncio.gather(*(backend.available() for _ in range(5))))
            assert server.seen == [("GET", "/health")]  # one probe for the five
            await backend.decide(BASE_INPUT)
            assert await backend.available()
            assert len(server.seen) == 2  # the decision's answer said so: no probe
            server.stop()
            deadline = time.monotonic() + 10
            while await backend.available():  # until its last answer is PROBE_INTERVAL old
                assert time.monotonic() < deadline, "still available with OPA stopped"
                await asyncio.sleep(0.05)
        finally:
            await backend.aclose()

    with standin(shipped, Recording) as server:
        run(go(server))


def test_a_closed_backend_denies(shipped: PolicySources) -> None:
    async def go() -> Any:
        backend = OpaPolicy(shipped, "http://127.0.0.1:1")
        await backend.open()
        await backend.aclose()
        return await backend.decide(BASE_INPUT)

    assert run(go()).reasons == ("policy error: the policy backend is closed",)


def test_an_input_that_is_not_json_is_denied_before_asking(shipped: PolicySources) -> None:
    with standin(shipped) as server:
        (decision,) = run(decide_all(shipped, server.url, [make_input(arguments={"n": 1e999})]))
        assert server.requests == 0
    assert "not JSON" in decision.reasons[0]


@pytest.mark.parametrize(
    "url", ["ftp://opa:8181", "http://", "http://opa:8181/v1", "http://opa:99999"]
)
def test_a_bad_opa_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="opa_url"):
        parse_url(url)


# --- the cache -----------------------------------------------------------------------------------


def test_the_cache_saves_requests_and_keeps_decision_ids_honest(shipped: PolicySources) -> None:
    other_call = make_input(request={"call_id": "c2", "time_ms": 1}, arguments={"content": "x"})
    with standin(shipped) as server:
        first, second, third = run(
            decide_all(shipped, server.url, [BASE_INPUT, other_call, make_input(tool=HIGH)])
        )
        assert server.requests == 2  # other_call differs only where the policy does not read
    assert first.decision_id and second.decision_id is None and third.decision_id
    assert (first.result, first.reasons) == (second.result, second.reasons)


def test_no_cache_while_opa_runs_another_revision(shipped: PolicySources) -> None:
    class Other(StandIn):
        def __init__(self, sources: PolicySources, revision: str, **kw: Any) -> None:
            super().__init__(sources, "some-other-revision", **kw)

    with standin(shipped, Other) as server:
        run(decide_all(shipped, server.url, [BASE_INPUT] * 3))
        assert server.requests == 3


def test_cached_decisions_expire(shipped: PolicySources) -> None:
    async def go(url: str) -> None:
        # A TTL a loaded machine cannot outlast between the first two decisions; then the
        # clock past it, counted from after the first (its decision was cached before).
        backend = OpaPolicy(shipped, url, cache_ttl=0.5)
        await backend.open()
        await backend.decide(BASE_INPUT)
        expired_by = time.monotonic() + 0.5
        await backend.decide(BASE_INPUT)
        while time.monotonic() <= expired_by:
            await asyncio.sleep(expired_by - time.monotonic() + 0.01)
        await backend.decide(BASE_INPUT)
        await backend.aclose()

    with standin(shipped) as server:
        run(go(server.url))
        assert server.requests == 2
