"""Latency of ``http.get_json`` through the gateway API against calling the service directly.

    .venv/bin/python bench/http_adapter.py [--calls 200]

Starts the example orders service (``python -m examples.orders_service``) and a gateway
(``toolgate serve``, a throw-away copy of the shipped configuration on SQLite whose service
``orders`` points at that port), both real processes on 127.0.0.1. Then, interleaved so that
machine noise hits both alike, over one keep-alive connection each:

- "api": ``POST /v1/executions`` of ``http.get_json {"path": "/items/1"}`` (the whole
  pipeline: resolve, validate, policy, reservation, the adapter's request, events, commit);
- "direct": ``GET /items/1`` on the service with httpx.

and, in this process, the adapter alone (``HttpAdapter.execute``: templates, egress check,
the request, the outcome) against ``httpx.AsyncClient`` GETs, interleaved likewise.

Prints the median and p90 of each in milliseconds, the ratio of the medians and the added
milliseconds, and writes them to ``bench/results/http_adapter-<date>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.adapters.http.adapter import HttpAdapter  # noqa: E402
from gateway.adapters.http.options import HttpConfig  # noqa: E402
from gateway.testing import (  # noqa: E402
    adapter_call,
    free_port,
    gateway,
    load_catalogue,
    make_project,
)

HEADERS = {"Authorization": "Bearer tg_dev_alice"}


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p90_ms": round(ordered[int(len(ordered) * 0.9)] * 1000, 3),
    }


def start_service(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "examples.orders_service", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.terminate()
    raise RuntimeError("the example orders service did not start")


def point_at(config: Path, service_url: str) -> None:
    data = yaml.safe_load(config.read_text())
    data["adapters"]["http"]["services"]["orders"]["base_url"] = service_url
    config.write_text(yaml.safe_dump(data))


def api_call(client: httpx.Client, url: str, i: int) -> float:
    payload = {
        "run_id": "bench-http",
        "call_id": f"c{i}",
        "tool": {"name": "http.get_json"},
        "arguments": {"path": "/items/1"},
        "actor": {"user_id": "alice", "agent_id": "bench"},
        "workspace": {"id": "demo"},
    }
    start = time.perf_counter()
    response = client.post(url, json=payload)
    elapsed = time.perf_counter() - start
    result = response.json()["result"]
    assert result["outcome"] == "succeeded", result
    assert result["data"]["body"]["id"] == 1, result
    return elapsed


def direct_call(client: httpx.Client, url: str) -> float:
    start = time.perf_counter()
    response = client.get(url)
    elapsed = time.perf_counter() - start
    assert response.status_code == 200 and response.json()["id"] == 1
    return elapsed


async def adapter_alone(service_url: str, calls: int) -> tuple[list[float], list[float]]:
    """(adapter.execute, AsyncClient.get) seconds per call, interleaved, after a warm-up."""
    tool = load_catalogue(ROOT / "tools.d").resolve("http.get_json")
    services = {"orders": {"base_url": service_url, "allow_networks": ["127.0.0.1/32"]}}
    adapter = HttpAdapter(HttpConfig.model_validate({"services": services}))
    through, straight = [], []
    async with httpx.AsyncClient() as client:
        for i in range(calls + 20):
            start = time.perf_counter()
            out = await adapter.execute(adapter_call(tool, {"path": "/items/1"}))
            middle = time.perf_counter()
            response = await client.get(f"{service_url}/items/1")
            end = time.perf_counter()
            assert out.data["body"]["id"] == 1 and response.status_code == 200
            if i >= 20:
                through.append(middle - start)
                straight.append(end - middle)
    await adapter.aclose()
    return through, straight


def measure(calls: int) -> dict[str, object]:
    port = free_port()
    service = start_service(port)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            config = make_project(root, f"sqlite:///{root / 'var' / 'toolgate.db'}")
            point_at(config, f"http://127.0.0.1:{port}")
            with (
                gateway(config) as base,
                httpx.Client(headers=HEADERS, timeout=30) as api,
                httpx.Client(timeout=30) as direct,
            ):
                api_url, item_url = f"{base}/v1/executions", f"http://127.0.0.1:{port}/items/1"
                for i in range(20):  # warm up: pools, caches, the first client of the adapter
                    api_call(api, api_url, -1 - i)
                    direct_call(direct, item_url)
                through, straight = [], []
                for i in range(calls):
                    through.append(api_call(api, api_url, i))
                    straight.append(direct_call(direct, item_url))
        adapter, async_direct = asyncio.run(adapter_alone(f"http://127.0.0.1:{port}", calls))
    finally:
        service.terminate()
        service.wait(timeout=10)
    api_median, direct_median = statistics.median(through), statistics.median(straight)
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(),
        "calls": calls,
        "api (http.get_json through POST /v1/executions)": summary(through),
        "direct (httpx GET /items/1)": summary(straight),
        "median ratio api/direct": round(api_median / direct_median, 2),
        "added by the gateway, median ms": round((api_median - direct_median) * 1000, 3),
        "adapter alone (HttpAdapter.execute, in-process)": summary(adapter),
        "direct (httpx.AsyncClient GET, in-process)": summary(async_direct),
        "median ratio adapter/direct": round(
            statistics.median(adapter) / statistics.median(async_direct), 2
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    results = measure(args.calls)
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / f"http_adapter-{dt.date.today().isoformat()}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    for key, value in results.items():
        print(f"{key:50} {value}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
