"""An open-loop (constant arrival rate) HTTP/1.1 load generator, for latency at a fixed rate.

wrk is closed-loop: a slow answer delays the next request, so its percentiles hide queueing
("coordinated omission"). wrk2 fixes that but is not packaged by Debian, so ``bench/run.py``
uses this instead: requests are *scheduled* at ``rate`` per second, evenly spaced, whatever
the server does; each is sent on an idle keep-alive connection (``warm_connections`` are
opened before the first is scheduled, as wrk2 opens its connections first; a new one is
opened when none is idle, up to ``max_connections``; beyond that it waits for one), and its
latency is measured from its scheduled time to the last byte of the answer. A request that
waits for a connection, or that the client itself sends late, therefore counts its wait.

Plain asyncio streams, no HTTP library, so the client costs little CPU at the rates used
(a few hundred requests a second).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class OpenLoopResult:
    rate: float
    duration_s: float
    sent: int = 0
    ok: int = 0
    bad: int = 0
    latencies_s: list[float] = field(default_factory=list)
    connections: int = 0
    max_send_lag_s: float = 0.0
    retried: int = 0
    problems: list[str] = field(default_factory=list)
    """The first few bad answers or errors, for diagnosis."""

    def summary(self) -> dict[str, float | int]:
        ordered = sorted(self.latencies_s)

        def pct(p: float) -> float:
            if not ordered:
                return 0.0
            return round(ordered[min(len(ordered) - 1, int(len(ordered) * p))] * 1000, 3)

        return {
            "target_rate": round(self.rate, 1),
            "achieved_rate": round(self.ok / self.duration_s, 1) if self.duration_s else 0.0,
            "sent": self.sent,
            "ok": self.ok,
            "bad": self.bad,
            "p50_ms": round(statistics.median(ordered) * 1000, 3) if ordered else 0.0,
            "p90_ms": pct(0.90),
            "p99_ms": pct(0.99),
            "max_ms": round(ordered[-1] * 1000, 3) if ordered else 0.0,
            "connections": self.connections,
            "max_send_lag_ms": round(self.max_send_lag_s * 1000, 3),
            "retried_on_new_connection": self.retried,
            "problems": self.problems[:5],
        }


class _Pool:
    def __init__(self, host: str, port: int, limit: int) -> None:
        self.host, self.port, self.limit = host, port, limit
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.opened = 0
        self.freed = asyncio.Condition()

    async def get(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while True:
            if self.idle:
                return self.idle.pop(0)  # oldest first: every connection stays in use
            if self.opened < self.limit:
                self.opened += 1
                try:
                    return await asyncio.open_connection(self.host, self.port)
                except OSError:
                    self.opened -= 1
                    raise
            async with self.freed:
                await self.freed.wait()

    async def put(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None) -> None:
        if conn is None:
            self.opened -= 1
        else:
            self.idle.append(conn)
        async with self.freed:
            self.freed.notify()

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()


async def _exchange(
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: bytes
) -> tuple[int, bytes]:
    reader, writer = conn
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return status, body


async def open_loop(
    url: str,
    body_for: Callable[[int], bytes],
    *,
    rate: float,
    duration_s: float,
    headers: dict[str, str] | None = None,
    marker: bytes = b"",
    max_connections: int = 256,
    warm_connections: int = 16,
) -> OpenLoopResult:
    """POST ``body_for(i)`` to ``url`` at ``rate`` requests/s for ``duration_s`` seconds."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = parts.path or "/"
    head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
    for name, value in (headers or {}).items():
        head += f"{name}: {value}\r\n"
    pool = _Pool(host, port, max_connections)
    # Connections opened before the schedule starts: a burst of slow answers should not also
    # cost the server a TCP handshake and a new protocol instance per extra connection.
    for conn in await asyncio.gather(*(pool.get() for _ in range(warm_connections))):
        await pool.put(conn)
    result = OpenLoopResult(rate=rate, duration_s=duration_s)
    total = max(int(rate * duration_s), 1)
    interval = 1.0 / rate
    tasks: list[asyncio.Task[None]] = []

    async def one(i: int, scheduled: float) -> None:
        body = body_for(i)
        request = (
            head + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        conn = await pool.get()
        try:
            status, answer = await _exchange(conn, request)
        except (OSError, asyncio.IncompleteReadError) as exc:
            # The server may close an idle keep-alive connection (uvicorn: after 5 s) just as
            # it is reused: send once more on a new connection, the wait still counted.
            conn[1].close()
            await pool.put(None)
            result.retried += 1
            conn = await pool.get()
            try:
                status, answer = await _exchange(conn, request)
            except (OSError, asyncio.IncompleteReadError, ValueError) as again:
                conn[1].close()
                await pool.put(None)
                result.bad += 1
                result.problems.append(f"{type(exc).__name__}, then {type(again).__name__}")
                return
        except ValueError as exc:
            conn[1].close()
            await pool.put(None)
            result.bad += 1
            result.problems.append(f"unparsable answer: {exc}")
            return
        done = time.perf_counter()
        await pool.put(conn)
        if status == 200 and (not marker or marker in answer):
            result.ok += 1
            result.latencies_s.append(done - scheduled)
        else:
            result.bad += 1
            result.problems.append(f"{status}: {answer[:300].decode(errors='replace')}")

    start = time.perf_counter() + 0.05
    for i in range(total):
        scheduled = start + i * interval
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            result.max_send_lag_s = max(result.max_send_lag_s, -delay)
        result.sent += 1
        tasks.append(asyncio.create_task(one(i, scheduled)))
    await asyncio.gather(*tasks)
    result.connections = pool.opened
    pool.close()
    return result


def run_open_loop(
    url: str,
    body_for: Callable[[int], bytes],
    *,
    rate: float,
    duration_s: float,
    headers: dict[str, str] | None = None,
    marker: bytes = b"",
    warm_connections: int = 16,
) -> OpenLoopResult:
    # The client's own pauses count as latency (a request sent late is late), so it must not
    # pause: a full garbage collection of the harness process (which has imported the gateway
    # and holds the results so far) took tens of milliseconds. Frozen objects are never
    # scanned; the collector is off for the run, its garbage collected after.
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        return asyncio.run(
            open_loop(
                url,
                body_for,
                rate=rate,
                duration_s=duration_s,
                headers=headers,
                marker=marker,
                warm_connections=warm_connections,
            )
        )
    finally:
        gc.enable()
        gc.unfreeze()
