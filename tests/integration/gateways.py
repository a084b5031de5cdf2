"""Real gateway processes (``toolgate serve``) on loopback, for cross-process tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import yaml

from tests.helpers import REPO


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_project(root: Path, database_url: str, quotas: bool = False) -> Path:
    """A copy of the shipped project under ``root``; quotas lifted unless ``quotas``."""
    for name in ("tools.d", "rego", "policies", "examples"):
        if (REPO / name).is_dir():
            shutil.copytree(
                REPO / name,
                root / name,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
    config = yaml.safe_load((REPO / "toolgate.yaml").read_text())
    config["database_url"] = database_url
    config["approval_secret"] = "s" * 40
    (root / "toolgate.yaml").write_text(yaml.safe_dump(config))
    if not quotas:
        rules = root / "policies" / "rules.yaml"
        data = yaml.safe_load(rules.read_text())
        data["quotas"] = {"calls_per_minute": {}}
        rules.write_text(yaml.safe_dump(data))
    return root / "toolgate.yaml"


def run_agent_code_without_approval(
    root: Path, tools: tuple[str, ...] = ("proc.python", "proc.run_tests")
) -> None:
    """Lift the shipped policy's approval for the tools that run agent code (approval_tags),
    for tests of what the process adapter does rather than of the policy."""
    rules = root / "policies" / "rules.yaml"
    data = yaml.safe_load(rules.read_text())
    for tool in tools:
        data.setdefault("tool_overrides", {})[tool] = {"approval": False}
    rules.write_text(yaml.safe_dump(data))


@contextmanager
def gateway(config: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """Start ``toolgate serve`` and yield its base URL; stop it afterwards.

    A start that loses its port to another process (free_port is only a guess) is retried
    on a new port."""
    for attempt in range(3):
        port = free_port()
        log_path = config.parent / f"gateway-{port}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gateway.cli",
                    "--config",
                    str(config),
                    "serve",
                    "--port",
                    str(port),
                    "--log-level",
                    "warning",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=config.parent,
            )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc)
            break
        except RuntimeError:
            stop(proc)
            if attempt == 2 or b"address already in use" not in log_path.read_bytes():
                raise
    try:
        yield url
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the gateway exited with {proc.returncode}")
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the gateway did not become ready")
