"""The wrk driver: finding (or installing) wrk, one run of it against a URL, and the
summary of A/B rounds."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from .plan import AUTH, BENCH, Plan, log


def ensure_wrk(install: bool) -> str | None:
    found = shutil.which("wrk")
    if found or not install:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        log("wrk is missing; running: apt-get update && apt-get install -y wrk")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update"], check=False, env=env)
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=False, env=env)
        return shutil.which("wrk")
    log("wrk is missing: install Debian's wrk as root (apt-get update && apt-get install -y wrk)")
    return None


def wrk_version(wrk: str) -> str:
    out = subprocess.run([wrk, "--version"], capture_output=True, text=True)
    first = (out.stdout + out.stderr).splitlines()[0]
    return first.split(" Copyright")[0].strip()


@dataclass
class Wrk:
    path: str
    plan: Plan
    scratch: Path

    def run(
        self,
        url: str,
        template: str,
        marker: str = "",
        duration: int | None = None,
        connections: int | None = None,
        pid: int | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> dict[str, Any]:
        """One wrk run; returns requests/s of ok responses and latency percentiles, and the
        server's CPU time per ok response when its ``pid`` is given."""
        nonce = uuid.uuid4().hex[:10]
        path = self.scratch / f"body-{nonce}.json"
        path.write_text(template)
        seconds = duration or self.plan.duration
        conns = connections or self.plan.connections
        cmd = [
            self.path,
            f"-t{min(self.plan.threads, conns)}",
            f"-c{conns}",
            f"-d{seconds}s",
            "--timeout",
            "30s",
            "-s",
            str(BENCH / "wrk_post.lua"),
            url,
            "--",
            str(path),
            nonce,
            marker,
            AUTH,
            "64",
            "\n".join(f"{k}: {v}" for k, v in headers),
        ]
        cpu_before = cpu_seconds(pid)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
        cpu_used = cpu_seconds(pid) - cpu_before
        path.unlink(missing_ok=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("WRK_JSON ")), None)
        if proc.returncode != 0 or line is None:
            raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
        data = json.loads(line[len("WRK_JSON ") :])
        seconds_run = data["duration_us"] / 1e6
        lat = data["latency_us"]
        out = {
            "rps": round(data["ok"] / seconds_run, 1),
            "requests": data["requests"],
            "ok": data["ok"],
            "bad": data["bad"],
            "errors": {k: v for k, v in data["errors"].items() if v},
            "p50_ms": round(lat["p50"] / 1000, 3),
            "p90_ms": round(lat["p90"] / 1000, 3),
            "p99_ms": round(lat["p99"] / 1000, 3),
            "max_ms": round(lat["max"] / 1000, 3),
        }
        if pid is not None and data["ok"]:
            out["cpu_us_per_ok"] = round(cpu_used * 1e6 / data["ok"], 1)
        if data["bad"]:
            log(f"  {data['bad']} bad responses from {url}: {proc.stderr.strip()[:600]}")
        return out


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) and of its live
    children (the workers of ``serve --workers N``) so far; 0 without one."""
    if pid is None:
        return 0.0
    proc = psutil.Process(pid)
    total = 0.0
    for one in (proc, *proc.children(recursive=True)):
        try:
            times = one.cpu_times()
        except psutil.Error:  # exited meanwhile
            continue
        total += times.user + times.system
    return total


def summarise_pairs(bare: list[dict[str, Any]], gw: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds; the ratio is the median of per-round (gateway / adjacent bare)."""
    ratios = [g["rps"] / b["rps"] for b, g in zip(bare, gw, strict=True) if b["rps"] > 0]

    def med(runs: list[dict[str, Any]], key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 3)

    cpu = {}
    if all("cpu_us_per_ok" in r for r in bare + gw):
        cpu = {
            "gateway_cpu_us_per_call": med(gw, "cpu_us_per_ok"),
            "bare_cpu_us_per_call": med(bare, "cpu_us_per_ok"),
        }
        cpu["cpu_ratio"] = round(cpu["bare_cpu_us_per_call"] / cpu["gateway_cpu_us_per_call"], 4)
    return {
        "ratio": round(statistics.median(ratios), 4) if ratios else 0.0,
        "ratios": [round(r, 4) for r in ratios],
        "gateway_rps": med(gw, "rps"),
        "bare_rps": med(bare, "rps"),
        "gateway_p50_ms": med(gw, "p50_ms"),
        "gateway_p99_ms": med(gw, "p99_ms"),
        "bare_p50_ms": med(bare, "p50_ms"),
        "bare_p99_ms": med(bare, "p99_ms"),
        **cpu,
        "bad": sum(r["bad"] for r in gw),
        "rounds": len(gw),
        "runs": {"bare": bare, "gateway": gw},
    }
