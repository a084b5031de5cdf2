"""The CPU cost of the gateway's telemetry on S1, in-process: ``run_call`` of fs.read_file
(1 KiB, allowed) sequentially with each part on vs off, alternated, on one runtime.

    PYTHONPATH=$PWD .venv/bin/python bench/telemetry_cost.py [--calls 2000] [--rounds 3]

Prints CPU µs per call (``time.process_time``: every thread of the process) for each round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import body, make_project, request_for, seed_workspace, sqlite_url

from gateway.observability.telemetry import OFF
from gateway.pipeline.runner import run_call
from gateway.runtime.bootstrap import close_runtime, make_telemetry, open_runtime
from gateway.runtime.container import Runtime
from gateway.settings import load_settings
from gateway.types import CachingPolicy


def unhooked(runtime: Runtime) -> Runtime:
    runtime.store.observe(None)
    runtime.store.observe_batches(None)
    if isinstance(runtime.policy, CachingPolicy):
        runtime.policy.observe_cache(None)
    return replace(runtime, telemetry=OFF)


def hooked(runtime: Runtime) -> Runtime:
    made = make_telemetry(runtime.settings, runtime.store, runtime.policy)
    return replace(runtime, telemetry=made)


async def cpu_us_per_call(runtime: Runtime, calls: int) -> float:
    nonce = uuid.uuid4().hex[:8]
    requests = [
        request_for(body("fs.read_file", {"path": "one-kib.txt"}, f"tc-{nonce}-{i}"))
        for i in range(calls)
    ]
    for request in requests[:50]:  # warm-up
        await run_call(runtime, request)
    start = time.process_time()
    for request in requests[50:]:
        await run_call(runtime, request)
    return (time.process_time() - start) / (calls - 50) * 1e6


async def main(calls: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        config = make_project(root, sqlite_url(root))
        seed_workspace(config)
        base = await open_runtime(load_settings(config, env={}))
        try:
            figures: dict[str, list[float]] = {"off": [], "metrics": []}
            for i in range(rounds):  # ABBA: neither always runs on the larger database
                order = ("off", "metrics") if i % 2 == 0 else ("metrics", "off")
                for which in order:
                    runtime = unhooked(base) if which == "off" else hooked(base)
                    figures[which].append(await cpu_us_per_call(runtime, calls))
            unhooked(base)
        finally:
            await close_runtime(base)
    out = {k: [round(v, 1) for v in vs] for k, vs in figures.items()}
    off, on = statistics.median(figures["off"]), statistics.median(figures["metrics"])
    out["median_off_us"], out["median_metrics_us"] = round(off, 1), round(on, 1)
    out["metrics_cost_us"] = round(on - off, 1)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(asyncio.run(main(args.calls, args.rounds)))
