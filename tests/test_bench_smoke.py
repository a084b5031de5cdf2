"""The benchmark harness itself works: ``bench/run.py --quick`` runs end to end.

Not a benchmark (the durations are far too short for the figures to mean anything): it checks
that every phase runs against real processes and that the results file has every scenario
with positive numbers. Needs Debian's ``wrk``: skipped with the reason when it is missing,
except in CI (``CI=true``), where that is a failure. Scenario 5 and its two-replica phase
need PostgreSQL on 127.0.0.1:5432 under the same rule.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import IN_CI, REPO, starts_processes

HTTP_SCENARIOS = (
    "s0_floor",
    "s1_read",
    "s2_replay",
    "s3_deny",
    "s4_write_64_files",
    "s4_write_shared_file",
    "s6_mcp_read",
    "s1_metrics_off",
    "s1_tracing_on",
    "s7_read_2_workers",
)


def positive(where: str, data: dict[str, Any], *keys: str) -> None:
    for key in keys:
        value = data.get(key)
        assert isinstance(value, int | float) and value > 0, f"{where}.{key} = {value!r}"


@pytest.fixture(scope="module")
@starts_processes
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        reason = "wrk is not installed (as root: apt-get update && apt-get install -y wrk)"
        if IN_CI:
            pytest.fail(f"{reason}; CI requires it", pytrace=False)
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "run.py"),
            "--quick",
            "--no-wrk-install",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    assert "scenario 6 throughput / bare (MCP tools/call)" in proc.stdout, proc.stdout
    files = list(out.glob("*.json"))
    assert len(files) == 1, files
    assert (out / "performance.png").stat().st_size > 0
    data: dict[str, Any] = json.loads(files[0].read_text())
    data["_stdout"] = proc.stdout
    return data


def test_every_http_scenario_has_positive_figures(results: dict[str, Any]) -> None:
    scenarios = results["http"]["scenarios"]
    for key in HTTP_SCENARIOS:
        s = scenarios[key]
        positive(key, s, "ratio", "gateway_rps", "bare_rps", "gateway_p50_ms", "gateway_p99_ms")
        positive(key, s, "gateway_cpu_us_per_call", "bare_cpu_us_per_call")
        assert s["bad"] == 0, (key, s["runs"])
    pg = scenarios["s5_read_postgres"]
    if "skipped" in pg:
        assert not IN_CI, f"scenario 5 was skipped in CI: {pg['skipped']}"
    else:
        positive("s5_read_postgres", pg, "ratio", "gateway_rps", "bare_rps", "gateway_p99_ms")
        assert pg["bad"] == 0, pg["runs"]
    replicas = results["http"]["replicas"]
    if "skipped" in replicas:
        assert not IN_CI, f"the replicas phase was skipped in CI: {replicas['skipped']}"
    else:
        positive("replicas", replicas, "ratio", "one_rps", "two_rps", "two_cpu_us_per_call")
        assert replicas["bad"] == 0, replicas["runs"]
        assert "2 replicas / 1" in results["_stdout"]
    half = results["http"]["s1_half_rate_latency"]
    positive("s1_half_rate_latency", half, "rate")
    positive("s1_half_rate_latency.gateway", half["gateway"], "achieved_rate", "p50_ms", "p99_ms")
    positive("s1_half_rate_latency.bare", half["bare"], "achieved_rate", "p99_ms")
    assert half["gateway"]["bad"] == 0
    one = results["http"]["mcp_vs_rest_latency"]
    positive("mcp_vs_rest_latency", one, "n", "ratio")
    positive("mcp_vs_rest_latency.mcp", one["mcp"], "median_ms", "p90_ms")
    positive("mcp_vs_rest_latency.rest", one["rest"], "median_ms", "p90_ms")
    positive("rss_mb", results["http"]["rss_mb"], "idle", "after")


def test_every_micro_benchmark_has_positive_figures(results: dict[str, Any]) -> None:
    micro = results["micro"]
    for key in (
        "policy_decision_allow",
        "policy_decision_deny",
        "policy_decision_allow_miss",
        "policy_decision_deny_miss",
        "pipeline_read",
        "pipeline_write",
    ):
        positive(key, micro[key], "median_us", "p99_us", "n")
    positive("micro", micro, "pipeline_read_concurrent16_rps")
    shipped = {p.name for p in (REPO / "tools.d").glob("*.yaml")}
    validation = micro["validation"]
    assert len(validation) == len(shipped), sorted(validation)
    for ref, figures in validation.items():
        assert "error" not in figures, (
            f"add valid arguments for {ref} to VALID_ARGUMENTS in bench/harness/micro.py: "
            f"{figures['error']}"
        )
        positive(f"validation[{ref}]", figures, "median_us", "p99_us")
    for key in (
        "empty_write_tx",
        "empty_write_tx_sync",
        "reserve_commit",
        "append_event_chained",
        "append_event_unchained",
        "event_hash",
    ):
        positive(f"store_sqlite.{key}", micro["store_sqlite"][key], "median_us", "p99_us")
    for key in ("read_call_chained", "read_call_unchained"):
        positive(f"audit_chain.{key}", micro["audit_chain"][key], "median_us", "cpu_us_per_call")
    assert "chain_cpu_share_pct" in micro["audit_chain"]
    if "skipped" not in micro["store_postgres"]:
        positive(
            "store_postgres.reserve_commit", micro["store_postgres"]["reserve_commit"], "median_us"
        )


def test_growth_and_targets(results: dict[str, Any]) -> None:
    catalogue = results["growth"]["catalogue"]
    assert catalogue["tools"] == results["plan"]["tools"]
    positive("catalogue", catalogue, "load_s", "shipped_load_s")
    positive("catalogue.resolve_any", catalogue["resolve_any"], "median_us")
    positive("catalogue.resolve_range", catalogue["resolve_range"], "median_us")
    events = results["growth"]["events"]
    assert events["events"] == results["plan"]["events"]
    positive("events", events, "ratio", "empty_rps", "full_rps")
    earlier = {t["target"]: t["status"] for t in results["targets"] if "issue" not in t}
    assert len(earlier) == 13, earlier  # the policy target twice: cached and on a miss
    assert set(earlier.values()) <= {"PASS", "MISS", "shown"}, earlier
    for status in earlier.values():
        assert status in results["_stdout"]
    # The floor is a yardstick, a row of the table rather than a target: each read's share of it.
    for row in ("1. read / the floor", "6. MCP tools/call / the floor"):
        assert row in results["_stdout"], row


def test_the_goals_of_issue_33_are_computed_from_the_run(results: dict[str, Any]) -> None:
    """Every goal of issue 33 has a PASS or MISS from the run's own figures (the phase
    ``kinds`` gives those no scenario has), but the peer's: --out holds no ``make
    bench-peers`` result, so it is "not measured"."""
    kinds = results["kinds"]
    positive("kinds.rss_mb", kinds["rss_mb"], "start", "after_warmup")
    positive("kinds.cpu_us_per_call", kinds["cpu_us_per_call"], "rest", "mcp", "http")
    pg = kinds["postgres"]
    if "skipped" in pg:
        assert not IN_CI, f"the kinds phase's PostgreSQL read was skipped in CI: {pg['skipped']}"
    else:
        positive("kinds.postgres", pg, "cpu_us_per_call", "backends", "ratio")
    goals = {t["target"]: t for t in results["targets"] if t.get("issue") == "issue 33"}
    assert len(goals) == 8, sorted(goals)
    peer = goals.pop("ContextForge CPU per call / Toolgate's")
    assert (peer["status"], peer["measured"]) == ("not measured", None)
    if "skipped" in pg:
        goals.pop("PostgreSQL read CPU (gateway + backends) / SQLite read")
    for name, goal in goals.items():
        assert goal["status"] in ("PASS", "MISS"), (name, goal)
        line = next(x for x in results["_stdout"].splitlines() if x.startswith(name))
        assert line.split()[-1] == goal["status"], line
    assert results["peers_file"] is None


@pytest.mark.slow  # runs bench/run.py itself
def test_only_runs_the_phases_it_names_into_a_file_of_their_own(tmp_path: Path) -> None:
    """``--only store`` runs the store's micro-benchmarks alone and leaves the day's full
    record alone; an unknown phase is refused with the list of phases."""
    if shutil.which("wrk") is None:
        reason = "wrk is not installed (as root: apt-get update && apt-get install -y wrk)"
        if IN_CI:
            pytest.fail(f"{reason}; CI requires it", pytrace=False)
        pytest.skip(reason)
    command = [sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--no-wrk-install"]
    bad = subprocess.run(
        [*command, "--only", "store,bogus"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2
    assert "unknown phase bogus; choose from micro, store" in bad.stderr
    out = tmp_path / "bench"
    proc = subprocess.run(
        [*command, "--only", "store", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = [p.name for p in out.glob("*.json")]
    assert len(files) == 1 and files[0].endswith("-only-store.json"), files
    data = json.loads((out / files[0]).read_text())
    assert set(data["micro"]) == {"store_sqlite", "store_postgres"}, sorted(data["micro"])
    positive("store_sqlite.reserve_commit", data["micro"]["store_sqlite"]["reserve_commit"], "n")
    assert data["http"]["scenarios"] == {}


@pytest.mark.slow
def test_render_refuses_what_is_not_a_full_run_and_changes_nothing(tmp_path: Path) -> None:
    """``--render`` rewrites the docs from a full run's results only: a quick or partial run's
    file, or no results at all, is refused (exit 2) and the page is left as it is."""
    quick = tmp_path / "2026-12-06.json"
    quick.write_text(json.dumps({"plan": {"quick": True}}))
    partial = tmp_path / "2026-12-06-only-store.json"
    partial.write_text(json.dumps({"plan": {"quick": False}}))
    page = REPO / "docs" / "performance.md"
    before = page.read_text()
    for path in (quick, partial, tmp_path / "missing.json"):
        proc = subprocess.run(
            [sys.executable, str(REPO / "bench" / "run.py"), "--render", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert "--render:" in proc.stderr and "full run" in proc.stderr
    assert page.read_text() == before


def test_a_bench_run_keeps_the_soak_section_of_the_page(tmp_path: Path) -> None:
    """``make bench`` rewrites docs/performance.md but measures no soak: the soak's section,
    which ``bench/soak.py`` writes at the end of the page, is kept (a run dropped it, and
    with it the anchor gateway/allocator.py cites)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from harness import page
    finally:
        sys.path.remove(str(REPO / "bench"))
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nold figures\n\n## Soak\n\nthe last soak\n")
    assert page._kept_soak(doc) == "\n## Soak\n\nthe last soak\n"
    doc.write_text("# Performance\n\nno soak yet\n")
    assert page._kept_soak(doc) == ""
    assert "\n## Soak\n" in (REPO / "docs" / "performance.md").read_text()
