"""The benchmark harness (`make bench`): the gateway's cost per call against the bare framework.

    .venv/bin/python bench/run.py [--quick] [--no-wrk-install] [--out DIR] [--no-docs]
                                  [--no-profile] [--duration S] [--rounds N] [--connections N]
                                  [--only PHASE,...]

What it measures, in one run on this machine (docs/performance.md explains each figure):

- HTTP, driven by wrk (same threads, connections and duration for every run), on loopback:
  the bare Starlette app (bench/bare_app.py, the gateway's uvicorn settings) against the
  gateway (``toolgate serve``, SQLite, embedded policy) in scenarios 1-4, scenario 1 over MCP
  (6: ``tools/call``, 2026-07-28) and with metrics off and tracing on (phase ``s1-4``), the
  gateway on PostgreSQL in scenario 5, and ``serve --workers 2`` against the bare app on two
  workers in scenario 7. Phase ``s5r``: scenario 5 on two replicas (two gateway processes
  on one PostgreSQL database, the load split across them) against one, alternated over the
  rounds, with the same connections in total. Every gateway run follows its own bare run
  (A B A B ..., at least three rounds); a scenario's ratio is the median over rounds of
  gateway / adjacent bare throughput, so slow drifts of the machine's load cancel out.
- Latency at half of scenario 1's maximum rate, open loop (bench/openloop.py; wrk2 is not
  packaged by Debian); one call at a time over MCP and over REST (median, p90); the gateway's
  RSS idle and after the scenarios.
- In-process micro-benchmarks: the policy decision (cached and on a miss), validation +
  normalisation of each shipped tool, the store's transactions, the whole pipeline without HTTP.
- Growth: a 1,000-tool catalogue (load and resolve), and scenario 1 on a store that already
  holds 1,000,000 events against an empty one.
- Where one call's time goes in-process: each pipeline stage and each store transaction.
- The server's CPU time per call next to every throughput figure (steadier than requests per
  second when other work shares the machine).
- A profile of the gateway under scenario 1 (py-spy, every running thread and the GIL
  holder), and cProfile of the in-process pipeline.

``--only s5,store`` runs just those phases (see PHASES) and writes
``<out>/<date>-only-<phases>.json`` instead.

Writes ``<out>/<date>.json`` (default bench/results/), prints the table and PASS/MISS per
goal (issues 6, 14, 17, 19 and 33; the peer's goal from the newest ``<out>/peers-*.json``
of ``make bench-peers``), and (unless --quick or --no-docs) rewrites docs/performance.md
and docs/performance.png. Exit status 0 even when a target is missed (it is a measurement);
non-zero when the harness itself fails.

This file is the command line; the phases live in bench/harness/ (its __init__ lists them).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))
os.environ.setdefault("RUST_LIB_BACKTRACE", "0")


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
    parser.add_argument(
        "--only",
        type=_phases,
        help="run only these phases, comma-separated, of: "
        + ", ".join(PHASES)
        + " (implies --no-docs and --no-profile)",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="RESULTS",
        help="measure nothing: take the goals again from RESULTS (a full run's <date>.json) "
        "and the newest peers-*.json (make bench-peers, run after it), and rewrite that file "
        "and docs/performance.md",
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        return render(args.render, args.out)
    # The harness imports the gateway (the pipeline, the runtime, the store: about 0.4 s),
    # so it is imported once the arguments are known: --help and a bad option answer at once.
    from harness import growth, http_phases, kinds, micro, page, report
    from harness.plan import FULL, QUICK, loadavg, log
    from harness.wrk import Wrk, ensure_wrk, wrk_version

    plan = QUICK if args.quick else FULL
    overrides = {
        k: getattr(args, k)
        for k in ("duration", "rounds", "connections", "threads", "events", "iterations")
        if getattr(args, k)
    }
    plan = replace(plan, **overrides)
    only: set[str] = args.only or set(PHASES)
    docs = not args.quick and not args.no_docs and args.only is None
    profile = not args.quick and not args.no_profile and "s1-4" in only

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
        size = None
        if "micro" in only:
            log("micro-benchmarks")
            asyncio.run(micro.micro_phase(plan, work, results, profile_out))
        if "store" in only:
            log("store micro-benchmarks")
            asyncio.run(micro.store_phase(plan, work, results))
        if "catalogue" in only:
            log("catalogue growth")
            growth.catalogue_growth(plan, work, results)
        if "s1-4" in only:
            log("HTTP scenarios 1-4 (SQLite)")
            size, prof = http_phases.http_sqlite_phase(plan, wrk, work, results, profile_out)
            if prof:
                results["profile"] = prof
        if "s5" in only:
            log("HTTP scenario 5 (PostgreSQL)")
            http_phases.http_pg_phase(plan, wrk, work, size, results)
        if "s5r" in only:
            log("HTTP scenario 5 on two replicas against one (PostgreSQL)")
            http_phases.http_replicas_phase(plan, wrk, work, results)
        if "s7" in only:
            log("HTTP scenario 7 (2 workers, SQLite)")
            http_phases.http_workers_phase(plan, wrk, work, size, results)
        if "kinds" in only:
            log("three kinds of call: RSS after warm-up, CPU per call (HTTP tool, PostgreSQL)")
            kinds.kinds_phase(plan, work, results)
        if "events" in only:
            log("store growth (events)")
            growth.events_growth_phase(plan, wrk, work, results)
    results["host"]["loadavg_end"] = loadavg()
    peers = report.newest_peers(args.out)
    results["peers_file"] = peers[0] if peers else None
    results["targets"] = report.targets(results, peers[1] if peers else None)
    # A partial run never replaces the day's full record.
    part = "" if args.only is None else "-only-" + "-".join(p for p in PHASES if p in only)
    out = args.out / f"{today}{part}.json"
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print("\n".join(report.table_lines(results, markdown=False)))
    print(
        f"\nload average: start {results['host']['loadavg_start']}, "
        f"end {results['host']['loadavg_end']} ({results['host']['cpus']} CPUs)"
    )
    if results.get("profile") or results.get("profile_inprocess"):
        print(page.profile_markdown(results))
    print(f"written to {out}")
    png = (ROOT / "docs" / "performance.png") if docs else (args.out / "performance.png")
    if page.chart(results, png):
        print(f"chart: {png}")
    if docs:
        page.write_docs(results, plan)
    return 0


def render(path: Path, out: Path) -> int:
    """The goals of a full run taken again with the newest peers file, the page rewritten."""
    from harness import page, report
    from harness.plan import Plan

    try:
        results = json.loads(path.read_text())
        plan = Plan(**results["plan"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"--render: {path} is not the results of a full run: {exc}", file=sys.stderr)
        return 2
    if results["plan"].get("quick") or "-only-" in path.name:
        print(f"--render: {path} is not the results of a full run", file=sys.stderr)
        return 2
    peers = report.newest_peers(out)
    results["peers_file"] = peers[0] if peers else None
    results["targets"] = report.targets(results, peers[1] if peers else None)
    path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    page.write_docs(results, plan)
    print(f"rewrote {path} and docs/performance.md (peers: {results['peers_file']})")
    return 0


PHASES = ("micro", "store", "catalogue", "s1-4", "s5", "s5r", "s7", "kinds", "events")
"""The phases in the order they run: policy, validation and the pipeline in-process; the
store's transactions; the 1,000-tool catalogue; HTTP scenarios 1-4 (SQLite, with the open-loop
latency and the profile); scenario 5 (PostgreSQL); scenario 5 on two replicas against one;
scenario 7 (``serve --workers 2``); the three kinds of call (REST, MCP, an HTTP tool: RSS
after warm-up, CPU per call, and a read's CPU on PostgreSQL with its backends); scenario 1 on
a store of 1,000,000 events."""


def _phases(text: str) -> set[str]:
    chosen = {p.strip() for p in text.split(",") if p.strip()}
    unknown = chosen - set(PHASES)
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown phase {', '.join(sorted(unknown)) or '(none)'}; "
            f"choose from {', '.join(PHASES)}"
        )
    return chosen


if __name__ == "__main__":
    sys.exit(main())
