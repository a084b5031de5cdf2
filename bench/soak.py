"""The soak: one gateway under a mixed load for minutes, its memory and open files sampled.

    .venv/bin/python bench/soak.py [--minutes 10] [--workers 4] [--sample 10] [--no-docs]

Not part of ``make test`` (``tests/test_soak_smoke.py`` runs it for a few seconds to prove it
works). A real ``toolgate serve`` on SQLite and the shipped project answers ``--workers``
threads, each a closed loop over a fixed mix: reads (fs.read_file), writes with an
idempotency key (a new file each), replays of an earlier write (a new call id, the same key:
the first execution must come back and the file must not change), calls denied by policy,
and process calls that need an approval (proc.python appends one line to a file; bob
approves, the call resumes and completes). Every ``--sample`` seconds the gateway's RSS and
open file descriptors are recorded, with the workers held between two calls (no call in
flight).

It fails (exit 1) on any 5xx or transport error, on growth of RSS or open files beyond 10 %
over the first sample after the warm-up (a fifth of the run, at least one sample), or on a
lost or doubled side effect: every write that succeeded must be on disk with its content,
no file written twice, and the process tool's file must hold exactly one line per completed
call. Writes ``bench/results/soak-<date>.json`` and, unless ``--no-docs``, the soak section of
docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.plan import ROOT, body, log, seed_workspace, sqlite_url
from harness.servers import gateway_pid

from gateway.store.sqlite import CONNECTIONS_AT_MOST_IDLE
from gateway.testing import gateway, make_project

ALICE = {"Authorization": "Bearer tg_dev_alice"}
BOB = {"Authorization": "Bearer tg_dev_bob"}
MIX = (("read", 40), ("write", 20), ("replay", 15), ("deny", 15), ("process", 10))
"""Kind of call and its weight."""
SCRIPT = "import sys\nwith open('proc-lines.txt', 'a') as f:\n    f.write(sys.argv[1] + '\\n')\n"
GROWTH_LIMIT = 0.10
SECTION_START, SECTION_END = "<!-- soak: written by bench/soak.py -->", "<!-- /soak -->"


@dataclass
class Tally:
    """What the workers saw and did; one lock for all of it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    calls: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    written: dict[str, tuple[str, str]] = field(default_factory=dict)
    """idempotency key → (path, execution id) of a write that succeeded."""
    processed: set[str] = field(default_factory=set)
    """Tokens of the process calls that completed."""

    def fail(self, what: str) -> None:
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append(what)


def _check(tally: Tally, r: httpx.Response, what: str) -> bool:
    with tally.lock:
        tally.statuses[r.status_code] += 1
    if r.status_code >= 500:
        tally.fail(f"{what}: {r.status_code} {r.text[:200]}")
        return False
    return True


def _post(client: httpx.Client, base: str, payload: dict[str, Any]) -> httpx.Response:
    return client.post(base + "/v1/executions", json=payload, headers=ALICE)


def one_call(client: httpx.Client, base: str, kind: str, tally: Tally, rng: random.Random) -> None:
    call = uuid.uuid4().hex
    if kind == "read":
        r = _post(client, base, body("fs.read_file", {"path": "one-kib.txt"}, call))
        if _check(tally, r, kind) and r.json()["result"]["outcome"] != "succeeded":
            tally.fail(f"read: {r.text[:200]}")
    elif kind == "write" or (kind == "replay" and not tally.written):
        key = f"soak-{call}"
        path = f"soak/{key}.txt"
        payload = body("fs.write_file", {"path": path, "content": key}, call, idempotency_key=key)
        r = _post(client, base, payload)
        if _check(tally, r, "write"):
            if r.json()["result"]["outcome"] == "succeeded":
                with tally.lock:
                    tally.written[key] = (path, r.json()["id"])
            else:
                tally.fail(f"write: {r.text[:200]}")
    elif kind == "replay":
        with tally.lock:
            key = rng.choice(list(tally.written))
            path, first = tally.written[key]
        payload = body("fs.write_file", {"path": path, "content": key}, call, idempotency_key=key)
        r = _post(client, base, payload)
        if _check(tally, r, kind) and r.json()["id"] != first:
            tally.fail(f"replay of {key} answered {r.json()['id']}, not {first}")
    elif kind == "deny":
        r = _post(
            client, base, body("fs.write_file", {"path": ".git/config", "content": "x"}, call)
        )
        if _check(tally, r, kind) and (r.json()["result"]["error"] or {}).get("phase") != "policy":
            tally.fail(f"deny: {r.text[:200]}")
    elif kind == "process":
        token = f"t-{call}"
        r = _post(client, base, body("proc.python", {"script": "lines.py", "args": [token]}, call))
        if not _check(tally, r, kind):
            return
        parked = r.json()
        if r.status_code != 202 or not parked.get("approval"):
            tally.fail(f"process call not parked for approval: {r.text[:200]}")
            return
        decided = client.post(
            f"{base}/v1/approvals/{parked['approval']['id']}/approve",
            json={"comment": "soak"},
            headers=BOB,
        )
        if not _check(tally, decided, "approve"):
            return
        done = client.get(f"{base}/v1/executions/{parked['id']}?wait=30", headers=ALICE)
        if not _check(tally, done, "process wait"):
            return
        result = done.json().get("result") or {}
        if result.get("outcome") == "succeeded":
            with tally.lock:
                tally.processed.add(token)
        else:
            tally.fail(f"process call did not succeed: {done.text[:200]}")
    with tally.lock:
        tally.calls[kind] += 1


class Pause:
    """Lets the sampler hold every worker between two calls: open files are counted with no
    call in flight (a call in flight holds pipes and sockets for a moment)."""

    def __init__(self, workers: int) -> None:
        self.cond = threading.Condition()
        self.held = False
        self.idle = 0
        self.workers = workers

    def between_calls(self) -> None:
        with self.cond:
            if self.held:
                self.idle += 1
                self.cond.notify_all()
                self.cond.wait_for(lambda: not self.held)
                self.idle -= 1

    @contextlib.contextmanager
    def quiet(self) -> Any:
        with self.cond:
            self.held = True
            self.cond.wait_for(lambda: self.idle == self.workers, timeout=120)
        try:
            time.sleep(0.5)  # the gateway closes what the last calls opened
            yield
        finally:
            with self.cond:
                self.held = False
                self.cond.notify_all()


def worker(base: str, stop: threading.Event, pause: Pause, tally: Tally, seed: int) -> None:
    rng = random.Random(seed)
    kinds = [k for k, _ in MIX]
    weights = [w for _, w in MIX]
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            pause.between_calls()
            kind = rng.choices(kinds, weights)[0]
            try:
                one_call(client, base, kind, tally, rng)
            except httpx.HTTPError as exc:
                tally.fail(f"{kind}: {type(exc).__name__}: {exc}")


def sample(pid: int, database: Path) -> dict[str, float]:
    """RSS, the open files but the store's connections, and those connections (each holds the
    database file open): the pool opens connections as reads overlap, up to a bound, so their
    number after the warm-up depends on the load's timing, not on a leak."""
    proc = psutil.Process(pid)
    connections = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed while listed
            connections += Path(os.readlink(fd)) == database.resolve()
    return {
        "rss_mb": round(proc.memory_info().rss / 1e6, 1),
        "fds": proc.num_fds() - connections,
        "store_connections": connections,
    }


def side_effects(ws: Path, tally: Tally) -> list[str]:
    """Lost or doubled side effects: what the gateway said it did, against the disk."""
    faults = []
    for key, (path, _) in tally.written.items():
        target = ws / path
        if not target.is_file():
            faults.append(f"lost write: {path}")
        elif target.read_text() != key:
            faults.append(f"wrong content in {path}")
    on_disk = {p.name for p in (ws / "soak").glob("*.txt")} if (ws / "soak").is_dir() else set()
    extra = on_disk - {Path(p).name for p, _ in tally.written.values()}
    faults += [f"a file no succeeded write made: {name}" for name in sorted(extra)[:10]]
    lines_file = ws / "proc-lines.txt"
    lines = lines_file.read_text().split() if lines_file.exists() else []
    counts = Counter(lines)
    faults += [f"process side effect doubled: {t}" for t, n in counts.items() if n > 1][:10]
    faults += [f"process side effect lost: {t}" for t in sorted(tally.processed - set(counts))][:10]
    faults += [
        f"process side effect of no completed call: {t}" for t in set(counts) - tally.processed
    ][:10]
    return faults


def growth(samples: list[dict[str, float]], warm: int) -> dict[str, Any]:
    base = samples[warm]
    after = samples[warm:]
    out: dict[str, Any] = {"baseline": base}
    for key in ("rss_mb", "fds"):
        peak = max(s[key] for s in after)
        out[f"{key}_peak"] = peak
        out[f"{key}_growth"] = round(peak / base[key] - 1, 4) if base[key] else 0.0
    return out


def run(minutes: float, workers: int, every: float, scratch: Path) -> dict[str, Any]:
    root = scratch / "project"
    config = make_project(root, sqlite_url(root))
    database = root / "var" / "toolgate.db"
    ws = seed_workspace(config)
    (ws / "lines.py").write_text(SCRIPT)
    tally = Tally()
    samples: list[dict[str, float]] = []
    with gateway(config) as base:
        pid = gateway_pid(base)
        assert pid is not None, "the gateway's pid was not found"
        stop = threading.Event()
        pause = Pause(workers)
        threads = [
            threading.Thread(target=worker, args=(base, stop, pause, tally, i), daemon=True)
            for i in range(workers)
        ]
        started = time.monotonic()
        for t in threads:
            t.start()
        end = started + minutes * 60
        while True:
            now = time.monotonic()
            if now >= end:
                break
            time.sleep(min(every, end - now))
            with pause.quiet():
                s = {"t_s": round(time.monotonic() - started, 1), **sample(pid, database)}
            samples.append(s)
            with tally.lock:
                done = sum(tally.calls.values())
            log(f"soak {s['t_s']:.0f}s: {done} calls, RSS {s['rss_mb']} MB, {s['fds']} fds")
        stop.set()
        for t in threads:
            t.join(timeout=120)
        samples.append({"t_s": round(time.monotonic() - started, 1), **sample(pid, database)})
        elapsed = time.monotonic() - started
    warm = max(1, len(samples) // 5) if len(samples) > 2 else 0
    grown = growth(samples, warm)
    faults = side_effects(ws, tally)
    server_errors = sum(n for code, n in tally.statuses.items() if code >= 500)
    verdicts = {
        "no 5xx or transport error": server_errors == 0 and not tally.failures,
        "RSS growth <= 10 % after warm-up": grown["rss_mb_growth"] <= GROWTH_LIMIT,
        "open files growth <= 10 % after warm-up (the store's connections apart)": (
            grown["fds_growth"] <= GROWTH_LIMIT
        ),
        f"store connections <= {CONNECTIONS_AT_MOST_IDLE} (the pool's bound)": (
            max(s["store_connections"] for s in samples) <= CONNECTIONS_AT_MOST_IDLE
        ),
        "no lost or doubled side effect": not faults,
    }
    return {
        "minutes": minutes,
        "workers": workers,
        "elapsed_s": round(elapsed, 1),
        "calls": dict(tally.calls),
        "calls_per_s": round(sum(tally.calls.values()) / elapsed, 1),
        "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
        "writes_on_disk": len(tally.written),
        "process_calls_completed": len(tally.processed),
        "samples": samples,
        "warmup_samples": warm,
        "growth": grown,
        "failures": tally.failures,
        "side_effect_faults": faults,
        "verdicts": verdicts,
        "passed": all(verdicts.values()),
    }


def section(result: dict[str, Any], when: str) -> str:
    g = result["growth"]
    lines = [
        SECTION_START,
        f"Last soak: {when}, `bench/soak.py --minutes {result['minutes']:g} --workers "
        f"{result['workers']}`: {sum(result['calls'].values()):,} calls "
        f"({result['calls_per_s']:.0f}/s; "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(result["calls"].items()))
        + f"), {result['writes_on_disk']:,} files written and checked on disk, "
        f"{result['process_calls_completed']:,} approved process calls. "
        f"**{'PASS' if result['passed'] else 'FAIL'}.**",
        "",
        "| check | result |",
        "| --- | --- |",
    ]
    for name, ok in result["verdicts"].items():
        lines.append(f"| {name} | {'yes' if ok else 'NO'} |")
    lines += [
        f"| RSS after warm-up / peak | {g['baseline']['rss_mb']} MB / {g['rss_mb_peak']} MB "
        f"({g['rss_mb_growth'] * 100:+.1f} %) |",
        f"| open files after warm-up / peak | {g['baseline']['fds']} / {g['fds_peak']} "
        f"({g['fds_growth'] * 100:+.1f} %) |",
        "| store connections, most at once | "
        f"{max(s['store_connections'] for s in result['samples'])} |",
        f"| HTTP statuses | {', '.join(f'{k}: {v:,}' for k, v in result['statuses'].items())} |",
        SECTION_END,
    ]
    return "\n".join(lines) + "\n"


def write_docs(text: str) -> None:
    doc = ROOT / "docs" / "performance.md"
    current = doc.read_text() if doc.exists() else ""
    if SECTION_START in current and SECTION_END in current:
        head, rest = current.split(SECTION_START, 1)
        tail = rest.split(SECTION_END, 1)[1].lstrip("\n")
        doc.write_text(head + text + tail)
    else:
        doc.write_text(current.rstrip("\n") + "\n\n## Soak\n\n" + text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="soak-") as scratch:
        result = run(args.minutes, args.workers, args.sample, Path(scratch))
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"soak-{time.strftime('%Y-%m-%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1))
    text = section(result, when)
    print(text)
    for fault in result["failures"] + result["side_effect_faults"]:
        print(f"  {fault}")
    if not args.no_docs:
        write_docs(text)
    print(f"written {path}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
