"""The profiles: py-spy on the gateway under scenario 1 (every running thread, and the GIL
holder) with the analysis of its collapsed stacks, and cProfile of the in-process pipeline."""

from __future__ import annotations

import cProfile
import gzip
import pstats
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.pipeline.runner import run_call

from .plan import ROOT, Scenario, log
from .servers import Server
from .wrk import Wrk


def _frame_name(frame: str) -> str:
    """'fn (path/to/file.py:12)' → 'file.py:fn' with the path shortened to the package."""
    m = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not m:
        return frame
    fn, path = m.groups()
    path = re.sub(r"^.*/site-packages/", "", path)
    path = path.replace(f"{ROOT}/", "")
    path = re.sub(r"^.*/lib/python3\.\d+/", "", path)
    return f"{path}:{fn}"


IDLE_LEAVES = frozenset(
    {
        "threading.py:Condition.wait",
        "threading.py:Event.wait",
        "threading.py:Thread.join",
        "selectors.py:EpollSelector.select",
        "queue.py:Queue.get",
    }
)
"""Leaf frames of a thread that waits (py-spy's idle detection misses some)."""


def analyse_collapsed(text: str, top: int = 15) -> dict[str, Any]:
    """Self and inclusive shares of each function in py-spy's raw (collapsed) output, over
    the samples of threads that were running (waiting leaves are counted apart)."""
    selfc: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = idle = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if not frames:
            continue
        if frames[-1] in IDLE_LEAVES:
            idle += c
            continue
        total += c
        selfc[frames[-1]] += c
        for name in set(frames):
            incl[name] += c

    def table(counter: Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": k, "pct": round(v * 100 / total, 1)} for k, v in counter.most_common(top)
        ]

    gateway_incl = Counter({k: v for k, v in incl.items() if k.startswith("gateway/")})
    return {
        "samples": total,
        "idle_samples": idle,
        "self": table(selfc),
        "inclusive": table(incl),
        "inclusive_gateway": table(gateway_incl),
    }


BUCKETS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # (name, the stack contains one of these, and none of these) on "file.py:function" names
    (
        "HTTP and ASGI around the route (uvicorn, httptools or h11, starlette)",
        ("uvicorn/", "h11/", "httptools/", "gateway/http/server.py", "starlette/"),
        ("routes.py:create_execution", "Pool._in_transaction", "SqliteTransactor._run_batch"),
    ),
    ("route create_execution (main thread)", ("routes.py:create_execution",), ()),
    ("  request parsing (pydantic): parse_request", ("request.py:parse_request",), ()),
    ("  pipeline: run_call", ("runner.py:run_call",), ()),
    ("    policy: EmbeddedPolicy.decide_sync", ("embedded.py:EmbeddedPolicy.decide_sync",), ()),
    ("    validate + normalise: normalise._normalise", ("normalise.py:_normalise",), ()),
    ("    path confinement: workspace.confine", ("workspace.py:confine",), ()),
    ("    creating frozen records: dataclasses.replace", ("dataclasses.py:replace",), ()),
    ("  response: _execution_response (render, JSON)", ("routes.py:_execution_response",), ()),
    (
        "store transactions: Pool._in_transaction, SqliteTransactor._run_batch",
        ("transactor.py:Pool._in_transaction", "sqlite.py:SqliteTransactor._run_batch"),
        (),
    ),
    ("  event inserts: events.insert", ("store/events.py:insert",), ()),
    (
        "thread hop: to_thread.run_sync + call_soon_threadsafe",
        ("to_thread.py:run_sync", "BaseEventLoop.call_soon_threadsafe"),
        (),
    ),
    ("JSON encoding (json.dumps anywhere)", ("encoder.py:JSONEncoder.encode",), ()),
)
"""Named shares of a profile: the samples whose stack matches."""


def buckets(text: str) -> list[dict[str, Any]]:
    counts = dict.fromkeys((name for name, _, _ in BUCKETS), 0)
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if not frames or frames[-1] in IDLE_LEAVES:
            continue
        total += int(count)
        joined = ";".join(frames)
        for name, anyof, noneof in BUCKETS:
            if any(m in joined for m in anyof) and not any(m in joined for m in noneof):
                counts[name] += int(count)
    return [{"bucket": k, "pct": round(v * 100 / max(total, 1), 1)} for k, v in counts.items()]


def profile_gateway(
    wrk: Wrk, gw: Server, s1: Scenario, seconds: int, out: Path
) -> dict[str, Any] | None:
    """py-spy on the gateway process while wrk drives scenario 1: once sampling every running
    thread (where the time goes, waits in C included), once only the thread holding the GIL
    (what uses the one Python CPU this process has)."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    pid, base = gw.pid, gw.url
    if not Path(pyspy).exists() or pid is None:
        log("profile: py-spy is not installed (pip install py-spy); only the cProfile one")
        return None
    found: dict[str, Any] = {}
    for mode, extra in (("threads", []), ("gil", ["--gil"])):
        raw = out.with_name(f"{out.name}-{mode}.txt")
        cmd = [
            pyspy,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(seconds),
            "--rate",
            "200",
            "--nonblocking",  # sample without pausing the gateway (it slows it down a lot)
            "--format",
            "raw",
            "--output",
            str(raw),
            *extra,
        ]
        log(f"profile: {' '.join(cmd[1:])} under scenario 1")
        spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)
        under = wrk.run(base + "/v1/executions", s1.template, s1.marker, duration=seconds)
        _, err = spy.communicate(timeout=seconds + 60)
        if spy.returncode != 0 or not raw.exists():
            log(f"profile: py-spy failed: {err.decode()[-500:]}")
            return None
        text = raw.read_text()
        analysis = analyse_collapsed(text)
        analysis["buckets"] = buckets(text)
        packed = raw.with_name(raw.name + ".gz")  # collapsed stacks compress about 20 times
        packed.write_bytes(gzip.compress(text.encode()))
        raw.unlink()
        raw = packed
        analysis["tool"] = (
            f"py-spy record --pid <gateway> --rate 200 --nonblocking {' '.join(extra)}".rstrip()
            + f" for {seconds}s while wrk drives scenario 1"
        )
        analysis["file"] = str(raw.relative_to(ROOT) if raw.is_relative_to(ROOT) else raw)
        analysis["rps_while_profiled"] = under["rps"]
        found[mode] = analysis
    return found


async def cprofile_pipeline(
    services: Any, make_request: Callable[[], Any], n: int, out: Path
) -> dict[str, Any]:
    """cProfile over ``n`` sequential run_call(fs.read_file): a second view of the costs, with
    the HTTP layer excluded (deterministic profiling inflates small calls)."""
    requests = [make_request() for _ in range(n)]
    prof = cProfile.Profile()
    prof.enable()
    for req in requests:
        await run_call(services, req)
    prof.disable()
    path = out.with_name(out.stem + "-inprocess.pstats")
    prof.dump_stats(str(path))
    stats = pstats.Stats(prof)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (file, _line, fn), (_cc, _nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tt, ct, _frame_name(f"{fn} ({file})")))
    by_self = sorted(rows, reverse=True)[:15]
    by_cum = sorted(((ct, tt, name) for tt, ct, name in rows if "gateway/" in name), reverse=True)[
        :15
    ]
    return {
        "tool": f"cProfile over {n} sequential run_call(fs.read_file) in-process "
        "(main thread only: store work on worker threads is not seen)",
        "total_s": round(total, 3),
        "self": [{"function": name, "pct": round(tt * 100 / total, 1)} for tt, _, name in by_self],
        "inclusive_gateway": [
            {"function": name, "pct": round(ct * 100 / total, 1)} for ct, _, name in by_cum
        ],
    }
