"""``check`` finds at load what used to wait for a call or a second run (issue 29.4).

- A template hole that a call can leave without a value (an optional argument without a
  default, a field below a nullable one) is a load error, except where the adapter gives "no
  value" a meaning (a process element marked ``optional``, an HTTP whole reference in
  ``query``/``headers``/``body``, a database bind from the arguments).
- A file's faults of shape no longer hide its faults of meaning until the next run.
- A misspelt key or value names the closest known one (difflib).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from gateway.testing import load_catalogue

HEAD = """\
name: t.{name}
version: 1.0.0
description: A tool.
adapter: {adapter}
operation: {operation}
risk: low
side_effect: {side_effect}
"""


def _faults(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "t.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_catalogue(tmp_path)
    return info.value.problems


def _loads(tmp_path: Path, text: str) -> None:
    (tmp_path / "t.yaml").write_text(text)
    load_catalogue(tmp_path)


PROCESS = HEAD.format(name="p", adapter="process", operation="run", side_effect="read")


def test_a_hole_an_optional_argument_can_leave_empty_is_a_load_error(tmp_path: Path) -> None:
    text = (
        PROCESS
        + """\
input:
  dir: {type: string}
  opts: {type: dict, required: true, nullable: true, schema: {depth: {type: integer}}}
  name: {type: string, default: x}
command: [ls, "{arguments.name}", "--depth={arguments.opts.depth}"]
locks:
  - key: "dir:{arguments.dir}"
"""
    )
    depth, lock = _faults(tmp_path, text)
    assert ":12: command.2: template '--depth={arguments.opts.depth}' has no value when " in depth
    assert "the nullable argument 'opts' is null (null has no fields)" in depth
    assert ":14: locks.0.key: template 'dir:{arguments.dir}' has no value when a call " in lock
    assert lock.endswith(
        "leaves out the optional argument 'dir' (no default): give it a default or make it required"
    )


def test_where_no_value_has_a_meaning_the_hole_may_be_empty(tmp_path: Path) -> None:
    _loads(
        tmp_path,
        PROCESS
        + """\
input: {dir: {type: string}}
command: [ls, {arg: "--dir={arguments.dir}", optional: true}]
""",
    )
    _loads(
        tmp_path,
        HEAD.format(name="h", adapter="http", operation="request", side_effect="read")
        + """\
input: {q: {type: string}, note: {type: string}}
method: POST
base_url: https://api.example.com
url: /search
query: {q: "{arguments.q}"}
body: {json: {note: "{arguments.note}"}}
""",
    )
    _loads(
        tmp_path,
        HEAD.format(name="d", adapter="database", operation="query", side_effect="read")
        + """\
connection: orders
input: {status: {type: string}}
sql: SELECT id FROM orders WHERE (:status IS NULL OR status = :status)
""",
    )
    text = (
        HEAD.format(name="h", adapter="http", operation="request", side_effect="read")
        + """\
input: {q: {type: string}}
method: GET
base_url: https://api.example.com
url: /search
query: {q: "text {arguments.q}"}
"""
    )
    [fault] = _faults(tmp_path, text)  # text around the hole: no key to leave out
    assert ": query.q: template 'text {arguments.q}' has no value when a call leaves out" in fault


def test_faults_of_shape_and_of_meaning_come_in_one_run(tmp_path: Path) -> None:
    """A key with a fault of shape (``kill_grace``) used to hide the second round (the
    template roots) until it was fixed; now it is left out and the second round runs."""
    text = (
        PROCESS
        + """\
input: {name: {type: string, required: true}}
command: [ls, "{arguments.name}"]
kill_grace: 90s
cwd: "{workspace.rot}"
"""
    )
    grace, cwd = _faults(tmp_path, text)
    assert ":10: kill_grace: kill_grace must be between 0s and 60s" in grace
    assert ":11: cwd: template '{workspace.rot}' uses workspace.rot, which no call has" in cwd


def test_a_fault_of_a_key_others_name_holds_their_checks_back(tmp_path: Path) -> None:
    """Without ``input`` (a fault of shape) every argument would look undeclared: those
    checks wait for it rather than report faults that are not there."""
    text = (
        PROCESS
        + """\
input: [name]
command: [ls, "{arguments.name}"]
"""
    )
    [fault] = _faults(tmp_path, text)
    assert ":8: input: " in fault


def test_every_fault_of_a_statement_at_once(tmp_path: Path) -> None:
    """A template in the SQL hid the second statement until the next run."""
    text = (
        HEAD.format(name="d", adapter="database", operation="query", side_effect="read")
        + """\
connection: orders
input: {id: {type: integer, required: true}}
sql: "SELECT * FROM orders WHERE id = {arguments.id}; DELETE FROM orders"
"""
    )
    [fault] = _faults(tmp_path, text)
    assert ":10: sql: SQL is never a template: {arguments.id} would splice text" in fault
    assert "; and must be one SQL statement: declare one tool per statement" in fault


def test_toolgate_yaml_faults_say_what_was_meant_and_never_echo_a_value(tmp_path: Path) -> None:
    """A misspelt key of toolgate.yaml gets the closest known key (in a section too), a
    value out of a few words the words; a refused value is never repeated (the file holds
    secrets: a short approval_secret must not end up in a CI log)."""
    config = tmp_path / "toolgate.yaml"
    config.write_text(
        "prot: 1\nmcp: {workspce: demo}\npolicy_backend: opaa\napproval_secret: hunter2\n"
    )
    with pytest.raises(ConfigError) as info:
        load_settings(config, env={})
    assert sorted(info.value.problems) == [
        f"{config}:1: prot: unknown key (did you mean 'port'?)",
        f"{config}:2: mcp.workspce: unknown key (did you mean 'workspace'?)",
        f"{config}:3: policy_backend: should be one of embedded, opa (did you mean 'opa'?)",
        f"{config}:4: approval_secret: String should have at least 32 characters",
    ]
