"""Phase ``kinds`` (issue 33): one gateway served the three kinds of call an agent makes, a
read over REST, the same read over MCP ``tools/call`` and an HTTP tool (``http.get_json``
against the example orders service in a process of its own), and a read on PostgreSQL.

Measured: the gateway's RSS right after start and after the warm-up over the three kinds;
the gateway's CPU time per call of each kind (from ``/proc``), and for PostgreSQL the CPU of
the gateway plus that of the PostgreSQL backends serving its database, against the same read
on SQLite. Calls come from a few client threads, each with a keep-alive connection; only
calls answered 200 with the expected outcome count, any other answer stops the phase.

    .venv/bin/python bench/run.py --only kinds [--quick]     # the phase alone
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from gateway.testing import gateway, make_project

from .plan import AUTH, MCP_HEADERS, Plan, body, compact, mcp_read, seed_workspace, sqlite_url
from .servers import PG_ADMIN, gateway_pid, pg_available, pg_database

CLIENTS = 4
"""Client threads, each with a keep-alive connection: some concurrency, as agents bring."""

KINDS: dict[str, tuple[str, str, Callable[[str], dict[str, Any]]]] = {
    "rest": ("/v1/executions", '"outcome":"succeeded"', lambda c: rest("fs.read_file", c)),
    "mcp": ("/mcp", '"io.toolgate/outcome":"succeeded"', mcp_read),
    "http": ("/v1/executions", '"outcome":"succeeded"', lambda c: rest("http.get_json", c)),
}
"""Each kind of call: its path, what an ok answer contains, its body for a call id."""


def rest(tool: str, call_id: str) -> dict[str, Any]:
    arguments = {"path": "one-kib.txt"} if tool == "fs.read_file" else {"path": "/echo"}
    return body(tool, arguments, call_id)


def calls_per_kind(plan: Plan) -> int:
    return 60 if plan.quick else 600


def kinds_phase(plan: Plan, work: Path, results: dict[str, Any]) -> None:
    """Fills ``results["kinds"]``: ``rss_mb`` (start, after warm-up), ``cpu_us_per_call``
    per kind, and ``postgres`` (gateway and backends) against ``sqlite``, or ``skipped``."""
    from instructions import upstream_service  # bench/: the example orders service

    n = calls_per_kind(plan)
    out: dict[str, Any] = {"calls_per_kind": n, "clients": CLIENTS}
    with upstream_service() as upstream:
        root = work / "kinds-sqlite"
        root.mkdir()
        config = project(root, sqlite_url(root), upstream)
        with gateway(config) as url:
            proc = psutil.Process(gateway_pid(url))
            out["rss_mb"] = {"start": rss_mb(proc)}
            cpu: dict[str, float] = {}
            for kind in KINDS:
                cpu[kind] = cpu_per_call(url, kind, n, [proc])
            out["rss_mb"]["after_warmup"] = rss_mb(proc)
            out["cpu_us_per_call"] = cpu
    out["postgres"] = postgres_read(work, n, cpu["rest"])
    results["kinds"] = out


def project(root: Path, database_url: str, upstream: str) -> Path:
    """The shipped project on ``database_url``, its orders service at ``upstream``."""
    config = make_project(root, database_url)
    data = yaml.safe_load(config.read_text())
    data["adapters"]["http"]["services"]["orders"]["base_url"] = upstream
    config.write_text(yaml.safe_dump(data))
    seed_workspace(config)
    return config


def rss_mb(proc: psutil.Process) -> float:
    """Resident set in MiB."""
    return round(proc.memory_info().rss / 2**20, 1)


def cpu_per_call(url: str, kind: str, n: int, procs: list[psutil.Process]) -> float:
    """``n`` calls of ``kind`` (after ``n // 10`` not counted); the CPU µs ``procs`` spent
    per call."""
    drive(url, kind, max(n // 10, CLIENTS))
    before = sum(cpu_s(p) for p in procs)
    drive(url, kind, n)
    return round((sum(cpu_s(p) for p in procs) - before) / n * 1e6, 1)


def cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def drive(url: str, kind: str, n: int) -> None:
    path, marker, make = KINDS[kind]
    headers = {"Authorization": AUTH, "Content-Type": "application/json"}
    if kind == "mcp":
        headers |= dict(MCP_HEADERS)

    def client(k: int) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            for _ in range(k):
                r = c.post(path, content=compact(make(uuid.uuid4().hex)))
                if r.status_code != 200 or marker not in r.text:
                    raise RuntimeError(f"{kind} call failed: {r.status_code} {r.text[:500]}")

    with ThreadPoolExecutor(CLIENTS) as pool:
        share = [n // CLIENTS + (i < n % CLIENTS) for i in range(CLIENTS)]
        for future in [pool.submit(client, k) for k in share]:
            future.result()


def postgres_read(work: Path, n: int, sqlite_cpu: float) -> dict[str, Any]:
    """Scenario 1's read on PostgreSQL: the gateway's CPU and its backends' per call,
    against ``sqlite_cpu`` (the same read on SQLite, same phase)."""
    ok, why = pg_available()
    if not ok:
        return {"skipped": why}
    root = work / "kinds-postgres"
    root.mkdir()
    with pg_database() as database_url:
        config = project(root, database_url, "http://127.0.0.1:9")  # no HTTP call here
        with gateway(config) as url:
            gw = psutil.Process(gateway_pid(url))
            drive(url, "rest", max(n // 10, CLIENTS))  # the pools opened before counting
            backends = backend_processes(database_url.rsplit("/", 1)[1])
            both = cpu_per_call(url, "rest", n, [gw, *backends])
            gateway_only = cpu_per_call(url, "rest", n, [gw])
    return {
        "cpu_us_per_call": both,
        "gateway_cpu_us_per_call": gateway_only,
        "backends": len(backends),
        "sqlite_cpu_us_per_call": sqlite_cpu,
        "ratio": round(both / sqlite_cpu, 3),
    }


def backend_processes(database: str) -> list[psutil.Process]:
    """The PostgreSQL backends connected to ``database`` (this machine's server)."""
    import psycopg  # the optional extra; pg_available() said it is there

    with psycopg.connect(**PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchall()
    procs = []
    for (pid,) in rows:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    return procs
