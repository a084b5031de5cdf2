"""The rule patterns of docs/policies.md, run as written: each fenced block whose first line is
``# rego/<file>`` or ``# policies/<file>`` is that file of a copy of the shipped project. The
``action`` patterns also decide real calls of the shipped tools, through the policy stage of a
real runtime; the CI example's ``toolgate`` commands run on a store of recorded calls."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.pipeline import normalise, policy, resolve, validate
from gateway.pipeline.records import Requested
from gateway.pipeline.request import parse_request
from gateway.policy.bundle import build
from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import load_policy_sources
from gateway.policy.standin import StandIn
from gateway.policy.testing import run_tests
from gateway.runtime.bootstrap import close_runtime, open_runtime
from gateway.settings import load_settings
from tests.policy.helpers import REPO, make_input
from tests.policy.test_extension import project_copy
from tests.policy.test_replay import record
from tests.server.helpers import body as request_body

BLOCK = re.compile(r"^```(?:rego|yaml)\n# ((?:rego|policies)/[\w.]+)\n(.*?)^```$", re.M | re.S)


def doc_files() -> dict[str, str]:
    text = (REPO / "docs" / "policies.md").read_text(encoding="utf-8")
    return {name: body for name, body in BLOCK.findall(text)}


def doc_pattern(name: str) -> dict[str, str]:
    """The files of one pattern: ``rego/<name>*`` and ``policies/<name>*``."""
    return {k: v for k, v in doc_files().items() if k.split("/")[1].startswith(name)}


def test_every_file_of_the_page_belongs_to_a_pattern_tested_here() -> None:
    assert set(doc_files()) == set(doc_pattern("business_hours")) | set(doc_pattern("actions"))


def test_the_business_hours_pattern_passes_its_tests_and_keeps_the_cache(tmp_path: Path) -> None:
    files = doc_pattern("business_hours")
    assert set(files) == {
        "policies/business_hours.yaml",
        "rego/business_hours.rego",
        "rego/business_hours_test.rego",
    }
    root = project_copy(tmp_path, {})
    for name, body in files.items():
        (root / name).write_text(body, encoding="utf-8")
    sources = load_policy_sources(root / "rego", root / "policies")
    assert sources.warnings == ()
    results = run_tests(sources, "business_hours").results
    assert [r.message for r in results if not r.passed] == []
    assert len(results) == 5

    backend = EmbeddedPolicy(sources)
    try:
        assert backend.cache_refusal is None  # time.clock and time.weekday of a given time
        assert backend._tree is not None and backend._tree["request"] == {"time_ms": None}

        def at(time_ms: int) -> str:
            doc = make_input(request={"time_ms": time_ms})
            return backend.decide_sync(doc).result.value

        assert at(1764579600000) == "allow"  # Monday 10:00 Paris
        assert at(1764615600000) == "deny"  # Monday 20:00
        assert at(1764579600000) == "allow"
    finally:
        asyncio.run(backend.aclose())


def test_a_policy_that_never_reads_the_time_keeps_one_cache_entry() -> None:
    backend = EmbeddedPolicy(load_policy_sources(REPO / "rego", REPO / "policies"))
    try:
        for time_ms in (1, 2, 3):
            assert backend.decide_sync(make_input(request={"time_ms": time_ms})).result.value == (
                "allow"
            )
        assert backend._cache is not None and len(backend._cache) == 1
    finally:
        asyncio.run(backend.aclose())


def test_the_action_patterns_pass_their_tests_and_keep_the_cache(tmp_path: Path) -> None:
    files = doc_pattern("actions")
    assert set(files) == {"policies/actions.yaml", "rego/actions.rego", "rego/actions_test.rego"}
    root = project_copy(tmp_path, {})
    for name, body in files.items():
        (root / name).write_text(body, encoding="utf-8")
    sources = load_policy_sources(root / "rego", root / "policies")
    assert sources.warnings == ()
    results = run_tests(sources, "actions_test").results
    assert [r.message for r in results if not r.passed] == []
    assert len(results) == 7
    backend = EmbeddedPolicy(sources)
    try:
        assert backend.cache_refusal is None
        assert backend._tree is not None
        assert backend._tree["action"] == {
            "kind": None, "method": None, "host": None, "statement": None, "argv": None
        }  # fmt: skip
    finally:
        asyncio.run(backend.aclose())


PURGE_TOOL = """
name: db.purge_order
version: 1.0.0
description: Delete one order of the example database.
adapter: database
operation: execute
connection: orders
risk: medium
side_effect: write
input:
  order_id: {type: integer, required: true, min: 1}
sql: "DELETE FROM orders WHERE id = :order_id"
locks:
  - {key: "db:orders:order:{arguments.order_id}", mode: exclusive}
idempotency: required
"""


@pytest.fixture
def action_project(tmp_path: Path) -> Path:
    root = project_copy(tmp_path, {})
    for name, body in doc_pattern("actions").items():
        (root / name).write_text(body, encoding="utf-8")
    (root / "tools.d" / "db.purge_order.yaml").write_text(PURGE_TOOL, encoding="utf-8")
    (root / "var" / "workspaces" / "demo").mkdir(parents=True)
    return root


@pytest.mark.parametrize("backend", ["embedded", "opa"])
def test_the_action_patterns_decide_real_calls_as_documented(
    action_project: Path, backend: str
) -> None:
    """Real calls of shipped tools (and a DELETE tool) through the policy stage of a real
    runtime: on the embedded engine, and on the OPA backend against the loopback stand-in."""
    opa = None
    if backend == "opa":
        opa = StandIn.from_bundle(
            build(load_policy_sources(action_project / "rego", action_project / "policies")).data,
            "127.0.0.1",
            0,
        )
        opa.start()
    try:
        extra = {"policy_backend": "opa", "opa_url": opa.url} if opa is not None else {}
        got = asyncio.run(_decide_calls(action_project, extra))
    finally:
        if opa is not None:
            opa.stop()
    assert got == {
        "post": ("require_approval", "a POST to 127.0.0.1 needs approval"),
        "get": ("allow", None),
        "delete": ("deny", "a delete statement is not allowed"),
        "update": ("allow", None),
        "forced": ("deny", "the command may not run with --force"),
        "plain": ("require_approval", None),  # proc.python runs agent code: approval anyway
    }


async def _decide_calls(project: Path, extra: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    url = f"sqlite:///{project / 'var' / 'toolgate.db'}"
    settings = load_settings(project / "toolgate.yaml", env={}, database_url=url, **extra)
    calls = {
        "post": ("orders.create", {"item_id": 1, "quantity": 1}),
        "get": ("orders.get", {"order_id": "ord_1"}),
        "delete": ("db.purge_order", {"order_id": 1}),
        "update": ("db.mark_shipped", {"order_id": 1, "carrier": "dhl", "tracking": "AB-1234"}),
        "forced": ("proc.python", {"script": "s.py", "args": ["--force"]}),
        "plain": ("proc.python", {"script": "s.py", "args": ["--fast"]}),
    }
    runtime = await open_runtime(settings)
    got: dict[str, tuple[str, str | None]] = {}
    try:
        for name, (tool, arguments) in calls.items():
            request = parse_request(request_body(tool, arguments, idempotency_key=name), "alice")
            resolved = await resolve.run(runtime, Requested.start(request))
            prepared = await validate.run(runtime, await normalise.run(runtime, resolved))
            decided = await policy.run(runtime, prepared)
            (event,) = [e for e in decided.trail.events if e.type == "policy.decided"]
            ours = [r for r in event.data["reasons"] if "(rule: actions." in r]
            got[name] = (str(event.data["result"]), ours[0].split(" (rule: ")[0] if ours else None)
    finally:
        await close_runtime(runtime)
    return got


CI_BLOCK = re.compile(r"^```yaml\n# \.github/workflows/policy\.yml\n(.*?)^```$", re.M | re.S)


def ci_commands() -> list[tuple[list[str], str | None, dict[str, str]]]:
    """The ``toolgate`` steps of the CI example: (argv after ``toolgate``, the file stdout is
    redirected to, the step's env)."""
    text = (REPO / "docs" / "policies.md").read_text(encoding="utf-8")
    (block,) = CI_BLOCK.findall(text)
    workflow = yaml.safe_load(block)
    assert workflow[True]["pull_request"]["paths"] == ["rego/**", "policies/**"]  # "on" is True
    out = []
    for step in workflow["jobs"]["policy"]["steps"]:
        words = shlex.split(step.get("run", ""))
        if words[:1] != ["toolgate"]:
            continue
        target = None
        if ">" in words:
            target = words[words.index(">") + 1]
            words = words[: words.index(">")]
        out.append((words[1:], target, dict(step.get("env") or {})))
    return out


def run_step(
    project: Path, argv: list[str], target: str | None, env: dict[str, str], store: str
) -> int:
    """One step as the runner would run it, the repository secret being the recorded store."""
    environ = {**os.environ, "PYTHONPATH": str(REPO), "RUST_LIB_BACKTRACE": "0"}
    environ.pop("TOOLGATE_CONFIG", None)
    for name, value in env.items():
        assert value == "${{ secrets.TOOLGATE_REPLAY_DATABASE_URL }}", value
        environ[name] = store
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", *argv],
        cwd=project,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in done.stderr, done.stderr
    if target is not None:
        (project / target).write_text(done.stdout, encoding="utf-8")
    return done.returncode


@pytest.mark.slow  # runs the toolgate command as a process
def test_the_ci_example_runs_and_fails_a_loosening_change(project: Path, tmp_path: Path) -> None:
    """The workflow's toolgate commands, as written, on a store of real recorded calls: the
    unchanged policy passes every step; a pull request lifting fs.delete_file's approval
    fails the tests (a shipped test pins that approval) and the replay step (exit 1, and
    replay.json says which decision loosens)."""
    record(project)
    (project / "var" / "toolgate.db").rename(tmp_path / "production.db")  # not the default
    store = f"sqlite:///{tmp_path / 'production.db'}"
    steps = ci_commands()
    assert [argv[:2] for argv, _, _ in steps] == [
        ["check"],
        ["policy", "test"],
        ["policy", "replay"],
    ]
    assert [run_step(project, *step, store=store) for step in steps] == [0, 0, 0]
    assert json.loads((project / "replay.json").read_text())["changes"] == []

    rules = project / "policies" / "rules.yaml"
    data = yaml.safe_load(rules.read_text())
    data["tool_overrides"]["fs.delete_file"] = {"approval": False}
    rules.write_text(yaml.safe_dump(data))
    assert [run_step(project, *step, store=store) for step in steps] == [0, 1, 1]
    report = json.loads((project / "replay.json").read_text())
    assert report["failed"] is True
    assert [(c["tool"], c["direction"]) for c in report["changes"]] == [
        ("fs.delete_file", "deny-to-allow")
    ]
