"""The floor for ``bench/run.py``'s phase ``floor``: the least work any gateway keeping
Toolgate's guarantees must do for scenario 1's read, written as plainly as it can be, under the
gateway's uvicorn settings. Where the bare app (``bench/bare_app.py``) is the framework's
ceiling, this is the ceiling of the guarantees: how close to the bare app a read that keeps
them can come on this machine and this Python.

    .venv/bin/python bench/floor_app.py --port 8098 --root DIR

``POST /call`` takes scenario 1's request body (``{"call_id", "tool": {"name"}, "arguments":
{"path"}, "actor", "workspace": {"id"}, ...}``) and does, in order, what no shortcut may skip:

1. the bearer key: its SHA-256 looked up among the configured keys, and a read of the
   revocations table that begins after the request arrived (revocation holds on every call);
2. the body: read in full and decoded, its shape checked (a known tool, an object of
   arguments, a string path), a ``400`` otherwise;
3. the path: resolved against the workspace root with symlinks followed
   (``os.path.realpath``) and confined to it, on every call, a ``403`` outside it;
4. the arguments hashed (canonical JSON, SHA-256: what approvals and idempotency bind to) and
   the policy's decision for them taken from a cache keyed by principal, tool and hash;
5. the file read (at most 1 MiB) and its SHA-256 taken (the evidence);
6. the durable commit before the answer: the execution row and seven events, each chained to
   the one before by SHA-256 over its canonical JSON, in one SQLite transaction (WAL,
   ``synchronous=NORMAL``, as the gateway's store), the transactions of one turn of the event
   loop committed together (group commit, as the gateway's store does);
7. the answer: the execution id, outcome, data and evidence as JSON.

What it leaves out is what Toolgate adds beyond that floor: declarations and their schemas, a
policy engine, approvals, idempotency keys, resource locks across processes, deadlines and
cancellation, verification probes, metrics, recovery. ``GET /readyz`` answers ``200``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.jsontext import prebuilt  # json's C encoder made once per kind (not per text)

MAX_READ = 1 << 20
EVENTS = (
    "tool.requested",
    "tool.resolved",
    "policy.decided",
    "tool.started",
    "tool.side_effect_observed",
    "tool.completed",
    "state.checkpointed",
)
SCHEMA = """
CREATE TABLE IF NOT EXISTS revoked_keys (key_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS executions (
    id TEXT PRIMARY KEY, call_id TEXT NOT NULL, tool TEXT NOT NULL, actor TEXT NOT NULL,
    arguments TEXT NOT NULL, arguments_hash TEXT NOT NULL, outcome TEXT NOT NULL,
    result TEXT NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id TEXT PRIMARY KEY, execution_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,
    data TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL,
    UNIQUE (execution_id, seq)
);
"""
canonical = prebuilt(json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False))
compact = prebuilt(json.JSONEncoder(separators=(",", ":")))


def sha256(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


class Store:
    """One SQLite connection on the event loop's thread; one transaction per loop turn."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=30000"):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.executescript(SCHEMA)
        self.pending: list[tuple[tuple[Any, ...], list[tuple[Any, ...]], asyncio.Future[None]]] = []

    def revoked(self, key_id: str) -> bool:
        row = self.db.execute("SELECT 1 FROM revoked_keys WHERE key_id = ?", (key_id,)).fetchone()
        return row is not None

    async def commit(self, execution: tuple[Any, ...], events: list[tuple[Any, ...]]) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self.pending.append((execution, events, done))
        if len(self.pending) == 1:
            loop.call_soon(self._flush)
        await done

    def _flush(self) -> None:
        batch, self.pending = self.pending, []
        db = self.db
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "INSERT INTO executions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [b[0] for b in batch]
            )
            db.executemany(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)", [e for b in batch for e in b[1]]
            )
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            for _, _, done in batch:
                done.set_exception(exc)
            return
        for _, _, done in batch:
            done.set_result(None)


def create_app(root: Path, keys: dict[str, str]) -> Starlette:
    """``keys``: API key → principal; the workspace ``demo`` is ``root/workspace``."""
    store = Store(root / "floor.db")
    hashed = {sha256(k): (f"key-{i}", p) for i, (k, p) in enumerate(sorted(keys.items()))}
    workspace = os.path.realpath(root / "workspace")
    decisions: dict[tuple[str, str, str], str] = {}

    def problem(status: int, detail: str) -> Response:
        return JSONResponse({"status": status, "detail": detail}, status_code=status)

    async def call(request: Request) -> Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        known = hashed.get(sha256(token)) if scheme.lower() == "bearer" else None
        if known is None or store.revoked(known[0]):
            return problem(401, "unauthenticated")
        principal = known[1]
        try:
            body = json.loads(await request.body())
            tool = body["tool"]["name"]
            arguments = body["arguments"]
            call_id = body["call_id"]
            relative = arguments["path"]
            if tool != "fs.read_file" or not isinstance(relative, str):
                raise ValueError(tool)
            if body["workspace"]["id"] != "demo":
                raise ValueError(body["workspace"])
        except (ValueError, KeyError, TypeError):
            return problem(400, "a malformed request")
        path = os.path.realpath(os.path.join(workspace, relative))
        if not path.startswith(workspace + os.sep):
            return problem(403, "outside the workspace")
        normalised = {"path": path[len(workspace) + 1 :]}
        args_hash = sha256(canonical(normalised))
        key = (principal, tool, args_hash)
        decision = decisions.get(key)
        if decision is None:
            decision = decisions[key] = "allow"
        with open(path, "rb", buffering=0) as f:
            content = f.read(min(os.fstat(f.fileno()).st_size, MAX_READ) + 1)[:MAX_READ]
        evidence = {"sha256": sha256(content), "bytes": len(content)}
        data = {"content": content.decode("utf-8", "replace"), **evidence}
        now = time.time()
        execution_id = f"{int(now * 1000):012x}{os.urandom(10).hex()}"
        result = {"outcome": "succeeded", "data": data, "evidence": evidence}
        details = (
            {"call_id": call_id, "tool": tool, "actor": principal},
            {"tool": tool, "version": "1.0.0"},
            {"result": decision, "arguments_hash": args_hash},
            {"arguments": normalised},
            {"evidence": evidence},
            {"outcome": "succeeded"},
            {"phase": "committed"},
        )
        events, prev = [], "0" * 64
        for seq, (kind, detail) in enumerate(zip(EVENTS, details, strict=True)):
            text = compact(detail)
            digest = sha256(prev + canonical([execution_id, seq, kind, detail]))
            events.append((f"{execution_id}-{seq}", execution_id, seq, kind, text, prev, digest))
            prev = digest
        execution = (
            execution_id,
            call_id,
            tool,
            principal,
            compact(normalised),
            args_hash,
            "succeeded",
            compact(result),
            now,
        )
        await store.commit(execution, events)
        return Response(
            compact({"execution_id": execution_id, **result}), media_type="application/json"
        )

    async def readyz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[Route("/call", call, methods=["POST"]), Route("/readyz", readyz, methods=["GET"])]
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", type=Path, required=True, help="holds floor.db, workspace/")
    parser.add_argument("--key", action="append", default=[], help="KEY=PRINCIPAL")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()
    keys = dict(k.split("=", 1) for k in args.key)
    uvicorn.run(
        create_app(args.root, keys),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        server_header=False,
    )


if __name__ == "__main__":
    main()
