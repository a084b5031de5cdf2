"""Faults asked through every door, each answered alike (docs/failures.md).

The doors and helpers are those of ``test_door_parity.py``; the gateway here is the shipped
project with one more, disabled, version of ``fs.list_dir``. Each question is one a hostile
user asks: a version that is none, a deadline past or no number, an idempotency key too long,
with a control character or empty, a key or call id used for another call, an approval token
of another call or spent, a workspace the caller may not use, a wait that is no number, a
cancel of an ended call, a decision taken twice. What must agree is the code, ``retryable``
and the ids the answer names; only each wire's envelope differs: HTTP's status, MCP's
``isError`` result (``_meta["io.toolgate/error"]``) or JSON-RPC error (``data``), the CLI's
exit code and the JSON it prints, the kit's ``ApiError`` and the adapters' ``refused``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
import yaml
from mcp.shared.exceptions import MCPError

from gateway.client import AsyncClient, CallOptions, Client
from gateway.client.errors import ApiError
from gateway.errors import MalformedRequest
from gateway.service import executions
from gateway.testing import gateway, make_project
from tests.helpers import ALICE, BOB, require_module
from tests.mcp.helpers import ERAS, connect
from tests.mcp.test_sdk import Tasks, TaskState
from tests.service import test_door_parity as parity
from tests.service.test_door_parity import Gw, mcp, page_session
from tests.service.test_door_parity_more import _code_of

pytestmark = pytest.mark.slow

RUN = "parity-faults"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gw]:
    """The shipped project (whose fs.write_file 1.0.0 is deprecated) with a disabled
    fs.list_dir 9.0.0, on SQLite."""
    root = tmp_path_factory.mktemp("parity-faults")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    listing = yaml.safe_load((root / "tools.d" / "fs.list_dir.yaml").read_text())
    listing.update(version="9.0.0", disabled=True)
    (root / "tools.d" / "fs.list_dir.v9.yaml").write_text(yaml.safe_dump(listing))
    with gateway(config) as url:
        yield Gw(url, root)


def _body(name: str, arguments: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A ``POST /v1/executions`` body of alice's (agent ``parity``) in a run of its own."""
    body = {
        "run_id": f"{RUN}-{uuid.uuid4().hex[:8]}",
        "call_id": uuid.uuid4().hex[:8],
        "tool": {"name": name},
        "arguments": arguments,
        "actor": {"agent_id": "parity"},
        "workspace": {"id": "demo"},
    }
    return {**body, **fields}


def _meta_of(body: dict[str, Any]) -> dict[str, Any]:
    """The ``_meta`` of the ``tools/call`` that asks what ``body`` asks (docs/mcp.md)."""
    named = {"io.toolgate/run_id": body["run_id"], "io.toolgate/call_id": body["call_id"]}
    named["io.toolgate/agent_id"] = "parity"
    named["io.toolgate/workspace"] = body["workspace"]["id"]
    if "requested_version" in body["tool"]:
        named["io.toolgate/requested_version"] = body["tool"]["requested_version"]
    for field in ("deadline", "idempotency_key", "approval_token", "expected_state"):
        if field in body:
            named[f"io.toolgate/{field}"] = body[field]
    return named


def _options_of(body: dict[str, Any]) -> CallOptions:
    """The kit's ``CallOptions`` that ask what ``body`` asks."""
    return CallOptions(
        run_id=body["run_id"],
        call_id=body["call_id"],
        agent_id="parity",
        workspace=body["workspace"]["id"],
        version=body["tool"].get("requested_version"),
        idempotency_key=body.get("idempotency_key"),
        expected_state=body.get("expected_state"),
        deadline_ms=body.get("deadline"),
        approval_token=body.get("approval_token"),
    )


def _cli_args(body: dict[str, Any]) -> list[str]:
    """``toolgate call`` asking what ``body`` asks (it has options for these fields only)."""
    args = ["call", body["tool"]["name"], "--args-json", json.dumps(body["arguments"])]
    args += ["--run-id", body["run_id"], "--call-id", body["call_id"], "--agent-id", "parity"]
    args += ["--workspace", body["workspace"]["id"]]
    if "requested_version" in body["tool"]:
        args += ["--version", body["tool"]["requested_version"]]
    if "idempotency_key" in body:
        args += ["--idempotency-key", body["idempotency_key"]]
    return args


CLI_FIELDS = frozenset({"run_id", "call_id", "tool", "arguments", "actor", "workspace"})
"""What ``toolgate call`` can send besides ``idempotency_key``."""


def _cli_can_ask(body: dict[str, Any]) -> bool:
    return set(body) - {"idempotency_key"} <= CLI_FIELDS


def _executions_of(gw: Gw, run_id: str) -> list[dict[str, Any]]:
    with gw.rest(ALICE) as rest:
        items: list[dict[str, Any]] = rest.get("/v1/executions", params={"run_id": run_id}).json()[
            "items"
        ]
    return items


# -- a call that becomes a failed execution ------------------------------------------------


def _write(**fields: Any) -> dict[str, Any]:
    return _body(
        "fs.write_file", {"path": f"f-{uuid.uuid4().hex[:8]}.txt", "content": "x"}, **fields
    )


FAILED_CALLS = {
    "unknown version": (
        _body(
            "fs.read_file",
            {"path": "a.txt"},
            tool={"name": "fs.read_file", "requested_version": "9.9.9"},
        ),
        ("version_not_found", "resolve"),
    ),
    "bad version range": (
        _body(
            "fs.read_file",
            {"path": "a.txt"},
            tool={"name": "fs.read_file", "requested_version": "^^x"},
        ),
        ("invalid_version_range", "resolve"),
    ),
    "disabled version": (
        _body(
            "fs.list_dir", {"path": "."}, tool={"name": "fs.list_dir", "requested_version": "9.0.0"}
        ),
        ("tool_disabled", "resolve"),
    ),
    "deadline past": (
        _body("fs.read_file", {"path": "a.txt"}, deadline=1),
        ("deadline_exceeded", "validate"),
    ),
    "approval token not one": (
        _body("fs.read_file", {"path": "a.txt"}, approval_token="not-a-token"),
        ("approval_token_invalid", "policy"),
    ),
    "state mismatch": (_write(expected_state={"sha256": "0000"}), ("state_mismatch", "validate")),
    "state key unknown": (
        _write(expected_state={"colour": "red"}),
        ("unknown_state_key", "validate"),
    ),
    "workspace not the caller's": (
        _body("fs.read_file", {"path": "a.txt"}, workspace={"id": "ops"}),
        ("policy_denied", "policy"),
    ),
    "workspace unknown": (
        _body("fs.read_file", {"path": "a.txt"}, workspace={"id": "nowhere"}),
        ("unknown_workspace", "validate"),
    ),
}


def _error(error: Any) -> tuple[Any, ...]:
    """What must agree of a failed call's error: its type, phase, retryable and message,
    and any other field it names (``reasons``, ``expected``, ...)."""
    return tuple(sorted((str(k), json.dumps(v, sort_keys=True)) for k, v in dict(error).items()))


@pytest.mark.parametrize("fault", list(FAILED_CALLS))
def test_every_door_fails_a_call_alike(gw: Gw, fault: str) -> None:
    template, (code, phase) = FAILED_CALLS[fault]
    errors: dict[str, tuple[Any, ...]] = {}
    outcomes: dict[str, str] = {}

    def sent() -> dict[str, Any]:  # each door its own call
        return {**template, "call_id": uuid.uuid4().hex[:8]}

    body = sent()
    with gw.rest(ALICE) as rest:
        posted = rest.post("/v1/executions", json=body).json()
    outcomes["rest"] = posted["result"]["outcome"]
    errors["rest"] = _error(posted["result"]["error"])
    for era in ERAS:
        body = sent()
        result = mcp(gw, era, ALICE, body["tool"]["name"], body["arguments"], **_meta_of(body))
        outcomes[f"mcp {era}"] = str((result.meta or {})["io.toolgate/outcome"])
        errors[f"mcp {era}"] = _error((result.meta or {})["io.toolgate/error"])
    if _cli_can_ask(template):
        called = gw.cli(ALICE, *_cli_args(sent()))
        assert called.returncode == 1, called.stderr
        result = json.loads(called.stdout)["result"]
        outcomes["cli"], errors["cli"] = result["outcome"], _error(result["error"])
    with Client(gw.url, ALICE) as client:
        body = sent()
        execution = client.execute(body["tool"]["name"], body["arguments"], _options_of(body))
    outcomes["kit"], errors["kit"] = str(execution.outcome), _error(execution.error or {})
    assert set(outcomes.values()) == {"failed"}, outcomes
    assert len(set(errors.values())) == 1, errors
    named = dict(errors["rest"])
    assert (named["type"], named["phase"], named["retryable"]) == (
        json.dumps(code),
        json.dumps(phase),
        "false",
    ), named


# -- a plan of a call that would fail ------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "would", "code"),
    [
        ("9.9.9", "fail", "version_not_found"),
        ("^^x", "fail", "invalid_version_range"),
        ("~1.0", "run", None),
    ],
)
def test_every_door_plans_a_call_of_a_version_alike(
    gw: Gw, version: str, would: str, code: str | None
) -> None:
    # fs.write_file ~1.0 resolves to the deprecated 1.0.0: the plan says so at every door
    body = _write(tool={"name": "fs.write_file", "requested_version": version})
    plans: dict[str, Any] = {}
    with gw.rest(ALICE) as rest:
        plans["rest"] = rest.post("/v1/plans", json=body).json()
    for era in ERAS:
        meta = {**_meta_of(body), "io.toolgate/dry_run": True}
        result = mcp(gw, era, ALICE, "fs.write_file", body["arguments"], **meta)
        plans[f"mcp {era}"] = dict(result.structured_content or {})
    with Client(gw.url, ALICE) as client:
        plans["kit"] = client.plan("fs.write_file", body["arguments"], _options_of(body))
    seen = {
        door: (plan["would"], (plan.get("error") or {}).get("type"), json.dumps(plan.get("tool")))
        for door, plan in plans.items()
    }
    assert len(set(seen.values())) == 1, seen
    assert seen["rest"][:2] == (would, code), seen
    if code is None:
        assert plans["rest"]["tool"]["deprecated"] == "use fs.write_file ^1.2", plans["rest"]


# -- a request refused before it is a call -------------------------------------------------


def _key(**fields: Any) -> dict[str, Any]:
    return _body("fs.read_file", {"path": "a.txt"}, **fields)


REFUSED = {
    "deadline no number": (_key(deadline="soon"), "deadline"),
    "deadline zero": (_key(deadline=0), "deadline"),
    "deadline past year 9999": (_key(deadline=10**16), "deadline"),
    "key too long": (_key(idempotency_key="k" * 257), "idempotency_key"),
    "key with a control character": (_key(idempotency_key="k\x07y"), "idempotency_key"),
    # the CLI sent no key for an empty --idempotency-key, and ran the call
    "key empty": (_key(idempotency_key=""), "idempotency_key"),
    # the CLI made up a run id for an empty --run-id, and ran the call
    "run id empty": (_key(run_id=""), "run_id"),
    # the CLI and the kit made up a call id for an empty one, and ran the call
    "call id empty": (_key(call_id=""), "call_id"),
    "approval token too long": (_key(approval_token="t" * 4097), "approval_token"),
    "expected state no object": (_key(expected_state="abc"), "expected_state"),
    "workspace empty": (_key(workspace={"id": ""}), "workspace.id"),
}


@pytest.mark.parametrize("fault", list(REFUSED))
def test_every_door_refuses_a_bad_request_alike(gw: Gw, fault: str) -> None:
    body, field = REFUSED[fault]
    refused: dict[str, tuple[str, bool, tuple[str, ...]]] = {}

    def fields(errors: list[dict[str, str]]) -> tuple[str, ...]:
        return tuple(error["field"] for error in errors)

    with gw.rest(ALICE) as rest:
        answer = rest.post("/v1/executions", json=body)
    problem = answer.json()
    assert answer.status_code == 400, problem
    refused["rest"] = (problem["code"], problem["retryable"], fields(problem["errors"]))
    for era in ERAS:
        result = mcp(gw, era, ALICE, "fs.read_file", body["arguments"], **_meta_of(body))
        assert result.is_error and (result.meta or {})["io.toolgate/outcome"] == "refused"
        error = (result.meta or {})["io.toolgate/error"]
        refused[f"mcp {era}"] = (error["type"], error["retryable"], fields(error["errors"]))
    if _cli_can_ask(body):
        called = gw.cli(ALICE, *_cli_args(body))
        problem = json.loads(called.stdout) if called.returncode == 1 else {}
        refused["cli"] = (
            problem.get("code", f"exit {called.returncode}"),
            problem.get("retryable", True),
            fields(problem.get("errors", [])),
        )
    if not isinstance(body.get("deadline", 0), str) and isinstance(
        body.get("expected_state", {}), dict
    ):  # the kit's options are typed: it cannot send these
        with Client(gw.url, ALICE) as client:
            try:
                client.execute("fs.read_file", body["arguments"], _options_of(body))
            except ApiError as exc:
                refused["kit"] = (exc.code, exc.retryable, fields(exc.details["errors"]))
            else:
                refused["kit"] = ("answered", True, ())
    assert set(refused.values()) == {("invalid_request", False, (field,))}, refused
    assert _executions_of(gw, body["run_id"] or RUN) == []  # nothing ran


# -- a key or call id used for another call: the execution it is about ---------------------


def _doomed_body(gw: Gw, **fields: Any) -> dict[str, Any]:
    return _body("fs.delete_file", {"path": parity._doomed(gw)}, **fields)


def _conflict(gw: Gw, fault: str) -> tuple[dict[str, Any], str]:
    """A request that conflicts with the call made first (``fault``), and that call's
    execution id."""
    with gw.rest(ALICE) as rest:
        if fault == "key in flight":  # parked for an approver, so in flight
            first = _doomed_body(gw, idempotency_key=uuid.uuid4().hex)
            again = {**_doomed_body(gw), "idempotency_key": first["idempotency_key"]}
            again["arguments"] = first["arguments"]
        elif fault == "key reused":
            first = _write(idempotency_key=uuid.uuid4().hex)
            again = {**_write(), "idempotency_key": first["idempotency_key"]}
        else:
            first = _body("fs.read_file", {"path": "a.txt"})
            again = {**first, "arguments": {"path": "b.txt"}}
        execution_id = rest.post("/v1/executions", json=first).json()["id"]
    return again, str(execution_id)


CONFLICTS = {
    "key in flight": ("idempotency_key_in_flight", True),
    "key reused": ("idempotency_key_reused", False),
    "call id reused": ("call_id_reused", False),
}


@pytest.mark.parametrize("fault", list(CONFLICTS))
def test_every_door_names_the_execution_a_conflict_is_about(gw: Gw, fault: str) -> None:
    # the adapters' refusal named the code alone: not retryable, nor the execution
    body, execution_id = _conflict(gw, fault)
    named: dict[str, tuple[str, bool, str]] = {}
    name, arguments = body["tool"]["name"], body["arguments"]
    with gw.rest(ALICE) as rest:
        problem = rest.post("/v1/executions", json=body).json()
    named["rest"] = (problem["code"], problem["retryable"], problem["execution_id"])
    for era in ERAS:
        error = (mcp(gw, era, ALICE, name, arguments, **_meta_of(body)).meta or {})[
            "io.toolgate/error"
        ]
        named[f"mcp {era}"] = (error["type"], error["retryable"], error["execution_id"])
    called = gw.cli(ALICE, *_cli_args(body))
    assert called.returncode == 1, called.stderr
    problem = json.loads(called.stdout)
    named["cli"] = (problem["code"], problem["retryable"], problem["execution_id"])
    with Client(gw.url, ALICE) as client:
        try:
            client.execute(name, arguments, _options_of(body))
        except ApiError as exc:
            named["kit"] = (exc.code, exc.retryable, exc.details["execution_id"])
    for door, error in _adapters_refuse(gw, body).items():
        named[door] = (error["code"], error["retryable"], error.get("execution_id", "none"))
    assert set(named.values()) == {(*CONFLICTS[fault], execution_id)}, named


def _adapters_refuse(gw: Gw, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``error`` the LangChain and Agents SDK tools answer for ``body`` (as its tool
    call: the call id is the tool call's id)."""
    require_module("agents")
    require_module("langchain_core")
    from agents.tool_context import ToolContext

    from gateway.client.agents import function_tools
    from gateway.client.langchain import structured_tools

    options = _options_of(body)
    llm_name = body["tool"]["name"].replace(".", "__")
    call_id, raw = body["call_id"], json.dumps(body["arguments"])
    with Client(gw.url, ALICE, defaults=options) as client:
        tool = {t.name: t for t in structured_tools(client)}[llm_name]
        call = {"type": "tool_call", "id": call_id, "name": llm_name, "args": body["arguments"]}
        langchain = json.loads(tool.invoke(call).content)

    async def agents() -> Any:
        async with AsyncClient(gw.url, ALICE, defaults=options) as client:
            tool = {t.name: t for t in await function_tools(client)}[llm_name]
            ctx = ToolContext(None, tool_name=llm_name, tool_call_id=call_id, tool_arguments=raw)
            return json.loads(await tool.on_invoke_tool(ctx, raw))

    answers = {"langchain": langchain, "agents": anyio.run(agents)}
    assert {a["outcome"] for a in answers.values()} == {"refused"}, answers
    return {door: a["error"] for door, a in answers.items()}


# -- an approval token of another call, or spent -------------------------------------------


def test_every_door_refuses_an_approval_token_of_another_call_or_spent(gw: Gw) -> None:
    parked = _doomed_body(gw, idempotency_key=uuid.uuid4().hex)
    with gw.rest(ALICE) as rest:
        approval_id = rest.post("/v1/executions", json=parked).json()["approval"]["id"]
    with gw.rest(BOB) as rest:
        approved = rest.post(f"/v1/approvals/{approval_id}/approve", json={"resume": False})
    token = approved.json()["approval_token"]
    other = {"path": parity._doomed(gw)}
    codes: dict[str, tuple[str, str, bool]] = {}

    def through_every_door(arguments: dict[str, str], step: str) -> None:
        def sent() -> dict[str, Any]:
            body = _doomed_body(gw, idempotency_key=uuid.uuid4().hex, approval_token=token)
            return {**body, "arguments": arguments}

        def of(error: Any) -> tuple[str, str, bool]:
            return error["type"], error["phase"], error["retryable"]

        with gw.rest(ALICE) as rest:
            codes[f"{step} rest"] = of(
                rest.post("/v1/executions", json=sent()).json()["result"]["error"]
            )
        for era in ERAS:
            body = sent()
            result = mcp(gw, era, ALICE, "fs.delete_file", arguments, **_meta_of(body))
            codes[f"{step} mcp {era}"] = of((result.meta or {})["io.toolgate/error"])
        with Client(gw.url, ALICE) as client:
            body = sent()
            codes[f"{step} kit"] = of(
                client.execute("fs.delete_file", arguments, _options_of(body)).error
            )

    through_every_door(other, "another call")
    with gw.rest(ALICE) as rest:  # the call it was issued for spends it
        spent = rest.post(
            "/v1/executions",
            json=_doomed_body(gw, idempotency_key=uuid.uuid4().hex, approval_token=token)
            | {"arguments": parked["arguments"]},
        ).json()
    assert spent["result"]["outcome"] == "succeeded", spent
    through_every_door(parked["arguments"], "spent")
    expected = {
        door: (
            "approval_token_invalid" if door.startswith("another") else "approval_token_used",
            "policy",
            False,
        )
        for door in codes
    }
    assert codes == expected, codes


# -- a wait that is no number --------------------------------------------------------------


@pytest.mark.parametrize("wait", ["nan", "inf", "1e400", "-1"])
def test_every_door_refuses_a_wait_that_is_no_number_of_seconds_alike(gw: Gw, wait: str) -> None:
    # the kit sent a NaN or an infinite wait as its own timeout: httpx raised ValueError or
    # OverflowError before the gateway was asked
    execution_id = parity._write(gw, ALICE)
    codes: dict[str, str] = {}
    with gw.rest(ALICE) as rest:
        codes["rest"] = rest.get(f"/v1/executions/{execution_id}", params={"wait": wait}).json()[
            "code"
        ]
    for era in ERAS:
        asked = {"execution_id": execution_id, "wait_s": wait}
        codes[f"mcp {era}"] = parity.error_code(mcp(gw, era, ALICE, parity.STATUS_TOOL, asked))
    with Client(gw.url, ALICE) as client:
        codes["kit"] = _code_of(lambda: client.get(execution_id, wait=float(wait)))

    async def kit_async() -> str:
        async with AsyncClient(gw.url, ALICE) as client:
            try:
                await client.get(execution_id, wait=float(wait))
            except ApiError as exc:
                return exc.code
        return "answered"

    codes["kit async"] = anyio.run(kit_async)
    assert set(codes.values()) == {"invalid_wait"}, codes


@pytest.mark.parametrize("wait", ["5_0", " 5", "5 ", "\u0665", "0x10", "+5", "1,5"])
def test_rest_and_mcp_refuse_a_wait_float_would_read_but_json_does_not_write(
    gw: Gw, wait: str
) -> None:
    # float() read "5_0" as 50 s and the Arabic-Indic digit five as 5 s: the execution was
    # answered (200) where the docs say a number of seconds
    execution_id = parity._write(gw, ALICE)
    codes: dict[str, str] = {}
    with gw.rest(ALICE) as rest:
        answer = rest.get(f"/v1/executions/{execution_id}", params={"wait": wait})
        codes["rest"] = answer.json().get("code", str(answer.status_code))
    for era in ERAS:
        asked = {"execution_id": execution_id, "wait_s": wait}
        codes[f"mcp {era}"] = parity.error_code(mcp(gw, era, ALICE, parity.STATUS_TOOL, asked))
    assert set(codes.values()) == {"invalid_wait"}, codes


# -- a cancel of an ended call, or of one the caller may not see ---------------------------


def _mcp_cancel(gw: Gw, era: str, task_id: str) -> tuple[int, str, bool]:
    """``tasks/cancel`` of ``task_id``: its JSON-RPC error's code, ``data.type`` and
    ``data.retryable``."""

    async def main() -> tuple[int, str, bool]:
        async with connect(gw.url, era, ALICE, extensions=[Tasks()]) as client:
            request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
            try:
                await client.session.send_request(request, TaskState)
            except MCPError as exc:
                data = exc.data or {}
                return exc.code, str(data.get("type")), bool(data.get("retryable"))
        return 0, "answered", False

    return anyio.run(main)


@pytest.mark.parametrize(
    ("whose", "code"),
    [("ended", "already_completed"), ("bob's", "not_found"), ("none", "not_found")],
)
def test_every_door_refuses_a_cancel_alike(gw: Gw, whose: str, code: str) -> None:
    # MCP's tasks/cancel answered -32602 with the message alone: no code, no retryable
    execution_id = {
        "ended": lambda: parity._write(gw, ALICE),
        "bob's": lambda: parity._write(gw, BOB),
        "none": lambda: "ex_00000000000000000000000000000000",
    }[whose]()
    refused: dict[str, tuple[Any, ...]] = {}
    with gw.rest(ALICE) as rest:
        answer = rest.post(f"/v1/executions/{execution_id}/cancel")
    refused["rest"] = (answer.json()["code"], answer.json()["retryable"])
    cancelled = gw.cli(ALICE, "executions", "cancel", execution_id)
    assert cancelled.returncode == 1, cancelled.stderr
    problem = json.loads(cancelled.stdout)
    refused["cli"] = (problem["code"], problem["retryable"])
    with Client(gw.url, ALICE) as client:
        try:
            client.cancel(execution_id)
        except ApiError as exc:
            refused["kit"] = (exc.code, exc.retryable)
    for era in ERAS:
        rpc, named, retryable = _mcp_cancel(gw, era, execution_id)
        assert rpc == types.INVALID_PARAMS, (era, rpc)
        refused[f"mcp {era}"] = (named, retryable)
    assert set(refused.values()) == {(code, False)}, refused
    if whose == "ended":
        with gw.rest(ALICE) as rest:
            shown = rest.get(f"/v1/executions/{execution_id}").json()
        assert shown["result"]["outcome"] == "succeeded", shown  # nothing changed


# -- a decision taken twice ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "then", "code"),
    [
        ("deny", "deny", "approval_denied"),
        ("deny", "approve", "approval_denied"),
        ("approve", "deny", "approval_approved"),
    ],
)
def test_every_door_refuses_a_second_decision_alike(
    gw: Gw, first: str, then: str, code: str
) -> None:
    parked = _doomed_body(gw, idempotency_key=uuid.uuid4().hex)
    with gw.rest(ALICE) as rest:
        approval_id = rest.post("/v1/executions", json=parked).json()["approval"]["id"]
    with gw.rest(BOB) as rest:  # approved as a token: it stays approved, not used
        decided = rest.post(
            f"/v1/approvals/{approval_id}/{first}",
            json={"resume": False} if first == "approve" else {},
        )
    assert decided.status_code == 200, decided.text
    refused: dict[str, tuple[int, str, bool]] = {}
    with gw.rest(BOB) as rest:
        answer = rest.post(f"/v1/approvals/{approval_id}/{then}", json={})
    refused["rest"] = (answer.status_code, answer.json()["code"], answer.json()["retryable"])
    detail = answer.json()["detail"]
    again = gw.cli(BOB, "approvals", then, approval_id)
    problem = json.loads(again.stdout)
    refused["cli"] = (409 if again.returncode == 1 else 0, problem["code"], problem["retryable"])
    with Client(gw.url, BOB) as client:
        try:
            getattr(client, then)(approval_id)
        except ApiError as exc:
            refused["kit"] = (exc.status, exc.code, exc.retryable)
    with page_session(gw, BOB) as page:
        form = page.get(f"/ui/approvals/{approval_id}").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert csrf, form
        sent = {"decision": then, "comment": "", "csrf": csrf.group(1)}
        shown = page.post(f"/ui/approvals/{approval_id}/decide", data=sent)
    assert detail in shown.text.replace("&#39;", "'"), shown.text  # the page's notice
    refused["page"] = (shown.status_code, code, False)
    assert set(refused.values()) == {(409, code, False)}, refused
    with gw.rest(BOB) as rest:
        status = rest.get(f"/v1/approvals/{approval_id}").json()["status"]
    assert status == ("denied" if first == "deny" else "approved")  # nothing changed


# -- arguments that are not an object ------------------------------------------------------


def _raw_mcp_call(gw: Gw, era: str, arguments: Any) -> dict[str, Any]:
    """A ``tools/call`` of fs.read_file sent as JSON-RPC over HTTP (the SDK client refuses to
    send such arguments): the JSON-RPC answer (2025-11-25: in its session, after the
    handshake)."""
    headers = {"Authorization": f"Bearer {ALICE}", "Accept": "application/json, text/event-stream"}
    call = {"name": "fs.read_file", "arguments": arguments}
    with httpx.Client(base_url=gw.url, headers=headers, timeout=30) as http:
        if era == "legacy":
            hello = {"protocolVersion": "2025-11-25", "capabilities": {}}
            hello["clientInfo"] = {"name": "parity", "version": "1"}
            opened = http.post(
                "/mcp", json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
            )
            session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
            session["MCP-Protocol-Version"] = "2025-11-25"
            ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            http.post("/mcp", json=ready, headers=session)
            sent = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
            answer = http.post("/mcp", json=sent, headers=session)
            http.delete("/mcp", headers=session)
            text = answer.text.split("data: ", 1)[-1]  # one SSE event
        else:
            meta = {"io.modelcontextprotocol/protocolVersion": era}
            meta["io.modelcontextprotocol/clientCapabilities"] = {}
            meta["io.modelcontextprotocol/clientInfo"] = {"name": "parity", "version": "1"}
            sent = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
            sent["params"] = {**call, "_meta": meta}
            routing = {"MCP-Protocol-Version": era, "Mcp-Method": "tools/call"}
            text = http.post(
                "/mcp", json=sent, headers={**routing, "Mcp-Name": "fs.read_file"}
            ).text
    answered: dict[str, Any] = json.loads(text)
    return answered


@pytest.mark.parametrize("arguments", [[1, 2], "a.txt"])
def test_arguments_that_are_not_an_object_are_refused_at_every_door(gw: Gw, arguments: Any) -> None:
    # docs/failures.md: MCP's protocol refuses them before the gateway sees the call
    body = _body("fs.read_file", arguments)
    with gw.rest(ALICE) as rest:
        problem = rest.post("/v1/executions", json=body).json()
    assert (problem["code"], problem["errors"][0]["field"]) == ("invalid_request", "arguments")
    for era in ERAS:
        error = _raw_mcp_call(gw, era, arguments)["error"]
        assert (error["code"], error["message"]) == (
            types.INVALID_PARAMS,
            "Invalid request parameters",
        ), era
    called = gw.cli(ALICE, "call", "fs.read_file", "--args-json", json.dumps(arguments))
    assert called.returncode == 2, called.stdout
    assert "--args-json must be one JSON object of arguments" in called.stderr
    assert _executions_of(gw, body["run_id"]) == []


@pytest.mark.parametrize(
    "wait",
    [10**400, -(10**400), "1e400", "-0.5", "60.000001"],
    ids=["401 digits", "-401 digits", "1e400", "-0.5", "60.000001"],
)
def test_a_wait_past_any_float_or_the_bound_is_invalid_wait(wait: object) -> None:
    # float(10**400) raised OverflowError: an MCP wait_s of 401 digits was a 500
    with pytest.raises(MalformedRequest) as refused:
        executions.wait_seconds(wait, "wait_s")
    assert (refused.value.code, refused.value.message) == (
        "invalid_wait",
        "wait_s must be between 0 and 60 seconds",
    )


@pytest.mark.parametrize(
    ("wait", "seconds"), [("5", 5.0), ("0.25", 0.25), (".5", 0.5), ("1e1", 10.0), (7, 7.0)]
)
def test_a_wait_as_json_writes_a_number_is_taken(wait: object, seconds: float) -> None:
    assert executions.wait_seconds(wait) == seconds
