"""A peer's own venv under ``.cache/peers``: installed by the bench on first use, reused after.
Peers are never project dependencies (they pull FastAPI, SQLAlchemy, another MCP SDK ...).
And what every peer's start shares: waiting until it answers (:func:`wait_up`)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "peers"


class PeerUnavailable(RuntimeError):
    """A peer cannot be installed or started here; the message says why."""


def installed(venv: Path, package: str, version: str) -> bool:
    """``package`` is in ``venv`` at exactly ``version``."""
    python = venv / "bin" / "python"
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True,
        text=True,
    )
    return probe.returncode == 0 and probe.stdout.strip() == version


def install(venv: Path, package: str, version: str) -> None:
    """Create ``venv`` and pip-install ``package==version`` into it unless it is there; the
    output goes to ``<venv>.log``."""
    if installed(venv, package, version):
        return
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = venv.with_suffix(".log")
    with log.open("wb") as out:
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                f"{package}=={version}",
            ],
        ]
        for step in steps:
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                tail = log.read_text(errors="replace")[-1500:]
                raise PeerUnavailable(f"installing {package}=={version} failed: {tail}")
    if not installed(venv, package, version):
        raise PeerUnavailable(f"{package}=={version} is not importable after its install")


def wait_up(
    proc: subprocess.Popen[bytes],
    name: str,
    log: Path,
    seconds: float,
    probe: Callable[[], T | None],
) -> T:
    """Ask ``probe`` every 0.2 s until it answers (not None, no HTTP error); what it answered.
    The peer exiting, or ``seconds`` passing, is a PeerUnavailable with the tail of its log."""
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:
            raise PeerUnavailable(f"{name} exited: {log.read_text()[-1500:]}")
        with contextlib.suppress(httpx.HTTPError):
            answer = probe()
            if answer is not None:
                return answer
        if time.monotonic() > deadline:
            raise PeerUnavailable(f"{name} did not start: {log.read_text()[-1500:]}")
        time.sleep(0.2)
