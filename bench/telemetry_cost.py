"""The CPU cost of the gateway's telemetry on S1, in-process: ``run_call`` of fs.read_file
(1 KiB, allowed) sequentially with each part on vs off, alternated, on one runtime.

    PYTHONPATH=$PWD .venv/bin/python bench/telemetry_cost.py [--calls 2000] [--rounds 3]

Modes: ``off``; ``metrics``; ``tracing`` (spans made, and exported to an exporter that drops
them); ``both`` (metrics, and spans with no exporter). Prints CPU µs per call
(``time.process_time``: every thread of the process) for each round, and the medians.
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

from gateway.observability.telemetry import OFF, Telemetry
from gateway.pipeline.runner import run_call
from gateway.runtime.bootstrap import close_runtime, make_telemetry, observed, open_runtime
from gateway.runtime.container import Runtime
from gateway.settings import load_settings
from gateway.types import CachingPolicy


def unhooked(runtime: Runtime) -> Runtime:
    runtime.store.observe(None)
    runtime.store.observe_batches(None)
    if isinstance(runtime.policy, CachingPolicy):
        runtime.policy.observe_cache(None)
    return replace(runtime, telemetry=OFF)


def hooked(runtime: Runtime, which: str) -> Runtime:
    made = make_telemetry(runtime.settings, runtime.store, env={})
    observed(runtime.policy, made.metrics)
    if which == "tracing":  # spans made and handed to an exporter that drops them
        from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

        from gateway.observability.tracing import Tracing

        class Dropped(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        unhooked(runtime)
        made = Telemetry(tracing=Tracing(exporter=Dropped()))
    elif which == "both":
        from gateway.observability.tracing import Tracing

        made = replace(made, tracing=Tracing(env={"OTEL_TRACES_EXPORTER": "none"}))
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
            modes = ("off", "metrics", "tracing", "both")
            figures: dict[str, list[float]] = {mode: [] for mode in modes}
            for i in range(rounds):  # forth and back: none always runs on the larger database
                for which in modes if i % 2 == 0 else modes[::-1]:
                    runtime = unhooked(base) if which == "off" else hooked(base, which)
                    figures[which].append(await cpu_us_per_call(runtime, calls))
            unhooked(base)
        finally:
            await close_runtime(base)
    out: dict[str, Any] = {k: [round(v, 1) for v in vs] for k, vs in figures.items()}
    off = statistics.median(figures["off"])
    for mode in modes:
        out[f"median_{mode}_us"] = round(statistics.median(figures[mode]), 1)
        if mode != "off":
            out[f"{mode}_cost_us"] = round(statistics.median(figures[mode]) - off, 1)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(asyncio.run(main(args.calls, args.rounds)))
