"""Instructions per call, counted by valgrind (callgrind): a measure this noisy machine cannot
disturb. Wall-clock and CPU-time figures move 10-20 % with the load of other processes; the
number of instructions a request executes does not (within ~0.1 % run to run).

    .venv/bin/python bench/instructions.py [--rev REV ...] [--calls 200] [--concurrency 16]
        [--scenario rest|mcp|floor|bare|http] [--client httpx|asgi] [--postgres] [--shadow]

For each revision (default: the working tree), a gateway app of that tree on a temporary project
(SQLite, or with ``--postgres`` a fresh database of its own on 127.0.0.1:5432; the shipped
tools.d) answers ``--calls`` ``POST /v1/executions`` of fs.read_file 1 KiB (scenario 1;
``--scenario mcp``: the same call as scenario 6's stateless 2026-07-28 ``tools/call`` on
``/mcp``; ``floor``: the same request to ``bench/floor_app.py``, the least work a read keeping
the guarantees needs; ``bare``: ``bench/bare_app.py``'s echo; ``http``: the shipped HTTP tool
``http.get_json`` of ``{"path": "/echo"}``, its service ``orders`` pointed at the example orders
service (``examples/orders_service.py``, a JSON echo) that the bench starts on 127.0.0.1 in a
process of its own, outside valgrind, so that only the gateway's side is counted; it also
measures scenario 1 in the same run and prints the ratio HTTP / fs.read_file) in-process through
httpx's ASGI transport, ``--concurrency`` at a time, after a warm-up of 500; callgrind counts
only the measured calls (instrumentation is switched on and off around them with
``callgrind_control``), with the gateway's timers (idle workers' polling, heartbeat, recovery,
sweeps, audit checkpoints) put past the measurement, since they run in wall time, which valgrind
stretches and load changes. Prints Ir (instructions) per call for each revision and the ratio to
the first; writes ``bench/results/instructions-<date>.json``. The count includes the client's
side (httpx) and excludes uvicorn's, the same code in every revision; with ``--client asgi`` the
calls go straight to the ASGI app and only the gateway is counted (to compare scenarios whose
requests and answers differ, as MCP's and REST's do). About 3 minutes a revision on 2 cores.
Needs Debian's ``valgrind`` (``apt-get install -y valgrind``). ``--shadow``: the project also
runs a shadow policy (a copy of the shipped one under ``candidate/``: decided beside it on
every call, no differences), to count what a shadow costs a call (docs/policies.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


SHADOW_ENV = "INSTRUCTIONS_SHADOW"
"""Set by ``--shadow`` for the child (valgrind passes the environment on)."""

MCP_ERA = "2026-07-28"
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": MCP_ERA,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "fs.read_file",
}
"""Scenario 6's headers (bench/harness/plan.py), here so that any revision can be measured."""


TOOLS: dict[str, tuple[str, dict[str, str]]] = {
    "rest": ("fs.read_file", {"path": "one-kib.txt"}),
    "http": ("http.get_json", {"path": "/echo"}),
}
"""The tool and arguments of each scenario's ``POST /v1/executions``."""


def mcp_body(call_id: str) -> bytes:
    """Scenario 6's ``tools/call`` (bench/harness/plan.py's ``mcp_read``)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MCP_ERA,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.toolgate/run_id": "bench",
        "io.toolgate/call_id": call_id,
        "io.toolgate/agent_id": "bench",
    }
    params = {"name": "fs.read_file", "arguments": {"path": "one-kib.txt"}, "_meta": meta}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return json.dumps(message, separators=(",", ":")).encode()


async def asgi_post(app: Any, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    """One POST straight to the ASGI app, with the least a client can do (``--client asgi``):
    what is counted is then the gateway's alone, whatever the scenario's headers and answer."""
    sent = [(b"host", b"127.0.0.1:8000"), (b"authorization", b"Bearer tg_dev_alice")]
    sent += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    sent.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": sent,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    pending, ended = [{"type": "http.request", "body": body, "more_body": False}], asyncio.Event()
    status, parts = 0, []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await ended.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                ended.set()

    await app(scope, receive, send)
    return status, b"".join(parts).decode()


def child(
    tree: Path,
    calls: int,
    concurrency: int,
    flag_dir: Path,
    scenario: str,
    raw: bool,
    url: str | None = None,
    upstream: str | None = None,
) -> None:
    """Runs inside valgrind: the app of ``tree``, the warm-up, then the measured calls."""
    sys.path.insert(0, str(tree))
    import httpx
    import yaml

    root = Path(tempfile.mkdtemp(prefix="instructions-"))
    for name in ("tools.d", "rego", "policies", "examples"):
        if (tree / name).is_dir():
            shutil.copytree(tree / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    config = yaml.safe_load((tree / "toolgate.yaml").read_text())
    config["database_url"] = url or f"sqlite:///{root}/toolgate.db"
    if upstream is not None:  # scenario http: the service behind http.get_json
        config["adapters"]["http"]["services"]["orders"]["base_url"] = upstream
        # valgrind slows the calls down 50-fold: the 5 s of the shipped declaration would
        # cut them off under load. The deadline's work does not depend on its length.
        declaration = root / "tools.d" / "http.get_json.yaml"
        text = declaration.read_text().replace("\ntimeout: 5s\n", "\ntimeout: 10m\n")
        declaration.write_text(text)
    config["approval_secret"] = "s" * 40
    # The gateway's timers (idle workers polling the queue every second, the replica's
    # heartbeat and recovery, the approvals' sweep, the audit checkpoints) run in wall time,
    # which valgrind stretches and the machine's load changes: put them past the measurement,
    # so that what is counted is the calls' own work (worker.IDLE_POLL is set below).
    config["lock_lease"] = "1h"
    config["sweep_interval"] = "1h"
    config.setdefault("audit", {})["checkpoint_interval"] = 0
    if os.environ.get(SHADOW_ENV):  # --shadow: a copy of the policy as the candidate
        for name in ("rego", "policies"):
            shutil.copytree(root / name, root / "candidate" / name)
        config["shadow"] = {"rego_dir": "candidate/rego", "policies_dir": "candidate/policies"}
    (root / "toolgate.yaml").write_text(yaml.safe_dump(config))
    rules = root / "policies" / "rules.yaml"
    data = yaml.safe_load(rules.read_text())
    data["quotas"] = {"calls_per_minute": {}}
    rules.write_text(yaml.safe_dump(data))
    ws = root / "var" / "workspaces" / "demo"
    ws.mkdir(parents=True)
    (ws / "one-kib.txt").write_text("x" * 1024)
    os.chdir(root)
    import logging

    from gateway.server.app import create_app
    from gateway.settings import load_settings

    logging.disable(logging.WARNING)
    from gateway.runtime import worker

    worker.IDLE_POLL = 3600.0
    if scenario in ("floor", "bare"):  # the yardsticks: bench/floor_app.py, bench/bare_app.py
        import importlib.util

        name = f"{scenario}_app"
        spec = importlib.util.spec_from_file_location(name, tree / "bench" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if scenario == "bare":
            app = module.create_app(1900)  # about the gateway's answer to scenario 1
        else:
            (root / "floor").mkdir()
            shutil.copytree(ws, root / "floor" / "workspace")
            app = module.create_app(root / "floor", {"tg_dev_alice": "alice"})
    else:
        app = create_app(load_settings(root / "toolgate.yaml"))

    tool, arguments = TOOLS.get(scenario, TOOLS["rest"])

    def body() -> dict[str, Any]:
        return {
            "run_id": "bench",
            "call_id": uuid.uuid4().hex,
            "tool": {"name": tool},
            "arguments": arguments,
            "actor": {"user_id": "alice", "agent_id": "bench"},
            "workspace": {"id": "demo"},
        }

    async def main() -> None:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            headers = {"Authorization": "Bearer tg_dev_alice"}
            # The MCP endpoint's DNS-rebinding check allows the loopback hosts only.
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1:8000", headers=headers
            ) as client:

                async def call() -> tuple[int, str]:
                    if scenario in ("floor", "bare"):
                        content = json.dumps(body()).encode()
                        path = "/call" if scenario == "floor" else "/echo"
                        if raw:
                            return await asgi_post(app, path, content, {})
                        r = await client.post(path, content=content)
                    elif scenario == "mcp":
                        content = mcp_body(uuid.uuid4().hex)
                        if raw:
                            return await asgi_post(app, "/mcp", content, MCP_HEADERS)
                        r = await client.post("/mcp", content=content, headers=MCP_HEADERS)
                    elif raw:
                        content = json.dumps(body()).encode()
                        json_headers = {"Content-Type": "application/json"}
                        return await asgi_post(app, "/v1/executions", content, json_headers)
                    else:
                        r = await client.post("/v1/executions", json=body())
                    return r.status_code, r.text

                async def worker(k: int) -> None:
                    for _ in range(k):
                        status, text = await call()
                        if status != 200 or ('"succeeded"' not in text and scenario != "bare"):
                            raise SystemExit(f"call failed: {status} {text[:1500]}")

                async def batch(total: int) -> None:
                    await asyncio.gather(
                        *(worker(total // concurrency) for _ in range(concurrency))
                    )

                await batch(500)
                (flag_dir / "ready").write_text("1")
                while not (flag_dir / "go").exists():
                    await asyncio.sleep(0.1)
                await batch(calls)
                (flag_dir / "done").write_text("1")
                while (flag_dir / "go").exists():
                    await asyncio.sleep(0.1)

    asyncio.run(main())
    shutil.rmtree(root, ignore_errors=True)


def count(
    tree: Path,
    calls: int,
    concurrency: int,
    scratch: Path,
    scenario: str,
    client: str,
    postgres: bool = False,
) -> int:
    """Instructions of ``calls`` calls on ``tree``'s gateway (all its threads: on PostgreSQL
    the store's lanes and the driver too; the database server is not counted, nor is the
    upstream service of scenario http)."""
    if scenario == "http":
        with upstream_service() as upstream:
            return _count(tree, calls, concurrency, scratch, scenario, client, None, upstream)
    if not postgres:
        return _count(tree, calls, concurrency, scratch, scenario, client, None)
    import psycopg

    admin = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "dbname": "postgres"}
    name = f"toolgate_instructions_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
        return _count(tree, calls, concurrency, scratch, scenario, client, url)
    finally:
        with psycopg.connect(**admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _count(
    tree: Path,
    calls: int,
    concurrency: int,
    scratch: Path,
    scenario: str,
    client: str,
    url: str | None,
    upstream: str | None = None,
) -> int:
    flags = Path(tempfile.mkdtemp(dir=scratch))
    out = flags / "callgrind.out"
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--child",
        str(tree),
        "--calls",
        str(calls),
        "--concurrency",
        str(concurrency),
        "--flags",
        str(flags),
        "--scenario",
        scenario,
        "--client",
        client,
        *(("--database-url", url) if url else ()),
        *(("--upstream", upstream) if upstream else ()),
    ]
    log = (flags / "log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        while not (flags / "ready").exists():
            if proc.poll() is not None:
                raise SystemExit(f"the child failed:\n{(flags / 'log').read_text()[-3000:]}")
            time.sleep(0.5)
        subprocess.run(
            ["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True
        )
        (flags / "go").write_text("1")
        while not (flags / "done").exists():
            if proc.poll() is not None:
                raise SystemExit(f"the child failed:\n{(flags / 'log').read_text()[-3000:]}")
            time.sleep(0.2)
        subprocess.run(
            ["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True
        )
        (flags / "go").unlink()
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    if KEEP is not None:  # --keep: for callgrind_annotate
        KEEP.mkdir(parents=True, exist_ok=True)
        shutil.copy(out, KEEP / f"callgrind-{scenario}-{tree.name}-{flags.name}.out")
    totals = next(line for line in out.read_text().splitlines() if line.startswith("totals:"))
    return int(totals.split()[1])


@contextlib.contextmanager
def upstream_service() -> Iterator[str]:
    """The example orders service (a JSON echo at ``/echo``) in a process of its own on
    127.0.0.1, not under valgrind: its instructions are not the gateway's. Yields its URL."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # uvicorn's keep-alive of 5 s would close pooled connections as the slowed-down gateway
    # reuses them (a lost response): an hour here.
    cmd = [sys.executable, "-m", "uvicorn", "examples.orders_service:create_app", "--factory"]
    cmd += ["--port", str(port), "--timeout-keep-alive", "3600", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the example orders service did not start")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


KEEP: Path | None = None
"""Where ``--keep`` copies each run's callgrind output."""


def tree_of(rev: str | None, scratch: Path) -> Path:
    if rev is None:
        return ROOT
    path = scratch / f"tree-{rev.replace('/', '_')}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev],
        check=True,
        capture_output=True,
    )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rev", action="append", help="a git revision (repeat); default: this tree"
    )
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--scenario", choices=("rest", "mcp", "floor", "bare", "http"), default="rest"
    )
    parser.add_argument(
        "--client",
        choices=("httpx", "asgi"),
        default="httpx",
        help="asgi: the least of clients, so that only the gateway is counted",
    )
    parser.add_argument(
        "--postgres", action="store_true", help="the store on PostgreSQL (127.0.0.1:5432)"
    )
    parser.add_argument(
        "--shadow", action="store_true", help="with a shadow policy (a copy of the shipped one)"
    )
    parser.add_argument(
        "--keep", metavar="DIR", help="copy each callgrind output there (for callgrind_annotate)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    parser.add_argument("--flags", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    if args.child:
        raw = args.client == "asgi"
        child(
            Path(args.child),
            args.calls,
            args.concurrency,
            Path(args.flags),
            args.scenario,
            raw,
            args.database_url,
            args.upstream,
        )
        return 0
    if args.shadow:
        os.environ[SHADOW_ENV] = "1"
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print(
            "valgrind is not installed: apt-get update && apt-get install -y valgrind",
            file=sys.stderr,
        )
        return 2
    global KEEP
    KEEP = Path(args.keep).resolve() if args.keep else None
    scratch = Path(tempfile.mkdtemp(prefix="instructions-"))
    revs: list[str | None] = list(args.rev or [None])
    trees: list[Path] = []
    try:
        trees = [tree_of(rev, scratch) for rev in revs]
        figures = []
        for rev, tree in zip(revs, trees, strict=True):
            total = count(
                tree,
                args.calls,
                args.concurrency,
                scratch,
                args.scenario,
                args.client,
                args.postgres,
            )
            per = total / args.calls
            figure: dict[str, Any] = {"rev": rev or "working tree", "ir_per_call": round(per)}
            figures.append(figure)
            first = figures[0]["ir_per_call"]
            print(
                f"{rev or 'working tree'}: {per / 1e6:.3f} M instructions per call "
                f"({per / first:.4f} of the first)",
                flush=True,
            )
            if args.scenario == "http":  # the yardstick of the goal, in the same run
                read = count(
                    tree, args.calls, args.concurrency, scratch, "rest", args.client, False
                )
                figure["read_ir_per_call"] = round(read / args.calls)
                figure["http_over_read"] = round(total / read, 3)
                print(
                    f"  fs.read_file: {read / args.calls / 1e6:.3f} M instructions per call; "
                    f"HTTP tool / fs.read_file: {total / read:.2f}",
                    flush=True,
                )
    finally:
        for rev, tree in zip(revs, trees, strict=False):
            if rev is not None:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                    capture_output=True,
                )
        shutil.rmtree(scratch, ignore_errors=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"instructions-{time.strftime('%Y-%m-%dT%H%M%S')}.json"
    path.write_text(
        json.dumps(
            {
                "scenario": args.scenario,
                "client": args.client,
                "calls": args.calls,
                "concurrency": args.concurrency,
                "store": "postgresql" if args.postgres else "sqlite",
                "shadow": args.shadow,
                "figures": figures,
            },
            indent=1,
        )
    )
    print(f"written {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
