"""Approvals asked through the protocol (gateway/mcp/elicitation.py): the official SDK client
with an elicitation callback, in both eras, against a real gateway process."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError

from gateway.mcp import meta
from tests.helpers import ALICE, BOB
from tests.mcp.helpers import ERAS, Gateway, connect, meta_of

pytestmark = pytest.mark.slow


def _target(gw: Gateway, era: str) -> str:
    path = f"asked-{era}-{uuid.uuid4().hex[:6]}.txt"
    (gw.workspace / path).write_text("bye")
    return path


def _ids() -> dict[str, str]:
    return {
        meta.RUN_ID: f"r-{uuid.uuid4().hex[:8]}",
        meta.CALL_ID: f"c-{uuid.uuid4().hex[:8]}",
        meta.IDEMPOTENCY_KEY: f"k-{uuid.uuid4().hex}",
    }


def _approve(gw: Gateway, approval_id: str) -> None:
    with gw.rest(BOB) as rest:
        response = rest.post(f"/v1/approvals/{approval_id}/approve", json={"comment": "ok"})
        assert response.status_code == 202, response.text


def _approval(gw: Gateway, approval_id: str) -> dict[str, Any]:
    with gw.rest(BOB) as rest:
        response = rest.get(f"/v1/approvals/{approval_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


class Person:
    """The elicitation callback: records what it was shown; approves as bob over REST
    first when told to, then answers ``action``."""

    def __init__(self, gw: Gateway, action: str, approve: bool) -> None:
        self.gw, self.action, self.approve = gw, action, approve
        self.asked: list[types.ElicitRequestURLParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams), params
        self.asked.append(params)
        if self.approve:
            approval_id = params.url.rsplit("/", 1)[-1]
            await anyio.to_thread.run_sync(_approve, self.gw, approval_id)
        return types.ElicitResult(action=self.action)


@pytest.mark.parametrize("era", ERAS)
def test_the_approval_is_asked_through_the_protocol_and_the_call_goes_on(
    gw: Gateway, era: str
) -> None:
    path = _target(gw, era)
    person = Person(gw, "accept", approve=True)

    async def main() -> types.CallToolResult:
        async with connect(gw.url, era, elicitation_callback=person) as client:
            return await client.call_tool("fs.delete_file", {"path": path}, meta=_ids())

    result = anyio.run(main)
    assert not result.is_error, result
    assert meta_of(result)[meta.OUTCOME] == "succeeded"
    assert not (gw.workspace / path).exists()
    [asked] = person.asked
    assert asked.mode == "url"
    assert asked.url.startswith(f"{gw.url}/ui/approvals/ap")
    approval = _approval(gw, asked.url.rsplit("/", 1)[-1])
    assert approval["status"] == "used" and approval["decided_by"] == "bob"  # spent by the call
    assert path in asked.message and approval["arguments_sha256"] in asked.message
    assert all(reason in asked.message for reason in approval["reasons"])
    assert "You may not decide it yourself" in asked.message  # alice is no approver


@pytest.mark.parametrize(("era", "action"), [("legacy", "decline"), ("2026-07-28", "cancel")])
def test_a_declined_or_dismissed_elicitation_changes_nothing(
    gw: Gateway, era: str, action: str
) -> None:
    path = _target(gw, era)
    person = Person(gw, action, approve=False)

    async def main() -> types.CallToolResult:
        async with connect(gw.url, era, elicitation_callback=person) as client:
            return await client.call_tool("fs.delete_file", {"path": path}, meta=_ids())

    result = anyio.run(main)
    assert not result.is_error, result
    body = result.structured_content or {}
    assert body["status"] == "awaiting_approval"
    assert "still pending" in result.content[0].text  # type: ignore[union-attr]
    assert "toolgate.execution_status" in result.content[0].text  # type: ignore[union-attr]
    assert _approval(gw, body["approval"]["id"])["status"] == "pending"
    assert (gw.workspace / path).exists()
    assert len(person.asked) == 1


def test_a_forged_or_borrowed_request_state_is_refused(gw: Gateway) -> None:
    era = "2026-07-28"
    path = _target(gw, era)
    args = {"path": path}
    person = Person(gw, "accept", approve=False)

    async def first() -> types.InputRequiredResult:
        async with connect(gw.url, era, elicitation_callback=person) as client:
            out = await client.session.call_tool(
                "fs.delete_file", args, meta=_ids(), allow_input_required=True
            )
            assert isinstance(out, types.InputRequiredResult), out
            return out

    asked = anyio.run(first)
    assert asked.request_state and asked.input_requests
    state = asked.request_state
    payload, mac = state.split(".")
    forged = f"{payload}.{mac[:-2]}{'AA' if mac[-2:] != 'AA' else 'BB'}"
    accepted = {"toolgate.approval": types.ElicitResult(action="accept")}

    async def retry(key: str, request_state: str) -> str:
        async with connect(gw.url, era, key=key, elicitation_callback=person) as client:
            try:
                await client.session.call_tool(
                    "fs.delete_file",
                    args,
                    input_responses=accepted,  # type: ignore[arg-type]
                    request_state=request_state,
                    allow_input_required=True,
                )
            except MCPError as exc:
                return exc.error.message
        raise AssertionError("the retry was answered")

    assert "requestState refused" in anyio.run(retry, ALICE, forged)
    assert "another principal" in anyio.run(retry, BOB, state)
    assert "requestState refused" in anyio.run(retry, ALICE, "not-a-state")
    assert (gw.workspace / path).exists()


@pytest.mark.parametrize("era", ERAS)
def test_a_client_without_url_elicitation_gets_the_pending_answer(gw: Gateway, era: str) -> None:
    path = _target(gw, era)

    async def main() -> Any:
        async with connect(gw.url, era) as client:
            if era == "legacy":
                return await client.call_tool("fs.delete_file", {"path": path}, meta=_ids())
            return await client.session.call_tool(
                "fs.delete_file", {"path": path}, meta=_ids(), allow_input_required=True
            )

    result = anyio.run(main)
    assert isinstance(result, types.CallToolResult) and not result.is_error, result
    body = result.structured_content or {}
    assert body["status"] == "awaiting_approval"
    assert result.content[0].text.startswith("awaiting approval")  # type: ignore[union-attr]
    assert (gw.workspace / path).exists()


def test_an_accept_without_a_decision_answers_that_the_approval_is_still_pending(
    gw: Gateway,
) -> None:
    """The person opened the page but no approver has decided: "accept" approves nothing;
    after a bounded wait the call answers pending, with how to follow it."""
    era = "2026-07-28"
    path = _target(gw, era)
    person = Person(gw, "accept", approve=False)

    async def main() -> types.CallToolResult:
        async with connect(gw.url, era, elicitation_callback=person) as client:
            return await client.call_tool("fs.delete_file", {"path": path}, meta=_ids())

    result = anyio.run(main)
    assert not result.is_error, result
    body = result.structured_content or {}
    assert body["status"] == "awaiting_approval"
    note = result.content[0].text  # type: ignore[union-attr]
    assert note.startswith("the page was opened, which decides nothing")
    assert "still pending" in note and body["execution_id"] in note
    assert _approval(gw, body["approval"]["id"])["status"] == "pending"
    assert (gw.workspace / path).exists()
