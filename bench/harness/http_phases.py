"""The HTTP phases: scenarios 1-4 on SQLite (with the open-loop latency and the profile),
scenario 5 on PostgreSQL, each gateway run after its own bare run; scenario 5 on two
replicas against one; scenario 7 (``serve --workers 2``)."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from openloop import run_open_loop  # bench/openloop.py (run.py puts bench/ on sys.path)

from gateway.testing import gateway, make_project

from .plan import (
    AUTH,
    FLOOR,
    MCP_HEADERS,
    S1_METRICS_OFF,
    S1_TRACING_ON,
    S5,
    S5_TITLE,
    S6,
    TELEMETRY_TITLES,
    Plan,
    Scenario,
    floor_scenario,
    loadavg,
    log,
    mcp_read,
    mcp_scenario,
    scenarios,
    seed_workspace,
    sqlite_url,
)
from .profiling import profile_gateway
from .servers import (
    Server,
    bare_server,
    check,
    floor_server,
    gateway_pid,
    gateways,
    pg_available,
    pg_database,
    post,
    prepare_gateway,
)
from .wrk import Wrk, summarise_pairs


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
                server.url + s.path, s.template, s.marker, duration=plan.warmup, headers=s.headers
            )["ok"]
    for r in range(plan.rounds):
        for key, (server, s) in gateways.items():
            a = wrk.run(bare_url, bare_template, pid=bare.pid)
            b = wrk.run(
                server.url + s.path, s.template, s.marker, pid=server.pid, headers=s.headers
            )
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
    workspace = seed_workspace(config)
    scen = scenarios(f"replay-{uuid.uuid4().hex[:8]}")
    telemetry = {
        S1_METRICS_OFF: _variant(work / "metrics-off", {"metrics": {"enabled": False}}),
        S1_TRACING_ON: _variant(work / "tracing-on", {"tracing": {"enabled": True}}),
    }
    with (
        gateways(config, *telemetry.values()) as (base, *others),
        httpx.Client(timeout=30) as client,
    ):
        gw = Server(base, gateway_pid(base))
        prep = prepare_gateway(client, base, scen)
        check_mcp(client, base)
        rss = {"idle": _rss_mb(gw.pid)}
        scen["s2_replay"] = replace(scen["s2_replay"], marker=prep["replay_marker"])
        size = prep["response_bytes"]
        s1 = scen["s1_read"]
        results["http"]["response_bytes"] = size
        results["http"]["request_bytes"] = len(s1.template)
        with bare_server(size, work) as bare, floor_server(workspace, work) as floor:
            echo = post(
                client, bare.url + "/echo", json.loads(s1.template.replace("@CALL@", "check"))
            )
            check(
                echo.status_code == 200 and abs(len(echo.content) - size) <= 2,
                "the bare app's response is not the gateway's size",
                echo,
            )
            log(f"A/B rounds; request {len(s1.template)} bytes, response {size} bytes")
            under: dict[str, tuple[Server, Scenario]] = {FLOOR: (floor, floor_scenario(s1))}
            under.update({k: (gw, s) for k, s in scen.items()})
            under[S6] = (gw, mcp_scenario())
            for (key, title), url in zip(TELEMETRY_TITLES.items(), others, strict=True):
                under[key] = (Server(url, gateway_pid(url)), replace(s1, key=key, title=title))
            results["http"]["scenarios"].update(ab_rounds(plan, wrk, bare, s1.template, under))
            rss["after"] = _rss_mb(gw.pid)
            results["http"]["rss_mb"] = rss
            results["http"]["mcp_vs_rest_latency"] = one_call_latency(
                client, base, plan.iterations // 4
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


def http_pg_phase(
    plan: Plan, wrk: Wrk, work: Path, size: int | None, results: dict[str, Any]
) -> None:
    """Scenario 5; the bare app answers ``size`` bytes (scenario 1's response; None: this
    gateway's own first response, when scenario 1 did not run)."""
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
            with bare_server(size or len(r.content), work) as bare:
                results["http"]["scenarios"].update(
                    ab_rounds(plan, wrk, bare, s1.template, {S5: (gw, s1)})
                )


def _variant(root: Path, overrides: dict[str, Any]) -> Path:
    """Scenario 1's project with some configuration changed (its own database)."""
    config = make_project(root, sqlite_url(root))
    seed_workspace(config)
    data = yaml.safe_load(config.read_text())
    data.update(overrides)
    config.write_text(yaml.safe_dump(data))
    return config


def check_mcp(client: httpx.Client, base: str) -> None:
    r = client.post(
        base + "/mcp",
        json=mcp_read("check-mcp"),
        headers={"Authorization": AUTH, **dict(MCP_HEADERS)},
    )
    meta = ((r.json() if r.status_code == 200 else {}).get("result") or {}).get("_meta") or {}
    check(
        meta.get("io.toolgate/outcome") == "succeeded",
        "scenario 6 (MCP tools/call) does not read the file",
        r,
    )


def one_call_latency(client: httpx.Client, base: str, n: int) -> dict[str, Any]:
    """One call at a time, alternately over REST and MCP: the median and p90 of each (ms)."""
    rest_ms: list[float] = []
    mcp_ms: list[float] = []
    rest_headers = {"Authorization": AUTH, "Content-Type": "application/json"}
    mcp_headers = {**rest_headers, **dict(MCP_HEADERS)}
    s1 = scenarios("unused")["s1_read"].template
    for i in range(max(n, 20)):
        for sink, url, body, headers in (
            (rest_ms, base + "/v1/executions", s1.replace("@CALL@", f"lat-rest-{i}"), rest_headers),
            (mcp_ms, base + "/mcp", json.dumps(mcp_read(f"lat-mcp-{i}")), mcp_headers),
        ):
            t0 = time.perf_counter()
            r = client.post(url, content=body, headers=headers)
            sink.append((time.perf_counter() - t0) * 1000)
            check(r.status_code == 200 and "succeeded" in r.text, f"{url} failed", r)

    def summary(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {
            "median_ms": round(statistics.median(ordered), 3),
            "p90_ms": round(ordered[int(len(ordered) * 0.9)], 3),
        }

    rest, mcp = summary(rest_ms), summary(mcp_ms)
    log(f"one call at a time: REST {rest['median_ms']} ms, MCP {mcp['median_ms']} ms (median)")
    return {
        "n": len(rest_ms),
        "rest": rest,
        "mcp": mcp,
        "ratio": round(mcp["median_ms"] / rest["median_ms"], 3),
    }


def _rss_mb(pid: int | None) -> float:
    return psutil.Process(pid).memory_info().rss / 1e6 if pid else 0.0


S7 = "s7_read_2_workers"
S7_TITLE = "7. fs.read_file 1 KiB, 2 workers (gateway --workers 2, bare app 2 workers)"
S7W = "s7_write_2_workers"
S7W_TITLE = "7w. fs.write_file 1 KiB, 64 files, 2 workers (SQLite's one writer across processes)"


def http_workers_phase(
    plan: Plan, wrk: Wrk, work: Path, size: int | None, results: dict[str, Any]
) -> None:
    """Scenario 1 on ``toolgate serve --workers 2`` (SQLite) against the bare app on two
    uvicorn workers: what a second process buys on this machine (CPU per call summed over
    every process of each side); and scenario 4a the same way, where the two processes' group
    commits contend for SQLite's one writer."""
    s1 = replace(scenarios("unused")["s1_read"], key=S7, title=S7_TITLE)
    s4 = replace(scenarios("unused")["s4_write_64_files"], key=S7W, title=S7W_TITLE)
    root = work / "workers"
    config = make_project(root, sqlite_url(root))
    seed_workspace(config)
    with gateway(config, args=("--workers", "2")) as base, httpx.Client(timeout=30) as client:
        r = post(client, base + "/v1/executions", json.loads(s1.template.replace("@CALL@", "w")))
        check(
            r.status_code == 200 and r.json()["result"]["outcome"] == "succeeded",
            "scenario 7 does not read the file",
            r,
        )
        gw = Server(base, gateway_pid(base))
        with bare_server(size or len(r.content), work, workers=2) as bare:
            results["http"]["scenarios"].update(
                ab_rounds(plan, wrk, bare, s1.template, {S7: (gw, s1), S7W: (gw, s4)})
            )


REPLICAS_TITLE = "5r. fs.read_file 1 KiB on PostgreSQL, 2 replicas / 1 (same connections)"


def http_replicas_phase(plan: Plan, wrk: Wrk, work: Path, results: dict[str, Any]) -> None:
    """Scenario 5 on one gateway, then on two gateway processes (replicas, each on its own
    port, as tests/integration/test_replicas.py starts them) sharing one PostgreSQL
    database, the load split evenly across them (a wrk on each at once, half the
    connections each): what a second replica buys on this machine. The two runs alternate
    over the rounds (one first in odd rounds, two first in even ones)."""
    ok, why = pg_available()
    if not ok:
        results["http"]["replicas"] = {"title": REPLICAS_TITLE, "skipped": why}
        log(f"replicas skipped: {why}")
        return
    s1 = scenarios("unused")["s1_read"]
    with pg_database() as url:
        config = make_project(work / "replicas", url)
        seed_workspace(config)
        # The first creates the schema; the second starts once it is there.
        with gateway(config) as first, gateway(config) as second:
            with httpx.Client(timeout=30) as client:
                for base in (first, second):
                    r = post(
                        client,
                        base + "/v1/executions",
                        json.loads(s1.template.replace("@CALL@", f"check-{base[-5:]}")),
                    )
                    check(
                        r.status_code == 200 and r.json()["result"]["outcome"] == "succeeded",
                        "a replica does not read the file",
                        r,
                    )
            pair = [Server(base, gateway_pid(base)) for base in (first, second)]
            results["http"]["replicas"] = {
                "title": REPLICAS_TITLE,
                **_replica_rounds(plan, wrk, pair, s1),
            }


def _replica_rounds(plan: Plan, wrk: Wrk, pair: list[Server], s1: Scenario) -> dict[str, Any]:
    half = max(plan.connections // 2, 1)

    def one() -> dict[str, Any]:
        gw = pair[0]
        return wrk.run(gw.url + s1.path, s1.template, s1.marker, pid=gw.pid)

    def two() -> dict[str, Any]:
        with ThreadPoolExecutor(2) as pool:
            futures = [
                pool.submit(
                    wrk.run, gw.url + s1.path, s1.template, s1.marker, connections=half, pid=gw.pid
                )
                for gw in pair
            ]
            runs = [f.result() for f in futures]
        ok = sum(r["ok"] for r in runs)
        cpu_us = sum(r.get("cpu_us_per_ok", 0) * r["ok"] for r in runs)
        return {
            "rps": round(sum(r["rps"] for r in runs), 1),
            "ok": ok,
            "bad": sum(r["bad"] for r in runs),
            "p50_ms": max(r["p50_ms"] for r in runs),
            "p99_ms": max(r["p99_ms"] for r in runs),
            "cpu_us_per_ok": round(cpu_us / ok, 1) if ok else 0.0,
            "replicas": runs,
        }

    if plan.warmup:
        for gw in pair:
            wrk.run(gw.url + s1.path, s1.template, s1.marker, duration=plan.warmup)
    ones: list[dict[str, Any]] = []
    twos: list[dict[str, Any]] = []
    for r in range(plan.rounds):
        order = (one, two) if r % 2 == 0 else (two, one)
        for run in order:
            (ones if run is one else twos).append(run())
        a, b = ones[-1], twos[-1]
        log(
            f"round {r + 1}/{plan.rounds} replicas: one {a['rps']:.0f}/s, two "
            f"{b['rps']:.0f}/s ({b['rps'] / max(a['rps'], 1e-9):.3f}x); cpu/call "
            f"{a.get('cpu_us_per_ok', 0):.0f} / {b['cpu_us_per_ok']:.0f} µs; load {loadavg()[0]}"
        )
    ratios = [b["rps"] / a["rps"] for a, b in zip(ones, twos, strict=True) if a["rps"] > 0]

    def med(runs: list[dict[str, Any]], key: str) -> float:
        return round(statistics.median(r.get(key, 0) for r in runs), 3)

    return {
        "ratio": round(statistics.median(ratios), 4) if ratios else 0.0,
        "ratios": [round(x, 4) for x in ratios],
        "one_rps": med(ones, "rps"),
        "two_rps": med(twos, "rps"),
        "one_p99_ms": med(ones, "p99_ms"),
        "two_p99_ms": med(twos, "p99_ms"),
        "one_cpu_us_per_call": med(ones, "cpu_us_per_ok"),
        "two_cpu_us_per_call": med(twos, "cpu_us_per_ok"),
        "connections": plan.connections,
        "bad": sum(r["bad"] for r in ones + twos),
        "rounds": len(ones),
        "runs": {"one": ones, "two": twos},
    }
