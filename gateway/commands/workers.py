"""``toolgate serve --workers N``: N gateway processes on one listening socket.

The parent checks everything (``tools.d``, ``rego/``, ``policies/``, the adapters), binds the
address (``serve``, gateway/http/server.py::listen), creates the store's schema once, and
starts N workers: ``toolgate serve`` children
that inherit the socket (``--listen-fd``) and accept from it, so the kernel spreads
connections over them. Each worker is a whole gateway (its own event loop, store connections,
group commit and policy engine) on the shared store: they coordinate the way replicas do
(per-key locks and claims in the database; recovery leaves a live sibling's executions
alone, since its process still exists, and settles a dead one's).

The parent supervises: a worker that dies is started again (its interrupted executions are
recovered by the new worker's start-up, like a restart of one gateway), after a pause that
doubles while workers keep dying at once, up to ``RESTART_PAUSE_MAX``, unless the worker
refused the configuration (a fault the parent's checks do not open, such as the audit key):
then every worker is stopped and the parent exits as the worker did; SIGTERM or SIGINT stops
every worker (each finishes what it runs, as one gateway does on SIGTERM) and then the
parent; SIGHUP is passed on to every worker.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gateway.commands.common import EXIT_FAULTS
from gateway.settings import Settings

RESTART_PAUSE = 0.5
RESTART_PAUSE_MAX = 30.0
STOP_TIMEOUT = 30.0
"""Seconds a worker has to stop after SIGTERM before it is killed."""


def worker_argv(config: Path | None, fd: int, log_level: str, access_log: bool) -> list[str]:
    argv = [sys.executable, "-m", "gateway.cli"]
    if config is not None:
        argv += ["--config", str(config)]
    argv += ["serve", "--listen-fd", str(fd), "--log-level", log_level]
    if access_log:
        argv.append("--access-log")
    return argv


class Supervisor:
    """The parent of ``n`` workers on one socket."""

    def __init__(self, argv: Sequence[str], sock: socket.socket, n: int) -> None:
        self.argv = list(argv)
        self.sock = sock
        self.n = n
        self.workers: list[subprocess.Popen[bytes]] = []
        self.stopping = False
        self.pause = RESTART_PAUSE

    def start_one(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, pass_fds=(self.sock.fileno(),))

    def on_signal(self, signum: int, frame: object) -> None:
        if signum == signal.SIGHUP:
            self.send(signal.SIGHUP)
            return
        self.stopping = True

    def send(self, sig: signal.Signals) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                try:
                    proc.send_signal(sig)
                except ProcessLookupError:
                    continue

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self.on_signal)
        self.workers = [self.start_one() for _ in range(self.n)]
        print(f"toolgate: {self.n} workers: pids {' '.join(str(p.pid) for p in self.workers)}")
        sys.stdout.flush()
        while not self.stopping:
            time.sleep(0.2)
            self.reap()
            died = [i for i, proc in enumerate(self.workers) if proc.returncode is not None]
            if not died or self.stopping:
                if not died:
                    self.pause = max(RESTART_PAUSE, self.pause / 2)
                continue
            # a worker that refused its configuration would only refuse it again
            refused = [self.workers[i] for i in died if self.workers[i].returncode == EXIT_FAULTS]
            if refused:
                print(
                    f"toolgate: worker {refused[0].pid} refused the configuration (exit status"
                    f" {EXIT_FAULTS}, its faults above); stopping every worker",
                    file=sys.stderr,
                )
                self.stop()
                return EXIT_FAULTS
            for i in died:
                old = self.workers[i]
                print(
                    f"toolgate: worker {old.pid} exited with {old.returncode}; starting another"
                    f" in {self.pause:.1f}s",
                    file=sys.stderr,
                )
            time.sleep(self.pause)
            self.pause = min(self.pause * 2, RESTART_PAUSE_MAX)
            if self.stopping:
                break
            for i in died:
                self.workers[i] = self.start_one()
                print(f"toolgate: worker {self.workers[i].pid} started", file=sys.stderr)
        return self.stop()

    def reap(self) -> None:
        """Collect every child that exited: a worker (its status noted on its Popen), or a
        process a dead worker left that this parent adopted (a worker makes itself a child
        subreaper, and so may this process have while checking the adapters)."""
        by_pid = {proc.pid: proc for proc in self.workers}
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in by_pid:
                by_pid[pid].returncode = os.waitstatus_to_exitcode(status)

    def stop(self) -> int:
        self.send(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for proc in self.workers:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.sock.close()
        return 0


def serve_workers(
    settings: Settings,
    config: Path | None,
    sock: socket.socket,
    n: int,
    log_level: str,
    access_log: bool,
) -> int:
    """Start ``n`` workers on ``sock`` (bound by ``serve``), supervise them until
    SIGTERM/SIGINT."""
    import anyio

    from gateway.store.store import Store

    async def schema() -> None:  # once, before the workers race to create it
        store = Store(settings.resolved_database_url)
        await store.open()
        await store.aclose()

    anyio.run(schema)
    sock.set_inheritable(True)
    argv = worker_argv(config, sock.fileno(), log_level, access_log)
    return Supervisor(argv, sock, n).run()
