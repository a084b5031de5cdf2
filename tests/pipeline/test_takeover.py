"""Taking over another replica's executions (gateway/runtime/recovery.py): which rule lets a
replica settle an execution it does not own, what it may do to the processes left behind,
and approved calls whose replica stopped before resuming them.

The multi-process proofs (real gateways, SIGKILL, a load) are tests/integration/test_replicas.py.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from gateway.adapters.base import AdapterCall
from gateway.declarations.catalogue import Catalogue
from gateway.events.model import make_event
from gateway.instance import HOST, INSTANCE_ID, NODE
from gateway.pipeline.runner import resume_call, run_call
from gateway.pipeline.services import Services
from gateway.runtime.approvals import resume
from gateway.runtime.recovery import Takeover, recover, takeover, unresumed
from gateway.store.records import ExecutionRecord, ReplicaRecord
from gateway.store.store import Store
from gateway.types import JSON, Decision, DecisionResult, Status
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    allow_all,
    make_services,
    ok,
    request,
    sha_probe,
)

pytestmark = pytest.mark.anyio
NOW = int(time.time() * 1000)


def _running(owner: str | None, updated_ms: int = NOW, id: str = "ex_t") -> ExecutionRecord:
    return ExecutionRecord(
        id, "alice", "a", "r", "t", id, "p", "demo", "fs.write_file", "1.2.0", "medium",
        Status.RUNNING, None, None, None, None, None, "{}", None, None, owner, NOW, updated_ms,
    )  # fmt: skip


def _replica(id: str, node: str, lease_until_ms: int) -> ReplicaRecord:
    return ReplicaRecord(id, node, HOST, 0, 0, lease_until_ms - 2000, lease_until_ms)


def _dead_local_owner() -> str:
    """An owner on this node whose process has exited (a pid that is free, or reused)."""
    proc = psutil.Popen(["true"])
    started = int(proc.create_time() * 1000)
    proc.wait()
    return f"{HOST}:{proc.pid}:{started}"


def _live_local_owner() -> str:
    parent = psutil.Process(os.getppid())
    return f"{HOST}:{parent.pid}:{int(parent.create_time() * 1000)}"


@pytest.mark.slow  # starts a process itself
async def test_each_owner_is_taken_over_by_its_rule(services: Services) -> None:
    dead, live = _dead_local_owner(), _live_local_owner()
    remote_live, remote_gone = "far:1:1", "far:2:2"
    replicas = {
        dead: _replica(dead, NODE, NOW + 60_000),  # its lease looks current: the pid decides
        live: _replica(live, NODE, NOW - 60_000),  # its lease passed, but the process lives
        remote_live: _replica(remote_live, "elsewhere", NOW + 1000),
        remote_gone: _replica(remote_gone, "elsewhere", NOW - 1),
    }
    stale = NOW - 10 * 60_000

    def rule(owner: str | None, updated_ms: int = NOW) -> Takeover | None:
        return takeover(services, _running(owner, updated_ms), replicas, NOW)

    assert rule(dead) == Takeover("owner_gone", True)
    assert rule(live) is None
    assert rule(remote_live) is None
    assert rule(remote_gone) == Takeover("lease_expired", False)  # never its pids
    assert rule(INSTANCE_ID) == Takeover("left_behind", True)
    # No replica row (a gateway of before replicas): the host name and the execution's beat.
    assert rule("nohost:1:1", stale) == Takeover("heartbeat_stale", False)
    assert rule("nohost:1:1") is None
    assert rule(_dead_local_owner()) == Takeover("owner_gone", True)
    services.active.add("ex_t")
    try:
        assert rule(dead) is None  # this process runs it right now
    finally:
        services.active.discard("ex_t")


class RecoveringAdapter(FunctionAdapter):
    """A fake adapter that left processes behind: ``recover`` records what it was asked
    (``recovered``: every state; ``steps``: each ``recover`` and probe, in order)."""

    def __init__(self, probe_value: str | None) -> None:
        super().__init__(ok, sha_probe(probe_value))
        self.recovered: list[Mapping[str, JSON]] = []
        self.steps: list[str] = []

    async def recover(self, states: Sequence[Mapping[str, JSON]]) -> None:
        self.recovered.extend(states)
        self.steps.append(f"recover {len(states)}")

    async def probe(self, name: str, params: Mapping[str, str], call: AdapterCall) -> JSON:
        self.steps.append(f"probe {call.execution_id}")
        return await super().probe(name, params, call)


async def _started_by(store: Store, services: Services, owner: str, id: str) -> ExecutionRecord:
    """A started execution of ``owner`` with a checkpointed pid, as a crash leaves it."""
    seed = await run_call(services, request(call_id=f"seed-{id}"))
    record = seed._replace(
        id=id, call_id=id, status=Status.RUNNING, outcome=None, result_json=None,
        owner=owner, payload_sha256=id,
    )  # fmt: skip
    events = [
        make_event(id, 0, "tool.requested", {}),
        make_event(id, 1, "tool.started", {}),
        make_event(id, 2, "state.checkpointed", {"adapter": {"pid": 1, "create_time": 1.0}}),
    ]
    await store.reserve(record, events, None)
    return record


@pytest.mark.parametrize("node", [NODE, "elsewhere"])
@pytest.mark.slow  # starts a process itself
async def test_only_a_local_owner_has_its_processes_stopped(
    tmp_path: Path, store: Store, catalogue: Catalogue, node: str
) -> None:
    adapter = RecoveringAdapter(probe_value="not-the-content")  # the probe finds nothing
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    owner = _dead_local_owner()
    record = await _started_by(store, services, owner, "ex_left")
    await store.beat_replica(_replica(owner, node, 0), lease_s=-60)  # its lease is long gone
    [settled] = await recover(services)
    events = await store.events(record.id)
    note = next(e.data for e in events if e.data.get("by") == "recovery")
    assert note["owner"] == owner and note["replica"] == INSTANCE_ID
    assert settled.result is not None
    if node == NODE:  # its pids are ours: stopped, then the probe is believed
        assert adapter.recovered == [{"pid": 1, "create_time": 1.0}]
        assert note["because"] == "owner_gone" and settled.outcome == "failed"
        assert settled.result["error"]["retryable"] is True
    else:  # another node's processes: left alone, and a probe that finds nothing proves nothing
        assert adapter.recovered == []
        assert note["because"] == "lease_expired" and settled.outcome == "unknown"
        assert "another node" in settled.result["error"]["message"]


@pytest.mark.slow  # starts a process itself
async def test_every_leftover_of_a_pass_is_stopped_in_one_call_before_any_probe(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    # A hundred trees stopped one recover() each waited for each other's grace periods; the
    # adapter now gets every state of the pass at once, and no probe runs before it returns.
    adapter = RecoveringAdapter(probe_value="not-the-content")
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    owner = _dead_local_owner()
    ids = [f"ex_left{i}" for i in range(5)]
    for id in ids:
        await _started_by(store, services, owner, id)
    await store.beat_replica(_replica(owner, NODE, 0), lease_s=-60)
    adapter.steps.clear()  # the seed calls' own probes
    settled = await recover(services)
    assert sorted(r.id for r in settled) == ids
    assert {r.outcome for r in settled} == {"failed"}  # stopped here, so the probe is believed
    assert adapter.steps[0] == "recover 5"
    assert sorted(adapter.steps[1:]) == [f"probe {id}" for id in ids]
    assert adapter.recovered == [{"pid": 1, "create_time": 1.0}] * 5


async def test_an_approved_call_left_parked_is_resumed_once(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    adapter = FunctionAdapter(ok, sha_probe(hashlib.sha256(b"hi").hexdigest()))

    def approve_first(document: Mapping[str, Any]) -> Decision:
        if document["approval"]["present"]:
            return Decision(DecisionResult.ALLOW, ("approved",))
        return Decision(DecisionResult.REQUIRE_APPROVAL, ("risky",))

    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(approve_first))
    parked = await run_call(services, request())
    assert parked.status is Status.AWAITING_APPROVAL and parked.approval_id
    decided = await store.decide_approval(parked.approval_id, "approved", "bob", None)
    approval = decided.approval  # type: ignore[union-attr]
    assert await unresumed(services) == [] and adapter.calls == []  # decided just now: not yet
    await store._write(lambda db: db.run("UPDATE approvals SET decided_ms = 1"))  # long ago
    [left] = await unresumed(services)
    assert left.id == approval.id
    await resume(services, left)  # what the workers' recovery pass does with it
    assert await unresumed(services) == []
    done = await store.get_execution(parked.id)
    assert done is not None and done.result is not None
    assert done.outcome == "succeeded", done.result["error"]
    assert len(adapter.calls) == 1
    again = await resume_call(services, approval)  # a late second resume: it writes nothing
    assert again.id == parked.id and again.outcome == "succeeded" and len(adapter.calls) == 1
    assert [e.type for e in await store.events(parked.id)].count("tool.completed") == 1
