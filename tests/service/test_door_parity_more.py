"""More questions asked through every door, each answered alike (issue 30).

The gateway, the doors and the helpers are those of ``test_door_parity.py``; the questions
here are the ones a new user tried there next: the same invalid arguments, a decision's
comment (its bound, its whitespace, a denied call telling it), approving one's own call, a
deprecated tool's description, a long-poll out of bounds, a body over the bound, and no API
key at all.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
import yaml
from mcp.shared.exceptions import MCPError

from gateway.client import AsyncClient, Client
from gateway.client.errors import ApiError, ToolgateClientError
from gateway.client.toolkit import answer, catalogue, text
from gateway.jsonlimits import JsonLimits
from gateway.testing import gateway, make_project
from tests.helpers import ALICE, BOB, CAROL
from tests.mcp.helpers import ERAS, connect
from tests.service import test_door_parity as parity
from tests.service.test_door_parity import Gw, error_code, mcp, page_session

pytestmark = pytest.mark.slow

gw = parity.gw
"""The one gateway of the parity tests (the shipped project on SQLite), for this module."""

MODERN = "2026-07-28"


def _parked(gw: Gw, run_id: str = "parity-more") -> tuple[str, str]:
    """A call of alice's parked for an approver: its execution's id and its approval's."""
    call_id = f"m-{uuid.uuid4().hex[:8]}"
    body = parity._delete_body(run_id, call_id, call_id, parity._doomed(gw))
    with gw.rest(ALICE) as rest:
        parked = rest.post("/v1/executions", json=body).json()
    assert parked["status"] == "awaiting_approval", parked
    return str(parked["id"]), str(parked["approval"]["id"])


def _page_decides(gw: Gw, key: str, approval_id: str, decision: str, comment: str) -> int:
    """``decision`` sent from the approval's page (its form, with its CSRF token); the status."""
    with page_session(gw, key) as page:
        form = page.get(f"/ui/approvals/{approval_id}").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert csrf, form
        sent = {"decision": decision, "comment": comment, "csrf": csrf.group(1)}
        return page.post(f"/ui/approvals/{approval_id}/decide", data=sent).status_code


def _error_of(gw: Gw, execution_id: str) -> dict[str, Any]:
    with gw.rest(ALICE) as rest:
        shown = rest.get(f"/v1/executions/{execution_id}").json()
    return dict(shown["result"]["error"])


def _code_of(call: Callable[[], object]) -> str:
    """The code of the gateway's refusal of the kit's ``call``; the name of the kit's own
    failure (no answer of the gateway's); else ``answered``."""
    try:
        call()
    except ApiError as exc:
        return exc.code
    except ToolgateClientError as exc:
        return type(exc).__name__
    return "answered"


async def _async_code_of(call: Awaitable[object]) -> str:
    """``_code_of`` of the async kit."""
    try:
        await call
    except ApiError as exc:
        return exc.code
    except ToolgateClientError as exc:
        return type(exc).__name__
    return "answered"


# -- the same invalid arguments ------------------------------------------------------------


def _write_body(arguments: dict[str, Any]) -> dict[str, Any]:
    """A REST request to call fs.write_file with ``arguments``."""
    return {
        "run_id": "parity-more",
        "call_id": uuid.uuid4().hex[:8],
        "tool": {"name": "fs.write_file"},
        "arguments": arguments,
        "actor": {"agent_id": "parity"},
        "workspace": {"id": "demo"},
    }


@pytest.mark.parametrize(
    ("arguments", "fields"),
    [
        # "" was confined to the workspace's root, ".", before the schema saw it: the
        # tool's `empty: false` never fired
        ({"path": "", "content": 5, "colour": "red"}, {"path", "content", "colour"}),
        # an unknown field hid the others: every door named "bogus" alone
        ({"path": 5, "content": "x", "bogus": 1}, {"path", "bogus"}),
    ],
)
def test_every_door_names_the_same_fields_of_invalid_arguments(
    gw: Gw, arguments: dict[str, Any], fields: set[str]
) -> None:
    # MCP's 2025-11-25 era goes through the SDK's transport, 2026-07-28 through the fast path
    seen: dict[str, tuple[str, str]] = {}

    def of(error: dict[str, Any]) -> tuple[str, str]:
        return str(error["type"]), json.dumps(error["errors"], sort_keys=True)

    with gw.rest(ALICE) as rest:
        posted = rest.post("/v1/executions", json=_write_body(arguments)).json()
    seen["rest"] = of(posted["result"]["error"])
    for era in ERAS:
        result = mcp(gw, era, ALICE, "fs.write_file", arguments)
        seen[f"mcp {era}"] = of((result.meta or {})["io.toolgate/error"])
    called = gw.cli(ALICE, "call", "fs.write_file", "--args-json", json.dumps(arguments))
    assert called.returncode == 1, called.stderr
    seen["cli"] = of(json.loads(called.stdout)["result"]["error"])
    with Client(gw.url, ALICE) as client:
        error = client.execute("fs.write_file", arguments).error
    assert error is not None
    seen["kit"] = of(dict(error))
    named = (seen["rest"][0], set(json.loads(seen["rest"][1])))
    assert len(set(seen.values())) == 1 and named == ("invalid_arguments", fields), seen


# -- the bound on the values of the same arguments -----------------------------------------


def _mcp_code(gw: Gw, era: str, arguments: dict[str, Any]) -> str:
    """The code MCP answers a call of fs.write_file with: a failed execution's, or a
    refusal's (a JSON-RPC error's ``data.type``)."""

    async def main() -> str:
        async with connect(gw.url, era, ALICE) as client:
            try:
                return error_code(await client.call_tool("fs.write_file", arguments))
            except MCPError as exc:
                return str((exc.data or {}).get("type", exc.message))

    return anyio.run(main)


@pytest.mark.parametrize(("extra", "code"), [(0, "invalid_arguments"), (1, "json_too_many_values")])
def test_every_door_bounds_the_values_of_the_same_arguments_alike(
    gw: Gw, extra: int, code: str
) -> None:
    # REST counted its whole body, MCP the arguments with _meta: arguments near the bound
    # passed through MCP 2025-11-25 (a small _meta) and were refused by the other doors
    bound = JsonLimits().max_values  # the shipped project's max_json_values
    arguments = {"path": "a.txt", "content": "x", "items": [0] * (bound - 3 + extra)}
    codes: dict[str, str] = {}
    with gw.rest(ALICE) as rest:
        posted = rest.post("/v1/executions", json=_write_body(arguments)).json()
    codes["rest"] = posted["code"] if "code" in posted else posted["result"]["error"]["type"]
    for era in ERAS:
        codes[f"mcp {era}"] = _mcp_code(gw, era, arguments)
    assert codes == dict.fromkeys(codes, code), codes


# -- a decision's comment ------------------------------------------------------------------


def test_every_door_refuses_an_overlong_comment_alike(gw: Gw) -> None:
    # the page held a comment to 2000 characters; REST, the CLI and the kit took any length
    comment = "x" * 2001
    codes: dict[str, str] = {}
    _, approval_id = _parked(gw)
    with gw.rest(BOB) as rest:
        denied = rest.post(f"/v1/approvals/{approval_id}/deny", json={"comment": comment})
    codes["rest"] = denied.json().get("code", "decided")
    denied = gw.cli(BOB, "approvals", "deny", approval_id, "--comment", comment)
    codes["cli"] = json.loads(denied.stdout)["code"] if denied.returncode == 1 else "decided"
    with Client(gw.url, BOB) as client:
        codes["kit"] = _code_of(lambda: client.deny(approval_id, comment))
    status = _page_decides(gw, BOB, approval_id, "deny", comment)
    codes["page"] = "invalid_comment" if status == 400 else str(status)
    with gw.rest(BOB) as rest:
        codes["still"] = rest.get(f"/v1/approvals/{approval_id}").json()["status"]
    assert codes == {**dict.fromkeys(codes, "invalid_comment"), "still": "pending"}, codes


def test_every_door_records_a_comment_alike(gw: Gw) -> None:
    # the page trimmed a comment's surrounding whitespace; REST, the CLI and the kit kept it
    comment = "  not today \n"
    denied: dict[str, str] = {}
    for door in ("rest", "cli", "kit", "page"):
        execution_id, approval_id = _parked(gw)
        if door == "rest":
            with gw.rest(BOB) as rest:
                rest.post(f"/v1/approvals/{approval_id}/deny", json={"comment": comment})
        elif door == "cli":
            gw.cli(BOB, "approvals", "deny", approval_id, "--comment", comment)
        elif door == "kit":
            with Client(gw.url, BOB) as client:
                client.deny(approval_id, comment)
        else:
            _page_decides(gw, BOB, approval_id, "deny", comment)
        denied[door] = str(_error_of(gw, execution_id)["message"])
    assert set(denied.values()) == {"denied by bob: not today"}, denied


def test_every_door_tells_a_denied_call_s_comment(gw: Gw) -> None:
    execution_id, approval_id = _parked(gw)
    with gw.rest(BOB) as rest:
        rest.post(f"/v1/approvals/{approval_id}/deny", json={"comment": "use the archive"})
    told: dict[str, str] = {}
    with gw.rest(ALICE) as rest:
        told["rest"] = rest.get(f"/v1/executions/{execution_id}").text
    for era in ERAS:
        status = mcp(gw, era, ALICE, parity.STATUS_TOOL, {"execution_id": execution_id})
        told[f"mcp {era}"] = " ".join(str(block.text) for block in status.content)
    told["cli"] = gw.cli(ALICE, "executions", "show", execution_id).stdout
    with Client(gw.url, ALICE) as client:
        told["kit"] = text(answer(client.get(execution_id)))
    with page_session(gw, ALICE) as page:
        told["page"] = page.get(f"/ui/executions/{execution_id}").text
    said = {door: "denied by bob: use the archive" in shown for door, shown in told.items()}
    assert set(said.values()) == {True}, said


def test_every_door_refuses_self_approval_with_the_same_code(gw: Gw) -> None:
    # carol is an agent and an approver; nobody approves their own call
    call_id = f"s-{uuid.uuid4().hex[:8]}"
    body = parity._delete_body("parity-more", call_id, call_id, parity._doomed(gw))
    with gw.rest(CAROL) as rest:
        approval_id = rest.post("/v1/executions", json=body).json()["approval"]["id"]
        refused = rest.post(f"/v1/approvals/{approval_id}/approve")
    codes = {"rest": refused.json().get("code", "decided")}
    approved = gw.cli(CAROL, "approvals", "approve", approval_id)
    codes["cli"] = json.loads(approved.stdout).get("code", "decided")
    with Client(gw.url, CAROL) as client:
        codes["kit"] = _code_of(lambda: client.approve(approval_id))
    status = _page_decides(gw, CAROL, approval_id, "approve", "")
    codes["page"] = "self_approval" if status == 403 else str(status)
    assert set(codes.values()) == {"self_approval"}, codes


# -- a deprecated tool's description -------------------------------------------------------


@pytest.fixture(scope="module")
def deprecating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gw]:
    """A gateway of the shipped project whose newest fs.list_dir is deprecated."""
    root = tmp_path_factory.mktemp("parity-deprecated")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    listing = yaml.safe_load((root / "tools.d" / "fs.list_dir.yaml").read_text())
    listing.update(version="9.0.0", deprecated="use fs.list_dir ^1")
    (root / "tools.d" / "fs.list_dir.v9.yaml").write_text(yaml.safe_dump(listing))
    with gateway(config) as url:
        yield Gw(url, root)


def test_every_door_describes_a_deprecated_tool_alike(deprecating: Gw) -> None:
    # MCP tools/list said "[deprecated: ...]"; ?format=... and the kit's tools did not
    described: dict[str, str] = {}
    with deprecating.rest(ALICE) as rest:
        for fmt in ("llm", "openai", "anthropic", "mcp"):
            listing = rest.get("/v1/tools", params={"format": fmt}).json()
            for item in listing["items"]:
                item = item.get("function", item)
                if listing["names"][item["name"]] == "fs.list_dir":
                    described[f"rest {fmt}"] = item["description"]
        detail = rest.get("/v1/tools/fs.list_dir").json()
        described["rest llm_tool"] = detail["llm_tool"]["description"]
    for era in ERAS:

        async def listed(era: str = era) -> str:
            async with connect(deprecating.url, era, ALICE) as client:
                tools = (await client.list_tools()).tools
            return next(str(t.description) for t in tools if t.name == "fs.list_dir")

        described[f"mcp {era}"] = anyio.run(listed)
    with Client(deprecating.url, ALICE) as client:
        specs = catalogue(client)
    described["kit"] = next(spec.description for spec in specs if spec.name == "fs.list_dir")
    assert len(set(described.values())) == 1, described
    assert described["kit"].startswith("[deprecated: use fs.list_dir ^1] "), described


# -- a long-poll out of bounds -------------------------------------------------------------


def test_every_door_refuses_a_wait_out_of_bounds_with_the_same_code(gw: Gw) -> None:
    execution_id = parity._write(gw, ALICE)
    codes: dict[str, str] = {}
    with gw.rest(ALICE) as rest:
        refused = rest.get(f"/v1/executions/{execution_id}", params={"wait": "61"})
    codes["rest"] = refused.json()["code"]
    for era in ERAS:
        asked = {"execution_id": execution_id, "wait_s": 61}
        codes[f"mcp {era}"] = error_code(mcp(gw, era, ALICE, parity.STATUS_TOOL, asked))
    with Client(gw.url, ALICE) as client:
        codes["kit"] = _code_of(lambda: client.get(execution_id, wait=61))
    assert set(codes.values()) == {"invalid_wait"}, codes


# -- a body over max_body_bytes ------------------------------------------------------------


def test_a_body_over_the_bound_is_refused_alike_at_every_door_and_framing(gw: Gw) -> None:
    # a declared Content-Length was refused without "retryable"; chunks with it
    big = b'{"pad": "' + b"x" * (1024 * 1024) + b'"}'
    doors = {
        "rest": ("/v1/executions", {}),
        f"mcp {MODERN}": ("/mcp", {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call"}),
        "mcp legacy": ("/mcp", {}),
    }
    refused: dict[str, tuple[int, str, Any]] = {}

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(big), 64 * 1024):
            yield big[start : start + 64 * 1024]

    headers = {
        "Authorization": f"Bearer {ALICE}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    with httpx.Client(base_url=gw.url, timeout=30) as http:
        for door, (path, more) in doors.items():
            for framing, content in (("length", big), ("chunked", chunks())):
                answer = http.post(path, content=content, headers={**headers, **more})
                problem = answer.json()
                refused[f"{door} {framing}"] = (
                    answer.status_code,
                    problem["code"],
                    problem.get("retryable"),
                )
    with Client(gw.url, ALICE) as client:
        try:
            client.execute("fs.write_file", {"path": "big.txt", "content": "x" * 1024 * 1024})
        except ApiError as exc:
            refused["kit"] = (exc.status, exc.code, exc.retryable)
        else:
            refused["kit"] = (200, "answered", None)
    assert set(refused.values()) == {(413, "payload_too_large", False)}, refused


# -- no API key ----------------------------------------------------------------------------


def test_every_door_answers_a_caller_without_a_key_alike(gw: Gw) -> None:
    # the kit given no key sent "Bearer " and failed as if the gateway could not be reached
    codes: dict[str, str] = {}
    with httpx.Client(base_url=gw.url) as http:
        codes["rest"] = http.get("/v1/tools").json()["code"]
        for era, version in (("legacy", "2025-11-25"), (MODERN, MODERN)):
            asked = http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                headers={"MCP-Protocol-Version": version, "Accept": "application/json"},
            )
            codes[f"mcp {era}"] = asked.json()["code"]
    with Client(gw.url, "") as client:
        codes["kit"] = _code_of(client.tools)

    async def kit_async() -> str:
        async with AsyncClient(gw.url, "") as client:
            return await _async_code_of(client.tools())

    codes["kit async"] = anyio.run(kit_async)
    assert set(codes.values()) == {"missing_api_key"}, codes


# -- an id that is no id -------------------------------------------------------------------


@pytest.mark.parametrize("odd", ["../tools", "..", "a/b", "x?wait=1"])
def test_every_door_finds_no_execution_of_an_id_that_names_another_path(gw: Gw, odd: str) -> None:
    # the kit and the CLI put the id into the path as it was: "../tools" read the tool list
    codes: dict[str, str] = {}
    with gw.rest(ALICE) as rest:
        codes["rest"] = rest.get(f"/v1/executions/{quote(odd, safe='')}").json()["code"]
    for era in ERAS:
        codes[f"mcp {era}"] = error_code(
            mcp(gw, era, ALICE, parity.STATUS_TOOL, {"execution_id": odd})
        )
    shown = gw.cli(ALICE, "executions", "show", odd)
    codes["cli"] = str(json.loads(shown.stdout).get("code", f"exit {shown.returncode}"))
    with Client(gw.url, ALICE) as client:
        codes["kit"] = _code_of(lambda: client.get(odd))
        codes["kit approval"] = _code_of(lambda: client.approval(odd))
    assert set(codes.values()) == {"not_found"}, codes
