"""Toolgate against a peer gateway, side by side, in front of the same upstream HTTP tool.

    .venv/bin/python bench/peers/run.py [--rounds 3] [--quick] [--peers contextforge,...|none]

Starts a JSON echo on 127.0.0.1 (``bench/peers/echo.py``, a process of its own), Toolgate on
a temporary project with an HTTP tool declared to it (``bench.echo``), and each peer with the
same echo registered (IBM ContextForge: ``bench/peers/contextforge.py``; openapi-mcp-gateway:
``bench/peers/openapi_gateway.py``; each installed on first use into a venv of its own under
``.cache/peers/``). Then, alternated over the rounds (the order of the
gateways flips each round, so that machine noise hits both alike), for each way of calling
each gateway (Toolgate: REST and MCP; ContextForge: ``/rpc`` and ``/mcp``; openapi-mcp-gateway:
its MCP, a session per client):

- p50 and p99 of one call at a time (concurrency 1);
- throughput: a closed loop of concurrent clients, bounded in calls and in seconds;
- gateway CPU per call over that loop: utime+stime deltas from ``/proc/<pid>/stat`` of the
  gateway process and its children, divided by the calls answered;
- RSS of the gateway after start and after the warm-up.

Every answer is checked (status 200, the echo of that call's unique message, no error), and a
run with failed calls says so. Prints a table, what each gateway does per call, and writes
``bench/results/peers-<date>.json``. The figures mean something only on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.peers import contextforge, openapi_gateway, toolgate_side  # noqa: E402
from bench.peers.venvs import PeerUnavailable  # noqa: E402
from gateway.testing import free_port, stop  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
PEERS = ("contextforge", "openapi-mcp-gateway")


@dataclass(frozen=True)
class Plan:
    rounds: int
    warmup: int
    """Calls per way of calling before the first round."""
    latency_calls: int
    """One at a time, per way and round."""
    concurrency: int
    loop_calls: int
    """The closed loop stops after this many calls ..."""
    loop_seconds: float
    """... or this many seconds, whichever comes first."""


FULL = Plan(
    rounds=3, warmup=50, latency_calls=200, concurrency=8, loop_calls=2000, loop_seconds=10.0
)
QUICK = Plan(rounds=1, warmup=5, latency_calls=10, concurrency=2, loop_calls=40, loop_seconds=3.0)


@dataclass(frozen=True)
class Way:
    """One way of calling one gateway: ``body(call_id, message)`` to ``url``."""

    label: str
    url: str
    headers: dict[str, str]
    body: Callable[[str, str], dict[str, Any]]
    session: Callable[[], dict[str, str]] | None = None
    """For a gateway whose MCP needs a session: the headers of a new one, one per client."""


@dataclass
class Side:
    key: str
    name: str
    pid: int
    per_call: str
    ways: list[Way]
    rss_mb: dict[str, float] = field(default_factory=dict)


# --- measuring --------------------------------------------------------------------------------


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pid: int) -> float:
    """utime+stime of ``pid`` and its descendants (fields 14 and 15 of /proc/<pid>/stat)."""
    total = 0
    for p in tree_pids(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / TICKS


def rss_mb(pid: int) -> float:
    total = 0
    for p in tree_pids(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return round(total / 1024, 1)


def answered(response: httpx.Response, message: str) -> bool:
    """A 200 whose body carries this call's echo and no error."""
    if response.status_code != 200 or message not in response.text:
        return False
    text = response.text.replace(" ", "")
    return '"isError":true' not in text and '"error":{' not in text


def call(
    client: httpx.Client, way: Way, headers: dict[str, str] | None = None
) -> tuple[bool, float]:
    tag = uuid.uuid4().hex
    message = f"echo-{tag}"
    start = time.perf_counter()
    response = client.post(
        way.url, json=way.body(f"c-{tag}", message), headers=headers or way.headers
    )
    return answered(response, message), time.perf_counter() - start


def latency(way: Way, n: int) -> dict[str, Any]:
    samples, bad = [], 0
    with httpx.Client(timeout=60) as client:
        for _ in range(n):
            ok, seconds = call(client, way)
            bad += not ok
            samples.append(seconds * 1000)
    ordered = sorted(samples)
    return {
        "n": n,
        "bad": bad,
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
    }


def closed_loop(way: Way, pid: int, plan: Plan) -> dict[str, Any]:
    """``plan.concurrency`` clients, each sending its next call when the last is answered,
    until ``plan.loop_calls`` calls are sent or ``plan.loop_seconds`` pass."""
    lock = threading.Lock()
    sent = {"n": 0, "ok": 0, "bad": 0}
    deadline = time.monotonic() + plan.loop_seconds

    def client_loop() -> None:
        headers = way.session() if way.session else way.headers
        with httpx.Client(timeout=60) as client:
            while time.monotonic() < deadline:
                with lock:
                    if sent["n"] >= plan.loop_calls:
                        return
                    sent["n"] += 1
                try:
                    ok, _ = call(client, way, headers)
                except httpx.HTTPError:
                    ok = False
                with lock:
                    sent["ok" if ok else "bad"] += 1

    threads = [threading.Thread(target=client_loop) for _ in range(plan.concurrency)]
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    calls = sent["ok"] + sent["bad"]
    return {
        "calls": calls,
        "bad": sent["bad"],
        "seconds": round(elapsed, 3),
        "rps": round(calls / elapsed, 1),
        "cpu_ms_per_call": round(cpu * 1000 / calls, 3) if calls else None,
    }


def warm_up(side: Side, plan: Plan) -> None:
    with httpx.Client(timeout=60) as client:
        for way in side.ways:
            for _ in range(plan.warmup):
                ok, _ = call(client, way)
                if not ok:
                    response = client.post(
                        way.url, json=way.body("check", "check"), headers=way.headers
                    )
                    raise RuntimeError(
                        f"{side.name} {way.label} does not echo: "
                        f"{response.status_code} {response.text[:500]}"
                    )


# --- the gateways -----------------------------------------------------------------------------


@contextlib.contextmanager
def echo_server(scratch: Path) -> Iterator[str]:
    port = free_port()
    with (scratch / "echo.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "peers" / "echo.py"), "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the echo exited: {(scratch / 'echo.log').read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the echo did not start")
            time.sleep(0.05)
        yield base
    finally:
        stop(proc)


@contextlib.contextmanager
def toolgate(scratch: Path, echo_base: str) -> Iterator[Side]:
    root = scratch / "toolgate"
    root.mkdir()
    with toolgate_side.started(root, echo_base) as (url, pid):
        headers = {**toolgate_side.AUTH, "Content-Type": "application/json"}
        yield Side(
            "toolgate",
            toolgate_side.NAME,
            pid,
            toolgate_side.PER_CALL,
            [
                Way("REST", url + "/v1/executions", headers, toolgate_side.rest_body),
                Way(
                    "MCP",
                    url + "/mcp",
                    {**headers, **toolgate_side.MCP_HEADERS},
                    toolgate_side.mcp_body,
                ),
            ],
        )


@contextlib.contextmanager
def context_forge(scratch: Path, echo_base: str) -> Iterator[Side]:
    with contextforge.started(scratch / "contextforge", echo_base + "/echo") as (url, pid, auth):
        headers = {**auth, "Content-Type": "application/json"}

        def body(_call_id: str, message: str) -> dict[str, Any]:
            return contextforge.rpc_body(message)

        yield Side(
            "contextforge",
            contextforge.NAME,
            pid,
            contextforge.PER_CALL,
            [
                Way("/rpc", url + "/rpc", headers, body),
                Way("/mcp", url + "/mcp", {**headers, **contextforge.MCP_HEADERS}, body),
            ],
        )


@contextlib.contextmanager
def openapi_mcp_gateway(scratch: Path, echo_base: str) -> Iterator[Side]:
    with openapi_gateway.started(scratch / "openapi-mcp-gateway", echo_base) as (url, pid, hdr):
        yield Side(
            "openapi-mcp-gateway",
            openapi_gateway.NAME,
            pid,
            openapi_gateway.PER_CALL,
            [
                Way(
                    "/api/mcp",
                    url,
                    hdr,
                    openapi_gateway.call_body,
                    lambda: openapi_gateway.session(url),
                )
            ],
        )


# --- the run ----------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(plan: Plan, peers: list[str], scratch: Path) -> dict[str, Any]:
    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "plan": plan.__dict__,
        "loadavg": list(os.getloadavg()),
        "cpus": os.cpu_count(),
        "gateways": {},
    }
    with contextlib.ExitStack() as stack:
        echo = stack.enter_context(echo_server(scratch))
        sides = [stack.enter_context(toolgate(scratch, echo))]
        if "contextforge" in peers:
            log(f"installing {contextforge.PACKAGE}=={contextforge.VERSION} (first use only)")
            contextforge.install()
            log("starting ContextForge")
            sides.append(stack.enter_context(context_forge(scratch, echo)))
        if "openapi-mcp-gateway" in peers:
            log(f"installing {openapi_gateway.PACKAGE}=={openapi_gateway.VERSION} (first use only)")
            openapi_gateway.install()
            log("starting openapi-mcp-gateway")
            sides.append(stack.enter_context(openapi_mcp_gateway(scratch, echo)))
        for side in sides:
            side.rss_mb["after_start"] = rss_mb(side.pid)
            warm_up(side, plan)
            side.rss_mb["after_warmup"] = rss_mb(side.pid)
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {
            side.key: {way.label: [] for way in side.ways} for side in sides
        }
        for r in range(plan.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            for side in order:
                for way in side.ways:
                    one = {"latency": latency(way, plan.latency_calls)}
                    one["loop"] = closed_loop(way, side.pid, plan)
                    runs[side.key][way.label].append(one)
                    log(
                        f"round {r + 1}: {side.name} {way.label}: "
                        f"{one['loop']['rps']} calls/s, "
                        f"{one['loop']['cpu_ms_per_call']} ms CPU/call, "
                        f"p50 {one['latency']['p50_ms']} ms"
                    )
        for side in sides:
            results["gateways"][side.key] = {
                "name": side.name,
                "per_call": side.per_call,
                "rss_mb": side.rss_mb,
                "ways": {label: summarise(rs) for label, rs in runs[side.key].items()},
            }
    results["loadavg_after"] = list(os.getloadavg())
    return results


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    def med(part: str, key: str) -> float:
        return round(statistics.median(r[part][key] for r in rounds), 3)

    return {
        "rps": med("loop", "rps"),
        "cpu_ms_per_call": med("loop", "cpu_ms_per_call"),
        "p50_ms": med("latency", "p50_ms"),
        "p99_ms": med("latency", "p99_ms"),
        "bad": sum(r["loop"]["bad"] + r["latency"]["bad"] for r in rounds),
        "rounds": rounds,
    }


def table(results: dict[str, Any]) -> str:
    rows = [("gateway", "way", "calls/s", "CPU ms/call", "p50 ms", "p99 ms", "RSS MiB start/warm")]
    for g in results["gateways"].values():
        rss = f"{g['rss_mb']['after_start']}/{g['rss_mb']['after_warmup']}"
        for label, w in g["ways"].items():
            rows.append(
                (
                    g["name"],
                    label,
                    f"{w['rps']}",
                    f"{w['cpu_ms_per_call']}",
                    f"{w['p50_ms']}",
                    f"{w['p99_ms']}",
                    rss,
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for key, ratio in results.get("ratios", {}).items():
        lines.append(f"{key}: {ratio}")
    lines.append("")
    lines.append("What each gateway does per call:")
    for g in results["gateways"].values():
        lines.append(f"- {g['name']}: {g['per_call']}")
    if any(w["bad"] for g in results["gateways"].values() for w in g["ways"].values()):
        lines.append("FAILED CALLS: see the 'bad' counts in the results file")
    return "\n".join(lines)


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """Each peer's CPU per call over Toolgate's (the cheaper of REST and MCP against the
    cheaper of the peer's ways), the figure issue 33's goal is set on."""
    gateways = results["gateways"]
    mine = min(w["cpu_ms_per_call"] for w in gateways["toolgate"]["ways"].values())
    out = {}
    for key, g in gateways.items():
        if key != "toolgate":
            theirs = min(w["cpu_ms_per_call"] for w in g["ways"].values())
            out[f"{g['name']} CPU per call / Toolgate's"] = round(theirs / mine, 2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny run: checks the harness")
    parser.add_argument("--rounds", type=int, help="alternated rounds (default 3; quick 1)")
    parser.add_argument(
        "--peers",
        default="contextforge,openapi-mcp-gateway",
        help="comma-separated peers to measure beside Toolgate, or 'none' (default: all)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan = Plan(**{**plan.__dict__, "rounds": args.rounds})
    peers = [] if args.peers == "none" else [p for p in args.peers.split(",") if p]
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        parser.error(f"unknown peer {unknown[0]!r}; known: {', '.join(PEERS)} or none")
    with tempfile.TemporaryDirectory(prefix="toolgate-peers-") as tmp:
        try:
            results = run(plan, peers, Path(tmp))
        except PeerUnavailable as exc:
            print(f"bench-peers: the peer is unavailable: {exc}", file=sys.stderr)
            return 2
    results["ratios"] = ratios(results)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"peers-{dt.date.today().isoformat()}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    print(f"written to {out}")
    bad = any(w["bad"] for g in results["gateways"].values() for w in g["ways"].values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
