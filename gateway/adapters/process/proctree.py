"""Process trees: find every process a command started, and stop them all.

A command runs in its own session, but a descendant that calls ``setsid`` leaves that
session, and when its parent dies it is reparented, so neither the process group nor the
root's ``children()`` finds it any more. Three things keep the tree in view:

- the gateway marks itself a *child subreaper* (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``):
  orphans reparent to the gateway instead of init and stay its descendants;
- every command gets ``TOOLGATE_EXECUTION_ID`` in its environment, which descendants
  inherit, so a stray can be told apart from the gateway's other children;
- a ``ProcessTree`` remembers every descendant it has seen (pid and start time) while the
  root ran, for strays that dropped the marker.

Stopping is SIGTERM to every member, a grace period (new members are signalled too), then
SIGKILL until none is left; zombies the gateway adopted are reaped. A pid alone never
identifies a process (pids are reused): it always goes with its ``create_time``.

After a gateway restart, ``kill_all_recorded(states)`` stops every tree recorded in the
``state.checkpointed`` events a crash left, each only if the process there is still the one
recorded, all at once (a ``Forest``): one look at the machine's processes a round for all of
them, and the grace periods run side by side.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import anyio
import psutil

from gateway.adapters.process.spec import MARKER_ENV

log = logging.getLogger("toolgate.proctree")

PR_SET_CHILD_SUBREAPER = 36
CREATE_TIME_TOLERANCE = 0.01
"""psutil's create_time has clock-tick (10 ms) resolution; a reused pid differs by more."""
POLL = 0.05
KILL_ROUNDS = 40
"""SIGKILL rounds (each POLL apart) before giving up on a tree that keeps forking."""

_subreaper: bool | None = None


def become_subreaper() -> bool:
    """Mark this process a child subreaper (once); False where the platform cannot."""
    global _subreaper
    if _subreaper is None:
        _subreaper = _prctl_subreaper()
    return _subreaper


def _prctl_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        ok = False
    if not ok:
        log.warning("cannot become a child subreaper; strays are found by their marker only")
    return ok


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """A process as recovery can recognise it: pid plus start time (epoch seconds)."""

    pid: int
    create_time: float

    def matches(self, proc: psutil.Process) -> bool:
        try:
            started = proc.create_time()
        except psutil.Error:
            return False
        return proc.pid == self.pid and _same_time(started, self.create_time)

    def process(self) -> psutil.Process | None:
        """The live process, or None when it is gone or the pid now belongs to another."""
        if self.pid <= 0:
            return None
        try:
            proc = psutil.Process(self.pid)
        except psutil.Error:
            return None
        return proc if self.matches(proc) and _alive(proc) else None


def _same_time(a: float, b: float) -> bool:
    return abs(a - b) <= CREATE_TIME_TOLERANCE


def identify(pid: int) -> ProcessIdentity:
    """The identity of a running (or not yet reaped) process."""
    return ProcessIdentity(pid, psutil.Process(pid).create_time())


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _marker(proc: psutil.Process) -> str | None:
    try:
        return proc.environ().get(MARKER_ENV)
    except psutil.Error:
        return None


class ProcessTree:
    """Every process a command started, as far as it can be seen.

    ``root`` is never reaped here (its spawner waits for it); adopted orphans are.
    ``scan_all`` looks for marked strays among all processes instead of this process's
    descendants: for recovery, when the tree was started by an earlier gateway.
    """

    def __init__(
        self, root: ProcessIdentity, marker: str | None = None, *, scan_all: bool = False
    ) -> None:
        self.root = root
        self.marker = marker
        self.scan_all = scan_all or not become_subreaper()
        self._seen: dict[int, float] = {}
        self.signalled: set[int] = set()

    def track(self) -> None:
        """Remember the root's current descendants (cheap; called periodically)."""
        root = self.root.process()
        if root is not None:
            self.remember(_descendants(root))

    def members(self) -> list[psutil.Process]:
        """Live processes of the tree now: root, descendants and adopted strays."""
        found = self.rooted()
        for stray in self._strays(skip=set(found)):
            found.setdefault(stray.pid, stray)
            found.update((p.pid, p) for p in _descendants(stray))
        self.remember(p for p in found.values() if p.pid != self.root.pid)
        return [p for p in found.values() if _alive(p)]

    def rooted(self) -> dict[int, psutil.Process]:
        """The root (while it is the recorded process) and its descendants, by pid."""
        found: dict[int, psutil.Process] = {}
        root = self.root.process()
        if root is not None:
            found[root.pid] = root
            found.update((p.pid, p) for p in _descendants(root))
        return found

    @property
    def seen(self) -> Mapping[int, float]:
        """Every descendant seen so far: pid to start time."""
        return self._seen

    def remember(self, procs: Iterable[psutil.Process]) -> None:
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                self._seen.setdefault(proc.pid, proc.create_time())

    def _strays(self, skip: set[int]) -> Iterator[psutil.Process]:
        candidates = psutil.process_iter() if self.scan_all else _own_descendants()
        for proc in candidates:
            if proc.pid in skip or proc.pid == self.root.pid:
                continue
            if self._ours(proc):
                yield proc

    def _ours(self, proc: psutil.Process) -> bool:
        try:
            started = proc.create_time()
        except psutil.Error:
            return False
        seen = self._seen.get(proc.pid)
        if seen is not None and _same_time(seen, started):
            return True
        if self.marker is None or started + CREATE_TIME_TOLERANCE < self.root.create_time:
            return False
        return _marker(proc) == self.marker

    def send(self, procs: Iterable[psutil.Process], sig: signal.Signals) -> None:
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)  # psutil refuses a pid that was reused
                self.signalled.add(proc.pid)

    def reap(self) -> None:
        """Collect the exit status of adopted orphans that died (never the root's)."""
        me = os.getpid()
        for pid, started in list(self._seen.items()):
            try:
                proc = psutil.Process(pid)
                if not _same_time(proc.create_time(), started):
                    continue
                if proc.ppid() == me and proc.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(pid, os.WNOHANG)
            except (psutil.Error, ChildProcessError):
                continue

    def stopping(self, grace: float) -> Iterator[float]:
        """Stop the tree step by step; yields how long to wait before the next step."""
        members = self.members()
        if members:
            self.send(members, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while members and time.monotonic() < deadline:
                yield min(POLL, max(deadline - time.monotonic(), 0.0))
                members = self.members()
                self.send((p for p in members if p.pid not in self.signalled), signal.SIGTERM)
            for _ in range(KILL_ROUNDS):
                if not members:
                    break
                self.send(members, signal.SIGKILL)
                yield POLL / 5
                members = self.members()
            if members:
                log.error("processes %s survived SIGKILL", sorted(p.pid for p in members))
        self.reap()

    async def stop(self, grace: float) -> int:
        """SIGTERM, ``grace`` seconds, SIGKILL: returns how many processes were signalled."""
        await drive_async(self.stopping(grace), anyio.sleep)
        return len(self.signalled)

    def stop_blocking(self, grace: float) -> int:
        """``stop`` for synchronous callers (recovery): blocks up to ``grace`` + ~1 s."""
        for delay in self.stopping(grace):
            time.sleep(delay)
        return len(self.signalled)


async def drive_async(steps: Iterator[float], sleep: Callable[[float], Awaitable[None]]) -> None:
    for delay in steps:
        await sleep(delay)


def _descendants(proc: psutil.Process) -> list[psutil.Process]:
    """All descendants of ``proc`` (zombies included), children first."""
    if not _PROC_CHILDREN:
        try:
            return proc.children(recursive=True)
        except psutil.Error:
            return []
    out: list[psutil.Process] = []
    queue = _child_pids(proc.pid)
    while queue:
        pid = queue.pop(0)
        with contextlib.suppress(psutil.Error):
            out.append(psutil.Process(pid))
            queue.extend(_child_pids(pid))
    return out


def _child_pids(pid: int) -> list[int]:
    """Direct children from ``/proc/PID/task/*/children``: cost grows with the tree, not with
    every process on the machine as psutil's ``children()`` does."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
        except OSError:
            continue
    return out


def _own_descendants() -> list[psutil.Process]:
    return _descendants(psutil.Process())


_PROC_CHILDREN = os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children")


def kill_all_recorded(
    states: Sequence[Mapping[str, object]], grace: float | None = None
) -> list[bool]:
    """Stop the tree each adapter state of a ``state.checkpointed`` event names, all at once
    in one ``Forest``, each with its own grace period (``grace``, else its ``kill_grace``,
    else 2 s): True for each state whose tree had something to signal. A state names a tree
    by ``pid`` and ``create_time`` (the root, only while it is still that process; with a
    ``marker``, the processes carrying it that started no earlier too), or by ``marker`` and
    ``not_before`` alone (a crash between the spawn and its checkpoint); anything else names
    none (False). Blocking: call it from a worker thread."""
    recorded = [_recorded(state, grace) for state in states]
    forest = Forest([r for r in recorded if r is not None])
    for delay in forest.stopping():
        time.sleep(delay)
    return [r is not None and bool(r[0].signalled) for r in recorded]


def _recorded(state: Mapping[str, object], grace: float | None) -> tuple[ProcessTree, float] | None:
    """The tree a state names and its grace period; None for a state that names no process,
    or a root that is gone (or whose pid was reused) and no marker to find the rest by."""
    pid, started, marker = state.get("pid"), state.get("create_time"), state.get("marker")
    recorded_grace = state.get("kill_grace")
    if grace is None:
        grace = float(recorded_grace) if isinstance(recorded_grace, int | float) else 2.0
    marker = marker if isinstance(marker, str) and marker else None
    if isinstance(pid, int) and isinstance(started, int | float):
        identity = ProcessIdentity(pid, float(started))
        if marker is None and identity.process() is None:
            return None
        return ProcessTree(identity, marker, scan_all=True), grace
    not_before = state.get("not_before")
    if marker is not None and isinstance(not_before, int | float):
        return ProcessTree(ProcessIdentity(0, float(not_before)), marker, scan_all=True), grace
    return None


class Forest:
    """Trees an earlier gateway started, stopped together after a restart.

    Each round looks at the machine's processes once for every tree (stopping a hundred
    trees one by one looked at them a hundred times a round, and each root's grace period
    came after the one before). Which process is whose is decided as a lone ``ProcessTree``
    decides it: its root and their descendants, a process seen in it before, or one carrying
    its marker that started no earlier than its root. Each tree gets SIGTERM, then SIGKILL
    once its own grace period is over.
    """

    def __init__(self, trees: Sequence[tuple[ProcessTree, float]]) -> None:
        self.trees = [tree for tree, _ in trees]
        self._grace = {id(tree): grace for tree, grace in trees}
        self._by_marker: dict[str, list[ProcessTree]] = {}
        for tree in self.trees:
            if tree.marker is not None:
                self._by_marker.setdefault(tree.marker, []).append(tree)
        marked = [t.root.create_time for ts in self._by_marker.values() for t in ts]
        self._earliest = min(marked, default=float("inf"))

    def members(self) -> dict[int, list[psutil.Process]]:
        """The live processes of each tree now (by ``id`` of the tree)."""
        found: dict[int, dict[int, psutil.Process]] = {}
        claimed: set[int] = set()
        for tree in self.trees:
            own = found[id(tree)] = tree.rooted()
            claimed.update(own)
        roots = {tree.root.pid for tree in self.trees}
        if self._by_marker or any(tree.seen for tree in self.trees):
            seen = {pid: (t, at) for t in self.trees for pid, at in t.seen.items()}
            for proc in psutil.process_iter():
                if proc.pid in claimed or proc.pid in roots:
                    continue
                owner = self._owner(proc, seen)
                if owner is not None:
                    own = found[id(owner)]
                    own.setdefault(proc.pid, proc)
                    own.update((p.pid, p) for p in _descendants(proc))
        out: dict[int, list[psutil.Process]] = {}
        for tree in self.trees:
            own = found[id(tree)]
            tree.remember(p for p in own.values() if p.pid != tree.root.pid)
            out[id(tree)] = [p for p in own.values() if _alive(p)]
        return out

    def _owner(
        self, proc: psutil.Process, seen: Mapping[int, tuple[ProcessTree, float]]
    ) -> ProcessTree | None:
        try:
            started = proc.create_time()
        except psutil.Error:
            return None
        known = seen.get(proc.pid)
        if known is not None and _same_time(known[1], started):
            return known[0]
        if started + CREATE_TIME_TOLERANCE < self._earliest:
            return None  # older than every marked root: reading its environment is wasted
        for tree in self._by_marker.get(_marker(proc) or "", ()):
            if started + CREATE_TIME_TOLERANCE >= tree.root.create_time:
                return tree
        return None

    def stopping(self) -> Iterator[float]:
        """Stop every tree; yields how long to wait before the next step."""
        trees = {id(tree): tree for tree in self.trees}
        members = self.members()
        for key, procs in members.items():
            trees[key].send(procs, signal.SIGTERM)
        start = time.monotonic()
        deadline = {key: start + grace for key, grace in self._grace.items()}
        kills = dict.fromkeys(deadline, 0)
        given_up: set[int] = set()
        while any(members.values()):
            now, killing = time.monotonic(), False
            for key, procs in members.items():
                if not procs or now < deadline[key]:
                    continue
                if kills[key] == KILL_ROUNDS:
                    log.error("processes %s survived SIGKILL", sorted(p.pid for p in procs))
                    given_up.add(key)
                    members[key] = []
                    continue
                trees[key].send(procs, signal.SIGKILL)
                kills[key] += 1
                killing = True
            waits = [
                deadline[k] - now for k, procs in members.items() if procs and now < deadline[k]
            ]
            if not any(members.values()):
                break
            yield POLL / 5 if killing else max(min([POLL, *waits]), 0.0)
            members = self.members()
            now = time.monotonic()
            for key, procs in members.items():
                if key in given_up:
                    members[key] = []
                elif now < deadline[key]:  # new members while the grace period runs: SIGTERM
                    tree = trees[key]
                    tree.send((p for p in procs if p.pid not in tree.signalled), signal.SIGTERM)
        for tree in self.trees:
            tree.reap()
