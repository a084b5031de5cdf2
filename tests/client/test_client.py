"""gateway.client against a real gateway process: every method, and the typed errors."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.client import (
    AsyncClient,
    CallOptions,
    Client,
    Forbidden,
    IdempotencyMismatch,
    MalformedRequest,
    NotFound,
    TransportError,
    Unauthenticated,
)
from gateway.client.toolkit import with_call_id
from gateway.events.model import make_event
from gateway.service.executions import PAGE_EVENTS
from gateway.store.store import Store
from gateway.testing import free_port
from tests.helpers import ALICE, BOB

Gw = tuple[str, Path]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}.txt"


def test_execute_plan_events_and_replay(gw: Gw) -> None:
    url, workspace = gw
    path = _name("client")
    key = CallOptions(idempotency_key=f"k-{uuid.uuid4().hex}")
    with Client(url, ALICE) as client:
        plan = client.plan("fs.write_file", {"path": path, "content": "hi"}, key)
        assert plan["would"] == "run" and not (workspace / path).exists()
        done = client.execute("fs.write_file", {"path": path, "content": "hi"}, key)
        assert done.terminal and done.succeeded and done.data["path"] == path
        assert (workspace / path).read_text() == "hi"
        events = client.events(done.id)
        assert events[0]["type"] == "tool.requested" and events[-1]["type"] == "tool.completed"
        later = client.events(done.id, after=events[-2]["seq"])
        assert [e["seq"] for e in later] == [events[-1]["seq"]]
        replay = client.execute("fs.write_file", {"path": path, "content": "hi"}, key)
        assert replay.id == done.id
        with pytest.raises(IdempotencyMismatch) as info:
            client.execute("fs.write_file", {"path": path, "content": "other"}, key)
        assert info.value.code == "idempotency_key_reused" and info.value.status == 422
        assert client.get(done.id).outcome == "succeeded"
        assert [e.id for e in client.find(run_id=key.run_id)] == [done.id]


def test_a_framework_call_of_the_longest_run_id_succeeds(gw: Gw) -> None:
    # <run_id>/<tool call id> is longer than a key may be: the kit keys it by its digest, as
    # the MCP door does (gateway/client/keys.py), instead of being refused invalid_request
    url, _ = gw
    path = _name("long-run")
    run_id = f"run-{uuid.uuid4().hex}".ljust(256, "r")
    options = with_call_id(CallOptions(run_id=run_id), f"call_{uuid.uuid4().hex}")
    with Client(url, ALICE) as client:
        done = client.execute("fs.write_file", {"path": path, "content": "long"}, options)
    assert done.succeeded, done.error


def test_approval_by_another_principal_then_wait(gw: Gw) -> None:
    url, workspace = gw
    path = _name("doomed")
    (workspace / path).write_text("bye")
    options = CallOptions(idempotency_key=f"d-{uuid.uuid4().hex}")
    with Client(url, ALICE) as alice, Client(url, BOB) as bob:
        parked = alice.execute("fs.delete_file", {"path": path}, options)
        assert parked.status == "awaiting_approval" and parked.approval is not None
        approval_id = str(parked.approval["id"])
        assert approval_id in [a["id"] for a in bob.approvals(status="pending")]
        assert bob.approval(approval_id)["preview"]["exists"] is True
        with pytest.raises(Forbidden) as info:
            alice.approvals()
        assert info.value.code == "not_an_approver"
        bob.approve(approval_id, "fine")
        done = alice.wait(parked.id, timeout=30)
        assert done.succeeded, done.raw
    assert not (workspace / path).exists()


def test_deny_and_cancel(gw: Gw) -> None:
    url, workspace = gw
    path = _name("kept")
    (workspace / path).write_text("stay")
    with Client(url, ALICE) as alice, Client(url, BOB) as bob:
        parked = alice.execute(
            "fs.delete_file", {"path": path}, CallOptions(idempotency_key=uuid.uuid4().hex)
        )
        assert parked.approval is not None
        bob.deny(str(parked.approval["id"]), "no")
        denied = alice.wait(parked.id, timeout=30)
        assert (
            denied.outcome == "failed"
            and denied.error
            and denied.error["type"] == "approval_denied"
        )
        other = alice.execute(
            "fs.delete_file", {"path": path}, CallOptions(idempotency_key=uuid.uuid4().hex)
        )
        cancelled = alice.cancel(other.id)
        assert cancelled.terminal and cancelled.outcome == "cancelled", cancelled.raw
    assert (workspace / path).read_text() == "stay"


def test_tools_and_typed_errors(gw: Gw) -> None:
    url, _ = gw
    with Client(url, ALICE) as client:
        listing = client.tools()
        assert "fs.write_file" in {t["name"] for t in listing["items"]}
        openai = client.tools(format="openai")
        assert openai["names"]["fs__write_file"] == "fs.write_file"
        assert client.tool("fs.write_file", "1.0.0")["version"] == "1.0.0"
        with pytest.raises(NotFound):
            client.tool("no.such_tool")
        with pytest.raises(MalformedRequest) as bad:
            client.tools(format="nope")
        assert bad.value.code == "invalid_format"
        with pytest.raises(NotFound):
            client.get("ex_missing")
    with Client(url, "tg_wrong") as stranger, pytest.raises(Unauthenticated):
        stranger.tools()
    with Client(f"http://127.0.0.1:{free_port()}", ALICE) as nowhere, pytest.raises(TransportError):
        nowhere.tools()


def test_the_async_client_does_the_same(gw: Gw) -> None:
    url, workspace = gw
    path = _name("async")

    async def main() -> None:
        async with AsyncClient(url, ALICE) as client:
            plan = await client.plan("fs.write_file", {"path": path, "content": "a"})
            assert plan["would"] == "run"
            done = await client.execute("fs.write_file", {"path": path, "content": "a"})
            assert done.succeeded
            assert (await client.wait(done.id, timeout=5)).id == done.id
            assert (await client.events(done.id))[-1]["type"] == "tool.completed"
            with pytest.raises(NotFound):
                await client.cancel("ex_missing")

    anyio.run(main)
    assert (workspace / path).read_text() == "a"


def _add_output(workspace: Path, execution_id: str, count: int) -> None:
    """``count`` more ``tool.output`` events in the log of ``execution_id``, appended to the
    gateway's store as slow output leaves them (one small event per flush)."""
    database = workspace.parents[2] / "toolgate.db"  # make_project's, beside var/

    async def append() -> None:
        store = Store(f"sqlite:///{database}")
        await store.open()
        try:
            data = {"stream": "stdout", "text": "a line\n"}
            made = [make_event(execution_id, 0, "tool.output", data) for _ in range(count)]
            await store.append(execution_id, made)
        finally:
            await store.aclose()

    anyio.run(append)


def test_events_reads_a_log_longer_than_a_page_whole(gw: Gw) -> None:
    """The gateway answers an execution's events a page at a time; ``events()`` gives the
    whole log, as it did before the pages, sync and async, and ``after`` still counts."""
    url, workspace = gw
    with Client(url, ALICE) as client:
        done = client.execute("fs.write_file", {"path": _name("long"), "content": "x"})
        before = len(client.events(done.id))
        _add_output(workspace, done.id, 2 * PAGE_EVENTS + 10)
        whole = client.events(done.id)
        assert [e["seq"] for e in whole] == list(range(before + 2 * PAGE_EVENTS + 10))
        assert client.events(done.id, after=5) == whole[6:]

    async def main() -> list[dict[str, Any]]:
        async with AsyncClient(url, ALICE) as client:
            return await client.events(done.id)

    assert anyio.run(main) == whole
