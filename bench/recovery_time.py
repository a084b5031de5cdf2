"""Time from ``kill -9`` of the gateway to every in-flight execution settled after restart.

Starts a real gateway (SQLite, ``workers`` raised to N), queues N ``proc.python`` calls of a
script that sleeps, waits until all N have started, kills the gateway with SIGKILL, starts
it again and measures until the store holds all N completed. Also checks that no process
of those executions survives (their trees are stopped by recovery), and starts the gateway
once more with nothing to recover: ``beyond_plain_start_s`` is what recovery added to the
start-up in the same run, ``recovery_pass_s`` the pass's own time from the gateway's log.

    .venv/bin/python bench/recovery_time.py [--executions 100]

Writes bench/results/recovery_time-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.testing import (
    free_port,
    make_project,
    run_agent_code_without_approval,
    serve,
    wait_healthy,
)

HEADERS = {"Authorization": "Bearer tg_dev_alice", "Prefer": "respond-async"}


def start(config: Path, port: int) -> subprocess.Popen[bytes]:
    return serve(config, port, (config.parent / f"gateway-{port}.log").open("ab"))


def count(db: Path, sql: str) -> int:
    with sqlite3.connect(db, timeout=30) as conn:
        return int(conn.execute(sql).fetchone()[0])


def cpu_of(pid: int) -> float:
    """CPU seconds a process has used so far (less noisy than its wall time)."""
    times = psutil.Process(pid).cpu_times()
    return round(times.user + times.system, 3)


def pass_seconds(log: Path) -> float | None:
    """The start-up recovery pass's own duration, from the gateway's log line."""
    found = re.findall(rb"recovered \d+ interrupted executions in ([0-9.]+) s", log.read_bytes())
    return float(found[-1]) if found else None


def plain_restart(config: Path, port: int) -> tuple[float, float]:
    """A start-up with nothing to recover, on the same store in the same run: the baseline
    the recovering start-up is compared with (the machine is shared and noisy)."""
    began = time.monotonic()
    third = start(config, port)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", third, timeout=300)
        return round(time.monotonic() - began, 3), cpu_of(third.pid)
    finally:
        third.send_signal(signal.SIGTERM)
        third.wait(timeout=30)


def survivors(ids: set[str]) -> int:
    alive = 0
    for proc in psutil.process_iter(["environ"]):
        try:
            if (proc.info["environ"] or {}).get("TOOLGATE_EXECUTION_ID") in ids:
                alive += 1
        except (psutil.Error, OSError):
            continue
    return alive


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--executions", type=int, default=100)
    args = parser.parse_args()
    n = args.executions
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = root / "var" / "toolgate.db"
        config = make_project(root, f"sqlite:///{db}")
        run_agent_code_without_approval(root)  # proc.python needs approval under the shipped policy
        data = yaml.safe_load(config.read_text())
        data["workers"] = n
        # All N calls are alice's: without this her share (64 by default) would keep the
        # rest queued, and fewer than N would be in flight at the kill.
        data["max_executions_per_principal"] = max(n, 64)
        data["max_executions_total"] = max(n, 256)
        config.write_text(yaml.safe_dump(data))
        ws = root / "var" / "workspaces" / "demo"
        ws.mkdir(parents=True, exist_ok=True)
        (ws / "sleep.py").write_text("import time\ntime.sleep(600)\n")
        # Starting N sandboxed interpreters can take longer than the shipped 60 s timeout on
        # a busy machine: the first calls would end `unknown` (timeout) before the kill, and
        # the run would measure fewer than N in flight.
        tool = root / "tools.d" / "proc.python.yaml"
        tool.write_text(tool.read_text().replace("timeout: 60s", "timeout: 900s"))
        port = free_port()
        first = start(config, port)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, first)
        ids = set()
        with httpx.Client(headers=HEADERS, timeout=60) as client:
            for i in range(n):
                body = {
                    "run_id": "recovery",
                    "call_id": f"c{i}",
                    "tool": {"name": "proc.python"},
                    "arguments": {"script": "sleep.py"},
                    "actor": {"user_id": "alice", "agent_id": "bench"},
                    "workspace": {"id": "demo"},
                }
                response = client.post(url + "/v1/executions", json=body)
                assert response.status_code == 202, response.text
                ids.add(response.json()["id"])
        started_sql = (
            "SELECT count(DISTINCT execution_id) FROM events "
            "WHERE type='state.checkpointed' AND data_json LIKE '%pid%'"
        )
        deadline = time.monotonic() + 300
        while count(db, started_sql) < n and time.monotonic() < deadline:
            time.sleep(0.2)
        running = count(db, started_sql)
        in_flight = count(db, "SELECT count(*) FROM executions WHERE status='running'")
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        killed_at = time.monotonic()
        second = start(config, port)
        try:
            wait_healthy(url, second, timeout=300)
            ready_at = time.monotonic()
            start_cpu = cpu_of(second.pid)
            done_sql = (
                "SELECT count(*) FROM executions WHERE status='completed' AND run_id='recovery'"
            )
            while count(db, done_sql) < n and time.monotonic() - killed_at < 600:
                time.sleep(0.05)
            settled_at = time.monotonic()
            outcomes = {}
            with sqlite3.connect(db) as conn:
                for outcome, c in conn.execute(
                    "SELECT outcome, count(*) FROM executions "
                    "WHERE run_id='recovery' GROUP BY outcome"
                ):
                    outcomes[outcome] = c
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=30)
        left = survivors(ids)
        recovery_pass = pass_seconds(config.parent / f"gateway-{port}.log")
        plain_start, plain_cpu = plain_restart(config, port)
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(),
        "executions": n,
        "started_before_kill": running,
        "in_flight_at_kill": in_flight,
        "kill_to_ready_s": round(ready_at - killed_at, 3),
        "kill_to_all_settled_s": round(settled_at - killed_at, 3),
        "ready_to_all_settled_s": round(settled_at - ready_at, 3),
        "recovery_pass_s": recovery_pass,
        "start_cpu_s": start_cpu,
        "plain_start_s": plain_start,
        "plain_start_cpu_s": plain_cpu,
        "beyond_plain_start_s": round(ready_at - killed_at - plain_start, 3),
        "outcomes": outcomes,
        "processes_left_running": left,
        "load_average": os.getloadavg(),
    }
    out_dir = Path(__file__).resolve().parent / "results"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / f"recovery_time-{dt.date.today().isoformat()}.json"
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
