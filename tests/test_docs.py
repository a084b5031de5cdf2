"""Keep docs/ true to the code: every field, route, error code and setting is documented.

Each test names what is missing, and what to do about it, when it fails.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.routing import Route

from gateway import cli, faults
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ConfigError
from gateway.events.model import EVENT_TYPES
from gateway.pipeline import policy
from gateway.pipeline.records import Call, Requested
from gateway.server.app import create_app
from gateway.settings import ENV_VARIABLES, RELOADABLE, JwtSettings, Settings
from gateway.types import ApprovalStatus, Outcome, Status
from gateway.workspace import Workspace
from tests.pipeline.fakes import request as fake_request

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
SCHEMA = DOCS / "tool-declaration.schema.json"
OWNED = ("api.md", "configuration.md", "failures.md", "policies.md", "quickstart.md", "tools.md")
"""The pages these tests keep true (docs/adapters/ has its own owners)."""


def doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def table_keys(text: str) -> set[str]:
    """The names a Markdown table row is about: a first cell made only of `code` spans."""
    keys: set[str] = set()
    for line in text.splitlines():
        if line.startswith("| "):
            first = line[2:].split(" | ", 1)[0]
            names = re.findall(r"`([^`]+)`", first)
            if names and not re.sub(r"`[^`]+`|[,\s]", "", first):
                keys.update(names)
    return keys


def missing_from_table(names: set[str], text: str) -> list[str]:
    listed = table_keys(text)
    return sorted(name for name in names if name not in listed)


def section(text: str, heading: str) -> str:
    """The body of the section whose heading line is ``heading``, up to the next heading of
    the same or a higher level (subsections included)."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    assert heading in lines, f"no heading {heading!r}"
    start = lines.index(heading) + 1
    end = next(
        (
            i
            for i in range(start, len(lines))
            if re.match(rf"#{{1,{level}}} ", lines[i]) and not _in_fence(lines, i)
        ),
        len(lines),
    )
    return "\n".join(lines[start:end])


def _in_fence(lines: list[str], index: int) -> bool:
    return sum(line.startswith("```") for line in lines[:index]) % 2 == 1


def mentioned(name: str, text: str) -> bool:
    """``name`` appears in backticks in ``text``."""
    return f"`{name}`" in text


# --- tools.md ---------------------------------------------------------------------------------


def test_every_declaration_key_is_in_tools_md() -> None:
    keys = set(ToolDeclaration.model_fields)
    assert len(keys) > 15
    missing = missing_from_table(keys, doc("tools.md"))
    assert not missing, (
        f"docs/tools.md has no table row for the declaration keys {missing}: add a row "
        "'| `key` | type | default | meaning |' to 'Every key'"
    )


def test_schema_file_is_what_toolgate_schema_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["schema"]) == 0
    printed = capsys.readouterr().out
    assert SCHEMA.exists(), f"{SCHEMA} is missing"
    assert SCHEMA.read_text(encoding="utf-8") == printed, (
        f"docs/{SCHEMA.name} is stale: regenerate it with "
        "'.venv/bin/toolgate schema > docs/tool-declaration.schema.json'"
    )


# --- api.md -----------------------------------------------------------------------------------


def _routes() -> set[str]:
    app = create_app(Settings(base_dir=REPO))
    found = set()
    for route in app.routes:
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD":
                found.add(f"{method} {route.path}")
    return found


def test_every_route_is_in_api_md() -> None:
    routes = _routes()
    assert "POST /v1/executions" in routes
    text = doc("api.md")
    missing = sorted(r for r in routes if f"`{r}`" not in text)
    assert not missing, f"docs/api.md does not document the routes {missing} (as `METHOD /path`)"


def _strings(node: ast.AST) -> Iterator[str]:
    """The strings an expression can evaluate to (an f-string: its leading text plus ``*``).

    Conditions (``x if state == "used" else y``) and ``getattr(obj, "name")`` are not values.
    """
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            yield node.value
    elif isinstance(node, ast.JoinedStr):
        head = node.values[0] if node.values else None
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            yield head.value + "*"
    elif isinstance(node, ast.IfExp):
        yield from _strings(node.body)
        yield from _strings(node.orelse)
    elif isinstance(node, ast.Compare) or (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
    ):
        return
    else:
        for child in ast.iter_child_nodes(node):
            yield from _strings(child)


def _is_code(target: ast.AST) -> bool:
    return (isinstance(target, ast.Name) and target.id == "code") or (
        isinstance(target, ast.Attribute) and target.attr == "code"
    )


def _code_value(node: ast.AST) -> ast.AST | None:
    """The expression ``node`` gives as an error code, if it gives one."""
    if isinstance(node, ast.keyword):
        return node.value if node.arg == "code" else None
    if isinstance(node, ast.Assign):
        return node.value if any(_is_code(t) for t in node.targets) else None
    if isinstance(node, ast.AnnAssign):
        return node.value if _is_code(node.target) else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.args[1] if node.func.id == "problem" and len(node.args) >= 2 else None
    return None


def error_codes(paths: Iterable[Path] | None = None) -> dict[str, str]:
    """Every error code in gateway/ (or in ``paths``) → where it is first used.

    Read from the source: ``code="..."`` arguments (conditional ones too), ``code = "..."``
    class defaults and assignments, and the code argument of ``problem(status, "...", ...)``.
    An f-string code (``f"approval_{state}"``) is kept as its prefix with ``*``.
    """
    found: dict[str, str] = {}
    for path in sorted(paths if paths is not None else (REPO / "gateway").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        where = str(path.relative_to(REPO))
        for node in ast.walk(tree):
            value = _code_value(node)
            if value is None:
                continue
            for text in _strings(value):
                if re.fullmatch(r"[a-z][a-z0-9_]*\*?", text):
                    found.setdefault(text, f"{where}:{getattr(node, 'lineno', '?')}")
    return found


def documented(code: str, text: str) -> bool:
    """`code` is in backticks in ``text``; a ``prefix*`` code needs one code with that prefix."""
    if code.endswith("*"):
        return re.search(r"`" + re.escape(code[:-1]) + r"[a-z0-9_]+`", text) is not None
    return f"`{code}`" in text


def test_every_error_code_is_in_api_md() -> None:
    codes = error_codes()
    for known in ("tool_not_found", "verification_unavailable", "method_not_allowed", "internal"):
        assert known in codes, f"the code scan no longer finds {known!r}: fix error_codes()"
    text = doc("api.md")
    missing = sorted(f"{c} ({where})" for c, where in codes.items() if not documented(c, text))
    assert not missing, f"docs/api.md does not document the error codes {missing}"


def test_every_event_type_is_in_api_md() -> None:
    missing = missing_from_table(set(EVENT_TYPES), doc("api.md"))
    assert not missing, f"docs/api.md has no row in the event table for {missing}"


def test_every_event_type_is_in_api_md_or_failures_md() -> None:
    text = doc("api.md") + doc("failures.md")
    missing = sorted(t for t in EVENT_TYPES if not mentioned(t, text))
    assert not missing, f"neither docs/api.md nor docs/failures.md mentions the events {missing}"


def _event_like(text: str) -> set[str]:
    """Backticked names shaped like an event type (``tool.started``) in ``text``."""
    prefixes = "|".join(sorted({t.split(".")[0] for t in EVENT_TYPES}))
    return set(re.findall(rf"`((?:{prefixes})\.[a-z_]+)`", text))


def test_failures_md_names_only_real_event_types() -> None:
    invented = sorted(_event_like(doc("failures.md")) - set(EVENT_TYPES))
    assert not invented, (
        f"docs/failures.md names events that gateway/events/model.py does not have: {invented}"
    )


def test_every_status_is_in_api_md() -> None:
    text = section(doc("api.md"), "## The execution resource")
    missing = missing_from_table({s.value for s in Status}, text)
    assert not missing, (
        f"docs/api.md 'The execution resource' has no row for the statuses {missing}"
    )


def test_every_approval_status_and_its_refusal_code_is_in_api_md() -> None:
    """One table of approval statuses in api.md, a row for each naming the 409 code a decision
    on it gets (``approval_<status>``), and those codes listed with approve and deny."""
    statuses = {s.value for s in ApprovalStatus}
    api = doc("api.md")
    table = section(api, "#### GET /v1/approvals/{approval_id}")
    listed = table_keys(table)
    assert listed == statuses, (
        f"docs/api.md's approval statuses: missing {sorted(statuses - listed)}, "
        f"not statuses of ApprovalStatus {sorted(listed - statuses)}"
    )
    decide = section(api, "#### POST /v1/approvals/{approval_id}/approve and /deny")
    for status in statuses - {"pending"}:
        code = f"approval_{status}"
        row = next(line for line in table.splitlines() if line.startswith(f"| `{status}` |"))
        assert mentioned(code, row), f"docs/api.md: the row of `{status}` does not name `{code}`"
        assert mentioned(code, decide), f"docs/api.md: approve and deny do not list `{code}`"


def test_every_outcome_is_in_the_result_table_of_api_md() -> None:
    missing = missing_from_table({o.value for o in Outcome}, doc("api.md"))
    assert not missing, f"docs/api.md has no row in the outcome table for {missing}"


# --- failures.md ------------------------------------------------------------------------------

CHAOS = "## Chaos-testing your own declarations"


def test_every_outcome_is_in_failures_md() -> None:
    text = section(doc("failures.md"), "## Reading a failure")
    missing = missing_from_table({o.value for o in Outcome}, text)
    assert not missing, (
        f"docs/failures.md 'Reading a failure' has no row in the outcome table for {missing}"
    )


def fault_actions() -> set[str]:
    """The action names gateway/faults.py understands, read from its comparisons
    (``action in ("crash", ...)``, ``kind == "delay"``) and checked by ``Faults.parse``."""
    tree = ast.parse((REPO / "gateway" / "faults.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Name)
            and node.left.id in ("action", "kind")
        ):
            for comparator in node.comparators:
                found.update(
                    c.value
                    for c in ast.walk(comparator)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
    for action in found:
        spelled = f"{action}:5" if action == "delay" else action
        faults.Faults.parse(f"after_commit:{spelled}")  # raises if it is not an action
    return found


def test_every_fault_point_and_action_is_in_failures_md() -> None:
    actions = fault_actions()
    assert {"crash", "raise", "delay", "store_unavailable"} <= actions, (
        f"the action scan finds only {sorted(actions)}: fix fault_actions()"
    )
    text = section(doc("failures.md"), CHAOS)
    keys = table_keys(text)
    missing_points = sorted(faults.POINTS - keys)
    assert not missing_points, (
        f"docs/failures.md '{CHAOS}' has no row in the point table for {missing_points}"
    )
    missing_actions = sorted(
        a for a in actions if a not in keys and not any(k.startswith(a + ":") for k in keys)
    )
    assert not missing_actions, (
        f"docs/failures.md '{CHAOS}' has no row in the action table for {missing_actions} "
        "(write `delay:MS` for an action with an argument)"
    )


def test_failures_md_lists_no_unknown_fault_point_or_action() -> None:
    for key in sorted(table_keys(section(doc("failures.md"), CHAOS))):
        if key in faults.POINTS:
            continue
        try:
            faults.Faults.parse("after_commit:" + re.sub(r"[A-Z]+$", "5", key))
        except ConfigError:
            pytest.fail(f"docs/failures.md '{CHAOS}' lists {key!r}, which is no point or action")


def test_every_gateway_crash_point_has_a_recovery_row() -> None:
    text = section(doc("failures.md"), "## Gateway crash")
    missing = missing_from_table(set(faults.POINTS), text)
    assert not missing, f"docs/failures.md 'Gateway crash' has no row for the points {missing}"


RECOVERY_MODULES = (
    "gateway/runtime/cancellation.py",
    "gateway/runtime/recovery.py",
    "gateway/pipeline/execute.py",
    "gateway/pipeline/existing.py",
    "gateway/pipeline/guards.py",
    "gateway/pipeline/lock.py",
    "gateway/pipeline/reserve.py",
    "gateway/pipeline/result.py",
    "gateway/pipeline/runner.py",
    "gateway/pipeline/validate.py",
    "gateway/pipeline/verify.py",
)
"""Where the gateway decides how a call fails after it was accepted: every code they give
must be explained, with what to do, in docs/failures.md."""


def test_every_failure_code_of_the_pipeline_is_in_failures_md() -> None:
    codes = error_codes(REPO / m for m in RECOVERY_MODULES)
    for known in ("interrupted", "lock_timeout", "already_completed", "timeout"):
        assert known in codes, f"the code scan no longer finds {known!r}: fix RECOVERY_MODULES"
    text = doc("failures.md")
    missing = sorted(f"{c} ({where})" for c, where in codes.items() if not documented(c, text))
    assert not missing, f"docs/failures.md does not explain the error codes {missing}"


# --- links between the pages ------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    lines = text.splitlines()
    found: set[str] = set()
    for i, line in enumerate(lines):
        if re.match(r"#{1,6} ", line) and not _in_fence(lines, i):
            base = slug(line.lstrip("#"))
            name, n = base, 0
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def links(text: str) -> Iterator[tuple[str, str]]:
    """(file, anchor) of every relative link outside code blocks; file is ``""`` for the
    page itself."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("```") or _in_fence(lines, i):
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            yield file, anchor


@pytest.mark.parametrize("page", OWNED)
def test_links_resolve(page: str) -> None:
    broken = []
    for file, anchor in links(doc(page)):
        target = (DOCS / file) if file else (DOCS / page)
        if not target.is_file():
            broken.append(f"{file}#{anchor}: no such file")
        elif anchor and anchor not in anchors(target.read_text(encoding="utf-8")):
            broken.append(f"{file or page}#{anchor}: no such heading")
    assert not broken, f"docs/{page} has broken links: {broken}"


# --- citations --------------------------------------------------------------------------------

TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".rego", ".toml", ".json", ".txt", ".cfg", ".sh"}
NOT_OURS = {".git", ".venv", "var", "build", "dist", "node_modules", "__pycache__"}
GONE_DOCUMENT = re.compile("DESIGN" + r"\s*(§|section\b)", re.IGNORECASE)
"""A citation of the design document, which is not in the repository (spelt so that this
file does not match itself)."""
CITED_ANCHOR = re.compile(r"docs/([\w/.-]+\.md)#([\w-]+)")


def text_files() -> Iterator[Path]:
    """The repository's own text files (not the virtualenv, the database, caches)."""
    for top, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if d not in NOT_OURS and not d.startswith("."))
        for name in sorted(files):
            path = Path(top) / name
            if path.suffix in TEXT_SUFFIXES or name == "Makefile":
                yield path


def test_nothing_cites_a_document_that_is_not_in_the_repository() -> None:
    files = list(text_files())
    assert REPO / "gateway" / "cli.py" in files and REPO / "docs" / "api.md" in files
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if GONE_DOCUMENT.search(line)
    ]
    assert not found, (
        f"these lines cite the design document, which readers of the repository do not have: "
        f"{found}; cite the section of a docs/ page that says it, by its anchor"
    )


def test_cited_doc_sections_exist() -> None:
    broken = []
    for path in text_files():
        if path.is_relative_to(DOCS):
            continue  # the pages' own links are checked by test_links_resolve
        for page, anchor in CITED_ANCHOR.findall(
            path.read_text(encoding="utf-8", errors="replace")
        ):
            target = DOCS / page
            if not target.is_file() or anchor not in anchors(target.read_text(encoding="utf-8")):
                broken.append(f"{path.relative_to(REPO)}: docs/{page}#{anchor}")
    assert not broken, f"these cite a docs/ section that does not exist: {broken}"


# --- examples ---------------------------------------------------------------------------------

EXAMPLE_PAGES = ("README.md", "docs/quickstart.md", "docs/api.md")
"""Pages a reader runs in order against one gateway: their calls must not collide."""


def fenced_blocks(text: str) -> Iterator[tuple[str, str]]:
    """(info string, body) of every fenced code block."""
    for match in re.finditer(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", text, re.M | re.S):
        yield match.group(1).strip(), match.group(2)


def example_requests(text: str) -> Iterator[dict[str, object]]:
    """The JSON bodies (``-d '...'``) with a run_id and call_id in the page's ``sh`` blocks,
    with an ``Idempotency-Key`` header sent along as ``idempotency_key``."""
    for info, block in fenced_blocks(text):
        if info != "sh":
            continue
        for command in re.split(r"\n(?=curl |\S+=\S* )", block):
            for raw in re.findall(r"-d '((?:[^']|'\\'')*)'", command):
                body = json.loads(raw.replace("'\\''", "'"))
                if isinstance(body, dict) and "run_id" in body and "call_id" in body:
                    key = re.search(r"Idempotency-Key: ([^'\"]+)", command)
                    if key:
                        body["idempotency_key"] = key.group(1)
                    yield body


def test_example_calls_do_not_collide() -> None:
    """Run in order, README, quickstart and api.md examples never reuse a (run_id, call_id)
    for another request (the gateway would answer 409 call_id_reused)."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    clashes, count = [], 0
    for page in EXAMPLE_PAGES:
        for body in example_requests((REPO / page).read_text(encoding="utf-8")):
            count += 1
            pair = (str(body["run_id"]), str(body["call_id"]))
            text = json.dumps(body, sort_keys=True)
            if pair in seen and seen[pair][1] != text:
                clashes.append(f"{pair} in {seen[pair][0]} and {page}")
            seen.setdefault(pair, (page, text))
    assert count >= 10, f"found only {count} example calls: fix example_requests()"
    assert not clashes, (
        f"these examples send different calls with the same (run_id, call_id): {clashes}; "
        "give each page a run_id of its own"
    )


@pytest.mark.slow
def test_example_calls_run_in_order_against_a_gateway(tmp_path: Path) -> None:
    """The same calls sent, page after page, to one real gateway: each is accepted (200 or
    202), none is refused as a reused call id or key."""
    import httpx

    from gateway.testing import gateway, make_project

    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    answers = []
    with gateway(config) as url:
        for page in EXAMPLE_PAGES:
            for body in example_requests((REPO / page).read_text(encoding="utf-8")):
                response = httpx.post(
                    f"{url}/v1/executions",
                    json=body,
                    headers={"Authorization": "Bearer tg_dev_alice"},
                    timeout=60,
                )
                answers.append((page, body["call_id"], response.status_code, response.text))
    refused = [a for a in answers if a[2] not in (200, 202)]
    assert len(answers) >= 10 and not refused, refused


BY_NAME = re.compile(r"\b(pgrep|pkill|killall)\b")
"""A process looked up by name: on a shared machine, every user's gateway matches."""


def test_no_recipe_finds_the_gateway_by_its_name() -> None:
    """Issue 29.6: ``kill -HUP "$(pgrep -f 'toolgate serve')"`` matched three processes, two
    of them other users' gateways. Recipes use ``toolgate reload`` or a known pid."""
    pages = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
    found = [
        f"{page.relative_to(REPO)}: {line.strip()}"
        for page in pages
        for _info, block in fenced_blocks(page.read_text(encoding="utf-8"))
        for line in block.splitlines()
        if BY_NAME.search(line)
    ]
    assert not found, f"these recipes find a process by name: {found}"


TASK_PAGES = sorted((DOCS / "tasks").glob("*.md"))


@pytest.mark.parametrize(
    "page", [REPO / "README.md", *TASK_PAGES], ids=lambda p: str(p.relative_to(REPO))
)
def test_links_resolve_in_readme_and_task_pages(page: Path) -> None:
    """Links are relative to the page's own directory."""
    broken = []
    for file, anchor in links(page.read_text(encoding="utf-8")):
        target = (page.parent / file).resolve() if file else page
        if not target.is_file():
            broken.append(f"{file}#{anchor}: no such file")
        elif anchor and anchor not in anchors(target.read_text(encoding="utf-8")):
            broken.append(f"{file or page.name}#{anchor}: no such heading")
    assert not broken, f"{page.relative_to(REPO)} has broken links: {broken}"


# --- policies.md ------------------------------------------------------------------------------


def _policy_input() -> dict[str, object]:
    tool = ToolDeclaration.model_validate(
        {
            "name": "fs.write_file",
            "version": "1.2.0",
            "description": "Write a file.",
            "adapter": "file",
            "operation": "atomic_replace",
            "risk": "medium",
            "side_effect": "write",
            "input": {"path": {"type": "string"}, "content": {"type": "string"}},
            "paths": ["path"],
        }
    )
    request = fake_request(tool.name, run_id="r1", turn_id="t1", agent_id="coder")
    call = Call(
        ticket=Requested.start(request).ticket,
        tool=tool,
        workspace=Workspace("demo", REPO / "var" / "workspaces" / "demo"),
        arguments={"path": "a.txt", "content": "hi", "create_dirs": True},
        arguments_sha256="0" * 64,
        paths={},
        roles=("agent",),
    )
    return policy.policy_input(call)


def test_every_top_level_policy_input_field_is_in_policies_md() -> None:
    document = _policy_input()
    missing = missing_from_table(set(document), doc("policies.md"))
    assert not missing, (
        f"docs/policies.md has no row in 'The input document' for the fields {missing}"
    )


def test_every_nested_policy_input_field_is_in_policies_md() -> None:
    nested = {
        f"{key}.{sub}"
        for key, value in _policy_input().items()
        if isinstance(value, dict) and key != "arguments"
        for sub in value
    }
    assert "request.deadline_ms_left" in nested
    text = doc("policies.md")
    missing = sorted(name for name in nested if f"`{name}`" not in text)
    assert not missing, f"docs/policies.md does not describe the input fields {missing}"


# --- configuration.md -------------------------------------------------------------------------


def test_every_setting_is_in_configuration_md() -> None:
    missing = missing_from_table(set(Settings.model_fields), doc("configuration.md"))
    assert not missing, f"docs/configuration.md has no row in 'Keys' for the settings {missing}"


def test_the_reloadable_keys_are_the_ones_deploy_md_names() -> None:
    """Issue 29.3: reload, check and the docs share one list (``settings.RELOADABLE``)."""
    text = section(doc("deploy.md"), "## Reload")
    match = re.search(r"applies its reloadable keys: ((?:`[a-z_.]+`(?:, )?)+)", text)
    assert match, "deploy.md#reload does not list the reloadable keys of toolgate.yaml"
    assert set(re.findall(r"`([^`]+)`", match.group(1))) == set(RELOADABLE)


def test_every_key_of_the_jwt_section_is_in_configuration_md() -> None:
    names = {f"jwt.{name}" for name in JwtSettings.model_fields}
    assert "jwt.issuer" in names
    missing = missing_from_table(names, doc("configuration.md"))
    assert not missing, (
        f"docs/configuration.md 'JWT bearer tokens' has no row for the keys {missing}"
    )


def test_every_keys_subcommand_is_in_configuration_md() -> None:
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    keys = next(a for a in commands["keys"]._actions if a.dest == "keys_command").choices
    assert {"hash", "revoke"} <= set(keys)
    text = section(doc("configuration.md"), "## Commands")
    missing = sorted(name for name in keys if f"`toolgate keys {name}" not in text)
    assert not missing, f"docs/configuration.md 'Commands' does not list `toolgate keys` {missing}"


def test_every_environment_variable_is_in_configuration_md() -> None:
    names = set(ENV_VARIABLES)
    missing = missing_from_table(names, doc("configuration.md"))
    assert not missing, f"docs/configuration.md has no row for the variables {missing}"


# --- mcp.md ---------------------------------------------------------------------------------


def mcp_meta_keys() -> set[str]:
    """Every ``_meta`` key gateway/mcp reads or writes: the ``io.toolgate/`` constants of
    gateway/mcp/meta.py, and the protocol's own keys the endpoint reads."""
    from gateway.mcp import meta

    names = {v for v in vars(meta).values() if isinstance(v, str) and v.startswith(meta.PREFIX)}
    names.discard(meta.PREFIX)
    return names | {meta.TRACEPARENT, "progressToken"}


def test_every_mcp_meta_key_is_in_mcp_md() -> None:
    from gateway.mcp import meta

    keys = mcp_meta_keys()
    assert set(meta.READ_KEYS) <= keys and set(meta.WRITTEN_KEYS) <= keys
    missing = missing_from_table(keys, doc("mcp.md"))
    assert not missing, f"docs/mcp.md has no table row for the _meta keys {missing}"


def test_every_public_name_of_the_test_kit_is_in_writing_md() -> None:
    """gateway.testing is public (issue 13 §1): each name it exports has a row in the
    Testing table of docs/adapters/writing.md, and the page is linked from tools.md."""
    from gateway import testing

    table = section(doc("adapters/writing.md"), "## Testing")
    missing = missing_from_table(set(testing.__all__), table)
    assert not missing, f"add a row to docs/adapters/writing.md#testing for {missing}"
    assert "(adapters/writing.md)" in doc("tools.md"), "link docs/adapters/writing.md"


# --- the checks themselves --------------------------------------------------------------------


def test_the_checks_can_fail() -> None:
    """The helpers report what a document lacks (so a passing test means something)."""
    text = "| `name` | string |\n| `a`, `b` | x |\n| size (`risk`) | x |\nprose: `tags`\n"
    assert missing_from_table({"name", "a", "b", "risk", "tags"}, text) == ["risk", "tags"]
    assert "policy_denied" in error_codes()
    assert "io.toolgate/run_id" in mcp_meta_keys()
    page = (
        "# T\n## A b\n```\n## not a heading\n```\n| `x` | 1 |\n### Sub\n| `y` | 2 |\n## C\n| `z` |"
    )
    assert table_keys(section(page, "## A b")) == {"x", "y"}
    assert anchors(page) == {"t", "a-b", "sub", "c"}
    cancel = slug(" POST /v1/executions/{execution_id}/cancel")
    assert cancel == "post-v1executionsexecution_idcancel"
    assert list(links("see [a](api.md#x) and [b](#y), [c](https://e.org)\n")) == [
        ("api.md", "x"),
        ("", "y"),
    ]
    assert _event_like("`tool.started` `tool.exploded` `error.type`") == {
        "tool.started",
        "tool.exploded",
    }
    with pytest.raises(ConfigError):
        faults.Faults.parse("after_commit:explode")
    assert GONE_DOCUMENT.search("see " + "DESIGN" + " §8") and GONE_DOCUMENT.search(
        "(" + "DESIGN" + " section 3)"
    )
    assert not GONE_DOCUMENT.search("docs/api.md#idempotency")
    assert CITED_ANCHOR.findall("(docs/api.md#toolresult).") == [("api.md", "toolresult")]
    sample = (
        "```sh\ncurl -s $TG -H 'Idempotency-Key: k'\\\n"
        '  -d \'{"run_id": "r", "call_id": "c"}\'\n'
        'curl -s $TG -d \'{"run_id": "r", "call_id": "d", "note": "\'\\\'\'x\'\\\'\'"}\'\n```\n'
        '```json\n{"run_id": "r", "call_id": "e"}\n```\n'
    )
    assert list(example_requests(sample)) == [
        {"run_id": "r", "call_id": "c", "idempotency_key": "k"},
        {"run_id": "r", "call_id": "d", "note": "'x'"},
    ]


# --- operations.md --------------------------------------------------------------------------


def test_every_metric_is_in_operations_md() -> None:
    from gateway.observability.metrics import Metrics

    names = {f"{name}_total" if kind == "counter" else name for name, kind in Metrics().kinds()}
    assert "toolgate_executions_total" in names
    text = section(doc("operations.md"), "## Metrics")
    missing = missing_from_table(names, text)
    assert not missing, f"docs/operations.md has no row in 'Metrics' for the series {missing}"


def _commands(
    parser: Any, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """Every (sub)command of the ``toolgate`` parser with its long options."""
    import argparse

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    options = [
        option
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
        and action.help != argparse.SUPPRESS
        for option in action.option_strings
        if option.startswith("--")
    ]
    yield path, options
    for sub in subs:
        for name, child in sub.choices.items():
            yield from _commands(child, (*path, name))


def test_every_command_and_option_is_in_configuration_md() -> None:
    text = (DOCS / "configuration.md").read_text().split("## Commands", 1)[1].split("\n## ")[0]
    rows = [line for line in text.splitlines() if line.startswith("| `toolgate")]
    missing = []
    for path, options in _commands(cli.build_parser()):
        row = [r for r in rows if all(re.search(rf"\b{re.escape(p)}\b", r) for p in path)]
        if not row:
            missing.append(" ".join(path))
            continue
        missing += [f"{' '.join(path)} {o}" for o in options if not any(o in r for r in row)]
    assert not missing, f"document these in docs/configuration.md#commands: {missing}"


def audit_subcommands() -> dict[str, set[str]]:
    """``toolgate audit``'s subcommands and the options of each, from the real parser."""
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    audit = commands.choices["audit"]
    subs = next(a for a in audit._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: {o for a in p._actions for o in a.option_strings if o.startswith("--")} - {"--help"}
        for name, p in subs.choices.items()
    }


def undocumented_audit(commands: dict[str, set[str]], text: str) -> list[str]:
    rows = [line for line in text.splitlines() if line.startswith("| `toolgate audit ")]
    found = []
    for name, options in commands.items():
        row = next((r for r in rows if r.startswith(f"| `toolgate audit {name}")), None)
        if row is None:
            found.append(name)
            continue
        found += [f"{name} {o}" for o in sorted(options) if o not in row]
    return found


def test_every_audit_command_and_option_is_in_operations_md() -> None:
    commands = audit_subcommands()
    assert set(commands) == {"verify", "export", "checkpoint", "public-key"}
    text = section(doc("operations.md"), "## The audit trail")
    missing = undocumented_audit(commands, text)
    assert not missing, f"docs/operations.md does not document `toolgate audit` {missing}"
    assert undocumented_audit({"verify": {"--since", "--forge"}}, text) == ["verify --forge"]
    assert undocumented_audit({"rewrite": set()}, text) == ["rewrite"]
