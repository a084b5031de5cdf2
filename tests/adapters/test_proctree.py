"""Process trees with real processes: finding members, stopping them, recognising them later."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gateway.adapters.process import proctree
from gateway.adapters.process.proctree import (
    MARKER_ENV,
    ProcessIdentity,
    ProcessTree,
    become_subreaper,
    identify,
    kill_all_recorded,
)

LEFTOVER_WAIT = 3.0

# Spawns: this process → a child that ignores SIGTERM → a grandchild that calls setsid and
# whose parent (an "orphaner") exits at once. Every process appends "pid create_time" to
# the file given as argv[1].
TREE_SCRIPT = """
import os, signal, subprocess, sys, time
import psutil
pidfile, role = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "root")
def spawn(r):
    return subprocess.Popen([sys.executable, __file__, pidfile, r])
if role == "grandchild":
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
me = psutil.Process()
with open(pidfile, "a") as fh:
    fh.write(f"{me.pid} {me.create_time()!r}\\n")
if role == "root":
    spawn("child")
    spawn("orphaner")
elif role == "child":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    spawn("grandchild")
elif role == "orphaner":
    spawn("grandchild")
    sys.exit(0)
time.sleep(120)
"""
TREE_SIZE = 5


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(autouse=True)
def no_stray_children() -> Iterator[None]:
    """Fail a test that leaves a process (even a zombie) of its own behind."""
    before = _children()
    yield
    deadline = time.monotonic() + LEFTOVER_WAIT
    while (left := _children() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:  # clean up before failing, so one failure does not cascade
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (OSError, ChildProcessError):
            pass
    assert not left, f"processes left behind: {sorted(left)}"


def read_pids(pidfile: Path, count: int, timeout: float = 60.0) -> list[ProcessIdentity]:
    """Wait until ``count`` processes have written their identity to ``pidfile``."""
    deadline = time.monotonic() + timeout
    while True:
        lines = pidfile.read_text().split("\n") if pidfile.exists() else []
        entries = [line.split() for line in lines if line.strip()]
        if len(entries) >= count:
            return [ProcessIdentity(int(pid), float(ct)) for pid, ct in entries]
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    raise AssertionError(f"only {pidfile.read_text() if pidfile.exists() else ''!r} written")


def survivors(identities: list[ProcessIdentity]) -> list[int]:
    """The recorded processes that still exist (a zombie counts: nobody reaped it)."""
    out = []
    for identity in identities:
        try:
            proc = psutil.Process(identity.pid)
            if identity.matches(proc):
                out.append(identity.pid)
        except psutil.NoSuchProcess:
            continue
    return out


def wait_gone(identities: list[ProcessIdentity], timeout: float = 2.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (alive := survivors(identities)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive


def _sleeper(**kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        **kw,  # type: ignore[call-overload]
    )


def _tries(n: int) -> Iterator[int]:
    for i in range(n):
        if i:
            time.sleep(0.2)
        yield i


def _wait_for_environ(pid: int, name: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if name in psutil.Process(pid).environ():
                return
        except psutil.Error:
            pass
        time.sleep(0.01)
    raise AssertionError(f"{name} never appeared in the environment of {pid}")


def test_this_process_is_a_subreaper() -> None:
    assert become_subreaper() is True
    assert become_subreaper() is True  # idempotent


@pytest.mark.slow  # starts a process itself
def test_tree_stop_kills_every_member_including_setsid_orphans(tmp_path: Path) -> None:
    become_subreaper()
    pidfile = tmp_path / "pids"
    script = tmp_path / "tree.py"
    script.write_text(TREE_SCRIPT)
    env = {**os.environ, MARKER_ENV: "ex_tree"}
    root = subprocess.Popen([sys.executable, str(script), str(pidfile)], env=env)
    try:
        identities = read_pids(pidfile, TREE_SIZE)
        tree = ProcessTree(identify(root.pid), marker="ex_tree")
        started = time.monotonic()
        signalled = tree.stop_blocking(grace=0.3)
        elapsed = time.monotonic() - started
    finally:
        root.kill()
        root.wait()
    assert signalled >= TREE_SIZE - 1  # the orphaner may be gone already
    assert elapsed < 3.0
    assert wait_gone(identities) == []


@pytest.mark.slow  # starts a process itself
def test_stop_of_a_finished_tree_is_quick_and_harmless() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    identity = identify(proc.pid)
    proc.wait()
    started = time.monotonic()
    assert ProcessTree(identity).stop_blocking(grace=5.0) == 0
    assert time.monotonic() - started < 1.0


@pytest.mark.slow  # starts a process itself
def test_identity_does_not_match_a_reused_pid() -> None:
    proc = _sleeper()
    try:
        real = identify(proc.pid)
        assert real.process() is not None
        assert ProcessIdentity(proc.pid, real.create_time - 5).process() is None
        assert ProcessIdentity(proc.pid, real.create_time + 0.5).process() is None
    finally:
        proc.kill()
        proc.wait()


ECHO = "import sys\nfor line in sys.stdin:\n    print(line, end='', flush=True)\n"


def _echoes(proc: subprocess.Popen[bytes]) -> None:
    """A line to ``proc`` (running :data:`ECHO`) and back: a signal sent it before this would
    have ended it first (a pending signal is delivered before a read returns)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"ping\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == b"ping\n", "the process did not answer"


@pytest.mark.slow  # starts a process itself
def test_kill_refuses_a_pid_whose_create_time_differs() -> None:
    echo = [sys.executable, "-c", ECHO]
    with subprocess.Popen(echo, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        try:
            identity = identify(proc.pid)
            earlier = {"pid": proc.pid, "create_time": identity.create_time - 10}
            later = {"pid": proc.pid, "create_time": identity.create_time + 10}
            assert kill_all_recorded([earlier, later], grace=0.2) == [False, False]
            _echoes(proc)
            assert proc.poll() is None  # untouched
            recorded = {"pid": proc.pid, "create_time": identity.create_time}
            assert kill_all_recorded([recorded], grace=0.2) == [True]
            assert proc.wait(timeout=5) == -signal.SIGTERM
        finally:
            proc.kill()
            proc.wait()


@pytest.mark.slow  # starts a process itself
def test_kill_of_a_gone_process_is_false() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    identity = identify(proc.pid)
    proc.wait()
    recorded = {"pid": identity.pid, "create_time": identity.create_time}
    assert kill_all_recorded([recorded], grace=0.1) == [False]


ORPHAN = """
import os, sys, time
os.setsid()
with open(sys.argv[1], "a") as fh:
    fh.write(f"{os.getpid()} 0\\n")
time.sleep(60)
"""


@pytest.mark.slow  # starts a process itself
def test_kill_finds_marked_orphans_after_the_root_died(tmp_path: Path) -> None:
    """As after a gateway restart: the root is gone, a setsid'd descendant lives on."""
    become_subreaper()
    pidfile = tmp_path / "pids"
    code = (
        f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {ORPHAN!r}, sys.argv[1]])"
    )
    env = {**os.environ, MARKER_ENV: "ex_orphan"}
    root = subprocess.Popen([sys.executable, "-c", code, str(pidfile)], env=env)
    root_identity = identify(root.pid)
    orphan_pid = read_pids(pidfile, 1)[0].pid
    root.wait()
    orphan = identify(orphan_pid)
    assert psutil.Process(orphan_pid).environ()[MARKER_ENV] == "ex_orphan"
    state = {
        "pid": root_identity.pid,
        "create_time": root_identity.create_time,
        "marker": "ex_orphan",
    }
    assert kill_all_recorded([state], grace=0.2) == [True]
    assert wait_gone([orphan]) == []


@pytest.mark.slow  # starts a process itself
def test_kill_with_another_marker_leaves_an_unrelated_marked_process() -> None:
    env = {**os.environ, MARKER_ENV: "ex_other"}
    proc = _sleeper(env=env)
    try:
        identity = identify(proc.pid)
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        dead = identify(gone.pid)
        gone.wait()
        recorded = {"pid": dead.pid, "create_time": dead.create_time, "marker": "ex_mine"}
        assert kill_all_recorded([recorded], grace=0.1) == [False]
        assert identity.process() is not None
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow  # starts a process itself
def test_kill_with_only_a_marker_stops_marked_processes() -> None:
    """A crash between the spawn and the checkpoint leaves only the execution id to go by."""
    proc = _sleeper(env={**os.environ, MARKER_ENV: "ex_uncheckpointed"})
    try:
        _wait_for_environ(proc.pid, MARKER_ENV)  # until exec has replaced the forked env
        identity = identify(proc.pid)
        later = {"marker": "ex_uncheckpointed", "not_before": identity.create_time + 5}
        # started before: not this execution's
        assert kill_all_recorded([later], grace=0.1) == [False]
        state = {"marker": "ex_uncheckpointed", "not_before": identity.create_time - 1}
        # A loaded machine may show the child mid-exec to one scan: allow a few looks.
        assert any(kill_all_recorded([state], grace=0.2) == [True] for _ in _tries(10))
        assert wait_gone([identity]) == []  # (and reaped: it looked like an adopted orphan)
    finally:
        proc.kill()
        proc.wait()


IGNORES_TERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "open(sys.argv[1], 'w').close()\n"
    "time.sleep(60)\n"
)


def _stubborn(ready: Path) -> subprocess.Popen[bytes]:
    """A process that ignores SIGTERM, once it does (``ready`` exists)."""
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_TERM, str(ready)])
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


@pytest.mark.slow  # starts a process itself
def test_kill_all_recorded_stops_each_recorded_tree_and_nothing_else(tmp_path: Path) -> None:
    """A restart's trees in one forest: an orphan found by its marker, a plain child, one
    that ignores SIGTERM (killed after its own grace), a gone root; an unrelated marked
    process lives on."""
    become_subreaper()
    pidfile = tmp_path / "pids"
    code = (
        f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {ORPHAN!r}, sys.argv[1]])"
    )
    root = subprocess.Popen(
        [sys.executable, "-c", code, str(pidfile)], env={**os.environ, MARKER_ENV: "ex_a"}
    )
    root_a = identify(root.pid)
    orphan = identify(read_pids(pidfile, 1)[0].pid)
    root.wait()
    plain = _sleeper()
    stubborn = _stubborn(tmp_path / "ready")
    other = _sleeper(env={**os.environ, MARKER_ENV: "ex_other"})
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = identify(gone.pid)
    gone.wait()
    try:
        _wait_for_environ(other.pid, MARKER_ENV)
        b, c = identify(plain.pid), identify(stubborn.pid)
        states: list[dict[str, object]] = [
            {"pid": root_a.pid, "create_time": root_a.create_time, "marker": "ex_a"},
            {"pid": b.pid, "create_time": b.create_time, "marker": "ex_b", "kill_grace": 5},
            {"pid": c.pid, "create_time": c.create_time, "marker": "ex_c", "kill_grace": 0.3},
            {"pid": dead.pid, "create_time": dead.create_time},
        ]
        assert kill_all_recorded(states) == [True, True, True, False]
        assert wait_gone([orphan]) == []
        assert plain.wait(timeout=5) == -signal.SIGTERM
        assert stubborn.wait(timeout=5) == -signal.SIGKILL
        assert other.poll() is None  # its marker is no recorded execution's
    finally:
        for proc in (plain, stubborn, other):
            proc.kill()
            proc.wait()


@pytest.mark.slow  # starts a process itself
def test_a_forest_looks_at_the_machine_once_a_round_for_all_its_trees(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Stopping trees one by one scanned every process once per tree and round.
    procs = [_stubborn(tmp_path / f"ready{i}") for i in range(4)]
    scans = 0
    real_iter = psutil.process_iter

    def counting_iter(*args: object, **kw: object) -> Iterator[psutil.Process]:
        nonlocal scans
        scans += 1
        return real_iter(*args, **kw)  # type: ignore[arg-type]

    try:
        trees = [(ProcessTree(identify(p.pid), f"ex_{p.pid}", scan_all=True), 0.2) for p in procs]
        forest = proctree.Forest(trees)
        monkeypatch.setattr(proctree.psutil, "process_iter", counting_iter)
        rounds = 1
        for delay in forest.stopping():
            time.sleep(delay)
            rounds += 1
        assert scans == rounds
        assert all(p.wait(timeout=5) == -signal.SIGKILL for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"pid": "1", "create_time": 1.0},
        {"pid": 1},
        {"pid": 1, "create_time": "x"},
        {"marker": "ex_m"},
        {"marker": "", "not_before": 1.0},
    ],
)
def test_kill_ignores_malformed_state(state: dict[str, object]) -> None:
    assert kill_all_recorded([state]) == [False]


@pytest.mark.slow  # starts a process itself
def test_sigterm_ignoring_process_is_killed_after_the_grace(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "open(sys.argv[1], 'w').close()\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(ready)], start_new_session=True)
    try:
        while not ready.exists():
            time.sleep(0.01)
        started = time.monotonic()
        ProcessTree(identify(proc.pid)).stop_blocking(grace=0.4)
        elapsed = time.monotonic() - started
        assert proc.wait(timeout=5) == -signal.SIGKILL
        assert 0.35 < elapsed < 2.5
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow  # starts a process itself
def test_no_subreaper_falls_back_to_scanning_every_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(proctree, "_subreaper", False)
    proc = _sleeper()
    try:
        tree = ProcessTree(identify(proc.pid), marker="ex_x")
        assert tree.scan_all is True
        assert [p.pid for p in tree.members()] == [proc.pid]
    finally:
        proc.kill()
        proc.wait()
