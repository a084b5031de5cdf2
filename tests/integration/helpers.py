"""What the replica tests (test_replicas.py) run on: a project with short leases and a
process tool that leaves its side effect on disk, and several gateway processes started at
once on one database."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

from gateway.testing import free_port, make_project, serve, stop, wait_healthy

START_TIMEOUT = 240.0
"""Seconds for every replica to be ready (four processes starting at once share the CPUs)."""
LEASE = 2.0
"""``lock_lease`` of the replicas here (seconds): short, so that a takeover is quick."""

WORK_PY = """
import pathlib, signal, sys, time
name, delay = sys.argv[1], float(sys.argv[2])
def term(*_):
    pathlib.Path("signals", name).write_text("TERM")
    sys.exit(143)
signal.signal(signal.SIGTERM, term)
time.sleep(delay)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the effect is whole or absent
with open("procs.txt", "a") as f:
    f.write(name + "\\n")
pathlib.Path("done", name).write_text("ok")
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
"""
LOAD_PROC = {
    "name": "load.proc",
    "version": "1.0.0",
    "description": "Sleep, then append a line and leave a marker file (the replica tests).",
    "adapter": "process",
    "operation": "run",
    "risk": "medium",
    "side_effect": "write",
    "reversible": False,
    "tags": ["process"],
    "input": {
        "name": {"type": "string", "required": True, "regex": "[a-z0-9-]+"},
        "delay": {"type": "string", "required": True, "regex": "[0-9.]+"},
    },
    "command": ["python", "-u", "--", "work.py", "{arguments.name}", "{arguments.delay}"],
    "cwd": ".",
    "env": {"allow": ["PATH", "HOME", "LANG"]},
    "success_exit_codes": [0],
    "kill_grace": "2s",
    "timeout": "60s",
    "idempotency": "optional",
    "reconcile": [{"probe": "file_exists", "path": "done/{arguments.name}"}],
}


def replica_project(root: Path, url: str) -> tuple[Path, Path]:
    """The shipped project with short leases, ``fs.write_file`` behind an approval and the
    ``load.proc`` tool; returns (toolgate.yaml, the workspace)."""
    config = make_project(root, url)
    data = yaml.safe_load(config.read_text())
    data["lock_lease"] = f"{LEASE}s"
    config.write_text(yaml.safe_dump(data))
    rules = root / "policies" / "rules.yaml"
    policy = yaml.safe_load(rules.read_text())
    policy.setdefault("tool_overrides", {})["fs.write_file"] = {"approval": True}
    rules.write_text(yaml.safe_dump(policy))
    (root / "tools.d" / "load.proc.yaml").write_text(yaml.safe_dump(LOAD_PROC))
    workspace = root / "var" / "workspaces" / "demo"
    for folder in ("done", "signals", "approved"):
        (workspace / folder).mkdir(parents=True, exist_ok=True)
    (workspace / "work.py").write_text(WORK_PY)
    (workspace / "read.txt").write_text("steady")
    return config, workspace


@dataclass
class Replica:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    """Its output (INFO and above), for the whole module: each test's part of it is kept
    apart, and shown when the test fails (``tests/integration/conftest.py``)."""


def start_replicas(
    config: Path | Mapping[str, Path], envs: dict[str, dict[str, str]], stack: ExitStack
) -> dict[str, Replica]:
    """Start one ``toolgate serve`` per named environment, all at once (each stopped when
    ``stack`` closes); wait until each is ready. ``config``: one toolgate.yaml for all, or
    one per name (each replica then runs in a directory of its own)."""
    started = {}
    for name, env in envs.items():
        port = free_port()
        own = config if isinstance(config, Path) else config[name]
        path = own.parent / f"gateway-{name}.log"
        with path.open("wb") as log:
            proc = serve(own, port, log, env, ("--log-level", "info"))
        stack.callback(stop, proc)
        started[name] = Replica(f"http://127.0.0.1:{port}", proc, path)
    for replica in started.values():  # they start at once: on a busy machine, slowly
        wait_healthy(replica.url, replica.proc, timeout=START_TIMEOUT)
    return started


@dataclass
class Cluster:
    """Gateway processes sharing one PostgreSQL database and one workspace."""

    url: str
    workspace: Path
    replicas: dict[str, Replica]


EVIDENCE_TABLES = {
    "executions": "SELECT * FROM executions WHERE id = ANY(%(ids)s) ORDER BY created_ms",
    "events": "SELECT * FROM events WHERE execution_id = ANY(%(ids)s) ORDER BY execution_id, seq",
    "locks": "SELECT * FROM locks WHERE holder = ANY(%(ids)s)",
    "approvals": "SELECT * FROM approvals WHERE execution_id = ANY(%(ids)s)",
    "idempotency": "SELECT * FROM idempotency WHERE execution_id = ANY(%(ids)s)",
    "replicas": "SELECT * FROM replicas ORDER BY started_ms",
    "recovery_notes": (
        "SELECT execution_id, seq, at_ms, data_json FROM events "
        "WHERE type = 'state.checkpointed' ORDER BY at_ms"
    ),
}
"""What is kept of a call whose side effect happened twice, before the test's database is
dropped: its executions' rows, events, locks, approvals and idempotency claims, every
replica's row (whose ``id`` its ``owner`` names) and every recovery note of the database."""


def evidence(url: str, run_id: str, call_ids: list[str]) -> dict[str, Any]:
    """The rows of ``EVIDENCE_TABLES`` for the executions of ``run_id`` whose call_id is
    one of ``call_ids`` or starts with one of them and a dash (an idempotent call's two
    requests), as JSON-ready rows; ``data_json`` decoded."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            patterns = [f"{c}" for c in call_ids] + [f"{c}-%" for c in call_ids]
            ids = [
                row[0]
                for row in conn.exec_driver_sql(
                    "SELECT id FROM executions WHERE run_id = %(run)s AND call_id LIKE ANY(%(p)s)",
                    {"run": run_id, "p": patterns},
                )
            ]
            found: dict[str, Any] = {"execution_ids": ids}
            for table, sql in EVIDENCE_TABLES.items():
                found_rows = conn.exec_driver_sql(sql, {"ids": ids}).mappings()
                rows = [_decoded(dict(row)) for row in found_rows]
                if table == "recovery_notes":
                    rows = [r for r in rows if r["data_json"].get("by") == "recovery"]
                found[table] = rows
            return found
    finally:
        engine.dispose()


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    for column in ("data_json", "request_json", "result_json"):
        if isinstance(row.get(column), str):
            row[column] = json.loads(row[column])
    return row
