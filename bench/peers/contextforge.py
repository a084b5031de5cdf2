"""IBM ContextForge (``mcp-contextforge-gateway``) as the peer of ``bench/peers/run.py``.

Installed by the bench on first use into a venv of its own, ``.cache/peers/contextforge-venv``
(never into the project's: it pulls FastAPI, SQLAlchemy and more), reused afterwards. Started
as /work/shared/NOTES.md's working setup says: SQLite, one uvicorn process, plugins,
observability, metrics and its rate limit off, authentication on (a JWT made by its own
``create_jwt_token``). The echo is registered as a REST tool (``POST /tools``) and called by
JSON-RPC ``tools/call`` on ``/rpc`` and on ``/mcp`` (stateless JSON).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.peers import venvs
from bench.peers.venvs import PeerUnavailable
from gateway.testing import free_port, stop

PACKAGE = "mcp-contextforge-gateway"
VERSION = "1.0.7.post20260921"
VENV = venvs.CACHE / "contextforge-venv"
NAME = f"IBM ContextForge {VERSION.split('.post')[0]}"
ADMIN = "admin@bench.example.com"
TOOL = "bench-echo"  # ContextForge slugifies the registered name bench_echo
MCP_VERSION = "2025-11-25"

PER_CALL = (
    "JWT check plus a database read of the token id, a SQLAlchemy ping, RBAC/token-scope "
    "middleware, a cached tool lookup, an SSRF check with DNS in a thread, and a new httpx "
    "client per REST tool call (a new SSL context, loading the CA bundle even for http://, "
    "and a new TCP connection). One tool_metrics row per call, buffered in memory (flushed "
    "every 60 s or 1,000 rows): nothing durable before the answer."
)


def installed() -> bool:
    """The pinned version is in its venv."""
    return venvs.installed(VENV, PACKAGE, VERSION)


def install() -> None:
    venvs.install(VENV, PACKAGE, VERSION)


def _env(data: Path) -> dict[str, str]:
    """Its settings for one run; the secrets are random (it rejects low-entropy ones)."""
    return {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        "DATABASE_URL": f"sqlite:///{data / 'contextforge.db'}",
        "AUTH_REQUIRED": "true",
        "JWT_SECRET_KEY": secrets.token_urlsafe(32),
        "JWT_ALGORITHM": "HS256",
        "PLATFORM_ADMIN_EMAIL": ADMIN,
        "PLATFORM_ADMIN_PASSWORD": "Pw-" + secrets.token_urlsafe(16),
        "BASIC_AUTH_USER": "admin",
        "BASIC_AUTH_PASSWORD": "Pw-" + secrets.token_urlsafe(16),
        "AUTH_ENCRYPTION_SECRET": secrets.token_urlsafe(32),
        "MCPGATEWAY_UI_ENABLED": "false",
        "MCPGATEWAY_ADMIN_API_ENABLED": "false",
        "PLUGINS_ENABLED": "false",
        "OBSERVABILITY_ENABLED": "false",
        "ENABLE_METRICS": "false",
        "SSRF_ALLOW_LOCALHOST": "true",
        "CACHE_TYPE": "database",
        "RATE_LIMITING_ENABLED": "false",
        "ENVIRONMENT": "development",
        "SECURE_COOKIES": "false",
        "LOG_LEVEL": "WARNING",
    }


def _token(env: dict[str, str]) -> str:
    out = subprocess.run(
        [
            str(VENV / "bin" / "python"),
            "-m",
            "mcpgateway.utils.create_jwt_token",
            "--username",
            ADMIN,
            "--exp",
            "1440",
            "--secret",
            env["JWT_SECRET_KEY"],
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    token = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode != 0 or not token:
        raise PeerUnavailable(f"create_jwt_token failed: {out.stderr[-800:]}")
    return token


@contextlib.contextmanager
def started(data: Path, echo_url: str) -> Iterator[tuple[str, int, dict[str, str]]]:
    """ContextForge on a free port with the echo registered: (base URL, pid, auth headers)."""
    data.mkdir(parents=True, exist_ok=True)
    env = _env(data)
    port = free_port()
    log_path = data / f"contextforge-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                str(VENV / "bin" / "mcpgateway"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=data,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        venvs.wait_up(proc, "ContextForge", log_path, 180, lambda: _healthy(url))
        headers = {"Authorization": f"Bearer {_token(env)}"}
        register(url, headers, echo_url)
        yield url, proc.pid, headers
    finally:
        stop(proc)


def _healthy(url: str) -> bool | None:
    return True if httpx.get(url + "/health", timeout=2).status_code == 200 else None


def register(url: str, headers: dict[str, str], echo_url: str) -> None:
    tool = {
        "name": "bench_echo",
        "url": echo_url,
        "description": "A JSON echo on 127.0.0.1 (bench/peers/echo.py).",
        "integration_type": "REST",
        "request_type": "POST",
        "input_schema": {
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
        },
        "visibility": "public",
    }
    r = httpx.post(url + "/tools", json={"tool": tool}, headers=headers, timeout=30)
    if r.status_code not in (200, 201):
        raise PeerUnavailable(f"POST /tools answered {r.status_code}: {r.text[:500]}")


def rpc_body(message: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": TOOL, "arguments": {"message": message}},
    }


MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": MCP_VERSION,
}
