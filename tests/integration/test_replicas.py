"""Replicas under failure: ``toolgate serve`` processes on one fresh PostgreSQL database (the
``cluster`` fixture), a bounded mixed load round-robin across three live ones, and one of
those killed with SIGKILL in the middle of it.

The load: writes with idempotency keys (each key sent twice, the second time through another
replica), reads, locked writes (appends to three shared files), calls parked for approval
and approved through another replica, and async (``Prefer: respond-async``) process calls.
Every side effect leaves a line or a file in the workspace, so the test counts them on disk.

- **Same node**: the killed replica's pids are this machine's; a survivor sees its process
  gone and takes its executions over (``owner_gone``), stopping the process trees it left.
- **Another node** (``TOOLGATE_NODE_ID`` set for that victim only): its pids are not ours;
  a survivor takes over only once the victim's lease has passed (``lease_expired``) and
  signals no process: the victim's scripts run to their end.

Both check: no side effect lost or doubled; every execution the victim had in flight is
settled by a survivor within 10 s of the victim's lease expiring; no request to a survivor
failed, and every execution the victim did not own succeeded. The takeover time is printed.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import psutil
import pytest

from gateway.store.store import Store
from gateway.testing import stop
from gateway.types import Status
from tests.helpers import ALICE, BOB
from tests.integration.helpers import LEASE, Cluster, Replica, evidence

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.postgres]
SETTLE_BOUND_MS = 10_000
"""Every execution of the victim is settled within this long after its lease expired."""
OPS = 90
WORKERS = 6
KILL_AFTER = 25
"""Operations issued before the victim is killed (once it has a process call running)."""


@dataclass
class Call:
    """One call of the load and what its side effect leaves on disk."""

    kind: str
    name: str
    execution: dict[str, Any] = field(default_factory=dict)
    again: dict[str, Any] | None = None
    """idem: the execution the second request with the same key got."""
    decided_on: str | None = None
    """approval: the replica that took the decision (and should resume the call)."""


ALICE_H = {"Authorization": f"Bearer {ALICE}"}
BOB_H = {"Authorization": f"Bearer {BOB}"}


@dataclass
class Load:
    """The load's client: round-robin over the live replicas; a request the victim dropped
    (it was killed) goes again, unchanged, to a survivor."""

    tag: str
    """Names this test's run, calls and files (the tests share the cluster's workspace)."""
    replicas: list[Replica]
    victim: Replica
    client: httpx.AsyncClient
    killed: bool = False
    issued: int = 0
    failures: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    _turn: Iterator[int] = field(default_factory=itertools.count)

    def live(self) -> list[str]:
        return [r.url for r in self.replicas if not (self.killed and r is self.victim)]

    async def send(
        self, method: str, path: str, *, avoid: str | None = None, **kwargs: Any
    ) -> tuple[str, httpx.Response, bool]:
        """(the replica that answered, its answer, whether the victim dropped it first)."""
        dropped = False
        for _ in range(6):
            urls = self.live()
            url = urls[next(self._turn) % len(urls)]
            if url == avoid and len(urls) > 1:
                url = urls[(urls.index(url) + 1) % len(urls)]
            try:
                response = await self.client.request(method, url + path, **kwargs)
            except httpx.TransportError as exc:
                if url == self.victim.url and self.killed:
                    dropped = True
                    continue
                self.failures.append(f"{method} {url}{path}: {exc!r}")
                raise
            if response.status_code >= 500:
                self.failures.append(
                    f"{method} {url}{path}: {response.status_code} {response.text}"
                )
            return url, response, dropped
        raise AssertionError(f"{method} {path}: no replica answered")

    async def post(
        self, call: Call, tool: str, arguments: dict[str, Any], call_id: str, **extra: Any
    ) -> tuple[str, dict[str, Any], bool]:
        """POST a call (again while its idempotency key is in flight: 409)."""
        body = {
            "run_id": self.tag,
            "call_id": call_id,
            "tool": {"name": tool},
            "arguments": arguments,
            "actor": {"user_id": "alice", "agent_id": "load"},
            "workspace": {"id": "demo"},
            **extra,
        }
        headers = dict(ALICE_H)
        if call.kind == "proc":
            headers["Prefer"] = "respond-async"
        for _ in range(200):
            url, response, dropped = await self.send(
                "POST", "/v1/executions", json=body, headers=headers
            )
            if response.status_code != 409:
                break
            await anyio.sleep(0.1)  # the first request with this key is still running
        assert response.status_code in (200, 202), response.text
        return url, response.json(), dropped

    async def settle(self, execution: dict[str, Any]) -> dict[str, Any]:
        """The execution once completed, long-polled through any live replica."""
        deadline = time.monotonic() + 60
        while execution["status"] != "completed":
            if time.monotonic() >= deadline:
                raise AssertionError(f"never completed: {await self._story(execution)}")
            path = f"/v1/executions/{execution['id']}?wait=5"
            _, response, _ = await self.send("GET", path, headers=ALICE_H)
            assert response.status_code in (200, 202), response.text
            execution = response.json()
        return execution

    async def _story(self, execution: dict[str, Any]) -> str:
        """An execution that never completed, as a live replica tells it: its record, its
        approval and its events (who did what, and when), for the failure's report."""
        path = f"/v1/executions/{execution['id']}"
        _, now, _ = await self.send("GET", path, headers=ALICE_H)
        _, events, _ = await self.send("GET", path + "/events", headers=ALICE_H)
        lines = [f"execution: {now.text}"]
        approval = (now.json() if now.status_code < 300 else {}).get("approval") or {}
        if approval.get("id"):
            _, found, _ = await self.send("GET", f"/v1/approvals/{approval['id']}", headers=BOB_H)
            lines.append(f"approval: {found.text}")
        lines.append(f"events: {events.text}")
        return "\n".join(lines)

    # -- the operations -----------------------------------------------------------------

    async def idem(self, n: int) -> None:
        call = Call("idem", f"{self.tag}-idem-{n}")
        self.calls.append(call)
        args = {"path": f"ledger-{self.tag}.txt", "content": call.name + "\n"}
        _, first, _ = await self.post(
            call, "fs.append_file", args, f"{call.name}-a", idempotency_key=call.name
        )
        call.execution = await self.settle(first)
        _, again, _ = await self.post(
            call, "fs.append_file", args, f"{call.name}-b", idempotency_key=call.name
        )
        call.again = await self.settle(again)

    async def read(self, n: int) -> None:
        call = Call("read", f"{self.tag}-read-{n}")
        self.calls.append(call)
        _, done, _ = await self.post(call, "fs.read_file", {"path": "read.txt"}, call.name)
        call.execution = await self.settle(done)

    async def locked(self, n: int) -> None:
        call = Call("locked", f"{self.tag}-lock-{n}")
        self.calls.append(call)
        args = {"path": f"shared-{self.tag}-{n % 3}.txt", "content": call.name + "\n"}
        _, done, _ = await self.post(
            call, "fs.append_file", args, call.name, idempotency_key=call.name
        )
        call.execution = await self.settle(done)

    async def approval(self, n: int) -> None:
        call = Call("approval", f"{self.tag}-appr-{n}")
        self.calls.append(call)
        args = {"path": f"approved/{call.name}", "content": call.name}
        url, parked, _ = await self.post(
            call, "fs.write_file", args, call.name, idempotency_key=call.name
        )
        if parked["status"] == "awaiting_approval":
            path = f"/v1/approvals/{parked['approval']['id']}/approve"
            decider, answer, dropped = await self.send("POST", path, avoid=url, headers=BOB_H)
            call.decided_on = None if dropped else decider
            # 409: the victim took the decision and died before answering it.
            assert answer.status_code in (200, 202) or (dropped and answer.status_code == 409), (
                answer.text
            )
        call.execution = await self.settle(parked)

    async def proc(self, n: int) -> None:
        call = Call("proc", f"{self.tag}-p-{n}")
        self.calls.append(call)
        args = {"name": call.name, "delay": f"{0.5 + (n % 4) * 0.4:.1f}"}
        _, queued, _ = await self.post(call, "load.proc", args, call.name)
        call.execution = queued  # settled after the load

    def operations(self) -> list[Callable[[], Awaitable[None]]]:
        kinds = (self.proc, self.idem, self.read, self.locked, self.approval)
        return [partial(kinds[n % len(kinds)], n) for n in range(OPS)]


async def _replica_id(store: Store, pid: int) -> str:
    for _ in range(100):
        found = [r.id for r in (await store.replicas()).values() if r.pid == pid]
        if found:
            return found[0]
        await anyio.sleep(0.05)
    raise AssertionError(f"replica with pid {pid} never heartbeat")


@dataclass
class Kill:
    at_ms: int = 0
    lease_until_ms: int = 0
    in_flight: set[str] = field(default_factory=set)
    spawned: set[str] = field(default_factory=set)
    """The executions whose process was alive when the victim was killed."""


async def _kill_mid_load(load: Load, store: Store, victim_id: str, kill: Kill) -> None:
    """SIGKILL the victim once the load is under way and it runs a process call whose
    process has started (a call it had marked running, or even started, may not have
    spawned its process yet: nothing would run on after the victim)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if load.issued >= KILL_AFTER:
            running = await store.unfinished([Status.RUNNING])
            procs = {r.id for r in running if r.owner == victim_id and r.tool_name == "load.proc"}
            if procs and _marked(procs):
                break
        await anyio.sleep(0.05)
    load.killed = True
    os.kill(load.victim.proc.pid, signal.SIGKILL)
    kill.at_ms = int(time.time() * 1000)
    kill.spawned = _marked(None)
    unfinished = await store.unfinished([Status.RUNNING, Status.CANCELLING])
    kill.in_flight = {r.id for r in unfinished if r.owner == victim_id}
    load.victim.proc.wait()
    kill.lease_until_ms = (await store.replicas())[victim_id].lease_until_ms


async def _run(load: Load, store: Store, victim_id: str, kill: Kill) -> None:
    operations = iter(load.operations())

    async def worker() -> None:
        for op in operations:  # one iterator: each operation runs once
            load.issued += 1
            await op()

    async with anyio.create_task_group() as tg:
        tg.start_soon(_kill_mid_load, load, store, victim_id, kill)
        for _ in range(WORKERS):
            tg.start_soon(worker)
    for call in load.calls:
        call.execution = await load.settle(call.execution)


def _recovery_note(events: list[Any], owner: str) -> Any | None:
    """The note of the last recovery by another replica that took the execution over from
    ``owner``. It may have been queued again before, and run again since: taken over from
    another owner, or by ``owner`` itself (its pass took a call its worker had just claimed
    for left behind: no takeover from it)."""
    notes = [
        event
        for event in events
        if event.type == "state.checkpointed"
        and event.data.get("by") == "recovery"
        and event.data.get("owner") == owner
        and event.data.get("replica") != owner
    ]
    return notes[-1] if notes else None


async def _taken_over(store: Store, run_id: str, victim_id: str) -> dict[str, Any]:
    """Every execution a survivor took over from the victim: id -> its recovery note."""
    taken = {}
    for record in await store.find_executions(None, run_id, None, limit=1000):
        note = _recovery_note(await store.events(record.id), victim_id)
        if note is not None:
            taken[record.id] = note
    return taken


def _on_disk(workspace: Path, tag: str, call: Call) -> int:
    """How many times ``call``'s side effect happened, as the workspace shows (a process
    call's line and marker file agree)."""
    happened = _times(workspace, tag, call)
    if call.kind == "proc":
        assert min(happened, 1) == int((workspace / "done" / call.name).exists()), call.name
    return happened


def _times(workspace: Path, tag: str, call: Call) -> int:
    """``_on_disk`` without its check (it runs while the victim's scripts may still run)."""
    if call.kind == "idem":
        return _lines(workspace / f"ledger-{tag}.txt").count(call.name)
    if call.kind == "locked":
        shared = (workspace / f"shared-{tag}-{i}.txt" for i in range(3))
        return sum(_lines(path).count(call.name) for path in shared)
    if call.kind == "approval":
        return int((workspace / "approved" / call.name).exists())
    if call.kind == "proc":
        return _lines(workspace / "procs.txt").count(call.name)
    return 0


async def _keep_doubled(
    cluster: Cluster, load: Load, folder: Path, victim_id: str, kill: Kill
) -> None:
    """Fail, naming each execution and where its evidence is kept, when a call's side
    effect happened more than once. The evidence (its rows and events, every replica, every
    recovery note, the kill) is written to ``folder`` first: the database is dropped with
    the module, and the replicas' logs alone did not tell such a run's story."""
    doubled = [c for c in load.calls if _times(cluster.workspace, load.tag, c) > 1]
    if not doubled:
        return
    kept = []
    for call in doubled:
        found = await anyio.to_thread.run_sync(evidence, cluster.url, load.tag, [call.name])
        found["call"] = {"kind": call.kind, "name": call.name, "execution": call.execution}
        found["seen_on_disk"] = _times(cluster.workspace, load.tag, call)
        found["kill"] = {"victim": victim_id, **asdict(kill)}
        found["replicas_by_name"] = {n: r.proc.pid for n, r in cluster.replicas.items()}
        path = folder / f"doubled-{call.execution.get('id', call.name)}.json"
        path.write_text(json.dumps(found, indent=1, sort_keys=True, default=sorted))
        kept.append(f"{call.name} (execution {call.execution.get('id')}): {path}")
    raise AssertionError("side effect doubled; evidence kept:\n" + "\n".join(kept))


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _check_effects(load: Load, workspace: Path, taken: dict[str, Any]) -> dict[str, int]:
    """No side effect lost or doubled; every call the victim did not leave in flight
    succeeded. Returns how many calls ended with each outcome."""
    outcomes: dict[str, int] = {}
    for call in load.calls:
        execution = call.execution
        outcome = execution["result"]["outcome"]
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if execution["id"] not in taken:
            assert outcome == "succeeded", (call, execution["result"])
        if call.again is not None:  # the same key through another replica: the same call
            assert call.again["id"] == execution["id"], (call.again, execution)
        if call.kind == "read":
            assert execution["result"]["data"]["content"] == "steady"
            continue
        happened = _on_disk(workspace, load.tag, call)
        allowed = {"succeeded": {1}, "unknown": {0, 1}}.get(outcome, {0})
        assert happened in allowed, (call.name, outcome, happened, execution["result"])
    names, tag = {c.name for c in load.calls}, load.tag
    effects = _lines(workspace / f"ledger-{tag}.txt")
    effects += [x for x in _lines(workspace / "procs.txt") if x.startswith(f"{tag}-")]
    effects += [x for i in range(3) for x in _lines(workspace / f"shared-{tag}-{i}.txt")]
    assert set(effects) <= names and len(effects) == len(set(effects)), effects
    return outcomes


def _check_takeover(
    kill: Kill, taken: dict[str, Any], victim_id: str, because: str, label: str
) -> None:
    """Every execution the victim had in flight was settled by a survivor, by ``because``,
    within SETTLE_BOUND_MS of the victim's lease expiring; prints the takeover time."""
    assert kill.in_flight, "the victim had nothing in flight when it was killed"
    assert kill.in_flight <= set(taken), kill.in_flight - set(taken)
    for note in taken.values():
        assert note.data["because"] == because, note
    last = max(note.at_ms for note in taken.values())
    after_lease = last - kill.lease_until_ms
    assert after_lease <= SETTLE_BOUND_MS, (after_lease, taken)
    print(
        f"\n[{label}] {len(taken)} executions taken over ({because}); the last settled "
        f"{last - kill.at_ms} ms after SIGKILL, {after_lease} ms after the lease expired "
        f"(lock_lease {LEASE:g} s)"
    )


def _marked_alive(ids: set[str]) -> list[int]:
    """Pids of live processes carrying the execution marker of one of ``ids``."""
    return [pid for pids in _live_markers(ids).values() for pid in pids]


def _marked(ids: set[str] | None) -> set[str]:
    """Those of ``ids`` (None: any) that a live process carries as its execution marker."""
    return set(_live_markers(ids))


def _live_markers(ids: set[str] | None) -> dict[str, list[int]]:
    alive: dict[str, list[int]] = {}
    for proc in psutil.process_iter():
        try:
            marker = proc.environ().get("TOOLGATE_EXECUTION_ID")
            if marker and (ids is None or marker in ids) and proc.status() != "zombie":
                alive.setdefault(marker, []).append(proc.pid)
        except psutil.Error:
            continue
    return alive


async def _scenario(
    cluster: Cluster, tag: str, victim_name: str, folder: Path
) -> tuple[Load, Kill, dict[str, Any], str]:
    """The load across ``a``, ``b`` and the victim, the victim killed in the middle of it;
    returns the load, the kill, what survivors took over and the victim's replica id. A
    check that fails here looks for a doubled side effect first (``_keep_doubled``)."""
    victim = cluster.replicas[victim_name]
    assert victim.proc.poll() is None, f"{victim_name} is not running"
    store = Store(cluster.url)
    try:
        victim_id = await _replica_id(store, victim.proc.pid)
        async with httpx.AsyncClient(timeout=30) as client:
            live = [cluster.replicas["a"], cluster.replicas["b"], victim]
            load, kill = Load(tag, live, victim, client), Kill()
            try:
                await _run(load, store, victim_id, kill)
                return await _checked(cluster, store, load, kill, victim_id)
            except Exception:
                await _keep_doubled(cluster, load, folder, victim_id, kill)
                raise
    finally:
        await store.aclose()


async def _checked(
    cluster: Cluster, store: Store, load: Load, kill: Kill, victim_id: str
) -> tuple[Load, Kill, dict[str, Any], str]:
    """The checks of ``_scenario`` once the load is settled."""
    assert not load.failures, load.failures
    taken = await _taken_over(store, load.tag, victim_id)
    for execution_id in kill.in_flight - set(taken):  # a COMMIT it sent as it died landed
        events = await store.events(execution_id)
        assert events[-1].type == "tool.completed" and events[-1].at_ms <= kill.at_ms
        kill.in_flight.discard(execution_id)
    unfinished = await store.unfinished([Status.RUNNING, Status.CANCELLING])
    left = [r for r in unfinished if r.owner == victim_id]
    assert not left, left
    await _check_resumed_where_decided(store, load, cluster)
    return load, kill, taken, victim_id


async def _check_resumed_where_decided(store: Store, load: Load, cluster: Cluster) -> None:
    """An approved call runs on the replica that received the decision (when it lived)."""
    ids = {r.pid: r.id for r in (await store.replicas()).values()}
    owner_of = {r.id: r.owner for r in await store.find_executions(None, load.tag, None, 1000)}
    by_url = {r.url: ids[r.proc.pid] for r in cluster.replicas.values() if r.proc.pid in ids}
    decided = [(c, c.decided_on) for c in load.calls if c.decided_on not in (None, load.victim.url)]
    assert decided, "no approval was decided by a survivor"
    for call, url in decided:
        assert url is not None and owner_of[call.execution["id"]] == by_url[url], call.name


async def test_a_replica_of_another_node_is_taken_over_at_its_lease_expiry(
    cluster: Cluster, evidence_dir: Path
) -> None:
    load, kill, taken, victim_id = await _scenario(cluster, "other", "other", evidence_dir)
    _check_takeover(kill, taken, victim_id, "lease_expired", "another node")
    first_note = min(note.at_ms for note in taken.values())
    assert first_note >= kill.lease_until_ms, "taken over before its lease expired"
    deadline = time.monotonic() + 10
    while _marked_alive(set(taken)) and time.monotonic() < deadline:
        await anyio.sleep(0.1)  # the victim's scripts run on to their end: nobody stops them
    await _keep_doubled(cluster, load, evidence_dir, victim_id, kill)
    signalled = [p.name for p in (cluster.workspace / "signals").glob("other-*")]
    assert not signalled, f"processes of another node were signalled: {signalled}"
    outcomes = _check_effects(load, cluster.workspace, taken)
    print(f"[another node] outcomes {outcomes}")
    procs = [
        c.name
        for c in load.calls
        if c.kind == "proc" and c.execution["id"] in taken and c.execution["id"] in kill.spawned
    ]
    assert procs, "the victim had no process running"
    done = cluster.workspace / "done"
    assert all((done / name).exists() for name in procs), procs  # they ran on to their end


async def test_a_replica_killed_mid_load_is_taken_over_by_the_survivors(
    cluster: Cluster, evidence_dir: Path
) -> None:
    other = cluster.replicas["other"]
    stop(other.proc)  # run alone, the other-node replica would race a and b to the lease
    load, kill, taken, victim_id = await _scenario(cluster, "same", "same", evidence_dir)
    await _keep_doubled(cluster, load, evidence_dir, victim_id, kill)
    _check_takeover(kill, taken, victim_id, "owner_gone", "same node")
    outcomes = _check_effects(load, cluster.workspace, taken)
    print(f"[same node] outcomes {outcomes}")
    assert not _marked_alive(set(taken)), "a process tree of the dead replica outlived it"
