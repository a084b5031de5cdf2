"""The MCP Inspector CLI (npm ``@modelcontextprotocol/inspector`` 2.12.x) lists the tools and
calls one, as docs/mcp.md quotes it too. ``make mcp-inspector`` (``make test`` too) installs it
into ``.cache/npm`` when Node is present; without CI a missing Node or Inspector skips with the
reason, in CI (``CI=true``) it fails."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.helpers import ALICE, IN_CI, REPO
from tests.mcp.helpers import Gateway

INSPECTOR = REPO / ".cache" / "npm" / "node_modules" / ".bin" / "mcp-inspector"


@pytest.fixture(scope="module")
def inspector() -> Path:
    problem = None
    if shutil.which("node") is None:
        problem = "node is not installed (the MCP Inspector needs it)"
    elif not INSPECTOR.exists():
        problem = f"the MCP Inspector is not installed in {INSPECTOR.parent}: `make mcp-inspector`"
    if problem is not None:
        if IN_CI:
            pytest.fail(problem)
        pytest.skip(problem)
    return INSPECTOR


def _run(inspector: Path, gw: Gateway, era: str, *method: str) -> dict:  # type: ignore[type-arg]
    done = subprocess.run(
        [
            str(inspector),
            "--cli",
            gw.url + "/mcp",
            "--transport",
            "http",
            "--protocol-era",
            era,
            "--header",
            f"Authorization: Bearer {ALICE}",
            "--format",
            "json",
            "-q",
            *method,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    return json.loads(done.stdout)["result"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_lists_the_tools_and_calls_one(
    inspector: Path, gw: Gateway, era: str
) -> None:
    listing = _run(inspector, gw, era, "--method", "tools/list")
    names = {tool["name"] for tool in listing["tools"]}
    assert {"fs.write_file", "fs.read_file"} <= names
    path = f"inspector-{era}-{uuid.uuid4().hex[:6]}.txt"
    (gw.workspace / path).write_text("seen by the inspector")
    args = json.dumps({"path": path})
    result = _run(
        inspector,
        gw,
        era,
        "--method",
        "tools/call",
        "--tool-name",
        "fs.read_file",
        "--tool-args-json",
        args,
    )
    assert result.get("isError") is not True, result
    assert "seen by the inspector" in json.dumps(result["structuredContent"])
    assert result["_meta"]["io.toolgate/outcome"] == "succeeded"


def quoted_commands() -> list[str]:
    """The Inspector commands docs/mcp.md quotes, one a string, continuations joined."""
    section = (REPO / "docs" / "mcp.md").read_text(encoding="utf-8")
    section = section.split("### The MCP Inspector", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_the_commands_mcp_md_quotes_run_as_it_says(inspector: Path, gw: Gateway) -> None:
    """A reader runs them from the repository's root against the demo gateway: the listing,
    then ``fs.read_file`` of ``notes/a.txt`` (which the SDK example above it writes)."""
    listing, call = quoted_commands()
    (gw.workspace / "notes").mkdir(exist_ok=True)
    (gw.workspace / "notes" / "a.txt").write_text("hi")
    answers = []
    for command in (listing, call):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command.replace("http://127.0.0.1:8080", gw.url)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
        answers.append((json.loads(done.stdout), done.stderr))
    (tools, listed_note), (result, _) = answers
    assert "fs.read_file" in {tool["name"] for tool in tools["tools"]}
    assert listed_note.startswith("Schema portability: 0 errors, 4 warnings across 3 tools.")
    assert result["isError"] is False
    assert result["structuredContent"]["content"] == "hi"
    assert result["_meta"]["io.toolgate/run_id"].startswith("mcp-")  # 2025-11-25: a session
