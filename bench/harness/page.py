"""The page: the chart (docs/performance.png) and docs/performance.md, whose hand-written
notes block between its markers survives a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .plan import ROOT, S5, Plan, log
from .report import render, table_lines


def chart(results: dict[str, Any], path: Path) -> bool:
    try:  # matplotlib is heavy (about 0.5 s) and only in the dev extra: imported here, once
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("chart skipped: matplotlib is not installed (it is in the dev extra)")
        return False
    http = {k: v for k, v in results["http"]["scenarios"].items() if "ratio" in v}
    goals = {
        "s1_read": 0.35,
        "s2_replay": 0.60,
        "s3_deny": 0.45,
        "s4_write_64_files": 0.15,
        "s4_write_shared_file": 0.10,
        S5: 0.20,
        "s6_mcp_read": 0.25,
    }
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    labels = [v["title"].split(" ", 1)[0] + " " + k.split("_", 1)[1] for k, v in http.items()]
    values = [v["ratio"] for v in http.values()]
    bars = left.bar(labels, values, color="#4c72b0")
    for i, key in enumerate(http):
        if key in goals:
            left.hlines(goals[key], i - 0.4, i + 0.4, colors="#c44e52", linestyles="--")
    left.bar_label(bars, fmt="%.3f", fontsize=8)
    left.set_ylabel("throughput / bare Starlette (same run)")
    left.set_title("HTTP scenarios (red dashes: the goals)")
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
- **The floor**: `bench/floor_app.py`, the least work any gateway keeping Toolgate's
  guarantees must do for scenario 1's read, written plainly under the same uvicorn settings:
  the bearer key hashed and looked up, a revocation read on every call, the body decoded and
  its shape checked, the path resolved with symlinks and confined, the arguments hashed and
  the decision taken from a cache, the file read and hashed, the execution and seven events
  chained by SHA-256 committed durably in SQLite (WAL, group commit) before the answer. It
  leaves out what Toolgate adds beyond that (declarations and schemas, a policy engine,
  approvals, idempotency keys, locks across processes, deadlines, verification, metrics,
  recovery). Scenario 0 measures it like a gateway, against its own adjacent bare run: how
  close to the bare app any read keeping the guarantees can come on the machine
  (`tests/test_floor_app.py` checks that it keeps them).
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
  store's transactions (an empty write transaction, inline on SQLite and through a writer
  thread on PostgreSQL; `reserve` + `commit` of one execution), and
  `gateway.pipeline.runner.run_call` with the real runtime (`open_runtime`).
- **Replicas** (phase `s5r`): scenario 5 on one gateway, then on two gateway processes on
  one PostgreSQL database (each its own replica on its own port), a wrk on each at once with
  half the connections, so the total load is the same; the two runs alternate over the rounds
  and the ratio is the median of per-round two / one throughput. CPU per call is summed over
  both processes.
- **Three kinds of call** (phase `kinds`, issue 33): one gateway, right after start and
  after a warm-up of 660 calls of each kind from 4 client threads: `fs.read_file` over REST,
  the same read as an MCP `tools/call`, and the HTTP tool `http.get_json` against the example
  orders service (`examples/orders_service.py`, a process of its own); its RSS after start and
  after the warm-up, and the CPU per call of each kind over the last 600 (from `/proc`). Then
  the same read on a gateway on PostgreSQL: the CPU per call of the gateway plus the
  PostgreSQL backends connected to its database, against the read on SQLite.
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


SOAK_HEADING = "\n## Soak\n"
"""Where the soak's section starts: ``bench/soak.py`` writes it at the end of the page, and a
run of ``make bench`` keeps it (it measures no soak)."""


def _kept_soak(doc: Path) -> str:
    """The page's soak section (heading to the end), or nothing if it has none."""
    text = doc.read_text() if doc.exists() else ""
    return text[text.index(SOAK_HEADING) :] if SOAK_HEADING in text else ""


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
            text += "\n".join(render(rows, True)) + "\n\n"
        rows = [["function (self time)", "%"]] + [
            [f"`{r['function']}`", f"{r['pct']}"] for r in prof["self"][:10]
        ]
        text += "\n".join(render(rows, True)) + "\n\n"
        rows = [["gateway function (inclusive)", "%"]] + [
            [f"`{r['function']}`", f"{r['pct']}"] for r in prof["inclusive_gateway"][:10]
        ]
        text += "\n".join(render(rows, True)) + "\n"
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
    doc.write_text(text + _kept_soak(doc))
    log(f"wrote {doc.relative_to(ROOT)}")
