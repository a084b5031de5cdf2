"""What a run does: the plan (durations, rounds, sizes), the scenarios' request bodies, and
the small helpers every phase uses (the log line, the load average, a seeded workspace)."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
AUTH = "Bearer tg_dev_alice"
KIB = "x" * 1024


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
    path: str = "/v1/executions"
    headers: tuple[tuple[str, str], ...] = ()
    """Headers besides Authorization and Content-Type."""


MCP_ERA = "2026-07-28"
MCP_HEADERS = (
    ("Accept", "application/json, text/event-stream"),
    ("MCP-Protocol-Version", MCP_ERA),
    ("Mcp-Method", "tools/call"),
    ("Mcp-Name", "fs.read_file"),
)


def mcp_read(call_id: str) -> dict[str, Any]:
    """Scenario 1's call as an MCP ``tools/call`` of the stateless 2026-07-28 era (no
    handshake, no session): the request contract's parts under ``_meta``."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "fs.read_file",
            "arguments": {"path": "one-kib.txt"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MCP_ERA,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.toolgate/run_id": "bench",
                "io.toolgate/call_id": call_id,
                "io.toolgate/agent_id": "bench",
            },
        },
    }


S6 = "s6_mcp_read"
S6_TITLE = "6. fs.read_file 1 KiB over MCP (tools/call, 2026-07-28)"


def mcp_scenario() -> Scenario:
    return Scenario(
        S6,
        S6_TITLE,
        compact(mcp_read("@CALL@")),
        marker='"io.toolgate/outcome":"succeeded"',
        path="/mcp",
        headers=MCP_HEADERS,
    )


FLOOR = "s0_floor"
FLOOR_TITLE = "0. the floor: scenario 1's guarantees alone (bench/floor_app.py)"


def floor_scenario(s1: Scenario) -> Scenario:
    """Scenario 1's request to ``bench/floor_app.py``: what a read keeping the guarantees
    costs with nothing else, the yardstick for how far the gateway's cost can fall."""
    return Scenario(FLOOR, FLOOR_TITLE, s1.template, path="/call")


S1_METRICS_OFF = "s1_metrics_off"
S1_TRACING_ON = "s1_tracing_on"
TELEMETRY_TITLES = {
    S1_METRICS_OFF: "1m. fs.read_file 1 KiB, metrics off",
    S1_TRACING_ON: "1t. fs.read_file 1 KiB, metrics and tracing on (spans dropped)",
}
"""Scenario 1 on gateways configured otherwise (scenario 1 itself: metrics on, tracing off,
the defaults): what telemetry costs, in the same run."""


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


def seed_workspace(config: Path) -> Path:
    ws = config.parent / "var" / "workspaces" / "demo"
    (ws / "w").mkdir(parents=True, exist_ok=True)
    (ws / "one-kib.txt").write_text(KIB)
    return ws


def sqlite_url(root: Path) -> str:
    return f"sqlite:///{root / 'var' / 'toolgate.db'}"
