"""Timed loops for the in-process micro-benchmarks, and their summary in µs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


class Samples(list[float]):
    """Wall-clock seconds per iteration, plus the process CPU seconds of the whole loop (all
    threads: the store's work runs on worker threads)."""

    cpu_s: float = 0.0


def stats_us(samples_s: list[float]) -> dict[str, float]:
    """Median, p99 and mean wall time in µs; with ``Samples``, also the mean process CPU time
    per iteration, which a busy machine inflates less than wall time (no run-queue waits)."""
    ordered = sorted(samples_s)
    n = len(ordered)
    out = {
        "n": n,
        "median_us": round(statistics.median(ordered) * 1e6, 1),
        "p99_us": round(ordered[min(n - 1, int(n * 0.99))] * 1e6, 1),
        "mean_us": round(statistics.fmean(ordered) * 1e6, 1),
    }
    if isinstance(samples_s, Samples):
        out["cpu_us_per_call"] = round(samples_s.cpu_s * 1e6 / n, 1)
    return out


def timed_loop(fn: Callable[[], Any], n: int, warmup: int = 50) -> Samples:
    for _ in range(warmup):
        fn()
    samples = Samples()
    clock = time.perf_counter
    cpu = time.process_time()
    for _ in range(n):
        start = clock()
        fn()
        samples.append(clock() - start)
    samples.cpu_s = time.process_time() - cpu
    return samples


async def timed_async(fn: Callable[[], Any], n: int, warmup: int = 20) -> Samples:
    for _ in range(warmup):
        await fn()
    samples = Samples()
    clock = time.perf_counter
    cpu = time.process_time()
    for _ in range(n):
        start = clock()
        await fn()
        samples.append(clock() - start)
    samples.cpu_s = time.process_time() - cpu
    return samples
