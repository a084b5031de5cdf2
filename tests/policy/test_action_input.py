"""``input.action``: what a call will do, as its adapter renders it for the policy
(docs/policies.md#the-input-document), through the real stages of a real runtime over the
shipped tools; and the decision cache keys on it when a policy reads it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.adapters.database.options import statement_view
from gateway.pipeline import normalise, policy, resolve, validate
from gateway.pipeline.records import Requested
from gateway.pipeline.request import parse_request
from gateway.policy.embedded import EmbeddedPolicy
from gateway.runtime.bootstrap import close_runtime, open_runtime
from gateway.runtime.container import Runtime
from gateway.settings import load_settings
from tests.policy.helpers import make_input
from tests.server.helpers import body

pytestmark = pytest.mark.anyio


SEARCH_TOOL = """
name: test.search
version: 1.0.0
description: Search the example API.
adapter: http
operation: request
risk: low
side_effect: read
input:
  q: {type: string, required: true}
  page: {type: integer, default: 1}
method: GET
base_url: https://api.example.com:8443
url: /v1/search
query: {q: "{arguments.q}", page: "{arguments.page}", format: json}
credentials:
  - {header: Authorization, prefix: "Bearer ", env: TEST_SEARCH_TOKEN}
timeout: 5s
"""


@pytest.fixture
async def runtime(project: Path, workspace_root: Path) -> AsyncIterator[Runtime]:
    (project / "tools.d" / "test.search.yaml").write_text(SEARCH_TOOL, encoding="utf-8")
    url = f"sqlite:///{project / 'var' / 'toolgate.db'}"
    opened = await open_runtime(load_settings(project / "toolgate.yaml", env={}, database_url=url))
    try:
        yield opened
    finally:
        await close_runtime(opened)


async def decided_input(runtime: Runtime, tool: str, arguments: dict[str, Any]) -> Any:
    """The input recorded by the policy stage's ``policy.decided`` event for one call."""
    request = parse_request(body(tool, arguments, idempotency_key="k1"), "alice")
    resolved = await resolve.run(runtime, Requested.start(request))
    prepared = await validate.run(runtime, await normalise.run(runtime, resolved))
    decided = await policy.run(runtime, prepared)
    (event,) = [e for e in decided.trail.events if e.type == "policy.decided"]
    return event.data["input"]


async def test_an_http_tool_gives_the_rendered_request_without_credentials(
    runtime: Runtime,
) -> None:
    """orders.create: a POST to the configured service, its credential header never shown."""
    document = await decided_input(runtime, "orders.create", {"item_id": 1, "quantity": 2})
    assert document["action"] == {
        "kind": "http",
        "method": "POST",
        "scheme": "http",
        "host": "127.0.0.1",
        "port": 8090,
        "path": "/orders",
        "query_keys": [],
    }
    got = await decided_input(runtime, "orders.get", {"order_id": "ord_12"})
    assert got["action"]["method"] == "GET" and got["action"]["path"] == "/orders/ord_12"


async def test_an_http_tool_gives_the_query_keys_and_never_their_values(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_SEARCH_TOKEN", "token-never-shown")
    document = await decided_input(runtime, "test.search", {"q": "value-never-shown"})
    action = document["action"]
    assert action["scheme"] == "https" and action["host"] == "api.example.com"
    assert action["port"] == 8443 and action["path"] == "/v1/search"
    assert action["query_keys"] == ["format", "page", "q"]
    assert "never-shown" not in str(document["action"])


async def test_a_database_tool_gives_its_statement_kind_and_tables(runtime: Runtime) -> None:
    args = {"order_id": 1, "carrier": "dhl", "tracking": "AB-1234"}
    document = await decided_input(runtime, "db.mark_shipped", args)
    assert document["action"] == {
        "kind": "database",
        "connection": "orders",
        "statement": "update",
        "tables": ["orders"],
    }
    read = await decided_input(runtime, "db.query_orders", {})
    assert read["action"]["statement"] == "select" and read["action"]["tables"] == ["orders"]


async def test_a_process_tool_gives_the_argv_it_will_run(runtime: Runtime) -> None:
    args = {"script": "s.py", "args": ["--force", "x y"]}
    document = await decided_input(runtime, "proc.python", args)
    assert document["action"] == {
        "kind": "process",
        "argv": ["python", "-u", "--", "s.py", "--force", "x y"],
    }


async def test_a_file_tool_gives_its_kind_and_its_resolved_paths(runtime: Runtime) -> None:
    document = await decided_input(runtime, "fs.delete_file", {"path": "notes//a.txt"})
    assert document["action"] == {"kind": "file"}
    assert document["paths"] == [
        {"argument": "path", "relative": "notes/a.txt", "inside_workspace": True}
    ]


def test_the_decision_cache_keys_on_the_action_a_policy_reads(scratch: Any) -> None:
    """A policy reading input.action.method: two calls alike but for the method get their
    own decisions, and the cache key holds the method (and nothing else of the action)."""
    rego = (
        "package toolgate\n\nimport rego.v1\n\n"
        'decision := {"result": "deny", "reasons": ["post"]} if input.action.method == "POST"\n'
        'else := {"result": "allow", "reasons": ["other"]}\n'
    )
    backend = EmbeddedPolicy(scratch(rego))
    try:
        assert backend.cache_refusal is None
        assert backend._tree is not None and backend._tree["action"] == {"method": None}

        def decide(method: str) -> str:
            action = {"kind": "http", "method": method, "host": "h"}
            return backend.decide_sync(make_input(action=action)).result.value

        assert [decide("POST"), decide("GET"), decide("POST")] == ["deny", "allow", "deny"]
    finally:
        asyncio.run(backend.aclose())


@pytest.mark.parametrize(
    ("sql", "kind", "tables"),
    [
        ("DELETE FROM orders WHERE id = :id", "delete", ("orders",)),
        ("SELECT * FROM orders o JOIN items i ON i.id = o.item_id", "select", ("items", "orders")),
        ("INSERT INTO shop.orders (a, b) VALUES (:a, :b) RETURNING id", "insert", ("shop.orders",)),
        (
            "UPDATE orders SET y = extract(year FROM d) WHERE id IN (SELECT id FROM late)",
            "update",
            ("late", "orders"),
        ),
        (
            "WITH old AS (SELECT id FROM orders) DELETE FROM archive USING old "
            "WHERE archive.id = old.id",
            "delete",
            ("archive", "orders"),
        ),
        (
            "select a from \"Order Items\", t2 x where q = 'from evil' -- from c",
            "select",
            ("Order Items", "t2"),
        ),
        ("SELECT id FROM jobs FOR UPDATE SKIP LOCKED", "select", ("jobs",)),
        ("INSERT INTO t (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET a = 2", "insert", ("t",)),
        ("TRUNCATE TABLE logs", "truncate", ("logs",)),
        ("SELECT 1", "select", ()),
    ],
)
def test_a_statement_s_kind_and_tables_are_read_from_its_words(
    sql: str, kind: str, tables: tuple[str, ...]
) -> None:
    assert statement_view(sql) == (kind, tables)
