"""Details of the ``/mcp`` contract over raw JSON-RPC on real gateways, in both eras and, for
2026-07-28 ``tools/call``, down both paths (the fast path of gateway/mcp/stateless.py and the
SDK's, ``mcp.fast_calls: false``): default call ids, input refused before anything runs,
tasks, approval links, the status tool, trace context, deprecated versions."""

from __future__ import annotations

import json
import re
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.mcp import meta, results
from gateway.testing import gateway, make_project, run_agent_code_without_approval
from tests.helpers import ALICE, BOB, starts_processes

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
TASKS = {
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    }
}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
INVALID_PARAMS = -32602
PARSE_ERROR = -32700
PUBLIC_URL = "https://toolgate.example.com"


@dataclass(frozen=True)
class Served:
    url: str
    root: Path

    @property
    def workspace(self) -> Path:
        return self.root / "var" / "workspaces" / "demo"

    def request_json(self, execution_id: str) -> dict[str, Any]:
        """The stored request of an execution (read from the gateway's SQLite store)."""
        with sqlite3.connect(self.root / "toolgate.db") as db:
            row = db.execute(
                "SELECT request_json FROM executions WHERE id = ?", (execution_id,)
            ).fetchone()
        assert row is not None, execution_id
        return dict(json.loads(row[0]))


def _project(factory: pytest.TempPathFactory, name: str, **mcp: Any) -> Path:
    root = factory.mktemp(name)
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    run_agent_code_without_approval(root, ("proc.python",))
    data = yaml.safe_load(config.read_text())
    data["mcp"] = {**data.get("mcp", {}), "task_wait": 0.5, **mcp}
    config.write_text(yaml.safe_dump(data))
    # A deprecated newest version of fs.list_dir: tools/list must list it, marked.
    listing = yaml.safe_load((root / "tools.d" / "fs.list_dir.yaml").read_text())
    listing.update(version="9.0.0", deprecated="use fs.list_dir ^1")
    (root / "tools.d" / "fs.list_dir.v9.yaml").write_text(yaml.safe_dump(listing))
    (root / "var" / "workspaces" / "demo").mkdir(parents=True, exist_ok=True)
    return config


@pytest.fixture(scope="module")
@starts_processes
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Served]]:
    """A gateway that answers plain calls itself ("fast"), and one whose SDK answers all."""
    fast = _project(tmp_path_factory, "fast")
    sdk = _project(tmp_path_factory, "sdk", fast_calls=False)
    with gateway(fast) as fast_url, gateway(sdk) as sdk_url:
        yield {"fast": Served(fast_url, fast.parent), "sdk": Served(sdk_url, sdk.parent)}


@pytest.fixture(params=["fast", "sdk"])
def served(request: pytest.FixtureRequest, pair: dict[str, Served]) -> Served:
    return pair[request.param]


# -- raw JSON-RPC in both eras ------------------------------------------------------------


def _messages(response: httpx.Response) -> list[Any]:
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "text/event-stream":
        return [
            json.loads(line[len("data:") :])
            for line in re.split(r"\r\n|\r|\n", response.text)
            if line.startswith("data:")
        ]
    return [json.loads(response.content)]


class Rpc:
    """One client of ``/mcp`` in one era (2025-11-25: an initialized session)."""

    def __init__(self, url: str, era: str, key: str = ALICE, **client_meta: Any) -> None:
        self.http = httpx.Client(base_url=url, timeout=60)
        self.era = era
        self.headers = {
            "Authorization": f"Bearer {key}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": era,
        }
        self.client_meta = {**ENVELOPE, **client_meta} if era == MODERN else {}
        if era == LEGACY:
            hello = {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "contract", "version": "1"},
            }
            del self.headers["MCP-Protocol-Version"]
            opened = self.http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
                headers=self.headers,
            )
            assert opened.status_code == 200, opened.text
            self.headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
            self.headers["MCP-Protocol-Version"] = LEGACY
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert self.http.post("/mcp", json=note, headers=self.headers).status_code == 202

    def __enter__(self) -> Rpc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def raw(
        self, method: str, params: dict[str, Any], request_id: Any = None, **headers: str
    ) -> dict[str, Any]:
        """The JSON-RPC response (``result`` or ``error``) to one request."""
        params = {**params, "_meta": {**self.client_meta, **params.get("_meta", {})}}
        body = {
            "jsonrpc": "2.0",
            "id": uuid.uuid4().hex if request_id is None else request_id,
            "method": method,
            "params": params,
        }
        sent = dict(self.headers)
        if self.era == MODERN:
            sent["Mcp-Method"] = method
            if method == "tools/call":
                sent["Mcp-Name"] = params["name"]
        sent.update(headers)
        response = self.http.post("/mcp", content=json.dumps(body).encode(), headers=sent)
        assert response.status_code < 500, response.text
        found = [m for m in _messages(response) if "id" in m]
        assert len(found) == 1, response.text
        return dict(found[0])

    def call(
        self, name: str, arguments: Any, meta_: dict[str, Any] | None = None, **kw: Any
    ) -> dict[str, Any]:
        params = {"name": name, "arguments": arguments, "_meta": meta_ or {}}
        return self.raw("tools/call", params, **kw)


def _result(message: dict[str, Any]) -> dict[str, Any]:
    assert "result" in message, message
    return dict(message["result"])


def _ids() -> dict[str, str]:
    """Run and call ids, and an idempotency key (fs.delete_file requires one)."""
    hexed = uuid.uuid4().hex
    return {meta.RUN_ID: f"r-{hexed}", meta.CALL_ID: f"c-{hexed}", meta.IDEMPOTENCY_KEY: hexed}


ERAS = (MODERN, LEGACY)


# -- 1. the default call id ---------------------------------------------------------------


def test_two_requests_with_one_id_in_one_trace_are_two_calls(served: Served) -> None:
    """2026-07-28: many clients number each request 1; two reads of a file that changed in
    between, sent with the same id, arguments and trace, each read it (no stale result)."""
    path = f"trace-{uuid.uuid4().hex[:6]}.txt"
    (served.workspace / path).write_text("one")
    traced = {"traceparent": TRACEPARENT}
    with Rpc(served.url, MODERN) as rpc:
        first = _result(rpc.call("fs.read_file", {"path": path}, traced, request_id=1))
        (served.workspace / path).write_text("two")
        again = _result(rpc.call("fs.read_file", {"path": path}, traced, request_id=1))
    assert first["structuredContent"]["content"] == "one"
    assert again["structuredContent"]["content"] == "two", again
    assert again["_meta"][meta.EXECUTION_ID] != first["_meta"][meta.EXECUTION_ID]


def test_a_loose_traceparent_names_no_run(served: Served) -> None:
    with Rpc(served.url, MODERN) as rpc:
        out = _result(rpc.call("fs.list_dir", {"path": "."}, {"traceparent": "a-b-c-d"}))
    assert "trace" not in out["_meta"][meta.RUN_ID]


def test_a_named_call_id_makes_a_stateless_retry_the_same_call(served: Served) -> None:
    path = f"retry-{uuid.uuid4().hex[:6]}.txt"
    (served.workspace / path).write_text("one")
    named = {meta.CALL_ID: f"c-{uuid.uuid4().hex}"}
    with Rpc(served.url, MODERN) as rpc:
        first = _result(rpc.call("fs.read_file", {"path": path}, named, request_id=7))
        (served.workspace / path).write_text("two")
        again = _result(rpc.call("fs.read_file", {"path": path}, named, request_id=8))
    assert again["_meta"][meta.EXECUTION_ID] == first["_meta"][meta.EXECUTION_ID]
    assert again["structuredContent"]["content"] == "one"


def test_a_legacy_retry_is_the_same_call_and_another_request_is_not(
    pair: dict[str, Served],
) -> None:
    """2025-11-25: the same request (session, JSON-RPC id, params) sent again is the same
    call; the next request (another id) reads the file again."""
    served = pair["fast"]
    path = f"legacy-{uuid.uuid4().hex[:6]}.txt"
    (served.workspace / path).write_text("one")
    with Rpc(served.url, LEGACY) as rpc:
        first = _result(rpc.call("fs.read_file", {"path": path}, request_id=41))
        (served.workspace / path).write_text("two")
        retry = _result(rpc.call("fs.read_file", {"path": path}, request_id=41))
        other = _result(rpc.call("fs.read_file", {"path": path}, request_id=42))
    assert retry["_meta"][meta.EXECUTION_ID] == first["_meta"][meta.EXECUTION_ID]
    assert other["structuredContent"]["content"] == "two"


@pytest.mark.parametrize("era", ERAS)
def test_a_named_call_of_a_keyed_tool_is_keyed_by_its_run_and_call(
    served: Served, era: str
) -> None:
    """fs.delete_file requires an idempotency key. A call named stably (its
    ``io.toolgate/call_id`` in 2026-07-28; any request of a 2025-11-25 session) needs none of
    the client's: its key is ``<run_id>/<call_id>``, as the kit's, and the same call sent again
    is the same keyed call."""
    path = f"keyed-{uuid.uuid4().hex[:6]}.txt"
    (served.workspace / path).write_text("bye")
    named = {meta.CALL_ID: f"c-{uuid.uuid4().hex}"} if era == MODERN else {}
    with Rpc(served.url, era) as rpc:
        first = _result(rpc.call("fs.delete_file", {"path": path}, named, request_id=51))
        again = _result(rpc.call("fs.delete_file", {"path": path}, named, request_id=51))
    assert not first["isError"], first
    execution_id = first["_meta"][meta.EXECUTION_ID]
    assert again["_meta"][meta.EXECUTION_ID] == execution_id
    stored = served.request_json(execution_id)
    assert stored["idempotency_key"] == f"{stored['run_id']}/{stored['call_id']}"


def test_an_unnamed_call_of_a_keyed_tool_is_refused_saying_how_to_name_it(
    served: Served,
) -> None:
    """2026-07-28 without ``io.toolgate/call_id``: nothing tells a retry from a new call, so a
    tool that requires a key refuses it, and says how to name the call over MCP."""
    path = f"unnamed-{uuid.uuid4().hex[:6]}.txt"
    (served.workspace / path).write_text("bye")
    with Rpc(served.url, MODERN) as rpc:
        out = _result(rpc.call("fs.delete_file", {"path": path}))
    assert out["isError"], out
    error = out["_meta"][meta.ERROR]
    assert error["type"] == "idempotency_key_required"
    assert meta.CALL_ID in error["message"] and meta.IDEMPOTENCY_KEY in error["message"]
    assert "Idempotency-Key header" not in out["content"][0]["text"]
    assert (served.workspace / path).exists()


# -- 2. input refused up front, never an exception's text ----------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("workspace", [["demo"], {"id": "demo"}, 5])
def test_tools_list_with_a_workspace_not_a_string_is_invalid_params(
    pair: dict[str, Served], era: str, workspace: Any
) -> None:
    with Rpc(pair["fast"].url, era) as rpc:
        answer = rpc.raw("tools/list", {"_meta": {meta.WORKSPACE: workspace}})
    error = answer.get("error")
    assert error is not None and error["code"] == INVALID_PARAMS, answer
    assert meta.WORKSPACE in error["message"] and "unhashable" not in error["message"]


SURROGATE_CALLS = [
    ("in an argument", {"content": "\ud800"}, {}),
    ("in an argument's key", {"content": "x", "\udc00": 1}, {}),
    ("in the run id", {"content": "x"}, {meta.RUN_ID: "r\ud800"}),
]


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(
    ("what", "arguments", "meta_"), SURROGATE_CALLS, ids=[c[0] for c in SURROGATE_CALLS]
)
def test_a_lone_surrogate_is_refused_before_anything_runs(
    served: Served, era: str, what: str, arguments: dict[str, Any], meta_: dict[str, Any]
) -> None:
    path = f"sur-{uuid.uuid4().hex[:6]}.txt"
    with Rpc(served.url, era) as rpc:
        answer = rpc.call("fs.write_file", {"path": path, **arguments}, meta_)
    error = answer.get("error")
    # 2025-11-25: the SDK's parser refuses the body first (a parse error); 2026-07-28's
    # parser lets it through, and the gateway refuses the params.
    code = INVALID_PARAMS if era == MODERN else PARSE_ERROR
    assert error is not None and error["code"] == code, answer
    assert "surrogate" in error["message"] or "hex escape" in error["message"], error
    assert not (served.workspace / path).exists()


# -- 3. a task-augmented call in 2025-11-25 is always answered with a task -----------------


def test_a_fast_legacy_task_call_is_answered_with_a_task(pair: dict[str, Served]) -> None:
    served = pair["fast"]
    path = f"task-{uuid.uuid4().hex[:6]}.txt"
    (served.workspace / path).write_text("quick")
    with Rpc(served.url, LEGACY) as rpc:
        created = _result(
            rpc.raw("tools/call", {"name": "fs.read_file", "arguments": {"path": path}, "task": {}})
        )
        assert set(created) <= {"task", "_meta", "content"}, created
        task = created["task"]
        assert task["status"] in ("working", "completed"), task
        state = _result(rpc.raw("tasks/get", {"taskId": task["taskId"]}))
        payload = _result(rpc.raw("tasks/result", {"taskId": task["taskId"]}))
    assert state["status"] == "completed", state
    assert payload["structuredContent"]["content"] == "quick"
    assert payload["_meta"][meta.EXECUTION_ID] == task["taskId"]


def test_a_refused_legacy_task_call_is_a_jsonrpc_error(pair: dict[str, Served]) -> None:
    with Rpc(pair["fast"].url, LEGACY) as rpc:
        answer = rpc.raw(
            "tools/call",
            {
                "name": "fs.read_file",
                "arguments": {"path": "x"},
                "task": {},
                "_meta": {meta.TURN_ID: 7},
            },
        )
    assert answer.get("error", {}).get("code") == INVALID_PARAMS, answer
    assert "invalid_request" in answer["error"]["message"]


# -- 4. where to decide an approval ---------------------------------------------------------


def _delete_target(served: Served) -> str:
    path = f"doomed-{uuid.uuid4().hex[:6]}.txt"
    (served.workspace / path).write_text("bye")
    return path


@pytest.mark.parametrize("era", ERAS)
def test_an_approval_names_its_page_on_the_requests_host(pair: dict[str, Served], era: str) -> None:
    served = pair["fast"]
    with Rpc(served.url, era) as rpc:
        out = _result(rpc.call("fs.delete_file", {"path": _delete_target(served)}, _ids()))
    body = out["structuredContent"]
    approval = body["approval"]["id"]
    assert body["links"]["approval_page"] == f"{served.url}/ui/approvals/{approval}"
    assert f"{served.url}/ui/approvals/{approval}" in body["message"]
    assert body["approval"]["page"] == f"{served.url}/ui/approvals/{approval}"


@pytest.fixture(scope="module")
@starts_processes
def public(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    config = _project(tmp_path_factory, "public", public_url=PUBLIC_URL + "/")
    with gateway(config) as url:
        yield Served(url, config.parent)


@pytest.mark.parametrize("era", ERAS)
def test_links_use_the_configured_public_url(public: Served, era: str) -> None:
    with Rpc(public.url, era) as rpc:
        out = _result(rpc.call("fs.delete_file", {"path": _delete_target(public)}, _ids()))
        params = {"name": "fs.delete_file", "arguments": {"path": _delete_target(public)}}
        if era == LEGACY:
            params.update(task={}, _meta=_ids())
        else:
            params["_meta"] = {**TASKS, **_ids()}
        task = _result(rpc.raw("tools/call", params))
    links = out["structuredContent"]["links"]
    assert links and all(link.startswith(PUBLIC_URL + "/") for link in links.values()), links
    assert links["approval_page"].startswith(PUBLIC_URL + "/ui/approvals/ap")
    assert public.url not in json.dumps(out) and public.url not in json.dumps(task)
    message = (task.get("task") or task)["statusMessage"]
    assert PUBLIC_URL + "/ui/approvals/ap" in message, message


# -- 5. the status tool ---------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_the_status_tool_answers_an_unknown_or_foreign_id_as_not_found(
    pair: dict[str, Served], era: str
) -> None:
    served = pair["fast"]
    with Rpc(served.url, MODERN, key=BOB) as bob:
        theirs = _result(bob.call("fs.list_dir", {"path": "."}))["_meta"][meta.EXECUTION_ID]
    answers = []
    with Rpc(served.url, era) as rpc:
        for execution_id in ("ex_" + "0" * 32, theirs):
            answers.append(_result(rpc.call(results.STATUS_TOOL, {"execution_id": execution_id})))
    for out in answers:
        assert out["isError"] is True, out
        assert out["_meta"][meta.ERROR]["type"] == "not_found"
        assert "fs.list_dir" not in json.dumps(out) and "bob" not in json.dumps(out)
    unknown, foreign = (out["content"][0]["text"] for out in answers)
    assert foreign.replace(theirs, "ex_" + "0" * 32) == unknown


# -- 6. trace context, deprecated versions, a long call as a task ---------------------------


def test_meta_traceparent_continues_into_the_execution(served: Served) -> None:
    with Rpc(served.url, MODERN) as rpc:
        out = _result(rpc.call("fs.list_dir", {"path": "."}, {"traceparent": TRACEPARENT}))
    assert served.request_json(out["_meta"][meta.EXECUTION_ID])["traceparent"] == TRACEPARENT


@pytest.mark.parametrize("era", ERAS)
def test_the_traceparent_header_continues_into_the_execution(
    pair: dict[str, Served], era: str
) -> None:
    served = pair["fast"]
    with Rpc(served.url, era) as rpc:
        out = _result(rpc.call("fs.list_dir", {"path": "."}, traceparent=TRACEPARENT))
        loose = _result(rpc.call("fs.list_dir", {"path": "."}, traceparent="a-b-c-d"))
    assert served.request_json(out["_meta"][meta.EXECUTION_ID])["traceparent"] == TRACEPARENT
    stored = served.request_json(loose["_meta"][meta.EXECUTION_ID])["traceparent"]
    assert stored != "a-b-c-d" and re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", stored)


@pytest.mark.parametrize("era", ERAS)
def test_tools_list_marks_a_deprecated_newest_version(pair: dict[str, Served], era: str) -> None:
    with Rpc(pair["fast"].url, era) as rpc:
        listed = {t["name"]: t for t in _result(rpc.raw("tools/list", {}))["tools"]}
    tool = listed["fs.list_dir"]
    assert tool["title"] == "fs.list_dir 9.0.0"
    assert tool["description"].startswith("[deprecated: use fs.list_dir ^1] ")
    assert tool["_meta"][meta.DEPRECATED] == "use fs.list_dir ^1"
    assert tool["_meta"][meta.TOOL_VERSION] == "9.0.0"
    assert listed["fs.read_file"]["_meta"][meta.DEPRECATED] is False
    # whether a call needs an idempotency key, as GET /v1/tools says (MCP's idempotentHint
    # says something else: whether calling twice does more than once)
    keyed = ("fs.delete_file", "fs.read_file")
    assert [listed[name]["_meta"][meta.IDEMPOTENCY] for name in keyed] == ["required", "none"]


@pytest.mark.parametrize("era", ERAS)
def test_a_long_call_becomes_a_task_that_ends_in_tasks_get(
    pair: dict[str, Served], era: str
) -> None:
    served = pair["fast"]
    script = f"s_{uuid.uuid4().hex[:8]}.py"
    (served.workspace / script).write_text("import time\ntime.sleep(2)\nprint('slept')\n")
    params: dict[str, Any] = {"name": "proc.python", "arguments": {"script": script}}
    if era == LEGACY:
        params["task"] = {}
    else:
        params["_meta"] = TASKS
    with Rpc(served.url, era) as rpc:
        created = _result(rpc.raw("tools/call", params))
        task = created["task"] if era == LEGACY else created
        assert (task.get("resultType"), era) != ("complete", MODERN), created
        assert task["status"] == "working", task
        assert "running" in task["statusMessage"], task
        deadline = time.monotonic() + 60
        while True:
            state = _result(rpc.raw("tasks/get", {"taskId": task["taskId"]}))
            if state["status"] != "working" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if era == LEGACY:
            final = _result(rpc.raw("tasks/result", {"taskId": task["taskId"]}))
        else:
            final = state["result"]
    assert state["status"] == "completed", state
    assert final["_meta"][meta.OUTCOME] == "succeeded", final
    assert "slept" in json.dumps(final)
