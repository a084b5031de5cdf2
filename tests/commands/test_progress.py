"""The command line's progress: shown with rich on a terminal, nothing on a pipe or with
``--json``; standard output is the same either way."""

from __future__ import annotations

import argparse
import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from gateway.commands import progress as progress_of
from gateway.commands.remote import _wait_for

ESC = "\x1b["


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=100), out


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_shown_on_a_terminal_only() -> None:
    plain = argparse.Namespace()
    assert progress_of.shown(plain, _Tty())
    assert not progress_of.shown(plain, io.StringIO())  # a pipe or a file
    assert not progress_of.shown(argparse.Namespace(json=True), _Tty())
    console, out = _terminal()
    with progress_of.progress(plain, "policy tests", console=console) as shown:
        for done in range(1, 4):
            shown.step(done, 3)
    drawn = out.getvalue()
    assert "policy tests" in drawn and "3/3" in drawn and ESC in drawn


def test_waiting_on_an_execution_shows_its_status() -> None:
    answers = iter(
        [
            httpx.Response(202, json={"id": "ex_1", "status": "awaiting_approval"}),
            httpx.Response(202, json={"id": "ex_1", "status": "running"}),
            httpx.Response(200, json={"id": "ex_1", "status": "completed"}),
        ]
    )
    transport = httpx.MockTransport(lambda request: next(answers))
    console, out = _terminal()
    args = argparse.Namespace()
    with (
        httpx.Client(base_url="http://gateway", transport=transport) as client,
        progress_of.progress(args, "execution ex_1: waiting", console=console) as shown,
    ):
        final = _wait_for(client, "ex_1", 30, 5, shown)
    assert final.json()["status"] == "completed"
    drawn = out.getvalue()
    assert "execution ex_1: running" in drawn, drawn


def _policy_test(project: Path, stderr: int) -> tuple[subprocess.CompletedProcess[str], str]:
    """``toolgate policy test`` with standard error on ``stderr`` (a pipe or a terminal)."""
    env = {**os.environ, "RUST_LIB_BACKTRACE": "0", "TERM": "xterm", "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "policy", "test"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        timeout=120,
    )
    return done, done.stderr or ""


@pytest.mark.slow  # starts a process itself
def test_policy_test_shows_progress_on_a_terminal_and_nothing_on_a_pipe(project: Path) -> None:
    piped, piped_err = _policy_test(project, subprocess.PIPE)
    assert piped.returncode == 0, piped.stdout + piped_err
    assert "policy tests" not in piped_err and ESC not in piped_err
    leader, follower = pty.openpty()
    try:
        on_tty, _ = _policy_test(project, follower)
        os.close(follower)
        follower = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: everything was read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    assert on_tty.returncode == 0
    text = drawn.decode("utf-8", "replace")
    assert "policy tests" in text and ESC in text, text
    assert on_tty.stdout == piped.stdout  # the report itself is the same
