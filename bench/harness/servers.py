"""The servers under load: the bare Starlette app, gateways (``gateway.testing``) and the
checks that each scenario does what it says on them, and a PostgreSQL database of its own."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from gateway.testing import free_port, gateway, stop

from .plan import AUTH, BENCH, KIB, Scenario, compact

PG_ADMIN = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "dbname": "postgres"}


@dataclass(frozen=True)
class Server:
    url: str
    pid: int | None


@contextlib.contextmanager
def bare_server(response_bytes: int, scratch: Path, workers: int = 1) -> Iterator[Server]:
    port = free_port()
    args = ["--response-bytes", str(response_bytes), "--workers", str(workers)]
    with _started(BENCH / "bare_app.py", port, args, scratch / f"bare-{port}.log") as server:
        yield server


@contextlib.contextmanager
def floor_server(workspace: Path, scratch: Path) -> Iterator[Server]:
    """``bench/floor_app.py`` on a directory of its own whose workspace is a copy of
    ``workspace`` (scenario 1's files), knowing the bench's API key."""
    root = scratch / f"floor-{uuid.uuid4().hex[:8]}"
    shutil.copytree(workspace, root / "workspace")
    port = free_port()
    args = ["--root", str(root), "--key", f"{AUTH.split()[-1]}=alice"]
    with _started(BENCH / "floor_app.py", port, args, scratch / f"floor-{port}.log") as server:
        yield server


@contextlib.contextmanager
def _started(script: Path, port: int, args: list[str], log_path: Path) -> Iterator[Server]:
    """``script --port PORT ARGS`` until it answers ``GET /readyz``, then until the block
    ends."""
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(script), "--port", str(port), "--log-level", "warning", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{script.name} exited: {log_path.read_text()}")
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{script.name} did not start")
            time.sleep(0.1)
        yield Server(url, proc.pid)
    finally:
        stop(proc)


@contextlib.contextmanager
def gateways(*configs: Path) -> Iterator[list[str]]:
    """Several ``gateway(config)`` started in parallel (each start is mostly waiting)."""
    managers = [gateway(config) for config in configs]
    entered: list[contextlib.AbstractContextManager[str]] = []
    with ThreadPoolExecutor(len(managers)) as pool:
        futures = [(cm, pool.submit(cm.__enter__)) for cm in managers]
        urls, failure = [], None
        for cm, future in futures:
            try:
                urls.append(future.result())
                entered.append(cm)
            except Exception as exc:  # stop the ones that did start, then raise
                failure = exc
    try:
        if failure is not None:
            raise failure
        yield urls
    finally:
        for cm in entered:
            cm.__exit__(None, None, None)


def gateway_pid(url: str) -> int | None:
    """The pid of the ``toolgate serve`` child listening on ``url``'s port."""
    port = url.rsplit(":", 1)[1]
    for child in psutil.Process().children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        if "gateway.cli" in cmd and "--port" in cmd and cmd[cmd.index("--port") + 1] == port:
            return child.pid
    return None


def post(client: httpx.Client, url: str, payload: dict[str, Any]) -> httpx.Response:
    response = client.post(
        url,
        content=compact(payload),
        headers={"Authorization": AUTH, "Content-Type": "application/json"},
    )
    return response


def check(condition: bool, what: str, response: httpx.Response) -> None:
    if not condition:
        raise RuntimeError(f"{what}: {response.status_code} {response.text[:500]}")


def prepare_gateway(client: httpx.Client, base: str, scen: dict[str, Scenario]) -> dict[str, Any]:
    """Check every scenario does what it says once; seed the replayed key. Returns the
    scenario 1 response size and the replay marker."""
    url = base + "/v1/executions"

    def one(key: str, call_id: str) -> httpx.Response:
        return post(
            client,
            url,
            json.loads(scen[key].template.replace("@CALL@", call_id).replace("@SLOT@", "0")),
        )

    r = one("s1_read", "check-read")
    result = r.json().get("result") or {}
    check(
        r.status_code == 200
        and result.get("outcome") == "succeeded"
        and (result.get("data") or {}).get("content") == KIB,
        "scenario 1 does not read the file",
        r,
    )
    size = len(r.content)
    seed = one("s2_replay", "seed")
    check(
        seed.status_code == 200 and seed.json()["result"]["outcome"] == "succeeded",
        "scenario 2's first execution failed",
        seed,
    )
    first_id = seed.json()["id"]
    again = one("s2_replay", "check-replay")
    check(
        again.status_code == 200 and again.json()["id"] == first_id,
        "scenario 2's replay did not return the first execution",
        again,
    )
    deny = one("s3_deny", "check-deny")
    err = (deny.json().get("result") or {}).get("error") or {}
    check(
        deny.status_code == 200 and err.get("phase") == "policy",
        "scenario 3 is not denied by policy",
        deny,
    )
    for key in ("s4_write_64_files", "s4_write_shared_file"):
        w = one(key, f"check-{key}")
        check(
            w.status_code == 200 and w.json()["result"]["outcome"] == "succeeded",
            f"scenario {key} failed",
            w,
        )
    return {"response_bytes": size, "replay_marker": f'"id":"{first_id}"'}


def pg_available() -> tuple[bool, str]:
    try:
        # psycopg is the optional [postgres] extra: without it scenario 5 and the PostgreSQL
        # store figures are reported as skipped, not a failed import of the harness.
        import psycopg

        with psycopg.connect(**PG_ADMIN, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True, ""
    except Exception as exc:  # any failure means: no server to use
        return False, f"PostgreSQL on 127.0.0.1:5432 does not answer ({exc})"


@contextlib.contextmanager
def pg_database() -> Iterator[str]:
    import psycopg  # the optional extra (see pg_available, which callers ask first)

    name = f"toolgate_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(**PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(**PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
