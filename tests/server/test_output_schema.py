"""A declared ``output:``: published with the tool, checked on every successful call."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.settings import Settings, load_settings
from tests.server.helpers import auth, body

# fs.read_file with an output that leaves out `sha256`, which the file adapter always returns.
BAD_READ = """\
name: t.read_short
version: 1.0.0
description: Read a file; its declared output forgets a field the adapter returns.
adapter: file
operation: read
risk: low
side_effect: read
input:
  path: {type: string, required: true}
paths: [path]
output:
  path: {type: string, required: true}
  content: {type: string, required: true}
  encoding: {type: string, required: true}
  size: {type: integer, required: true}
"""


@pytest.fixture
def declared(project: Path, database_url: str) -> Settings:
    (project / "tools.d" / "t.read_short.yaml").write_text(BAD_READ)
    return load_settings(project / "toolgate.yaml", env={}, database_url=database_url)


@pytest.fixture
def client(declared: Settings, workspace_root: Path) -> Iterator[TestClient]:
    (workspace_root / "a.txt").write_text("hello\n")
    with TestClient(create_app(declared), raise_server_exceptions=False) as test_client:
        yield test_client


def _call(client: TestClient, tool: str) -> dict:  # type: ignore[type-arg]
    response = client.post("/v1/executions", json=body(tool, {"path": "a.txt"}), headers=auth())
    assert response.status_code == 200, response.text
    result: dict = response.json()["result"]  # type: ignore[type-arg]
    return result


def test_the_tool_publishes_its_output_schema(client: TestClient) -> None:
    read = client.get("/v1/tools/fs.read_file", headers=auth()).json()
    schema = read["output_schema"]
    assert schema["required"] == ["content", "encoding", "path", "sha256", "size"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["encoding"]["enum"] == ["utf-8", "hex"]
    assert client.get("/v1/tools/fs.write_file", headers=auth()).json()["output_schema"] is None
    mcp = client.get("/v1/tools", params={"format": "mcp"}, headers=auth()).json()["items"]
    by_name = {item["name"]: item for item in mcp}
    assert by_name["fs.read_file"]["outputSchema"] == schema  # no x- keys in this one
    assert "outputSchema" not in by_name["fs.write_file"]


def test_a_conforming_result_succeeds(client: TestClient) -> None:
    result = _call(client, "fs.read_file")
    assert result["outcome"] == "succeeded", result
    assert result["data"]["sha256"] == hashlib.sha256(b"hello\n").hexdigest()


def test_a_result_that_breaks_the_declared_output_fails_in_verify_and_keeps_its_data(
    client: TestClient,
) -> None:
    result = _call(client, "t.read_short")
    assert result["outcome"] == "failed", result
    error = result["error"]
    assert (error["type"], error["phase"], error["retryable"]) == (
        "output_mismatch",
        "verify",
        False,
    )
    assert error["errors"] == {"sha256": ["unknown field"]}
    assert result["data"]["content"] == "hello\n"  # kept as the adapter returned it
    assert result["side_effect"]["attempted"] is False  # a read: nothing to commit
    assert [e["kind"] for e in result["evidence"]] == ["file_hash"]
