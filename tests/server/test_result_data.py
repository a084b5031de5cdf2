"""What a result's ``data`` holds when the call did not succeed (docs/api.md, ToolResult):
what the adapter reported, when it ran and reported a result; else null."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.settings import Settings
from gateway.testing import run_agent_code_without_approval
from tests.server.helpers import auth, body


def _result(client: TestClient, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/executions", json=body(tool, arguments), headers=auth())
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def test_a_failed_command_keeps_what_it_printed(
    settings: Settings, project: Path, workspace_root: Path
) -> None:
    run_agent_code_without_approval(project)  # a test of the result's data, not of the policy
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        _failed_command(client, workspace_root)


def _failed_command(client: TestClient, workspace_root: Path) -> None:
    (workspace_root / "fails.py").write_text(
        "import sys\nprint('half done')\nprint('broke', file=sys.stderr)\nsys.exit(3)\n"
    )
    result = _result(client, "proc.python", {"script": "fails.py"})
    assert result["outcome"] == "failed" and result["error"]["type"] == "command_failed"
    data = result["data"]
    assert isinstance(data, dict), result
    assert data["exit_code"] == 3 and data["stdout"] == "half done\n"
    assert data["stderr"] == "broke\n"


def test_data_is_null_when_the_adapter_reported_no_result(
    client: TestClient, workspace_root: Path
) -> None:
    refused = _result(client, "fs.read_file", {"path": "../outside.txt"})  # before the adapter
    assert refused["error"]["type"] == "path_escape" and refused["data"] is None
    missing = _result(client, "fs.read_file", {"path": "absent.txt"})  # the adapter raised
    assert missing["error"]["type"] == "file_not_found" and missing["data"] is None
