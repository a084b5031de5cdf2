"""The soak harness itself works: ``bench/soak.py`` for a few seconds, end to end.

Not a soak (far too short for growth to mean anything): it checks that every kind of call of
the mix ran against a real gateway, that the side effects were counted on disk, and that the
verdicts and samples are in the results file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow


def test_a_short_soak_runs_every_kind_of_call_and_passes(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "soak.py"),
            "--minutes",
            "0.2",
            "--sample",
            "3",
            "--workers",
            "3",
            "--no-docs",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    (path,) = tmp_path.glob("soak-*.json")
    result = json.loads(path.read_text())
    assert result["passed"] is True
    assert set(result["calls"]) == {"read", "write", "replay", "deny", "process"}, result["calls"]
    assert all(n > 0 for n in result["calls"].values()), result["calls"]
    assert result["writes_on_disk"] > 0 and result["process_calls_completed"] > 0
    assert len(result["samples"]) >= 3
    assert all(s["rss_mb"] > 0 and s["fds"] > 0 for s in result["samples"])
    # the store's connections are counted apart (the pool opens them as reads overlap, up to
    # its bound), and the gateway holds at least its writer's
    assert all(0 < s["store_connections"] <= 10 for s in result["samples"]), result["samples"]
    assert "**PASS.**" in proc.stdout
