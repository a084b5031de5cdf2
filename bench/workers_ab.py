"""One worker against ``serve --workers 2``, in the same run, with the bare app's own ratio as
the yardstick (issue 33): CPU per call from /proc (every process of each side) and
throughput with wrk, the servers alternated A B A B over the rounds.

    .venv/bin/python bench/workers_ab.py [--scenario s1_read] [--tree DIR ...]

``--tree DIR`` adds the gateway of another checkout (``git archive REV gateway | tar -x -C
DIR``): each tree is started with ``PYTHONPATH=DIR``, so an old revision and this one run on
the same load. What a second worker costs is the median over rounds of (CPU a call with two
workers) / (CPU a call with one); the bare app's ratio says what the machine charges a second
process whatever it runs. Not run by ``make bench``.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from harness.plan import FULL, loadavg, scenarios, seed_workspace, sqlite_url  # noqa: E402
from harness.servers import Server, bare_server, gateway_pid  # noqa: E402
from harness.wrk import Wrk  # noqa: E402

from gateway.testing import gateway, make_project  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="s1_read", choices=sorted(scenarios("x")))
    parser.add_argument("--tree", action="append", default=[], help="another checkout's root")
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    wrk_path = shutil.which("wrk")
    if wrk_path is None:
        print("wrk is missing (apt-get install -y wrk)", file=sys.stderr)
        return 2
    trees = {"this": str(BENCH.parent), **{Path(t).name: t for t in args.tree}}
    s = scenarios("x")[args.scenario]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        wrk = Wrk(wrk_path, replace(FULL, duration=args.duration), work)
        runs: dict[str, tuple[Server, str, str]] = {}
        for name, tree in trees.items():
            for n in (1, 2):
                root = work / f"{name}-{n}"
                config = make_project(root, sqlite_url(root))
                seed_workspace(config)
                extra = ("--workers", "2") if n == 2 else ()
                url = stack.enter_context(gateway(config, {"PYTHONPATH": tree}, extra))
                runs[f"{name}-{n}"] = (Server(url, gateway_pid(url)), s.path, s.marker)
        for n in (1, 2):
            runs[f"bare-{n}"] = (stack.enter_context(bare_server(1300, work, n)), "/echo", "")
        for server, path, marker in runs.values():
            wrk.run(server.url + path, s.template, marker, duration=2)
        results: dict[str, list[dict[str, Any]]] = {key: [] for key in runs}
        for r in range(args.rounds):
            for key in list(runs) if r % 2 == 0 else list(runs)[::-1]:
                server, path, marker = runs[key]
                out = wrk.run(server.url + path, s.template, marker, pid=server.pid)
                results[key].append(out)
                print(
                    f"round {r + 1} {key}: {out['rps']:.0f}/s, {out.get('cpu_us_per_ok', 0):.0f}"
                    f" µs CPU a call, p99 {out['p99_ms']:.1f} ms; load {loadavg()[0]}"
                )
        for name in [*trees, "bare"]:
            one, two = results[f"{name}-1"], results[f"{name}-2"]
            cpu = [b["cpu_us_per_ok"] / a["cpu_us_per_ok"] for a, b in zip(one, two, strict=True)]
            rps = [b["rps"] / a["rps"] for a, b in zip(one, two, strict=True)]
            print(
                f"{name}: two workers / one: CPU a call {statistics.median(cpu):.3f}"
                f" ({', '.join(f'{x:.2f}' for x in cpu)}), throughput"
                f" {statistics.median(rps):.3f} ({', '.join(f'{x:.2f}' for x in rps)})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
