"""The peer bench's harness works: ``bench/peers/run.py --quick`` runs end to end.

Not a benchmark (far too few calls for the figures to mean anything): it checks that the echo,
the gateway and the harness run as real processes, that every call was answered with its echo,
and that the results file has positive figures for each way of calling.

CI runs Toolgate's half only (``--peers none``): installing the peers (IBM ContextForge,
openapi-mcp-gateway) takes minutes and CI's time is bounded. A peer's half runs here only when
``make bench-peers`` has installed it into ``.cache/peers/`` already; otherwise it is skipped
with the reason (and never attempted in CI).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import IN_CI, REPO

pytestmark = pytest.mark.slow

sys.path.insert(0, str(REPO))
from bench.peers import contextforge, openapi_gateway  # noqa: E402


def run_quick(out: Path, peers: str) -> dict[str, Any]:
    command = [sys.executable, str(REPO / "bench" / "peers" / "run.py"), "--quick"]
    proc = subprocess.run(
        [*command, "--peers", peers, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    assert "What each gateway does per call:" in proc.stdout, proc.stdout
    files = list(out.glob("peers-*.json"))
    assert len(files) == 1, files
    data: dict[str, Any] = json.loads(files[0].read_text())
    return data


def check_gateway(data: dict[str, Any], key: str, ways: tuple[str, ...]) -> None:
    gateway = data["gateways"][key]
    assert gateway["per_call"], key
    assert gateway["rss_mb"]["after_start"] > 0 and gateway["rss_mb"]["after_warmup"] > 0
    assert tuple(gateway["ways"]) == ways, gateway["ways"].keys()
    for label, way in gateway["ways"].items():
        assert way["bad"] == 0, (key, label, way["rounds"])
        for figure in ("rps", "cpu_ms_per_call", "p50_ms", "p99_ms"):
            assert way[figure] > 0, (key, label, figure, way)


def test_toolgate_half_measures_rest_and_mcp(tmp_path: Path) -> None:
    data = run_quick(tmp_path, "none")
    assert list(data["gateways"]) == ["toolgate"]
    check_gateway(data, "toolgate", ("REST", "MCP"))


PEERS = [
    pytest.param(contextforge, "contextforge", ("/rpc", "/mcp"), id="contextforge"),
    pytest.param(openapi_gateway, "openapi-mcp-gateway", ("/api/mcp",), id="openapi-mcp-gateway"),
]


@pytest.mark.parametrize(("module", "key", "ways"), PEERS)
def test_peer_half_when_installed(
    tmp_path: Path, module: Any, key: str, ways: tuple[str, ...]
) -> None:
    if IN_CI:
        pytest.skip("CI does not install the peers (minutes of its bounded time): make bench-peers")
    if not module.installed():
        pytest.skip(
            f"{module.PACKAGE}=={module.VERSION} is not installed in {module.VENV}: "
            "make bench-peers installs it"
        )
    data = run_quick(tmp_path, key)
    check_gateway(data, "toolgate", ("REST", "MCP"))
    check_gateway(data, key, ways)
    assert next(iter(data["ratios"].values())) > 0
