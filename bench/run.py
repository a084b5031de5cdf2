"""The benchmark harness (`make bench`): the gateway's cost per call against the bare framework.

    .venv/bin/python bench/run.py [--quick] [--no-wrk-install] [--out DIR] [--no-docs]
                                  [--no-profile] [--duration S] [--rounds N] [--connections N]

What it measures, in one run on this machine (docs/performance.md explains each figure):

- HTTP, driven by wrk (same threads, connections and duration for every run), on loopback:
  the bare Starlette app (bench/bare_app.py, the gateway's uvicorn settings) against the
  gateway (``toolgate serve``, SQLite, embedded policy) in scenarios 1-4, and the gateway on
  PostgreSQL in scenario 5. Every gateway run follows its own bare run (A B A B ..., at least
  three rounds); a scenario's ratio is the median over rounds of gateway / adjacent bare
  throughput, so slow drifts of the machine's load cancel out.
- Latency at half of scenario 1's maximum rate, open loop (bench/openloop.py; wrk2 is not
  packaged by Debian).
- In-process micro-benchmarks: the policy decision (cached and on a miss), validation +
  normalisation of each shipped tool, the store's transactions, the whole pipeline without HTTP.
- Growth: a 1,000-tool catalogue (load and resolve), and scenario 1 on a store that already
  holds 1,000,000 events against an empty one.
- Where one call's time goes in-process: each pipeline stage and each store transaction.
- The server's CPU time per call next to every throughput figure (steadier than requests per
  second when other work shares the machine).
- A profile of the gateway under scenario 1 (py-spy, every running thread and the GIL
  holder), and cProfile of the in-process pipeline.

Writes ``<out>/<date>.json`` (default bench/results/), prints the table and PASS/MISS per
target of issue 6, and (unless --quick or --no-docs) rewrites docs/performance.md and
docs/performance.png. Exit status 0 even when a target is missed (it is a measurement);
non-zero when the harness itself fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import cProfile
import datetime as dt
import gzip
import json
import os
import platform
import pstats
import random
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))
os.environ.setdefault("RUST_LIB_BACKTRACE", "0")

import httpx  # noqa: E402
import yaml  # noqa: E402
from openloop import run_open_loop  # noqa: E402

from gateway.testing import free_port, gateway, make_project  # noqa: E402

AUTH = "Bearer tg_dev_alice"
KIB = "x" * 1024
PG_ADMIN = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "dbname": "postgres"}

# --- plan -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    quick: bool
    duration: int
    """Seconds per wrk run."""
    warmup: int
    connections: int
    threads: int
    rounds: int
    iterations: int
    """Per micro-benchmark."""
    tools: int
    """Generated declarations for the catalogue growth test."""
    events: int
    """Events preloaded for the store growth test."""
    openloop_s: float
    profile_s: int


FULL = Plan(
    quick=False,
    duration=8,
    warmup=2,
    connections=16,
    threads=2,
    rounds=3,
    iterations=2000,
    tools=1000,
    events=1_000_000,
    openloop_s=20.0,
    profile_s=12,
)
QUICK = Plan(
    quick=True,
    duration=1,
    warmup=0,
    connections=4,
    threads=1,
    rounds=1,
    iterations=60,
    tools=40,
    events=5000,
    openloop_s=2.0,
    profile_s=0,
)

# --- the scenarios' request bodies -----------------------------------------------------------


def body(tool: str, arguments: dict[str, Any], call_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": "bench",
        "call_id": call_id,
        "tool": {"name": tool},
        "arguments": arguments,
        "actor": {"user_id": "alice", "agent_id": "bench"},
        "workspace": {"id": "demo"},
        **extra,
    }


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    template: str
    """Compact JSON body; @CALL@ becomes a unique call_id, @SLOT@ a file number."""
    marker: str = '"outcome":"succeeded"'
    """What an ok response body contains (besides status 200)."""


def scenarios(replay_key: str) -> dict[str, Scenario]:
    return {
        "s1_read": Scenario(
            "s1_read",
            "1. fs.read_file 1 KiB (allowed)",
            compact(body("fs.read_file", {"path": "one-kib.txt"}, "@CALL@")),
        ),
        "s2_replay": Scenario(
            "s2_replay",
            "2. fs.write_file replayed (one idempotency key)",
            compact(
                body(
                    "fs.write_file",
                    {"path": "replay.txt", "content": KIB},
                    "@CALL@",
                    idempotency_key=replay_key,
                )
            ),
            marker="",  # set to the first execution's id once it exists
        ),
        "s3_deny": Scenario(
            "s3_deny",
            "3. fs.write_file .git/config (denied by policy)",
            compact(body("fs.write_file", {"path": ".git/config", "content": "x"}, "@CALL@")),
            marker='"phase":"policy"',
        ),
        "s4_write_64_files": Scenario(
            "s4_write_64_files",
            "4a. fs.write_file 1 KiB, 64 files (64 lock keys)",
            compact(body("fs.write_file", {"path": "w/f@SLOT@.txt", "content": KIB}, "@CALL@")),
        ),
        "s4_write_shared_file": Scenario(
            "s4_write_shared_file",
            "4b. fs.write_file 1 KiB, one file (one lock key)",
            compact(body("fs.write_file", {"path": "shared.txt", "content": KIB}, "@CALL@")),
        ),
    }


S5 = "s5_read_postgres"
S5_TITLE = "5. fs.read_file 1 KiB on PostgreSQL"

# --- small helpers ----------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Samples(list[float]):
    """Wall-clock seconds per iteration, plus the process CPU seconds of the whole loop (all
    threads: the store's work runs on worker threads)."""

    cpu_s: float = 0.0


def stats_us(samples_s: list[float]) -> dict[str, float]:
    """Median, p99 and mean wall time in µs; with ``Samples``, also the mean process CPU time
    per iteration, which a busy machine inflates less than wall time (no run-queue waits)."""
    ordered = sorted(samples_s)
    n = len(ordered)
    out = {
        "n": n,
        "median_us": round(statistics.median(ordered) * 1e6, 1),
        "p99_us": round(ordered[min(n - 1, int(n * 0.99))] * 1e6, 1),
        "mean_us": round(statistics.fmean(ordered) * 1e6, 1),
    }
    if isinstance(samples_s, Samples):
        out["cpu_us_per_call"] = round(samples_s.cpu_s * 1e6 / n, 1)
    return out


def timed_loop(fn: Callable[[], Any], n: int, warmup: int = 50) -> Samples:
    for _ in range(warmup):
        fn()
    samples = Samples()
    clock = time.perf_counter
    cpu = time.process_time()
    for _ in range(n):
        start = clock()
        fn()
        samples.append(clock() - start)
    samples.cpu_s = time.process_time() - cpu
    return samples


async def timed_async(fn: Callable[[], Any], n: int, warmup: int = 20) -> Samples:
    for _ in range(warmup):
        await fn()
    samples = Samples()
    clock = time.perf_counter
    cpu = time.process_time()
    for _ in range(n):
        start = clock()
        await fn()
        samples.append(clock() - start)
    samples.cpu_s = time.process_time() - cpu
    return samples


def seed_workspace(config: Path) -> Path:
    ws = config.parent / "var" / "workspaces" / "demo"
    (ws / "w").mkdir(parents=True, exist_ok=True)
    (ws / "one-kib.txt").write_text(KIB)
    return ws


def sqlite_url(root: Path) -> str:
    return f"sqlite:///{root / 'var' / 'toolgate.db'}"


# --- wrk --------------------------------------------------------------------------------------


def ensure_wrk(install: bool) -> str | None:
    found = shutil.which("wrk")
    if found or not install:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        log("wrk is missing; running: apt-get update && apt-get install -y wrk")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update"], check=False, env=env)
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=False, env=env)
        return shutil.which("wrk")
    log("wrk is missing: install Debian's wrk as root (apt-get update && apt-get install -y wrk)")
    return None


def wrk_version(wrk: str) -> str:
    out = subprocess.run([wrk, "--version"], capture_output=True, text=True)
    first = (out.stdout + out.stderr).splitlines()[0]
    return first.split(" Copyright")[0].strip()


@dataclass
class Wrk:
    path: str
    plan: Plan
    scratch: Path

    def run(
        self,
        url: str,
        template: str,
        marker: str = "",
        duration: int | None = None,
        connections: int | None = None,
        pid: int | None = None,
    ) -> dict[str, Any]:
        """One wrk run; returns requests/s of ok responses and latency percentiles, and the
        server's CPU time per ok response when its ``pid`` is given."""
        nonce = uuid.uuid4().hex[:10]
        path = self.scratch / f"body-{nonce}.json"
        path.write_text(template)
        seconds = duration or self.plan.duration
        conns = connections or self.plan.connections
        cmd = [
            self.path,
            f"-t{min(self.plan.threads, conns)}",
            f"-c{conns}",
            f"-d{seconds}s",
            "--timeout",
            "30s",
            "-s",
            str(BENCH / "wrk_post.lua"),
            url,
            "--",
            str(path),
            nonce,
            marker,
            AUTH,
            "64",
        ]
        cpu_before = cpu_seconds(pid)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
        cpu_used = cpu_seconds(pid) - cpu_before
        path.unlink(missing_ok=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("WRK_JSON ")), None)
        if proc.returncode != 0 or line is None:
            raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
        data = json.loads(line[len("WRK_JSON ") :])
        seconds_run = data["duration_us"] / 1e6
        lat = data["latency_us"]
        out = {
            "rps": round(data["ok"] / seconds_run, 1),
            "requests": data["requests"],
            "ok": data["ok"],
            "bad": data["bad"],
            "errors": {k: v for k, v in data["errors"].items() if v},
            "p50_ms": round(lat["p50"] / 1000, 3),
            "p90_ms": round(lat["p90"] / 1000, 3),
            "p99_ms": round(lat["p99"] / 1000, 3),
            "max_ms": round(lat["max"] / 1000, 3),
        }
        if pid is not None and data["ok"]:
            out["cpu_us_per_ok"] = round(cpu_used * 1e6 / data["ok"], 1)
        if data["bad"]:
            log(f"  {data['bad']} bad responses from {url}: {proc.stderr.strip()[:600]}")
        return out


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far; 0 without one."""
    if pid is None:
        return 0.0
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def summarise_pairs(bare: list[dict[str, Any]], gw: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds; the ratio is the median of per-round (gateway / adjacent bare)."""
    ratios = [g["rps"] / b["rps"] for b, g in zip(bare, gw, strict=True) if b["rps"] > 0]

    def med(runs: list[dict[str, Any]], key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 3)

    cpu = {}
    if all("cpu_us_per_ok" in r for r in bare + gw):
        cpu = {
            "gateway_cpu_us_per_call": med(gw, "cpu_us_per_ok"),
            "bare_cpu_us_per_call": med(bare, "cpu_us_per_ok"),
        }
        cpu["cpu_ratio"] = round(cpu["bare_cpu_us_per_call"] / cpu["gateway_cpu_us_per_call"], 4)
    return {
        "ratio": round(statistics.median(ratios), 4) if ratios else 0.0,
        "ratios": [round(r, 4) for r in ratios],
        "gateway_rps": med(gw, "rps"),
        "bare_rps": med(bare, "rps"),
        "gateway_p50_ms": med(gw, "p50_ms"),
        "gateway_p99_ms": med(gw, "p99_ms"),
        "bare_p50_ms": med(bare, "p50_ms"),
        "bare_p99_ms": med(bare, "p99_ms"),
        **cpu,
        "bad": sum(r["bad"] for r in gw),
        "rounds": len(gw),
        "runs": {"bare": bare, "gateway": gw},
    }


# --- servers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    url: str
    pid: int | None


@contextlib.contextmanager
def bare_server(response_bytes: int, scratch: Path) -> Iterator[Server]:
    port = free_port()
    log_path = scratch / f"bare-{port}.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(BENCH / "bare_app.py"),
                "--port",
                str(port),
                "--response-bytes",
                str(response_bytes),
                "--log-level",
                "warning",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"bare app exited: {log_path.read_text()}")
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the bare app did not start")
            time.sleep(0.1)
        yield Server(url, proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    import psutil

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


# --- HTTP phases ------------------------------------------------------------------------------


def ab_rounds(
    plan: Plan,
    wrk: Wrk,
    bare: Server,
    bare_template: str,
    gateways: dict[str, tuple[Server, Scenario]],
) -> dict[str, dict[str, Any]]:
    """``rounds`` times (for each scenario: a bare run, then the gateway run); summarised."""
    runs: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
        k: ([], []) for k in gateways
    }
    bare_url = bare.url + "/echo"
    warm: dict[str, int] = {}
    if plan.warmup:
        wrk.run(bare_url, bare_template, duration=plan.warmup)
        for key, (server, s) in gateways.items():
            warm[key] = wrk.run(
                server.url + "/v1/executions", s.template, s.marker, duration=plan.warmup
            )["ok"]
    for r in range(plan.rounds):
        for key, (server, s) in gateways.items():
            a = wrk.run(bare_url, bare_template, pid=bare.pid)
            b = wrk.run(server.url + "/v1/executions", s.template, s.marker, pid=server.pid)
            # Calls of this scenario the gateway answered before this run (a replayed key's
            # log grows with each replay: see scenario 2's per-round ratios).
            b["earlier_calls"] = sum(x["ok"] for x in runs[key][1]) + warm.get(key, 0)
            runs[key][0].append(a)
            runs[key][1].append(b)
            log(
                f"round {r + 1}/{plan.rounds} {key}: bare {a['rps']:.0f}/s, gateway "
                f"{b['rps']:.0f}/s ({b['rps'] / max(a['rps'], 1e-9):.3f}x); cpu/call "
                f"{a.get('cpu_us_per_ok', 0):.0f} / {b.get('cpu_us_per_ok', 0):.0f} µs; "
                f"load {loadavg()[0]}"
            )
    return {
        key: {"title": gateways[key][1].title, **summarise_pairs(a_runs, b_runs)}
        for key, (a_runs, b_runs) in runs.items()
    }


def http_sqlite_phase(
    plan: Plan, wrk: Wrk, work: Path, results: dict[str, Any], profile_out: Path | None
) -> tuple[int, dict[str, Any] | None]:
    """Scenarios 1-4, the open-loop latency and the profile; returns scenario 1's response
    size (for the bare app of the later phases) and the profile."""
    root = work / "sqlite"
    config = make_project(root, sqlite_url(root))
    seed_workspace(config)
    scen = scenarios(f"replay-{uuid.uuid4().hex[:8]}")
    with gateway(config) as base, httpx.Client(timeout=30) as client:
        gw = Server(base, gateway_pid(base))
        prep = prepare_gateway(client, base, scen)
        scen["s2_replay"] = replace(scen["s2_replay"], marker=prep["replay_marker"])
        size = prep["response_bytes"]
        s1 = scen["s1_read"]
        results["http"]["response_bytes"] = size
        results["http"]["request_bytes"] = len(s1.template)
        with bare_server(size, work) as bare:
            echo = post(
                client, bare.url + "/echo", json.loads(s1.template.replace("@CALL@", "check"))
            )
            check(
                echo.status_code == 200 and abs(len(echo.content) - size) <= 2,
                "the bare app's response is not the gateway's size",
                echo,
            )
            log(f"A/B rounds; request {len(s1.template)} bytes, response {size} bytes")
            results["http"]["scenarios"].update(
                ab_rounds(plan, wrk, bare, s1.template, {k: (gw, s) for k, s in scen.items()})
            )
            # Latency at half of scenario 1's max rate: open loop, gateway then bare.
            max_rps = results["http"]["scenarios"]["s1_read"]["gateway_rps"]
            rate = max(max_rps / 2, 1.0)
            nonce = uuid.uuid4().hex[:8]
            log(f"open loop at {rate:.0f}/s for {plan.openloop_s}s (half of {max_rps:.0f}/s)")

            def body_for(i: int) -> bytes:
                return s1.template.replace("@CALL@", f"ol-{nonce}-{i}").encode()

            headers = {"Authorization": AUTH}
            gw_ol = run_open_loop(
                gw.url + "/v1/executions",
                body_for,
                rate=rate,
                duration_s=plan.openloop_s,
                headers=headers,
                marker=s1.marker.encode(),
            ).summary()
            bare_ol = run_open_loop(
                bare.url + "/echo", body_for, rate=rate, duration_s=plan.openloop_s, headers=headers
            ).summary()
            results["http"]["s1_half_rate_latency"] = {
                "tool": "bench/openloop.py (open loop, constant rate; wrk2 is not in Debian)",
                "rate": round(rate, 1),
                "gateway": gw_ol,
                "bare": bare_ol,
            }
        profile = None
        if profile_out is not None and plan.profile_s > 0:
            profile = profile_gateway(wrk, gw, s1, plan.profile_s, profile_out)
    return size, profile


def pg_available() -> tuple[bool, str]:
    try:
        import psycopg

        with psycopg.connect(**PG_ADMIN, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True, ""
    except Exception as exc:  # any failure means: no server to use
        return False, f"PostgreSQL on 127.0.0.1:5432 does not answer ({exc})"


@contextlib.contextmanager
def pg_database() -> Iterator[str]:
    import psycopg

    name = f"toolgate_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(**PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(**PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def http_pg_phase(plan: Plan, wrk: Wrk, work: Path, size: int, results: dict[str, Any]) -> None:
    ok, why = pg_available()
    if not ok:
        results["http"]["scenarios"][S5] = {"title": S5_TITLE, "skipped": why}
        log(f"scenario 5 skipped: {why}")
        return
    s1 = replace(scenarios("unused")["s1_read"], key=S5, title=S5_TITLE)
    with pg_database() as url:
        root = work / "pg"
        config = make_project(root, url)
        seed_workspace(config)
        with gateway(config) as base, httpx.Client(timeout=30) as client:
            r = post(
                client,
                base + "/v1/executions",
                json.loads(s1.template.replace("@CALL@", "check-pg")),
            )
            check(
                r.status_code == 200 and r.json()["result"]["outcome"] == "succeeded",
                "scenario 5 does not read the file",
                r,
            )
            gw = Server(base, gateway_pid(base))
            with bare_server(size, work) as bare:
                results["http"]["scenarios"].update(
                    ab_rounds(plan, wrk, bare, s1.template, {S5: (gw, s1)})
                )


# --- growth: events ---------------------------------------------------------------------------


def preload_events(db_path: Path, count: int, per_execution: int = 10) -> float:
    """Insert ``count`` events straight into the events table; returns seconds taken."""
    from gateway.store.store import Store

    store = Store(f"sqlite:///{db_path}")
    store.open_sync()
    store.engine.dispose()
    start = time.perf_counter()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-262144")
    now = int(time.time() * 1000)
    types = [
        "tool.requested",
        "tool.resolved",
        "policy.decided",
        "lock.acquired",
        "tool.started",
        "tool.side_effect_observed",
        "tool.verified",
        "tool.completed",
    ]

    def rows() -> Iterator[tuple[Any, ...]]:
        for i in range(count):
            execution = i // per_execution
            yield (
                f"ev_{uuid.uuid4().hex}",
                f"ex_{execution:032x}",
                i % per_execution,
                types[i % len(types)],
                1,
                now - (count - i),
                f'{{"call_id":"c{execution}","note":"preloaded by bench/run.py"}}',
            )

    with conn:
        conn.executemany(
            "INSERT INTO events (id, execution_id, seq, type, version, at_ms, data_json) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows(),
        )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.perf_counter() - start


def events_growth_phase(plan: Plan, wrk: Wrk, work: Path, results: dict[str, Any]) -> None:
    empty_root, full_root = work / "ev-empty", work / "ev-full"
    empty_cfg = make_project(empty_root, sqlite_url(empty_root))
    full_cfg = make_project(full_root, sqlite_url(full_root))
    for cfg in (empty_cfg, full_cfg):
        seed_workspace(cfg)
    (full_root / "var").mkdir(parents=True, exist_ok=True)
    log(f"preloading {plan.events:,} events")
    took = preload_events(full_root / "var" / "toolgate.db", plan.events)
    (counted,) = (
        sqlite3.connect(full_root / "var" / "toolgate.db")
        .execute("SELECT count(*) FROM events")
        .fetchone()
    )
    log(f"  {counted:,} events in {took:.1f}s")
    s1 = scenarios("unused")["s1_read"]
    with gateways(empty_cfg, full_cfg) as (empty, full):
        servers = {
            "empty": Server(empty, gateway_pid(empty)),
            "full": Server(full, gateway_pid(full)),
        }
        for server in servers.values():
            if plan.warmup:
                wrk.run(server.url + "/v1/executions", s1.template, s1.marker, duration=plan.warmup)
        runs: dict[str, list[dict[str, Any]]] = {"empty": [], "full": []}
        for r in range(plan.rounds):
            for name, server in servers.items():
                runs[name].append(
                    wrk.run(server.url + "/v1/executions", s1.template, s1.marker, pid=server.pid)
                )
            log(
                f"round {r + 1}/{plan.rounds} events: empty {runs['empty'][-1]['rps']:.0f}/s, "
                f"{counted:,} events {runs['full'][-1]['rps']:.0f}/s"
            )
    ratios = [f["rps"] / e["rps"] for e, f in zip(runs["empty"], runs["full"], strict=True)]
    ratio = statistics.median(ratios)
    results["growth"]["events"] = {
        "events": counted,
        "preload_s": round(took, 2),
        "empty_rps": round(statistics.median(r["rps"] for r in runs["empty"]), 1),
        "full_rps": round(statistics.median(r["rps"] for r in runs["full"]), 1),
        "empty_p99_ms": round(statistics.median(r["p99_ms"] for r in runs["empty"]), 3),
        "full_p99_ms": round(statistics.median(r["p99_ms"] for r in runs["full"]), 3),
        "empty_cpu_us_per_call": _med_opt(runs["empty"], "cpu_us_per_ok"),
        "full_cpu_us_per_call": _med_opt(runs["full"], "cpu_us_per_ok"),
        "ratio": round(ratio, 4),
        "ratios": [round(x, 4) for x in ratios],
        "slowdown_pct": round((1 - ratio) * 100, 2),
        "runs": runs,
    }


def _med_opt(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if key in r]
    return round(statistics.median(values), 1) if values else None


# --- growth: catalogue ------------------------------------------------------------------------


def generate_catalogue(target: Path, count: int) -> list[str]:
    """``count`` declarations cloned from the shipped ones under new names; returns names."""
    shipped = sorted((ROOT / "tools.d").glob("*.yaml"))
    sources = [yaml.safe_load(p.read_text()) for p in shipped]
    target.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        decl = dict(sources[i % len(sources)])
        decl["name"] = f"gen.t{i:04d}.{decl['name']}"
        names.append(decl["name"])
        (target / f"{decl['name']}@{decl['version']}.yaml").write_text(
            yaml.safe_dump(decl, sort_keys=False)
        )
    return names


def catalogue_growth(plan: Plan, work: Path, results: dict[str, Any]) -> None:
    from gateway.testing import load_catalogue

    tools_dir = work / "tools-1000"
    names = generate_catalogue(tools_dir, plan.tools)
    loads = []
    for _ in range(1 if plan.quick else 3):
        start = time.perf_counter()
        catalogue = load_catalogue(tools_dir)
        loads.append(time.perf_counter() - start)
    assert len(catalogue) == plan.tools, len(catalogue)
    shipped_start = time.perf_counter()
    shipped = load_catalogue(ROOT / "tools.d")
    shipped_load = time.perf_counter() - shipped_start
    rng = random.Random(6)
    picks = [rng.choice(names) for _ in range(plan.iterations)]
    it = iter(picks * 2)
    any_version = stats_us(timed_loop(lambda: catalogue.resolve(next(it)), plan.iterations, 0))
    it = iter(picks * 2)
    ranged = stats_us(timed_loop(lambda: catalogue.resolve(next(it), "^1"), plan.iterations, 0))
    small = stats_us(timed_loop(lambda: shipped.resolve("fs.write_file", "^1"), plan.iterations))
    results["growth"]["catalogue"] = {
        "tools": len(catalogue),
        "load_s": round(statistics.median(loads), 3),
        "loads_s": [round(x, 3) for x in loads],
        "per_tool_ms": round(statistics.median(loads) / len(catalogue) * 1000, 3),
        "shipped_tools": len(shipped),
        "shipped_load_s": round(shipped_load, 3),
        "resolve_any": any_version,
        "resolve_range": ranged,
        "resolve_shipped_range": small,
    }


# --- micro-benchmarks -------------------------------------------------------------------------

VALID_ARGUMENTS: dict[str, dict[str, Any]] = {
    "db.mark_shipped": {"order_id": 1, "carrier": "dhl", "tracking": "JD0001-42"},
    "db.query_orders": {"status": "paid", "limit": 10},
    "fs.append_file": {"path": "notes/a.txt", "content": KIB},
    "fs.apply_patch": {"path": "a.txt", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+b\n"},
    "fs.delete_file": {"path": "notes/a.txt"},
    "fs.list_dir": {"path": "notes", "recursive": True},
    "fs.read_file": {"path": "one-kib.txt"},
    "fs.write_file": {"path": "notes/a.txt", "content": KIB},
    "fs.write_files": {"files": [{"path": f"notes/{i}.txt", "content": KIB} for i in range(3)]},
    "http.get_json": {"path": "/items/1"},
    "orders.create": {"item_id": 1, "quantity": 2, "note": "bench"},
    "orders.get": {"order_id": "ord_1"},
    "proc.python": {"script": "tools/s.py", "args": ["a", "b"], "stdin": ""},
    "proc.run_tests": {"target": "tests", "keyword": "smoke"},
    "web.extract_text": {"url": "https://example.com/", "selector": "h1"},
    "web.screenshot": {"url": "https://example.com/"},
    "web.submit_form": {
        "url": "https://example.com/form",
        "name": "Ada",
        "email": "a@b.c",
        "plan": "pro",
    },
}


def _generated_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A guess at valid arguments for a tool this file does not know (required keys only)."""
    samples = {"string": "a", "integer": 1, "number": 1.0, "boolean": True, "list": [], "dict": {}}
    out: dict[str, Any] = {}
    for key, rule in schema.items():
        if isinstance(rule, dict) and rule.get("required"):
            if "allowed" in rule:
                out[key] = rule["allowed"][0]
            else:
                kind = rule.get("type")
                out[key] = samples.get(kind[0] if isinstance(kind, list) else kind, "a")
    return out


def request_for(payload: dict[str, Any]) -> Any:
    from gateway.pipeline.request import parse_request

    return parse_request(payload, "alice")


async def micro_phase(
    plan: Plan, work: Path, results: dict[str, Any], profile_out: Path | None
) -> None:
    from gateway.pipeline import normalise, resolve, validate
    from gateway.pipeline.policy import policy_input
    from gateway.pipeline.records import Requested
    from gateway.pipeline.runner import run_call
    from gateway.policy.embedded import EmbeddedPolicy
    from gateway.runtime.bootstrap import close_runtime, open_runtime
    from gateway.settings import load_settings

    n = plan.iterations
    micro = results["micro"]
    root = work / "micro"
    config = make_project(root, sqlite_url(root))
    seed_workspace(config)
    services = await open_runtime(load_settings(config, env={}))
    try:
        # The policy input documents, built by the real stages 1-3.
        async def document(payload: dict[str, Any]) -> dict[str, Any]:
            resolved = await resolve.run(services, Requested.start(request_for(payload)))
            prepared = await validate.run(services, await normalise.run(services, resolved))
            return policy_input(prepared.call)

        policy = services.policy
        assert isinstance(policy, EmbeddedPolicy)
        for name, payload, want in (
            ("allow", body("fs.read_file", {"path": "one-kib.txt"}, "p1"), "allow"),
            ("deny", body("fs.write_file", {"path": ".git/config", "content": "x"}, "p2"), "deny"),
        ):
            doc = await document(payload)
            decision = policy.decide_sync(doc)
            assert decision.result.value == want, decision
            micro[f"policy_decision_{name}"] = stats_us(
                timed_loop(lambda d=doc: policy.decide_sync(d), n)
            )
        # The embedded backend caches decisions by the part of the input the policy reads
        # (docs/policies.md), so the loops above are cache hits, as repeated calls on the same
        # paths are. A miss: a different path in every call.
        for name, payload in (
            ("allow", body("fs.read_file", {"path": "one-kib.txt"}, "p3")),
            ("deny", body("fs.write_file", {"path": ".git/config", "content": "x"}, "p4")),
        ):
            doc = await document(payload)
            misses = []
            for i in range(n + 50):
                other = copy.deepcopy(doc)
                for entry in other["paths"]:
                    entry["relative"] = f"{entry['relative']}.{i}"
                misses.append(other)
            docs = iter(misses)
            micro[f"policy_decision_{name}_miss"] = stats_us(
                timed_loop(lambda d=docs: policy.decide_sync(next(d)), n)
            )
        log(
            f"policy decision: {micro['policy_decision_allow']['median_us']} µs median "
            f"(cached), {micro['policy_decision_allow_miss']['median_us']} µs (miss)"
        )

        # Validation + normalisation of each shipped tool (what stage 2 does with cerberus).
        validation: dict[str, Any] = {}
        for tool in services.catalogue.all():
            validator = services.catalogue.validator(tool)
            args = VALID_ARGUMENTS.get(tool.name) or _generated_arguments(dict(tool.input))
            if not validator.validate(dict(args)):
                validation[tool.ref] = {"error": f"arguments not valid: {validator.errors}"}
                continue

            def once(v: Any = validator, a: dict[str, Any] = args) -> dict[str, Any]:
                if not v.validate(dict(a)):
                    raise AssertionError(v.errors)
                return dict(v.document)

            validation[tool.ref] = stats_us(timed_loop(once, n))
        micro["validation"] = validation
        worst = max(
            (v for v in validation.values() if "median_us" in v), key=lambda v: v["median_us"]
        )
        log(f"validation: worst median {worst['median_us']} µs over {len(validation)} tools")

        # The whole pipeline without HTTP: fs.read_file through run_call, sequentially.
        nonce = uuid.uuid4().hex[:8]
        counter = iter(range(10**9))

        def read_request() -> Any:
            return request_for(
                body("fs.read_file", {"path": "one-kib.txt"}, f"pipe-{nonce}-{next(counter)}")
            )

        record = await run_call(services, read_request())
        assert (record.result or {}).get("outcome") == "succeeded", record.result
        requests = [read_request() for _ in range(n + 20)]
        it = iter(requests)
        micro["pipeline_read"] = stats_us(
            await timed_async(lambda: run_call(services, next(it)), n)
        )
        log(f"pipeline: {micro['pipeline_read']['median_us']} µs median")
        # ... and 16 at a time: the in-process ceiling that HTTP adds to.
        concurrent = [read_request() for _ in range(min(n, 1000))]
        start = time.perf_counter()
        queue = iter(concurrent)

        async def worker() -> None:
            for req in queue:
                await run_call(services, req)

        await asyncio.gather(*(worker() for _ in range(16)))
        micro["pipeline_read_concurrent16_rps"] = round(
            len(concurrent) / (time.perf_counter() - start), 1
        )
        m = max(n // 4, 10)
        writes = [
            request_for(
                body(
                    "fs.write_file", {"path": f"w/p{i % 64}.txt", "content": KIB}, f"pw-{nonce}-{i}"
                )
            )
            for i in range(m + 20)
        ]
        it = iter(writes)
        micro["pipeline_write"] = stats_us(
            await timed_async(lambda: run_call(services, next(it)), m)
        )

        def write_request(i: int) -> Any:
            payload = body(
                "fs.write_file", {"path": f"w/s{i % 64}.txt", "content": KIB}, f"sw-{nonce}-{i}"
            )
            return request_for(payload)

        micro["pipeline_read_stages"] = await stage_breakdown(services, lambda i: read_request(), m)
        micro["pipeline_write_stages"] = await stage_breakdown(services, write_request, m)
        if profile_out is not None:
            results["profile_inprocess"] = await cprofile_pipeline(
                services, read_request, max(n // 4, 10), profile_out
            )
    finally:
        await close_runtime(services)

    micro["store_sqlite"] = await store_micro(sqlite_url(work / "store-micro"), n)
    ok, why = pg_available()
    if ok:
        with pg_database() as url:
            micro["store_postgres"] = await store_micro(url, n)
    else:
        micro["store_postgres"] = {"skipped": why}


async def stage_breakdown(
    services: Any, make_request: Callable[[int], Any], n: int
) -> dict[str, Any]:
    """Where the time of one call goes: mean wall µs per pipeline stage, and per kind of store
    transaction (its body on the worker thread, with that thread's CPU time), over ``n``
    sequential run_calls. Timing wrappers add a little to each figure."""
    from gateway.pipeline.runner import STAGES, Stage, run_call

    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}

    def timed_stage(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        async def run(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return await fn(*args)
            finally:
                wall.setdefault(name, []).append(time.perf_counter() - start)

        return run

    stages = tuple(Stage(s.name, s.takes, timed_stage(s.name, s.run)) for s in STAGES)

    def timed_tx(name: str, wall_s: float, thread_cpu_s: float) -> None:
        # SQLite's group commit: one transaction for the writes of a loop turn (sequential
        # calls give batches of one), named after its first write.
        wall.setdefault("store tx " + name, []).append(wall_s)
        cpu.setdefault("store tx " + name, []).append(thread_cpu_s)

    requests = [make_request(i) for i in range(n)]
    services.store.observe(timed_tx)
    try:
        start, process_cpu = time.perf_counter(), time.process_time()
        for req in requests:
            await run_call(services, req, stages)
        total = time.perf_counter() - start
        total_cpu = time.process_time() - process_cpu
    finally:
        services.store.observe(None)
    out: dict[str, Any] = {
        "n": n,
        "call_wall_us": round(total * 1e6 / n, 1),
        "call_cpu_us": round(total_cpu * 1e6 / n, 1),
        "parts": {},
    }
    for name, values in wall.items():
        part = {
            "per_call": round(len(values) / n, 2),
            "mean_wall_us": round(statistics.fmean(values) * 1e6, 1),
        }
        if name in cpu:
            part["mean_thread_cpu_us"] = round(statistics.fmean(cpu[name]) * 1e6, 1)
        out["parts"][name] = part
    return out


async def store_micro(url: str, n: int) -> dict[str, Any]:
    from gateway.events.model import make_event
    from gateway.instance import INSTANCE_ID
    from gateway.pipeline.records import new_execution_id
    from gateway.store.records import ExecutionRecord
    from gateway.store.store import Reserved, Store
    from gateway.types import Status

    store = Store(url)
    await store.open()
    try:
        out: dict[str, Any] = {}
        out["empty_write_tx"] = stats_us(
            await timed_async(lambda: store._write(lambda conn: None), n)
        )
        out["empty_write_tx_sync"] = stats_us(
            timed_loop(lambda: store._tx(lambda c: None, True), n)
        )
        counter = iter(range(10**9))

        async def reserve_commit() -> None:
            i = next(counter)
            now = int(time.time() * 1000)
            ex = new_execution_id()
            record = ExecutionRecord(
                id=ex,
                principal="alice",
                agent_id="bench",
                run_id="micro",
                turn_id="",
                call_id=f"c{i}",
                payload_sha256="0" * 64,
                workspace_id="demo",
                tool_name="fs.write_file",
                tool_version="1.2.0",
                risk="medium",
                status=Status.RUNNING,
                outcome=None,
                arguments_sha256="1" * 64,
                idempotency_scope=None,
                approval_id=None,
                cancellation_token=None,
                request_json=f'{{"call_id":"c{i}"}}',
                result_json=None,
                fencing_json=None,
                owner=INSTANCE_ID,
                created_ms=now,
                updated_ms=now,
            )
            events = [
                make_event(ex, 0, "tool.requested", {"call_id": f"c{i}"}),
                make_event(ex, 1, "tool.resolved", {"version": "1.2.0"}),
                make_event(ex, 2, "policy.decided", {"result": "allow", "reasons": []}),
            ]
            got = await store.reserve(record, events, None)
            assert isinstance(got, Reserved), got
            done = await store.commit(
                ex,
                outcome="succeeded",
                result_json='{"outcome":"succeeded"}',
                events=[make_event(ex, 3, "tool.completed", {"outcome": "succeeded"})],
                fencing_json=None,
            )
            assert done

        out["reserve_commit"] = stats_us(await timed_async(reserve_commit, n))
        return out
    finally:
        await store.aclose()


# --- profiles ---------------------------------------------------------------------------------


def _frame_name(frame: str) -> str:
    """'fn (path/to/file.py:12)' → 'file.py:fn' with the path shortened to the package."""
    m = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not m:
        return frame
    fn, path = m.groups()
    path = re.sub(r"^.*/site-packages/", "", path)
    path = path.replace(f"{ROOT}/", "")
    path = re.sub(r"^.*/lib/python3\.\d+/", "", path)
    return f"{path}:{fn}"


IDLE_LEAVES = frozenset(
    {
        "threading.py:Condition.wait",
        "threading.py:Event.wait",
        "threading.py:Thread.join",
        "selectors.py:EpollSelector.select",
        "queue.py:Queue.get",
    }
)
"""Leaf frames of a thread that waits (py-spy's idle detection misses some)."""


def analyse_collapsed(text: str, top: int = 15) -> dict[str, Any]:
    """Self and inclusive shares of each function in py-spy's raw (collapsed) output, over
    the samples of threads that were running (waiting leaves are counted apart)."""
    selfc: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = idle = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if not frames:
            continue
        if frames[-1] in IDLE_LEAVES:
            idle += c
            continue
        total += c
        selfc[frames[-1]] += c
        for name in set(frames):
            incl[name] += c

    def table(counter: Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": k, "pct": round(v * 100 / total, 1)} for k, v in counter.most_common(top)
        ]

    gateway_incl = Counter({k: v for k, v in incl.items() if k.startswith("gateway/")})
    return {
        "samples": total,
        "idle_samples": idle,
        "self": table(selfc),
        "inclusive": table(incl),
        "inclusive_gateway": table(gateway_incl),
    }


BUCKETS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # (name, the stack contains one of these, and none of these) on "file.py:function" names
    (
        "HTTP and ASGI around the route (uvicorn, h11, starlette)",
        ("uvicorn/", "h11/", "starlette/"),
        ("routes.py:create_execution", "Pool._in_transaction", "SqliteTransactor._run_batch"),
    ),
    ("route create_execution (main thread)", ("routes.py:create_execution",), ()),
    ("  request parsing (pydantic): parse_request", ("request.py:parse_request",), ()),
    ("  pipeline: run_call", ("runner.py:run_call",), ()),
    ("    policy: EmbeddedPolicy.decide_sync", ("embedded.py:EmbeddedPolicy.decide_sync",), ()),
    ("    validate + normalise: normalise._normalise", ("normalise.py:_normalise",), ()),
    ("    path confinement: workspace.confine", ("workspace.py:confine",), ()),
    ("    creating frozen records: dataclasses.replace", ("dataclasses.py:replace",), ()),
    ("  response: _execution_response (render, JSON)", ("routes.py:_execution_response",), ()),
    (
        "store transactions: Pool._in_transaction, SqliteTransactor._run_batch",
        ("transactor.py:Pool._in_transaction", "sqlite.py:SqliteTransactor._run_batch"),
        (),
    ),
    ("  event inserts: events.insert", ("store/events.py:insert",), ()),
    (
        "thread hop: to_thread.run_sync + call_soon_threadsafe",
        ("to_thread.py:run_sync", "BaseEventLoop.call_soon_threadsafe"),
        (),
    ),
    ("JSON encoding (json.dumps anywhere)", ("encoder.py:JSONEncoder.encode",), ()),
)
"""Named shares of a profile: the samples whose stack matches."""


def buckets(text: str) -> list[dict[str, Any]]:
    counts = dict.fromkeys((name for name, _, _ in BUCKETS), 0)
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if not frames or frames[-1] in IDLE_LEAVES:
            continue
        total += int(count)
        joined = ";".join(frames)
        for name, anyof, noneof in BUCKETS:
            if any(m in joined for m in anyof) and not any(m in joined for m in noneof):
                counts[name] += int(count)
    return [{"bucket": k, "pct": round(v * 100 / max(total, 1), 1)} for k, v in counts.items()]


def profile_gateway(
    wrk: Wrk, gw: Server, s1: Scenario, seconds: int, out: Path
) -> dict[str, Any] | None:
    """py-spy on the gateway process while wrk drives scenario 1: once sampling every running
    thread (where the time goes, waits in C included), once only the thread holding the GIL
    (what uses the one Python CPU this process has)."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    pid, base = gw.pid, gw.url
    if not Path(pyspy).exists() or pid is None:
        log("profile: py-spy is not installed (pip install py-spy); only the cProfile one")
        return None
    found: dict[str, Any] = {}
    for mode, extra in (("threads", []), ("gil", ["--gil"])):
        raw = out.with_name(f"{out.name}-{mode}.txt")
        cmd = [
            pyspy,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(seconds),
            "--rate",
            "200",
            "--nonblocking",  # sample without pausing the gateway (it slows it down a lot)
            "--format",
            "raw",
            "--output",
            str(raw),
            *extra,
        ]
        log(f"profile: {' '.join(cmd[1:])} under scenario 1")
        spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)
        under = wrk.run(base + "/v1/executions", s1.template, s1.marker, duration=seconds)
        _, err = spy.communicate(timeout=seconds + 60)
        if spy.returncode != 0 or not raw.exists():
            log(f"profile: py-spy failed: {err.decode()[-500:]}")
            return None
        text = raw.read_text()
        analysis = analyse_collapsed(text)
        analysis["buckets"] = buckets(text)
        packed = raw.with_name(raw.name + ".gz")  # collapsed stacks compress about 20 times
        packed.write_bytes(gzip.compress(text.encode()))
        raw.unlink()
        raw = packed
        analysis["tool"] = (
            f"py-spy record --pid <gateway> --rate 200 --nonblocking {' '.join(extra)}".rstrip()
            + f" for {seconds}s while wrk drives scenario 1"
        )
        analysis["file"] = str(raw.relative_to(ROOT) if raw.is_relative_to(ROOT) else raw)
        analysis["rps_while_profiled"] = under["rps"]
        found[mode] = analysis
    return found


async def cprofile_pipeline(
    services: Any, make_request: Callable[[], Any], n: int, out: Path
) -> dict[str, Any]:
    """cProfile over ``n`` sequential run_call(fs.read_file): a second view of the costs, with
    the HTTP layer excluded (deterministic profiling inflates small calls)."""
    from gateway.pipeline.runner import run_call

    requests = [make_request() for _ in range(n)]
    prof = cProfile.Profile()
    prof.enable()
    for req in requests:
        await run_call(services, req)
    prof.disable()
    path = out.with_name(out.stem + "-inprocess.pstats")
    prof.dump_stats(str(path))
    stats = pstats.Stats(prof)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (file, _line, fn), (_cc, _nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tt, ct, _frame_name(f"{fn} ({file})")))
    by_self = sorted(rows, reverse=True)[:15]
    by_cum = sorted(((ct, tt, name) for tt, ct, name in rows if "gateway/" in name), reverse=True)[
        :15
    ]
    return {
        "tool": f"cProfile over {n} sequential run_call(fs.read_file) in-process "
        "(main thread only: store work on worker threads is not seen)",
        "total_s": round(total, 3),
        "self": [{"function": name, "pct": round(tt * 100 / total, 1)} for tt, _, name in by_self],
        "inclusive_gateway": [
            {"function": name, "pct": round(ct * 100 / total, 1)} for ct, _, name in by_cum
        ],
    }


# --- targets, table, docs ---------------------------------------------------------------------


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    http = results["http"]["scenarios"]
    out: list[dict[str, Any]] = []

    def add(name: str, measured: float | None, target: str, ok: bool | None) -> None:
        out.append(
            {
                "target": name,
                "measured": measured,
                "goal": target,
                "status": "n/a" if ok is None else ("PASS" if ok else "MISS"),
            }
        )

    def ratio(key: str) -> float | None:
        return http.get(key, {}).get("ratio")

    r1 = ratio("s1_read")
    add("scenario 1 throughput / bare", r1, ">= 0.20", None if r1 is None else r1 >= 0.20)
    half = results["http"].get("s1_half_rate_latency", {}).get("gateway", {}).get("p99_ms")
    add("scenario 1 p99 at half max rate (ms)", half, "<= 10", None if half is None else half <= 10)
    r2 = ratio("s2_replay")
    add("scenario 2 throughput / bare", r2, ">= 0.40", None if r2 is None else r2 >= 0.40)
    r3 = ratio("s3_deny")
    add("scenario 3 throughput / bare", r3, ">= 0.30", None if r3 is None else r3 >= 0.30)
    pol = results["micro"].get("policy_decision_allow", {}).get("median_us")
    add("policy decision median (µs), cached", pol, "<= 100", None if pol is None else pol <= 100)
    miss = results["micro"].get("policy_decision_allow_miss", {}).get("median_us")
    add(
        "policy decision median (µs), cache miss",
        miss,
        "<= 100",
        None if miss is None else miss <= 100,
    )
    val = [
        v["median_us"] for v in results["micro"].get("validation", {}).values() if "median_us" in v
    ]
    worst = max(val) if val else None
    add(
        "validation median, worst shipped tool (µs)",
        worst,
        "<= 100",
        None if worst is None else worst <= 100,
    )
    load = results["growth"].get("catalogue", {}).get("load_s")
    tools = results["growth"].get("catalogue", {}).get("tools")
    add(f"{tools}-tool catalogue load (s)", load, "< 2", None if load is None else load < 2)
    slow = results["growth"].get("events", {}).get("slowdown_pct")
    n_ev = results["growth"].get("events", {}).get("events")
    add(
        f"scenario 1 slowdown with {n_ev:,} events (%)" if n_ev else "events slowdown (%)",
        slow,
        "< 10",
        None if slow is None else slow < 10,
    )
    return out


def table_lines(results: dict[str, Any], markdown: bool) -> list[str]:
    """The results as rows (markdown table or fixed-width text)."""
    rows: list[list[str]] = [
        [
            "measure",
            "gateway",
            "bare",
            "ratio",
            "p50 ms (gw / bare)",
            "p99 ms (gw / bare)",
            "CPU µs/call (gw / bare)",
            "CPU ratio",
        ]
    ]
    for s in results["http"]["scenarios"].values():
        if "skipped" in s:
            rows.append([s["title"], "skipped", "", "", s["skipped"][:60], "", "", ""])
            continue
        cpu = cpu_ratio = ""
        if "cpu_ratio" in s:
            cpu = f"{s['gateway_cpu_us_per_call']:.0f} / {s['bare_cpu_us_per_call']:.0f}"
            cpu_ratio = f"{s['cpu_ratio']:.3f}x"
        rows.append(
            [
                s["title"],
                f"{s['gateway_rps']:.0f}/s",
                f"{s['bare_rps']:.0f}/s",
                f"{s['ratio']:.3f}x",
                f"{s['gateway_p50_ms']:.2f} / {s['bare_p50_ms']:.2f}",
                f"{s['gateway_p99_ms']:.2f} / {s['bare_p99_ms']:.2f}",
                cpu,
                cpu_ratio,
            ]
        )
    half = results["http"].get("s1_half_rate_latency")
    if half:
        g, b = half["gateway"], half["bare"]
        rows.append(
            [
                f"1. at {half['rate']:.0f}/s open loop (half max)",
                f"{g['achieved_rate']:.0f}/s",
                f"{b['achieved_rate']:.0f}/s",
                "",
                f"{g['p50_ms']:.2f} / {b['p50_ms']:.2f}",
                f"{g['p99_ms']:.2f} / {b['p99_ms']:.2f}",
                "",
                "",
            ]
        )
    ev = results["growth"].get("events")
    if ev:
        rows.append(
            [
                f"1. with {ev['events']:,} events vs empty store",
                f"{ev['full_rps']:.0f}/s",
                f"{ev['empty_rps']:.0f}/s (empty)",
                f"{ev['ratio']:.3f}x",
                "",
                f"{ev['full_p99_ms']:.2f} / {ev['empty_p99_ms']:.2f}",
                f"{ev.get('full_cpu_us_per_call') or 0:.0f} / "
                f"{ev.get('empty_cpu_us_per_call') or 0:.0f} (empty)",
                "",
            ]
        )
    micro_rows: list[list[str]] = [["in-process", "median µs", "p99 µs", "n", "CPU µs/call"]]
    m = results["micro"]

    def add(name: str, s: dict[str, Any] | None) -> None:
        if s and "median_us" in s:
            cpu = f"{s['cpu_us_per_call']:.0f}" if "cpu_us_per_call" in s else ""
            micro_rows.append(
                [name, f"{s['median_us']:.1f}", f"{s['p99_us']:.1f}", str(s["n"]), cpu]
            )
        elif s and "skipped" in s:
            micro_rows.append([name, "skipped", "", "", ""])

    add("policy decision (allow, fs.read_file)", m.get("policy_decision_allow"))
    add("policy decision (deny, .git/config)", m.get("policy_decision_deny"))
    add("policy decision, cache miss (allow)", m.get("policy_decision_allow_miss"))
    add("policy decision, cache miss (deny)", m.get("policy_decision_deny_miss"))
    for ref, s in m.get("validation", {}).items():
        add(f"validate+normalise {ref}", s)
    for backend in ("sqlite", "postgres"):
        st = m.get(f"store_{backend}", {})
        if "skipped" in st:
            add(f"store {backend}", st)
            continue
        how = "inline" if backend == "sqlite" else "thread hop"
        add(f"store {backend}: empty write tx (async, {how})", st.get("empty_write_tx"))
        add(
            f"store {backend}: empty write tx (sync, pooled connection)",
            st.get("empty_write_tx_sync"),
        )
        add(f"store {backend}: reserve + commit of one execution", st.get("reserve_commit"))
    add("pipeline run_call fs.read_file (no HTTP)", m.get("pipeline_read"))
    add("pipeline run_call fs.write_file (no HTTP)", m.get("pipeline_write"))
    cat = results["growth"].get("catalogue")
    if cat:
        add(f"resolve in {cat['tools']}-tool catalogue (no range)", cat["resolve_any"])
        add(f"resolve in {cat['tools']}-tool catalogue (^1)", cat["resolve_range"])
        add(
            f"resolve in shipped catalogue (^1, {cat['shipped_tools']} tools)",
            cat["resolve_shipped_range"],
        )
    target_rows = [["target (issue 6)", "measured", "goal", ""]]
    for t in results["targets"]:
        measured = t["measured"]
        text = (
            "n/a"
            if measured is None
            else (f"{measured:.3f}" if isinstance(measured, float) else str(measured))
        )
        target_rows.append([t["target"], text, t["goal"], t["status"]])
    extra = []
    if cat:
        extra.append(
            f"catalogue of {cat['tools']} tools: load {cat['load_s']:.3f} s "
            f"({cat['per_tool_ms']:.2f} ms per tool); shipped {cat['shipped_tools']} "
            f"tools {cat['shipped_load_s']:.3f} s"
        )
    if "pipeline_read_concurrent16_rps" in m:
        extra.append(
            f"pipeline in-process, 16 concurrent fs.read_file: "
            f"{m['pipeline_read_concurrent16_rps']:.0f}/s"
        )
    stage_rows = [
        [
            "one call in-process, mean µs (stages; each store transaction, with its CPU)",
            "fs.read_file",
            "fs.write_file",
        ]
    ]
    read_st, write_st = m.get("pipeline_read_stages"), m.get("pipeline_write_stages")
    if read_st and write_st:
        names = list(write_st["parts"])
        read_names = list(read_st["parts"])
        for i, name in enumerate(read_names):  # read-only parts go before what follows them
            if name not in names:
                after = [n for n in read_names[i + 1 :] if n in names]
                names.insert(names.index(after[0]) if after else len(names), name)

        def cell(st: dict[str, Any], name: str) -> str:
            part = st["parts"].get(name)
            if part is None:
                return ""
            text = f"{part['mean_wall_us'] * part['per_call']:.0f}"
            if "mean_thread_cpu_us" in part:
                text += f" (cpu {part['mean_thread_cpu_us'] * part['per_call']:.0f})"
            return text

        for name in names:
            label = name if name.startswith("store tx") else f"stage {name}"
            stage_rows.append([label, cell(read_st, name), cell(write_st, name)])
        stage_rows.append(
            [
                "whole call: wall (process CPU)",
                f"{read_st['call_wall_us']:.0f} ({read_st['call_cpu_us']:.0f})",
                f"{write_st['call_wall_us']:.0f} ({write_st['call_cpu_us']:.0f})",
            ]
        )
    out: list[str] = []
    for block in (rows, micro_rows, stage_rows, target_rows):
        if len(block) == 1:
            continue
        out.extend(_render(block, markdown))
        out.append("")
    out.extend(("- " if markdown else "") + e for e in extra)
    return out


def _render(rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return lines
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def chart(results: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("chart skipped: matplotlib is not installed (it is in the dev extra)")
        return False
    http = {k: v for k, v in results["http"]["scenarios"].items() if "ratio" in v}
    goals = {"s1_read": 0.20, "s2_replay": 0.40, "s3_deny": 0.30, S5: 0.20}
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    labels = [v["title"].split(" ", 1)[0] + " " + k.split("_", 1)[1] for k, v in http.items()]
    values = [v["ratio"] for v in http.values()]
    bars = left.bar(labels, values, color="#4c72b0")
    for i, key in enumerate(http):
        if key in goals:
            left.hlines(goals[key], i - 0.4, i + 0.4, colors="#c44e52", linestyles="--")
    left.bar_label(bars, fmt="%.3f", fontsize=8)
    left.set_ylabel("throughput / bare Starlette (same run)")
    left.set_title("HTTP scenarios (red dashes: issue 6 targets)")
    left.tick_params(axis="x", rotation=30, labelsize=8)
    m = results["micro"]
    names, med, p99 = [], [], []
    for label, s in (
        ("policy", m.get("policy_decision_allow")),
        *((f"val {ref}", s) for ref, s in m.get("validation", {}).items()),
        ("store tx", (m.get("store_sqlite") or {}).get("empty_write_tx")),
    ):
        if s and "median_us" in s:
            names.append(label)
            med.append(s["median_us"])
            p99.append(s["p99_us"])
    y = range(len(names))
    right.barh(list(y), p99, color="#dd8452", label="p99")
    right.barh(list(y), med, color="#55a868", label="median")
    right.axvline(100, color="#c44e52", linestyle="--", label="100 µs target")
    right.set_yticks(list(y), names, fontsize=7)
    right.invert_yaxis()
    right.set_xscale("log")
    right.set_xlabel("µs (log)")
    right.set_title("in-process micro-benchmarks")
    right.legend(fontsize=7)
    fig.suptitle(
        f"Toolgate benchmarks {results['date'][:10]} — {results['host']['cpus']} CPUs, "
        f"load {results['host']['loadavg_start'][0]}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


DOC_HEAD = """# Performance

What a call through Toolgate costs, measured against the physical ceiling on the same machine
in the same run. Everything on this page is written by `make bench`
(`.venv/bin/python bench/run.py`; see [bench/README.md](../bench/README.md)); re-run it to
refresh the figures. Absolute numbers depend on the machine and on what else runs on it; the
ratios, measured in one run with A/B alternation, are what to compare.

## How it is measured

- **Bare endpoint**: `bench/bare_app.py`, a Starlette app with one `POST` route that parses the
  JSON body and answers a JSON body of the gateway's response size, under the same uvicorn
  settings as `toolgate serve` (one process, `access_log` off, `server_header` off, log level
  `warning`).
- **Gateway**: `toolgate serve` on a temporary copy of this project (SQLite in WAL mode, the
  embedded Rego policy, quotas lifted), started by `gateway/testing.py`.
- **Load**: `wrk` with {threads} threads, {connections} connections, {duration} s per run,
  `bench/wrk_post.lua` sending a unique `call_id` per request. Every gateway run follows its
  own bare run (A B A B ..., {rounds} rounds); a ratio is the median over rounds of gateway /
  adjacent bare throughput (ok responses only: status 200 and the expected body).
- **Latency at half rate**: `bench/openloop.py`, an open-loop generator (constant arrival rate,
  latency from the scheduled send time, so queueing is counted; wrk2 is not packaged by
  Debian), for {openloop} s at half of scenario 1's measured maximum. Like wrk2 it opens its
  connections (16 keep-alive ones) before the first request, and it runs with its own garbage
  collector off, since its pauses would count as the server's latency.
- **Micro-benchmarks**: in-process, median and p99 over {iterations} iterations after a
  warm-up: `EmbeddedPolicy.decide_sync` on the policy input the real stages build (the same
  input again, answered from the decision cache, and a different path each call, a cache
  miss), `validate` + `document` of each shipped tool's validator (`Catalogue.validator`: the
  compiled fast path, cerberus for anything it does not accept) with valid arguments, the
  store's transactions (an empty write transaction, inline on SQLite and through a worker
  thread on PostgreSQL; `reserve` + `commit` of one execution), and
  `gateway.pipeline.runner.run_call` with the real runtime (`open_runtime`).
- **Growth**: a catalogue of {tools} generated declarations (clones of the shipped ones under
  new names) loaded with `load_catalogue`; scenario 1 against a store preloaded with
  {events} events (bulk SQL into `events`) vs an empty store, alternated.

## Results ({date})

Machine: {cpus} CPUs, {python}, {wrk}; load average {load_start} at the start and
{load_end} at the end (other work was running).

![chart](performance.png)

<!-- notes -->

"""


NOTES_START, NOTES_END = "<!-- notes: kept by bench/run.py -->", "<!-- /notes -->"
NOTES_DEFAULT = f"""{NOTES_START}
## Notes

(Hand-written reading of the figures goes here; `make bench` keeps this block.)
{NOTES_END}
"""


def _kept_notes(doc: Path) -> str | None:
    """The hand-written notes block of the current page, if any (kept across runs)."""
    if not doc.exists():
        return None
    text = doc.read_text()
    if NOTES_START not in text or NOTES_END not in text:
        return None
    start = text.index(NOTES_START)
    end = text.index(NOTES_END) + len(NOTES_END)
    return text[start:end] + "\n"


def profile_markdown(results: dict[str, Any]) -> str:
    """The profiles as markdown sections (top functions and named buckets)."""
    sections = []
    gateway_profiles = results.get("profile") or {}
    titles = {
        "threads": "Profile of the gateway under scenario 1: every running thread (py-spy)",
        "gil": "Profile of the gateway under scenario 1: the thread holding the GIL (py-spy)",
    }
    for mode, prof in gateway_profiles.items():
        sections.append((titles.get(mode, mode), prof))
    if results.get("profile_inprocess"):
        sections.append(("Profile of run_call in-process (cProfile)", results["profile_inprocess"]))
    text = ""
    for title, prof in sections:
        text += f"\n## {title}\n\n{prof['tool']}"
        if "samples" in prof:
            text += f"; {prof['samples']} samples of running threads"
            if "rps_while_profiled" in prof:
                text += f", {prof['rps_while_profiled']:.0f} calls/s while profiled"
        text += ". Shares of the sampled time:\n\n"
        if prof.get("buckets"):
            rows = [["where (stack contains)", "%"]] + [
                [b["bucket"], f"{b['pct']}"] for b in prof["buckets"]
            ]
            text += "\n".join(_render(rows, True)) + "\n\n"
        rows = [["function (self time)", "%"]] + [
            [f"`{r['function']}`", f"{r['pct']}"] for r in prof["self"][:10]
        ]
        text += "\n".join(_render(rows, True)) + "\n\n"
        rows = [["gateway function (inclusive)", "%"]] + [
            [f"`{r['function']}`", f"{r['pct']}"] for r in prof["inclusive_gateway"][:10]
        ]
        text += "\n".join(_render(rows, True)) + "\n"
    return text


def write_docs(results: dict[str, Any], plan: Plan) -> None:
    doc = ROOT / "docs" / "performance.md"
    host = results["host"]
    text = DOC_HEAD.format(
        threads=plan.threads,
        connections=plan.connections,
        duration=plan.duration,
        rounds=plan.rounds,
        openloop=plan.openloop_s,
        iterations=plan.iterations,
        tools=f"{plan.tools:,}",
        events=f"{plan.events:,}",
        date=results["date"][:16],
        cpus=host["cpus"],
        python=host["python"],
        wrk=host["wrk"],
        load_start=", ".join(map(str, host["loadavg_start"])),
        load_end=", ".join(map(str, host.get("loadavg_end", []))),
    )
    text += "\n".join(table_lines(results, markdown=True)) + "\n"
    text += profile_markdown(results)
    text += f"\nRaw results: `bench/results/{results['date'][:10]}.json`.\n"
    notes = _kept_notes(doc)
    text = text.replace("<!-- notes -->\n", notes if notes else NOTES_DEFAULT)
    doc.write_text(text)
    log(f"wrote {doc.relative_to(ROOT)}")


# --- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Toolgate benchmarks (see docs/performance.md)")
    parser.add_argument("--quick", action="store_true", help="tiny durations (smoke test)")
    parser.add_argument(
        "--no-wrk-install",
        action="store_true",
        help="do not apt-get install wrk when it is missing",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=BENCH / "results",
        help="directory for <date>.json (default bench/results)",
    )
    parser.add_argument(
        "--no-docs",
        action="store_true",
        help="do not rewrite docs/performance.md and docs/performance.png",
    )
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--duration", type=int, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, help="A/B rounds (at least 3 for the record)")
    parser.add_argument("--connections", type=int)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--events", type=int, help="events preloaded for the growth test")
    parser.add_argument(
        "--iterations", type=int, help="per micro-benchmark (>= 2000 for the record)"
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    overrides = {
        k: getattr(args, k)
        for k in ("duration", "rounds", "connections", "threads", "events", "iterations")
        if getattr(args, k)
    }
    plan = replace(plan, **overrides)
    docs = not args.quick and not args.no_docs
    profile = not args.quick and not args.no_profile

    wrk_path = ensure_wrk(install=not args.no_wrk_install)
    if wrk_path is None:
        print("bench: wrk is required (apt-get install -y wrk)", file=sys.stderr)
        return 2
    today = dt.date.today().isoformat()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "quick": plan.quick,
        "plan": plan.__dict__,
        "host": {
            "cpus": os.cpu_count(),
            "python": f"Python {platform.python_version()}",
            "platform": platform.platform(),
            "wrk": wrk_version(wrk_path),
            "loadavg_start": loadavg(),
        },
        "http": {"scenarios": {}},
        "micro": {},
        "growth": {},
    }
    log(f"plan {plan}; load {loadavg()}")
    profile_out = (args.out / f"profile-{today}") if profile else None
    with tempfile.TemporaryDirectory(prefix="toolgate-bench-") as tmp:
        work = Path(tmp)
        wrk = Wrk(wrk_path, plan, work)
        log("micro-benchmarks")
        asyncio.run(micro_phase(plan, work, results, profile_out))
        log("catalogue growth")
        catalogue_growth(plan, work, results)
        log("HTTP scenarios 1-4 (SQLite)")
        size, prof = http_sqlite_phase(plan, wrk, work, results, profile_out)
        if prof:
            results["profile"] = prof
        log("HTTP scenario 5 (PostgreSQL)")
        http_pg_phase(plan, wrk, work, size, results)
        log("store growth (events)")
        events_growth_phase(plan, wrk, work, results)
    results["host"]["loadavg_end"] = loadavg()
    results["targets"] = targets(results)
    out = args.out / f"{today}.json"
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print("\n".join(table_lines(results, markdown=False)))
    print(
        f"\nload average: start {results['host']['loadavg_start']}, "
        f"end {results['host']['loadavg_end']} ({results['host']['cpus']} CPUs)"
    )
    if results.get("profile") or results.get("profile_inprocess"):
        print(profile_markdown(results))
    print(f"written to {out}")
    png = (ROOT / "docs" / "performance.png") if docs else (args.out / "performance.png")
    if chart(results, png):
        print(f"chart: {png}")
    if docs:
        write_docs(results, plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
