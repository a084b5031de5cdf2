"""Growth: a catalogue of generated declarations (load and resolve), and scenario 1 on a
store preloaded with events against an empty one."""

from __future__ import annotations

import random
import sqlite3
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gateway.store.store import Store
from gateway.testing import load_catalogue, make_project

from .plan import ROOT, Plan, log, scenarios, seed_workspace, sqlite_url
from .servers import Server, gateway_pid, gateways
from .timing import stats_us, timed_loop
from .wrk import Wrk

# --- growth: events ---------------------------------------------------------------------------


def preload_events(db_path: Path, count: int, per_execution: int = 10) -> float:
    """Insert ``count`` events straight into the events table; returns seconds taken."""
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
                # Time-ordered, as the gateway's ids are (the audit trail's checkpoints read
                # the events since a time as a range of them).
                f"ev_{now - (count - i):012x}{uuid.uuid4().hex[:20]}",
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
