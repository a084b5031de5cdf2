"""How long one hostile request holds up the gateway's event loop (issue 12 §1).

For each hostile input, starts a real gateway (SQLite), pings ``GET /healthz`` back to back
from another thread, sends the input once, and reports the slowest ping while the request ran
(a ping waits for the loop, so its latency is the loop's stall plus one round trip; the
baseline is the slowest ping of an idle gateway). A fresh gateway per input: an input that
stalls the loop for minutes does not spoil the next measurement. A ping or request that does
not answer within ``--timeout`` seconds counts as a stall of at least that long.

    PYTHONPATH=$PWD .venv/bin/python bench/loop_stall.py [--timeout 30] [--only NAME]

Writes bench/results/loop_stall-<date>.json. Not part of ``make bench``: about a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.testing import free_port, make_project, wait_healthy

HEADERS = {"Authorization": "Bearer tg_dev_alice", "Content-Type": "application/json"}


def _call(tool: str, arguments: Any, **extra: Any) -> bytes:
    body = {
        "run_id": "stall",
        "call_id": "c1",
        "tool": {"name": tool},
        "arguments": arguments,
        "workspace": {"id": "demo"},
        **extra,
    }
    return json.dumps(body).encode()


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def cases() -> dict[str, bytes]:
    unknown = {"path": "k.txt", "content": "x", **{f"a{i}": i for i in range(40_000)}}
    deep = '{"path": "a.txt", "content": ' + _nested(990) + "}"
    return {
        "unknown_keys_40000": _call("fs.write_file", unknown),
        "proc_python_args_2500": _call(
            "proc.python", {"script": "a.py", "args": list(range(2500))}
        ),
        "write_files_1500_malformed": _call("fs.write_files", {"files": [{"x": 1}] * 1500}),
        "body_10000_deep": _nested(10_000).encode(),
        "arguments_990_deep": (
            b'{"run_id": "stall", "call_id": "c1", "tool": {"name": "fs.write_file"}, '
            b'"workspace": {"id": "demo"}, "arguments": ' + deep.encode() + b"}"
        ),
        "unknown_keys_9990": _call(
            "fs.write_file", {"path": "k.txt", "content": "x", **{f"a{i}": i for i in range(9990)}}
        ),
        "values_300000": _call("fs.write_file", {"path": "a", "content": [0] * 300_000}),
    }


class Pinger(threading.Thread):
    """GET /healthz back to back; keeps the slowest latency since the last ``reset``."""

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(daemon=True)
        self.url, self.timeout = url + "/healthz", timeout
        self.worst = 0.0
        self.pings = 0
        self.stop = threading.Event()

    def reset(self) -> None:
        self.worst, self.pings = 0.0, 0

    def run(self) -> None:
        with httpx.Client(timeout=self.timeout) as client:
            while not self.stop.is_set():
                start = time.perf_counter()
                with contextlib.suppress(httpx.HTTPError):  # a timeout: its latency counts
                    client.get(self.url)
                self.worst = max(self.worst, time.perf_counter() - start)
                self.pings += 1
                time.sleep(0.002)


def start(config: Path, port: int) -> subprocess.Popen[bytes]:
    log = (config.parent / f"gateway-{port}.log").open("ab")
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "gateway.cli", "--config", str(config), "serve"),
            *("--port", str(port), "--log-level", "warning"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=config.parent,
    )


def measure(name: str, raw: bytes, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = make_project(root, f"sqlite:///{root / 'var' / 'toolgate.db'}")
        (root / "var" / "workspaces" / "demo").mkdir(parents=True, exist_ok=True)
        port = free_port()
        proc = start(config, port)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc)
            pinger = Pinger(url, timeout)
            pinger.start()
            time.sleep(1.0)
            idle = pinger.worst
            pinger.reset()
            began = time.perf_counter()
            try:
                response = httpx.post(url + "/v1/executions", content=raw, headers=HEADERS,
                                      timeout=timeout)  # fmt: skip
                status: Any = response.status_code
                code = response.json().get("code") or (response.json().get("result") or {}).get(
                    "error", {}
                ).get("type")
            except httpx.HTTPError as exc:
                status, code = "no answer", type(exc).__name__
            took = time.perf_counter() - began
            time.sleep(0.3)  # pings queued behind the request land
            pinger.stop.set()
            pinger.join(timeout + 1)
            return {
                "case": name,
                "body_bytes": len(raw),
                "status": status,
                "code": code,
                "request_s": round(took, 3),
                "worst_ping_ms": round(pinger.worst * 1000, 1),
                "idle_worst_ping_ms": round(idle * 1000, 1),
                "pings": pinger.pings,
            }
        finally:
            proc.send_signal(signal.SIGKILL)  # it may still be busy with the input
            proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--only", default=None, help="run only the case of this name")
    parser.add_argument("--label", default="", help="a word for the result file (e.g. before)")
    args = parser.parse_args()
    results = []
    for name, raw in cases().items():
        if args.only and name != args.only:
            continue
        result = measure(name, raw, args.timeout)
        results.append(result)
        print(json.dumps(result), flush=True)
    summary = {
        "date": dt.datetime.now(dt.UTC).isoformat(),
        "label": args.label,
        "timeout_s": args.timeout,
        "worst_ping_ms": max(r["worst_ping_ms"] for r in results),
        "cases": results,
        "load_average": os.getloadavg(),
    }
    out_dir = Path(__file__).resolve().parent / "results"
    out_dir.mkdir(exist_ok=True)
    suffix = f"-{args.label}" if args.label else ""
    out = out_dir / f"loop_stall{suffix}-{dt.date.today().isoformat()}.json"
    out.write_text(json.dumps(summary, indent=2))
    print(f"worst /healthz latency while a hostile request ran: {summary['worst_ping_ms']} ms")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
