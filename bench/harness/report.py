"""The report: the targets (PASS/MISS; the goals of issues 6, 14, 17, 19 and 33) and the
results as table rows (markdown or fixed-width text)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ISSUE_33 = "issue 33"
"""The ``issue`` of the goals of issue 33 (their own table); the others have none."""


def targets(results: dict[str, Any], peers: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every goal with its figure from this run (``peers``: the newest ``make bench-peers``
    results, for the one goal set against a peer)."""
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

    def shown(name: str, measured: float | None, earlier: str) -> None:
        """An earlier goal, shown for comparison: no longer a goal."""
        out.append({"target": name, "measured": measured, "goal": earlier, "status": "shown"})

    def ratio(key: str) -> float | None:
        return http.get(key, {}).get("ratio")

    def at_least(name: str, value: float | None, goal: float) -> None:
        add(name, value, f">= {goal}", None if value is None else value >= goal)

    def at_most(name: str, value: float | None, goal: float) -> None:
        add(name, value, f"<= {goal}", None if value is None else value <= goal)

    out.extend(issue_33(results, peers))
    # The goals of issue 19 (one host), 17 (scenario 5) and 14 (scenario 6); those of
    # scenarios 1 and 6 against the bare app are shown, issue 33 set the goals elsewhere.
    shown("scenario 1 throughput / bare", ratio("s1_read"), "was >= 0.35")
    at_least("scenario 2 throughput / bare", ratio("s2_replay"), 0.60)
    at_least("scenario 3 throughput / bare", ratio("s3_deny"), 0.45)
    at_least("scenario 4a throughput / bare (64 files)", ratio("s4_write_64_files"), 0.15)
    at_least("scenario 4b throughput / bare (one lock key)", ratio("s4_write_shared_file"), 0.10)
    at_least("scenario 5 throughput / bare (PostgreSQL)", ratio("s5_read_postgres"), 0.20)
    shown("scenario 6 throughput / bare (MCP tools/call)", ratio("s6_mcp_read"), "was >= 0.25")
    idle = results["http"].get("rss_mb", {}).get("idle")
    shown("gateway memory idle (MB)", idle, "was <= 100")
    pol = results["micro"].get("policy_decision_allow", {}).get("median_us")
    at_most("policy decision median (µs), cached", pol, 100)
    miss = results["micro"].get("policy_decision_allow_miss", {}).get("median_us")
    at_most("policy decision median (µs), cache miss", miss, 50)
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


def issue_33(results: dict[str, Any], peers: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The goals of issue 33 (performance where the cost really is), each computed from this
    run's figures; a figure the run has not got is ``n/a``, the peer's without a
    ``make bench-peers`` result "not measured"."""
    http = results["http"]
    scen = http["scenarios"]
    kinds = results.get("kinds", {})
    cpu = kinds.get("cpu_us_per_call", {})
    out: list[dict[str, Any]] = []

    def goal(name: str, value: float | None, op: str, limit: float, missing: str = "n/a") -> None:
        ok = None if value is None else (value <= limit if op == "<=" else value >= limit)
        status = missing if ok is None else ("PASS" if ok else "MISS")
        out.append(
            {
                "target": name,
                "measured": None if value is None else round(value, 3),
                "goal": f"{op} {limit}",
                "status": status,
                "issue": ISSUE_33,
            }
        )

    def over(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    def gw_cpu(key: str) -> float | None:
        return scen.get(key, {}).get("gateway_cpu_us_per_call")

    goal(
        "HTTP tool CPU / fs.read_file CPU (per call)",
        over(cpu.get("http"), cpu.get("rest")),
        "<=",
        1.5,
    )
    # Scenarios 6 and 1 (wrk, many calls) when the run has them, else the kinds phase's.
    mcp_rest = over(gw_cpu("s6_mcp_read"), gw_cpu("s1_read")) or over(
        cpu.get("mcp"), cpu.get("rest")
    )
    goal("MCP tools/call CPU / REST CPU, fs.read_file", mcp_rest, "<=", 1.05)
    floor = over(scen.get("s1_read", {}).get("ratio"), scen.get("s0_floor", {}).get("ratio"))
    goal("scenario 1 throughput / the floor", floor, ">=", 0.6)
    pg = kinds.get("postgres", {}).get("ratio")
    goal("PostgreSQL read CPU (gateway + backends) / SQLite read", pg, "<=", 2)
    goal(
        "serve --workers 2 CPU per call / one worker",
        over(gw_cpu("s7_read_2_workers"), gw_cpu("s1_read")),
        "<=",
        1.1,
    )
    half = http.get("s1_half_rate_latency", {}).get("gateway", {}).get("p99_ms")
    goal("scenario 1 p99 at half its max rate (ms)", half, "<=", 10)
    rss = kinds.get("rss_mb", {}).get("after_warmup")
    goal("RSS after warm-up over REST, MCP and an HTTP tool (MiB)", rss, "<=", 100)
    goal(
        "ContextForge CPU per call / Toolgate's",
        contextforge_ratio(peers),
        ">=",
        15,
        missing="not measured",
    )
    return out


def contextforge_ratio(peers: dict[str, Any] | None) -> float | None:
    """IBM ContextForge's CPU per call over Toolgate's in a ``make bench-peers`` result (each
    side's cheaper way, as ``bench/peers/run.py`` computes its ratios), or None."""
    gateways = (peers or {}).get("gateways", {})
    if "contextforge" not in gateways or "toolgate" not in gateways:
        return None

    def cheapest(key: str) -> float:
        return min(w["cpu_ms_per_call"] for w in gateways[key]["ways"].values())

    return cheapest("contextforge") / cheapest("toolgate")


def newest_peers(results_dir: Path) -> tuple[str, dict[str, Any]] | None:
    """The newest ``peers-<date>.json`` that ``make bench-peers`` wrote, with its name."""
    found = sorted(results_dir.glob("peers-*.json"))
    return (found[-1].name, json.loads(found[-1].read_text())) if found else None


def floor_rows(scenarios: dict[str, Any]) -> list[list[str]]:
    """The floor (bench/floor_app.py, scenario 0) is a yardstick, not a goal: how close a read
    keeping the guarantees can come to bare, and each gateway read's share of it (same run)."""
    floor = scenarios.get("s0_floor", {}).get("ratio")
    rows: list[list[str]] = []
    for key, name in (("s1_read", "1. read"), ("s6_mcp_read", "6. MCP tools/call")):
        share = scenarios.get(key, {}).get("ratio")
        if floor and share:
            rows.append([f"{name} / the floor", "", "", f"{share / floor:.3f}x", "", "", "", ""])
    return rows


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
    rows.extend(replica_rows(results["http"].get("replicas")))
    rows.extend(worker_rows(results["http"]["scenarios"]))
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
    lat = results["http"].get("mcp_vs_rest_latency")
    if lat:
        rows.append(
            [
                f"6. one call at a time, MCP vs REST ({lat['n']} each)",
                "",
                "",
                f"{lat['ratio']:.3f}x",
                f"{lat['mcp']['median_ms']:.2f} / {lat['rest']['median_ms']:.2f} (REST)",
                "",
                "",
                "",
            ]
        )
    rows.extend(floor_rows(results["http"]["scenarios"]))
    rss = results["http"].get("rss_mb")
    if rss:
        rows.append(
            [
                "gateway RSS MB, idle / after the scenarios",
                f"{rss['idle']:.0f} / {rss['after']:.0f}",
                "",
                "",
                "",
                "",
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
        how = "inline" if backend == "sqlite" else "writer thread"
        add(f"store {backend}: empty write tx (async, {how})", st.get("empty_write_tx"))
        add(
            f"store {backend}: empty write tx (sync, pooled connection)",
            st.get("empty_write_tx_sync"),
        )
        add(f"store {backend}: reserve + commit of one execution", st.get("reserve_commit"))
        add(f"store {backend}: append one event, hash-chained", st.get("append_event_chained"))
        add(
            f"store {backend}: append one event, unchained (before)",
            st.get("append_event_unchained"),
        )
    add("pipeline run_call fs.read_file (no HTTP)", m.get("pipeline_read"))
    add("pipeline run_call fs.write_file (no HTTP)", m.get("pipeline_write"))
    chain = m.get("audit_chain", {})
    add("scenario 1's call in-process, hash-chained", chain.get("read_call_chained"))
    add("scenario 1's call in-process, unchained (before)", chain.get("read_call_unchained"))
    cat = results["growth"].get("catalogue")
    if cat:
        add(f"resolve in {cat['tools']}-tool catalogue (no range)", cat["resolve_any"])
        add(f"resolve in {cat['tools']}-tool catalogue (^1)", cat["resolve_range"])
        add(
            f"resolve in shipped catalogue (^1, {cat['shipped_tools']} tools)",
            cat["resolve_shipped_range"],
        )
    goal_rows = [["goal (issue 33)", "measured", "goal", ""]]
    target_rows = [["target", "measured", "goal", ""]]
    for t in results["targets"]:
        measured = t["measured"]
        text = (
            "n/a"
            if measured is None
            else (f"{measured:.3f}" if isinstance(measured, float) else str(measured))
        )
        rows_of = goal_rows if t.get("issue") == ISSUE_33 else target_rows
        rows_of.append([t["target"], text, t["goal"], t["status"]])
    extra = []
    if cat:
        extra.append(
            f"catalogue of {cat['tools']} tools: load {cat['load_s']:.3f} s "
            f"({cat['per_tool_ms']:.2f} ms per tool); shipped {cat['shipped_tools']} "
            f"tools {cat['shipped_load_s']:.3f} s"
        )
    if "chain_cpu_us_per_call" in chain:
        extra.append(
            f"audit hash chain: {chain['chain_cpu_us_per_call']} µs CPU per scenario 1 call "
            f"({chain['chain_cpu_share_pct']} % of it), same run, alternating blocks"
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
    for block in (goal_rows, rows, kinds_rows(results), micro_rows, stage_rows, target_rows):
        if len(block) == 1:
            continue
        out.extend(render(block, markdown))
        out.append("")
    out.extend(("- " if markdown else "") + e for e in extra)
    return out


def kinds_rows(results: dict[str, Any]) -> list[list[str]]:
    """Phase ``kinds``: one gateway's RSS and CPU per call over the three kinds of call, and a
    read on PostgreSQL with its backends' CPU."""
    kinds = results.get("kinds")
    if not kinds:
        return [[]]
    rows = [["three kinds of call (phase kinds)", "figure"]]
    rss = kinds["rss_mb"]
    rows.append(
        ["gateway RSS MiB, after start / after warm-up", f"{rss['start']} / {rss['after_warmup']}"]
    )
    for kind, label in (("rest", "REST"), ("mcp", "MCP tools/call"), ("http", "HTTP tool")):
        rows.append([f"CPU µs per call, {label}", f"{kinds['cpu_us_per_call'][kind]:.0f}"])
    pg = kinds["postgres"]
    if "skipped" in pg:
        rows.append(["CPU µs per read on PostgreSQL", f"skipped: {pg['skipped'][:60]}"])
    else:
        rows.append(
            [
                "CPU µs per read on PostgreSQL, gateway + backends (gateway alone)",
                f"{pg['cpu_us_per_call']:.0f} ({pg['gateway_cpu_us_per_call']:.0f})",
            ]
        )
    return rows


def replica_rows(rep: dict[str, Any] | None) -> list[list[str]]:
    """Scenario 5 on two replicas against one (phase ``s5r``): the gateway columns hold two
    replicas, the bare ones one replica."""
    if not rep:
        return []
    if "skipped" in rep:
        return [[rep["title"], "skipped", "", "", rep["skipped"][:60], "", "", ""]]
    return [
        [
            rep["title"],
            f"{rep['two_rps']:.0f}/s",
            f"{rep['one_rps']:.0f}/s (one)",
            f"{rep['ratio']:.3f}x",
            "",
            f"{rep['two_p99_ms']:.2f} / {rep['one_p99_ms']:.2f} (one)",
            f"{rep['two_cpu_us_per_call']:.0f} / {rep['one_cpu_us_per_call']:.0f} (one)",
            "",
        ]
    ]


def worker_rows(scenarios: dict[str, Any]) -> list[list[str]]:
    """What a second worker process buys (issue 19): the gateway's throughput on ``serve
    --workers 2`` (scenarios 7, 7w) against one process (scenarios 1, 4a) of the same run."""
    rows = []
    for two, one, name in (
        ("s7_read_2_workers", "s1_read", "7 / 1. reads: gateway on 2 workers / 1"),
        ("s7_write_2_workers", "s4_write_64_files", "7w / 4a. writes: gateway on 2 workers / 1"),
    ):
        a, b = scenarios.get(two, {}), scenarios.get(one, {})
        if a.get("gateway_rps") and b.get("gateway_rps"):
            ratio = a["gateway_rps"] / b["gateway_rps"]
            rows.append(
                [
                    name,
                    f"{a['gateway_rps']:.0f}/s",
                    f"{b['gateway_rps']:.0f}/s (1 worker)",
                    f"{ratio:.3f}x",
                    "",
                    "",
                    "",
                    "",
                ]
            )
    return rows


def render(rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return lines
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
