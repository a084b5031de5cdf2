"""What the audit trail's tests share: a store filled through its real append path, raw SQL
for the tampering, and the ``toolgate`` command run as a process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.cli import main
from gateway.events.model import make_event
from gateway.store.records import ExecutionRecord
from gateway.store.sql import Db
from gateway.store.store import Store
from gateway.types import Status
from tests.helpers import REPO


def record(ex_id: str) -> ExecutionRecord:
    now = int(time.time() * 1000)
    return ExecutionRecord(
        id=ex_id,
        principal="alice",
        agent_id="a",
        run_id="r1",
        turn_id="t1",
        call_id=ex_id,
        payload_sha256="p",
        workspace_id="demo",
        tool_name="fs.write_file",
        tool_version="1.2.0",
        risk="medium",
        status=Status.RUNNING,
        outcome=None,
        arguments_sha256="args",
        idempotency_scope=None,
        approval_id=None,
        cancellation_token=None,
        request_json="{}",
        result_json=None,
        fencing_json=None,
        owner=None,
        created_ms=now,
        updated_ms=now,
    )


async def fill(store: Store, ids: Sequence[str]) -> None:
    """Six events per execution, the way the pipeline writes them: two at the reservation,
    two appended, one with a status change, one at the commit."""
    for ex_id in ids:
        first = [
            make_event(ex_id, 0, "tool.requested", {"tool": "fs.write_file", "n": 1}),
            make_event(ex_id, 0, "tool.resolved", {"version": "1.2.0", "note": "é ü"}),
        ]
        await store.reserve(record(ex_id), first, None)
        await store.append(
            ex_id,
            [
                make_event(ex_id, 0, "policy.decided", {"result": "allow"}),
                make_event(ex_id, 0, "tool.started", {}),
            ],
        )
        await store.set_status(
            ex_id,
            [Status.RUNNING],
            Status.RUNNING,
            [make_event(ex_id, 0, "tool.output", {"text": 'line "1"\n'})],
        )
        done = [make_event(ex_id, 0, "tool.completed", {"outcome": "succeeded"})]
        await store.commit(
            ex_id, outcome="succeeded", result_json="{}", events=done, fencing_json=None
        )


def sql(url: str, *statements: tuple[str, Sequence[Any]]) -> list[Any]:
    """Run statements in one transaction, around the gateway; the last one's rows."""

    def run(db: Db) -> list[Any]:
        found: list[Any] = []
        for text, params in statements:
            if text.lstrip().upper().startswith("SELECT"):
                found = db.all(text, params)
            else:
                db.run(text, params)
        return found

    store = Store(url)
    try:
        return store.transactor.transaction(run, True)
    finally:
        store.engine.dispose()


def toolgate(project: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RUST_LIB_BACKTRACE": "0", "PYTHONPATH": str(REPO)}
    env.pop("TOOLGATE_CONFIG", None)
    env["TOOLGATE_DATABASE_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--config", str(project / "toolgate.yaml"), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def toolgate_here(
    project: Path, url: str, *args: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    """The same command in this process (cheaper than a process; its output captured)."""
    capsys.readouterr()
    saved = os.environ.get("TOOLGATE_DATABASE_URL")
    os.environ["TOOLGATE_DATABASE_URL"] = url
    try:
        code = main(["--config", str(project / "toolgate.yaml"), *args])
    finally:
        if saved is None:
            os.environ.pop("TOOLGATE_DATABASE_URL", None)
        else:
            os.environ["TOOLGATE_DATABASE_URL"] = saved
    out, err = capsys.readouterr()
    return code, out, err


def filled(url: str, ids: Sequence[str]) -> None:
    """A store at ``url`` opened (the schema made) and filled with :func:`fill`."""

    async def run() -> None:
        store = Store(url)
        await store.open()
        try:
            await fill(store, ids)
        finally:
            await store.aclose()

    anyio.run(run)


def external_hash(line: dict[str, Any]) -> str:
    """An event's hash from an export line, computed as docs/security.md says, without
    the gateway's code."""
    data_json = json.dumps(line["data"], separators=(",", ":"))
    fields = [
        "toolgate.event.v1",
        line["prev"],
        line["execution_id"],
        line["seq"],
        line["id"],
        line["type"],
        line["version"],
        line["at_ms"],
        data_json,
    ]
    text = json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
