"""A Python client generated from the served ``/openapi.json`` by ``openapi-python-client``
makes a call on a real gateway and follows its events.

The generator pins its own dependencies, so it lives in a venv of its own,
``.cache/openapi-client-venv``, made on first use (``OPENAPI_CLIENT`` below). Where it cannot
be installed the test skips with the reason; in CI (``CI=true``) it fails. The generated code
runs in that venv too (it needs httpx and attrs, which the generator brings), in a process
that prints what it saw as JSON."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from tests.helpers import ALICE, IN_CI, REPO

OPENAPI_CLIENT = "openapi-python-client>=0.29,<0.30"
VENV = REPO / ".cache" / "openapi-client-venv"
CONFIG = """\
post_hooks: []
content_type_overrides:
  application/gzip: application/octet-stream
  image/png: application/octet-stream
"""
"""No formatter run after generating (ruff need not be on PATH); the binary answers (the
policy bundle, a screenshot) read as bytes."""


def _install() -> str | None:
    """Make the generator's venv unless it holds this pin; why it could not, or None."""
    done = VENV / ".installed"
    with open(REPO / ".cache" / "openapi-client-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs at once install once
        if done.exists() and done.read_text() == OPENAPI_CLIENT:
            return None
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(VENV)],
            [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", OPENAPI_CLIENT],
        ]
        for step in steps:
            ran = subprocess.run(step, capture_output=True, text=True, timeout=600, check=False)
            if ran.returncode != 0:
                return f"{' '.join(step[-2:])} failed: {(ran.stderr or ran.stdout)[-1500:]}"
        done.write_text(OPENAPI_CLIENT)
    return None


@pytest.fixture(scope="module")
def python() -> Path:
    """The venv's interpreter, with ``openapi_python_client`` installed."""
    (REPO / ".cache").mkdir(exist_ok=True)
    problem = _install()
    if problem is not None:
        if IN_CI:
            pytest.fail(problem)
        pytest.skip(f"{OPENAPI_CLIENT} could not be installed into {VENV}: {problem}")
    return VENV / "bin" / "python"


def _generate(python: Path, url: str, into: Path) -> Path:
    """The client generated from the document ``url`` serves; every operation must be
    generated (``--fail-on-warning``: a skipped operation or response is a failure)."""
    served = httpx.get(url + "/openapi.json", headers={"Authorization": f"Bearer {ALICE}"})
    assert served.status_code == 200
    document = served.json()
    validate(document)
    (into / "openapi.json").write_text(json.dumps(document))
    (into / "config.yaml").write_text(CONFIG)
    generated = subprocess.run(
        [
            str(python),
            "-m",
            "openapi_python_client",
            "generate",
            "--path",
            str(into / "openapi.json"),
            "--output-path",
            str(into / "toolgate_client"),
            "--meta",
            "none",
            "--config",
            str(into / "config.yaml"),
            "--fail-on-warning",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert generated.returncode == 0, generated.stdout[-3000:] + generated.stderr[-3000:]
    return into / "toolgate_client"


SCRIPT = """
import json, sys
from toolgate_client import AuthenticatedClient
from toolgate_client.api.executions import (
    create_execution, get_execution, list_execution_events, list_executions,
)
from toolgate_client.api.tools import get_tool, list_tools
from toolgate_client.models import ExecutionRequestBody, Execution, ExecutionEvents, Problem

url, key, run_id, path = sys.argv[1:5]
client = AuthenticatedClient(base_url=url, token=key, raise_on_unexpected_status=True)
seen = {}
tools = list_tools.sync(client=client)
seen["tools"] = [type(tools).__name__, sorted(t.name for t in tools.items)]
seen["tool"] = type(get_tool.sync("fs.write_file", client=client)).__name__
body = ExecutionRequestBody.from_dict({
    "run_id": run_id, "call_id": "c1",
    "tool": {"name": "fs.write_file"},
    "arguments": {"path": path, "content": "written by a generated client"},
    "workspace": {"id": "demo"},
})
created = create_execution.sync_detailed(
    client=client, body=body, prefer="respond-async", idempotency_key=run_id
)
execution = created.parsed
seen["created"] = [int(created.status_code), type(execution).__name__, execution.status.value]
# follow the events: each page asks for those after the last seq it has, until tool.completed;
# between pages the long-poll of getExecution waits for the call instead of a sleep
types, after = [], None
for _ in range(100):
    kwargs = {} if after is None else {"after": after}
    page = list_execution_events.sync(execution.id, client=client, **kwargs)
    assert isinstance(page, ExecutionEvents), page
    types += [event.type_ for event in page.items]  # "type" is a builtin
    after = page.items[-1].seq if page.items else after
    if "tool.completed" in types:
        break
    get_execution.sync(execution.id, client=client, wait=5)
seen["events"] = types
final = get_execution.sync_detailed(execution.id, client=client)
result = final.parsed.result
seen["final"] = [int(final.status_code), final.parsed.status.value, result.outcome.value]
listed = list_executions.sync(client=client, run_id=run_id)
seen["listed"] = [e.id == execution.id for e in listed.items]
missing = get_execution.sync_detailed("ex_nope", client=client)
seen["missing"] = [int(missing.status_code), type(missing.parsed).__name__, missing.parsed.code]
print(json.dumps(seen))
"""


def test_a_generated_client_runs_a_call_and_follows_its_events(
    python: Path, gw: tuple[str, Path], tmp_path: Path
) -> None:
    url, workspace = gw
    package = _generate(python, url, tmp_path)
    assert (package / "api" / "executions" / "create_execution.py").exists()
    run_id = f"generated-{uuid.uuid4().hex[:8]}"
    path = f"{run_id}.txt"
    ran = subprocess.run(
        [str(python), "-c", SCRIPT, url, ALICE, run_id, path],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen: dict[str, Any] = json.loads(ran.stdout)
    assert seen["tools"][0] == "ToolList" and "fs.write_file" in seen["tools"][1]
    assert seen["tool"] == "Tool"
    assert seen["created"][:2] == [202, "Execution"]
    assert seen["events"][0] == "tool.requested" and seen["events"][-1] == "tool.completed"
    assert "tool.started" in seen["events"]
    assert seen["final"] == [200, "completed", "succeeded"]
    assert seen["listed"] == [True]
    assert seen["missing"] == [404, "Problem", "not_found"]
    assert (workspace / path).read_text() == "written by a generated client"
