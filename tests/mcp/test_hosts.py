"""DNS-rebinding protection takes its allowed hosts from configuration (a deployment behind a
proxy or in compose names itself)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from gateway.settings import load_settings
from gateway.testing import gateway, make_project
from tests.helpers import ALICE

BODY = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


def _post(url: str, host: str) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {ALICE}",
        "Host": host,
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/list",
    }
    body = {
        **BODY,
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    return httpx.post(url + "/mcp", json=body, headers=headers, timeout=30)


def test_the_environment_replaces_the_allowed_hosts(tmp_path: Path) -> None:
    (tmp_path / "toolgate.yaml").write_text("mcp: {workspace: demo}\n")
    env = {"TOOLGATE_MCP_ALLOWED_HOSTS": "toolgate:*, proxy:443"}
    settings = load_settings(tmp_path / "toolgate.yaml", env=env)
    assert settings.mcp.allowed_hosts == ("toolgate:*", "proxy:443")
    assert settings.mcp.workspace == "demo"


@pytest.mark.slow
def test_a_configured_host_is_served_and_the_loopback_default_is_gone(tmp_path: Path) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path}/toolgate.db")
    with gateway(config, env={"TOOLGATE_MCP_ALLOWED_HOSTS": "toolgate:*"}) as url:
        served = _post(url, "toolgate:8080")
        assert served.status_code == 200, served.text
        assert "fs.write_file" in served.text
        assert _post(url, "127.0.0.1:8080").status_code == 421
