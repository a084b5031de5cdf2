"""Every fault of every file at once, each at its own key and line (issue 11, bugs 4 and 5).

Adapter keys used to be checked by one model-level validator that stopped at the first fault
and reported it at ``file:1: (document)``; template references below the roots other than
``arguments`` were not checked at load at all (``cwd: "{workspace.rot}"`` loaded, and failed
each call after its approval).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.declarations.templates import FIELDS
from gateway.errors import ConfigError
from gateway.pipeline.context import template_context
from gateway.pipeline.records import Call, Ticket
from gateway.testing import load_catalogue
from gateway.workspace import Workspace
from tests.pipeline.fakes import request as fake_request

HEAD = """\
name: {name}
version: 1.0.0
description: A tool with faults.
adapter: {adapter}
operation: {operation}
risk: low
side_effect: read
"""

# Each file: its text, and the (line, key, fragment) of every fault it must report.
FAULTY: dict[str, tuple[str, list[tuple[int, str, str]]]] = {
    "proc.yaml": (
        HEAD.format(name="t.proc", adapter="process", operation="run")
        + """\
input:
  script: {type: string}
command:
  - "{arguments.script}"
  - run
success_exit_codes: [0, 300]
kill_grace: 90s
env:
  allow: [HOME, BAD-NAME]
""",
        [
            (11, "command.0", "command[0] (the program) must be a fixed"),
            (13, "success_exit_codes.1", "between 0 and 255"),
            (14, "kill_grace", "kill_grace must be between 0s and 60s"),
            (16, "env.allow.1", "'BAD-NAME' is not an environment variable name"),
        ],
    ),
    "http.yaml": (
        HEAD.format(name="t.http", adapter="http", operation="request")
        + """\
method: GET
base_url: https://api.example.com
service: orders
url: /items
idempotency_header: Idempotency-Key
headers:
  Accept: application/json
  idempotency-key: "{request.call_id}"
body: {json: {a: 1}}
""",
        [
            (10, "service", "declare base_url or service, not both"),
            (15, "headers.idempotency-key", "is the idempotency_header"),
            (16, "body", "a GET request has no body"),
        ],
    ),
    # Faults of single keys come together; rules across keys (above) run once each key is
    # valid by itself.
    "http2.yaml": (
        HEAD.format(name="t.http2", adapter="http", operation="request")
        + """\
method: GET
url: ftp://files.example.com/x
redirects: 20
headers:
  Authorization: Bearer s3cret
  X-Trace: "1"
  Host: evil.example.com
""",
        [
            (9, "url", "must be an absolute http(s) URL"),
            (10, "redirects", "less than or equal to 10"),
            (12, "headers.Authorization", "carries credentials"),
            (14, "headers.Host", "is set by the gateway"),
        ],
    ),
    "web.yaml": (
        HEAD.format(name="t.web", adapter="browser", operation="steps")
        + """\
steps:
  - open: https://example.com
  - fill: "#q"
    full_page: true
  - extract: "#r"
    as: attribute
""",
        [
            (10, "steps.1", "a fill step needs 'value'"),
            (11, "steps.1.full_page", "'full_page' does not apply to a fill step"),
            (13, "steps.2.as", "extract as: attribute needs 'attribute'"),
        ],
    ),
    # Parses: the second round (what the file means) reports these.
    "refs.yaml": (
        HEAD.format(name="t.refs", adapter="process", operation="run")
        + """\
input:
  name: {type: string, required: true}
  items: {type: list, required: true, schema: {type: string}}
  opts: {type: dict, required: true, schema: {depth: {type: integer}}}
command: [python, "{arguments.name.first}", "{arguments.items.x}", "{arguments.opts.width}"]
cwd: "{workspace.rot}"
stdin: "{actor.user_id}{request.call}{execution.id.x}"
env:
  set: {WHO: "{arguments.items.*}"}
locks:
  - key: "ws:{workspace.id}:{tool.title}"
junit: "reports/{arguments.report}.xml"
""",
        [
            (12, "command.1", "arguments.name is a string and has no fields"),
            (12, "command.2", "arguments.items is a list"),
            (12, "command.3", "arguments.opts.width, which arguments.opts does not declare"),
            (13, "cwd", "workspace.rot, which no call has (known: workspace.id, workspace.root)"),
            (14, "stdin", "request.call, which no call has"),
            (14, "stdin", "execution.id is text and has no fields"),
            (16, "env.set.WHO", "only a lock key can do"),
            (18, "locks.0.key", "tool.title, which no call has (known: tool.name, tool.version)"),
            (19, "junit", "arguments.report, which input does not declare"),
        ],
    ),
}


def write_faulty(tools: Path) -> None:
    tools.mkdir(parents=True, exist_ok=True)
    for name, (text, _) in FAULTY.items():
        (tools / name).write_text(text)


def expected_faults(tools: Path) -> list[tuple[str, str]]:
    """(``file:line: key:`` prefix, message fragment) of every fault FAULTY must report."""
    return [
        (f"{tools / name}:{line}: {key}: ", fragment)
        for name, (_, faults) in sorted(FAULTY.items())
        for line, key, fragment in faults
    ]


def assert_all_reported(problems: list[str], tools: Path) -> None:
    expected = expected_faults(tools)
    for prefix, fragment in expected:
        assert any(p.startswith(prefix) and fragment in p for p in problems), (
            f"no fault {prefix}...{fragment} in:\n" + "\n".join(problems)
        )
    assert len(problems) == len(expected), "\n".join(problems)
    assert not any("(document)" in p for p in problems)


def test_every_adapter_key_fault_of_every_file_at_its_line(tmp_path: Path) -> None:
    write_faulty(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_catalogue(tmp_path)
    assert_all_reported(info.value.problems, tmp_path)


def test_faults_of_one_file_come_in_line_order(tmp_path: Path) -> None:
    write_faulty(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_catalogue(tmp_path)
    proc = [p for p in info.value.problems if "proc.yaml:" in p]
    lines = [int(p.split(".yaml:")[1].split(":")[0]) for p in proc]
    assert lines == sorted(lines) and len(lines) == 4


GOOD_PROC = (
    HEAD.format(name="t.ok", adapter="process", operation="run")
    + """\
input:
  files:
    type: list
    required: true
    schema: {type: dict, schema: {path: {type: string, required: true}}}
  extra: {type: dict, required: true}
  name: {type: string, default: x}
command:
  - python
  - "{arguments.files.0.path}"
  - "{arguments.extra.anything.below}"
  - "{arguments}"
  - "{workspace.id}{workspace.root}{actor.user_id}{actor.agent_id}{tool.name}{tool.version}"
  - "{request.run_id}{request.turn_id}{request.call_id}{request.idempotency_key}"
  - "{execution.id}{sha256(arguments.name)}{workspace}"
cwd: "{workspace.root}"
locks:
  - key: "ws:{workspace.id}:f:{arguments.files.*.path}"
"""
)


def test_every_field_a_call_has_loads(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text(GOOD_PROC)
    assert load_catalogue(tmp_path).resolve("t.ok").options is not None


def test_a_lock_key_walks_one_list(tmp_path: Path) -> None:
    text = GOOD_PROC.replace(
        "{arguments.files.*.path}", "{arguments.files.*.path}:{arguments.extra.*}"
    )
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_catalogue(tmp_path)
    assert len(info.value.problems) == 1
    assert ":25: locks.0.key: " in info.value.problems[0]
    assert "walks one list" in info.value.problems[0]


def test_known_fields_are_what_a_call_fills_in(tmp_path: Path) -> None:
    """templates.FIELDS (what the load accepts) is exactly what the pipeline provides."""
    (tmp_path / "ok.yaml").write_text(GOOD_PROC)
    tool = load_catalogue(tmp_path).resolve("t.ok")
    request = fake_request(tool.name, call_id="c", arguments={}, agent_id="a")
    ticket = Ticket(request, "ex_1", 0)
    call = Call(ticket, tool, Workspace("demo", tmp_path), {}, "0" * 64, {}, ())
    context = template_context(call)
    assert set(context) == set(FIELDS)
    for root, fields in FIELDS.items():
        if root != "arguments":
            assert set(context[root]) == fields, root
            assert all(isinstance(v, str) for v in context[root].values()), root
