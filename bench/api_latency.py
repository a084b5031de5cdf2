"""Latency of calls through the HTTP API, against a real gateway process on loopback.

Measures (median and p99 of N sequential calls over one keep-alive connection):
- fs.read_file of a 1 KiB file;
- fs.write_file first executions (a new idempotency key each) vs idempotent replays of one
  key, interleaved so machine noise hits both alike;
and, in-process, the embedded policy decision (2,000 calls).

    .venv/bin/python bench/api_latency.py [--calls 200] [--database-url URL]

Prints a table and writes bench/results/api_latency-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.testing import gateway, make_project

HEADERS = {"Authorization": "Bearer tg_dev_alice"}


def body(tool: str, arguments: dict, call_id: str, **extra: object) -> dict:
    return {
        "run_id": "bench",
        "call_id": call_id,
        "tool": {"name": tool},
        "arguments": arguments,
        "actor": {"user_id": "alice", "agent_id": "bench"},
        "workspace": {"id": "demo"},
        **extra,
    }


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
    }


def timed(client: httpx.Client, url: str, payload: dict) -> float:
    start = time.perf_counter()
    response = client.post(url, json=payload)
    elapsed = time.perf_counter() - start
    assert response.status_code == 200, response.text
    assert response.json()["result"]["outcome"] == "succeeded", response.text
    return elapsed


def policy_decisions(n: int = 2000) -> dict[str, float]:
    from gateway.policy.embedded import EmbeddedPolicy
    from gateway.policy.loader import load_policy_sources

    root = Path(__file__).resolve().parent.parent
    policy = EmbeddedPolicy(load_policy_sources(root / "rego", root / "policies"))
    doc = {
        "tool": {
            "name": "fs.read_file",
            "version": "1.0.0",
            "risk": "low",
            "side_effect": "read",
            "reversible": True,
            "adapter": "file",
            "operation": "read",
            "tags": ["fs"],
        },
        "arguments": {"path": "notes/a.txt"},
        "arguments_sha256": "0" * 64,
        "paths": [{"argument": "path", "relative": "notes/a.txt", "inside_workspace": True}],
        "actor": {"user_id": "alice", "agent_id": "bench", "roles": ["agent"]},
        "workspace": {"id": "demo", "root": "/tmp/demo"},
        "request": {
            "run_id": "r",
            "turn_id": "t",
            "call_id": "c",
            "deadline_ms_left": None,
            "idempotency_key_present": False,
        },
        "approval": {"present": False, "approved_by": None},
        "usage": {},
    }
    for _ in range(200):
        policy.decide_sync(doc)
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        decision = policy.decide_sync(doc)
        samples.append(time.perf_counter() - start)
    assert decision.result.value == "allow", decision
    out = summary(samples)
    out["median_us"] = round(statistics.median(samples) * 1e6, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    results: dict[str, object] = {"date": dt.datetime.now(dt.UTC).isoformat(), "calls": args.calls}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        url_db = args.database_url or f"sqlite:///{root / 'var' / 'toolgate.db'}"
        config = make_project(root, url_db)
        ws = root / "var" / "workspaces" / "demo"
        ws.mkdir(parents=True, exist_ok=True)
        (ws / "one-kib.txt").write_text("x" * 1024)
        with gateway(config) as base, httpx.Client(headers=HEADERS, timeout=30) as client:
            url = base + "/v1/executions"
            for i in range(20):  # warm up
                timed(client, url, body("fs.read_file", {"path": "one-kib.txt"}, f"w{i}"))
            reads = [
                timed(client, url, body("fs.read_file", {"path": "one-kib.txt"}, f"r{i}"))
                for i in range(args.calls)
            ]
            timed(
                client,
                url,
                body(
                    "fs.write_file",
                    {"path": "w.txt", "content": "x" * 1024},
                    "seed",
                    idempotency_key="replayed",
                ),
            )
            first, replay = [], []
            for i in range(args.calls):
                first.append(
                    timed(
                        client,
                        url,
                        body(
                            "fs.write_file",
                            {"path": f"w/{i}.txt", "content": "x" * 1024},
                            f"f{i}",
                            idempotency_key=f"key-{i}",
                        ),
                    )
                )
                replay.append(
                    timed(
                        client,
                        url,
                        body(
                            "fs.write_file",
                            {"path": "w.txt", "content": "x" * 1024},
                            f"p{i}",
                            idempotency_key="replayed",
                        ),
                    )
                )
    results["fs.read_file"] = summary(reads)
    results["fs.write_file first execution"] = summary(first)
    results["fs.write_file idempotent replay"] = summary(replay)
    results["replay/first median ratio"] = round(
        statistics.median(replay) / statistics.median(first), 3
    )
    results["policy decision (in-process)"] = policy_decisions()
    out_dir = Path(__file__).resolve().parent / "results"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / f"api_latency-{dt.date.today().isoformat()}.json"
    out.write_text(json.dumps(results, indent=2))
    for key, value in results.items():
        print(f"{key:36} {value}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
