"""Where one call's time goes in-process: each pipeline stage and each store transaction."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from gateway.pipeline.runner import STAGES, Stage, run_call


async def stage_breakdown(
    services: Any, make_request: Callable[[int], Any], n: int
) -> dict[str, Any]:
    """Where the time of one call goes: mean wall µs per pipeline stage, and per kind of store
    transaction (its body on the worker thread, with that thread's CPU time), over ``n``
    sequential run_calls. Timing wrappers add a little to each figure."""
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}

    def timed_stage(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        async def run(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return await fn(*args)
            finally:
                wall.setdefault(name, []).append(time.perf_counter() - start)

        return run

    stages = tuple(Stage(s.name, s.takes, timed_stage(s.name, s.run)) for s in STAGES)

    def timed_tx(name: str, wall_s: float, thread_cpu_s: float | None) -> None:
        # SQLite's group commit: one transaction for the writes of a loop turn (sequential
        # calls give batches of one), named after its first write.
        wall.setdefault("store tx " + name, []).append(wall_s)
        cpu.setdefault("store tx " + name, []).append(thread_cpu_s or 0.0)

    requests = [make_request(i) for i in range(n)]
    services.store.observe(timed_tx, thread_cpu=True)
    try:
        start, process_cpu = time.perf_counter(), time.process_time()
        for req in requests:
            await run_call(services, req, stages)
        total = time.perf_counter() - start
        total_cpu = time.process_time() - process_cpu
    finally:
        services.store.observe(None)
    out: dict[str, Any] = {
        "n": n,
        "call_wall_us": round(total * 1e6 / n, 1),
        "call_cpu_us": round(total_cpu * 1e6 / n, 1),
        "parts": {},
    }
    for name, values in wall.items():
        part = {
            "per_call": round(len(values) / n, 2),
            "mean_wall_us": round(statistics.fmean(values) * 1e6, 1),
        }
        if name in cpu:
            part["mean_thread_cpu_us"] = round(statistics.fmean(cpu[name]) * 1e6, 1)
        out["parts"][name] = part
    return out
