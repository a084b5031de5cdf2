"""The toolgate command line, run as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import ALICE, BOB
from tests.integration.gateways import free_port, gateway, make_project


def toolgate(
    *args: str, cwd: Path, key: str | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RUST_LIB_BACKTRACE": "0"}
    env.pop("TOOLGATE_CONFIG", None)
    if key:
        env["TOOLGATE_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_passes_on_the_shipped_files(project: Path) -> None:
    done = toolgate("check", cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: ")


def test_check_lists_every_fault(project: Path) -> None:
    read = project / "tools.d" / "fs.read_file.yaml"
    read.write_text(read.read_text() + "colour: blue\n")
    (project / "tools.d" / "broken.yaml").write_text("name: [\n")
    (project / "rego" / "extra.rego").write_text("package toolgate\n\nx := undefined_fn(1)\n")
    done = toolgate("check", cwd=project)
    assert done.returncode == 2
    assert "fs.read_file.yaml:" in done.stderr and "colour: unknown key" in done.stderr
    assert "broken.yaml" in done.stderr
    assert "extra.rego" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_refuses_to_start_on_a_broken_catalogue(project: Path) -> None:
    (project / "tools.d" / "dup.yaml").write_text(
        (project / "tools.d" / "fs.read_file.yaml").read_text()
    )
    done = toolgate("serve", "--port", str(free_port()), cwd=project)
    assert done.returncode == 2
    assert "declared twice" in done.stderr and "Traceback" not in done.stderr


def test_policy_test_and_eval(project: Path, tmp_path: Path) -> None:
    done = toolgate("policy", "test", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].endswith(" passed, 0 failed")
    (project / "rego" / "zz_test.rego").write_text(
        "package toolgate_zz_test\n\ntest_always_fails if {\n\t1 == 2\n}\n"
    )
    failing = toolgate("policy", "test", cwd=project)
    assert failing.returncode == 1
    assert failing.stdout.strip().splitlines()[-1].endswith(" passed, 1 failed")
    doc = {
        "tool": {
            "name": "fs.write_file",
            "version": "1.2.0",
            "risk": "medium",
            "side_effect": "write",
            "reversible": False,
            "adapter": "file",
            "tags": [],
        },
        "arguments": {"path": "a.txt"},
        "arguments_sha256": "x",
        "paths": [{"argument": "path", "relative": "a.txt", "inside_workspace": True}],
        "actor": {"user_id": "alice", "agent_id": "a", "roles": []},
        "workspace": {"id": "demo", "root": "/x"},
        "request": {
            "run_id": "r",
            "turn_id": "t",
            "call_id": "c",
            "deadline_ms_left": None,
            "idempotency_key_present": False,
        },
        "approval": {"present": False, "approved_by": None},
        "usage": {},
    }
    (tmp_path / "in.json").write_text(json.dumps(doc))
    evaluated = toolgate("policy", "eval", "--input", str(tmp_path / "in.json"), cwd=project)
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["result"] == "allow"
    denied = {**doc, "actor": {"user_id": "mallory"}}
    for args in (("--input", "-"), ()):
        piped = toolgate("policy", "eval", *args, cwd=project, stdin=json.dumps(denied))
        assert piped.returncode == 0, piped.stderr
        assert json.loads(piped.stdout)["result"] == "deny"
    garbage = toolgate("policy", "eval", cwd=project, stdin="{not json")
    assert garbage.returncode == 2
    assert garbage.stderr.startswith("toolgate: standard input: cannot read a JSON input")
    assert "Traceback" not in garbage.stderr


def test_policy_input_shows_what_the_policy_saw(tmp_path: Path) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    (tmp_path / "var/workspaces/demo").mkdir(parents=True, exist_ok=True)
    with gateway(config) as url:
        ids = {}
        for call_id, content in (("short", "hi"), ("long", "x" * 5000), ("denied", "x")):
            response = httpx.post(
                f"{url}/v1/executions",
                json={
                    "run_id": "policy-input",
                    "call_id": call_id,
                    "tool": {"name": "fs.write_file"},
                    "arguments": {
                        "path": ".git/config" if call_id == "denied" else f"notes/{call_id}.txt",
                        "content": content,
                    },
                    "workspace": {"id": "demo"},
                },
                headers={"Authorization": f"Bearer {ALICE}"},
                timeout=60,
            )
            assert response.status_code == 200, response.text
            ids[call_id] = response.json()["id"]
        shown = toolgate(
            "--config",
            str(config),
            "policy",
            "input",
            ids["short"],
            "--url",
            url,
            cwd=tmp_path,
            key=ALICE,
        )
        assert shown.returncode == 0, shown.stderr
        document = json.loads(shown.stdout)
        assert document["tool"]["name"] == "fs.write_file"
        assert document["arguments"]["content"] == "hi"  # normalised: defaults filled in
        assert document["paths"] == [
            {"argument": "path", "relative": "notes/short.txt", "inside_workspace": True}
        ]
        assert isinstance(document["request"]["time_ms"], int)
        again = toolgate(
            "--config", str(config), "policy", "eval", cwd=tmp_path, stdin=shown.stdout
        )
        assert json.loads(again.stdout)["result"] == "allow", again.stdout + again.stderr
        long = toolgate(
            "--config",
            str(config),
            "policy",
            "input",
            ids["long"],
            "--url",
            url,
            cwd=tmp_path,
            key=ALICE,
        )
        assert long.returncode == 0, long.stderr
        content = json.loads(long.stdout)["arguments"]["content"]
        assert content == "x" * 1024 + "…[cut: 5000 characters]"
        assert "long arguments were cut" in long.stderr
        denied = toolgate(
            "--config",
            str(config),
            "policy",
            "input",
            ids["denied"],
            "--url",
            url,
            cwd=tmp_path,
            key=ALICE,
        )  # a denial is recorded too (its policy.decided event was lost before)
        assert denied.returncode == 0, denied.stderr
        replayed = toolgate(
            "--config",
            str(config),
            "policy",
            "eval",
            "--input",
            "-",
            cwd=tmp_path,
            stdin=denied.stdout,
        )
        decision = json.loads(replayed.stdout)
        assert decision["result"] == "deny"
        assert any("protected path '.git/'" in r for r in decision["reasons"])
        unknown = toolgate(
            "--config",
            str(config),
            "policy",
            "input",
            "ex_nope",
            "--url",
            url,
            cwd=tmp_path,
            key=ALICE,
        )
        assert unknown.returncode == 1 and "Traceback" not in unknown.stderr


def test_tools_keys_and_schema(project: Path) -> None:
    listed = toolgate("tools", cwd=project)
    assert "fs.write_file" in listed.stdout and "1.0.0" in listed.stdout
    shown = json.loads(toolgate("tools", "fs.write_file", cwd=project).stdout)
    assert shown["input_schema"]["required"] == ["content", "path"]
    hashed = toolgate("keys", "hash", "tg_dev_alice", cwd=project).stdout.strip()
    assert hashed == "34c46cc18b2bf5414c649239812810b4fc0a4523a5d0be48a2d3ac4b96eb71b7"
    schema = json.loads(toolgate("schema", cwd=project).stdout)
    assert "name" in schema["properties"] and schema["additionalProperties"] is False


@pytest.mark.slow
def test_call_and_approvals_against_a_running_gateway(tmp_path: Path) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    with gateway(config) as url:
        wrote = toolgate(
            "--config",
            str(config),
            "call",
            "fs.write_file",
            "--url",
            url,
            "--arg",
            "path=notes/a.txt",
            "--arg",
            "content=hi",
            cwd=tmp_path,
            key=ALICE,
        )
        assert wrote.returncode == 0, wrote.stdout + wrote.stderr
        assert json.loads(wrote.stdout)["result"]["outcome"] == "succeeded"
        assert (tmp_path / "var/workspaces/demo/notes/a.txt").read_text() == "hi"
        parked = toolgate(
            "--config",
            str(config),
            "call",
            "fs.delete_file",
            "--url",
            url,
            "--arg",
            "path=notes/a.txt",
            "--idempotency-key",
            "k",
            cwd=tmp_path,
            key=ALICE,
        )
        approval = json.loads(parked.stdout)["approval"]["id"]
        listed = toolgate(
            "--config",
            str(config),
            "approvals",
            "list",
            "--status",
            "pending",
            "--url",
            url,
            cwd=tmp_path,
            key=BOB,
        )
        assert approval in listed.stdout
        approved = toolgate(
            "--config",
            str(config),
            "approvals",
            "approve",
            approval,
            "--comment",
            "fine",
            "--url",
            url,
            cwd=tmp_path,
            key=BOB,
        )
        assert approved.returncode == 0, approved.stdout
        refused = toolgate(
            "--config", str(config), "approvals", "list", "--url", url, cwd=tmp_path, key=ALICE
        )
        assert refused.returncode == 1 and "not_an_approver" in refused.stdout
