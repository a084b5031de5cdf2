"""A tool's declared ``output:`` as MCP's ``outputSchema``, held to over a real gateway with
the official SDK client (which validates ``structuredContent`` against it), in both eras."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import mcp_types as types
import pytest

from gateway.mcp import meta
from gateway.mcp.results import NOT_THE_OUTPUT
from gateway.testing import gateway, make_project
from tests.helpers import ALICE, starts_processes
from tests.mcp.helpers import ERAS, Gateway, connect, meta_of
from tests.server.test_output_schema import BAD_READ


@pytest.fixture(scope="module")
@starts_processes
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    root = tmp_path_factory.mktemp("mcp-output")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    (root / "tools.d" / "t.read_short.yaml").write_text(BAD_READ)
    with gateway(config) as url:
        handle = Gateway(url, root)
        handle.workspace.mkdir(parents=True, exist_ok=True)
        (handle.workspace / "a.txt").write_text("hello\n")
        yield handle


def _run(gw: Gateway, era: str, name: str, **call_meta: Any) -> types.CallToolResult:
    async def main() -> types.CallToolResult:
        async with connect(gw.url, era) as client:
            return await client.call_tool(name, {"path": "a.txt"}, meta=call_meta or None)

    return anyio.run(main)


@pytest.mark.parametrize("era", ERAS)
def test_tools_list_publishes_the_declared_output_only(gw: Gateway, era: str) -> None:
    async def main() -> dict[str, types.Tool]:
        async with connect(gw.url, era) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    tools = anyio.run(main)
    with gw.rest(ALICE) as rest:
        published = rest.get("/v1/tools/fs.read_file").json()["output_schema"]
    assert tools["fs.read_file"].output_schema == published
    assert tools["http.get_json"].output_schema is not None
    assert tools["fs.write_file"].output_schema is None


@pytest.mark.parametrize("era", ERAS)
def test_a_conforming_result_is_structured_content(gw: Gateway, era: str) -> None:
    result = _run(gw, era, "fs.read_file")  # the SDK client validates it against the schema
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["content"] == "hello\n"
    assert meta_of(result)[meta.OUTCOME] == "succeeded"


@pytest.mark.parametrize("era", ERAS)
def test_a_non_conforming_result_is_an_error_without_structured_content(
    gw: Gateway, era: str
) -> None:
    result = _run(gw, era, "t.read_short")
    assert result.is_error and result.structured_content is None
    got = meta_of(result)
    assert got[meta.OUTCOME] == "failed"
    assert (got[meta.ERROR]["type"], got[meta.ERROR]["phase"]) == ("output_mismatch", "verify")
    texts = [block.text for block in result.content]  # type: ignore[union-attr]
    assert texts[0].startswith("failed:") and "declared output" in texts[0]
    assert any('"content":"hello\\n"' in t for t in texts), texts  # the data is not lost


@pytest.mark.parametrize("era", ERAS)
def test_answers_that_are_not_the_output_are_errors(gw: Gateway, era: str) -> None:
    ids = {meta.RUN_ID: f"r-{uuid.uuid4().hex[:8]}", meta.CALL_ID: "c"}
    plan = _run(gw, era, "fs.read_file", **ids, **{meta.DRY_RUN: True})
    assert plan.is_error and plan.structured_content is None
    assert plan.content[0].text == NOT_THE_OUTPUT  # type: ignore[union-attr]
    assert meta_of(plan)[meta.OUTCOME] == "planned"
    assert '"would":"run"' in plan.content[1].text  # type: ignore[union-attr]
