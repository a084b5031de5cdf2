"""The toolgate command line, run as a real process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from gateway.events.model import make_event
from gateway.settings import RELOADABLE
from gateway.store.store import Store
from gateway.testing import free_port, gateway, make_project, wait_healthy
from tests.declarations.test_faults_at_once import assert_all_reported, write_faulty
from tests.helpers import ALICE, BOB, REVIEWED_TOOL, wait_until

pytestmark = pytest.mark.slow  # every test runs the toolgate command as a process


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


def test_check_says_which_toolgate_yaml_keys_a_reload_applies(project: Path) -> None:
    """Issue 29.3: check passed a connection added to toolgate.yaml that the reload then
    refused, and said nothing of which keys need a restart."""
    done = toolgate("check", cwd=project)
    assert done.returncode == 0, done.stderr
    note = done.stdout.splitlines()[1]
    assert note.startswith("reload (SIGHUP, toolgate reload) applies tools.d, rego/, policies/")
    assert note.endswith(
        f"keys of toolgate.yaml (toolgate.yaml): {', '.join(sorted(RELOADABLE))}; "
        "a change to any other key needs a restart"
    )


def test_check_strict_fails_on_a_misspelt_data_key(project: Path) -> None:
    """Issue 29.4: a rule reading a data key that does not exist (a misspelling) never
    matches; ``check`` warns and passes, ``check --strict`` fails (exit status 1) for CI."""
    (project / "rego" / "typo.rego").write_text(
        "package toolgate\n\nsuffixes := data.toolgate.secret_file.suffixes\n"
    )
    lenient = toolgate("check", cwd=project)
    assert lenient.returncode == 0, lenient.stderr
    assert "data.toolgate.secret_file.suffixes" in lenient.stderr
    strict = toolgate("check", "--strict", cwd=project)
    assert strict.returncode == 1, strict.stderr
    assert "data.toolgate.secret_file.suffixes" in strict.stderr
    assert "--strict: warnings fail the check (1 warning)" in strict.stderr


def test_check_shows_every_round_of_faults_of_a_file_in_one_run(project: Path) -> None:
    """Issue 29.4: a database file took three runs of check (the template in the SQL, then
    its second statement, then expect_rows and the connection, which the adapter checks).
    One run lists them all."""
    (project / "tools.d" / "db.bad.yaml").write_text(
        "name: db.bad\nversion: 1.0.0\ndescription: A bad one.\nadapter: database\n"
        "operation: query\nrisk: low\nside_effect: read\nconnection: kb\n"
        "input: {id: {type: integer, required: true}}\n"
        'sql: "SELECT * FROM orders WHERE id = {arguments.id}; DELETE FROM orders"\n'
        "expect_rows: 1\n"
    )
    done = toolgate("check", cwd=project)
    assert done.returncode == 2
    faults = [line for line in done.stderr.splitlines() if "db.bad.yaml" in line]
    assert len(faults) == 3, done.stderr
    connection, expect_rows, sql = sorted(faults, key=lambda f: f.split(": ")[1])
    assert ":8: connection: connection 'kb' is not declared" in connection
    assert ":10: sql: SQL is never a template" in sql
    assert "and must be one SQL statement" in sql
    assert ":11: expect_rows: expect_rows applies to operation execute only" in expect_rows


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


def test_check_lists_every_adapter_key_fault_at_its_line(project: Path) -> None:
    """Issue 11 bugs 4 and 5: all faults of all files in one run, each at file:line: key."""
    write_faulty(project / "tools.d")
    done = toolgate("check", cwd=project)
    assert done.returncode == 2
    assert done.stderr.startswith("toolgate: configuration is not valid:\n")
    problems = [line.removeprefix("  - ") for line in done.stderr.splitlines()[1:]]
    assert_all_reported(problems, project / "tools.d")


@pytest.mark.parametrize(
    "args", [("tools",), ("tools", "fs.write_file"), ("schema",), ("keys", "hash", "k")]
)
def test_a_reader_that_closes_early_gets_no_traceback(project: Path, args: tuple[str]) -> None:
    """``toolgate tools | head`` used to print a BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", *args],
            cwd=project,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 141  # 128 + SIGPIPE, as cat or grep would exit


def test_head_of_the_schema_is_quiet(project: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "schema"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == "{"
    proc.stdout.close()  # like head -1: 22 KB more to write, into a pipe nobody reads
    assert proc.wait(timeout=120) in (0, 141)  # 0 if it all fitted in the pipe's buffer
    assert "Traceback" not in proc.stderr.read()
    proc.stderr.close()


def test_command_line_mistakes_are_not_called_configuration_faults(
    project: Path, tmp_path: Path
) -> None:
    no_key = toolgate("call", "fs.read_file", "--arg", "path=a", cwd=project)
    assert no_key.returncode == 2
    assert no_key.stderr == "toolgate: give an API key with --key or TOOLGATE_API_KEY\n"
    bad_arg = toolgate("call", "fs.read_file", "--arg", "path", cwd=project, key="k")
    assert bad_arg.stderr == "toolgate: --arg 'path': use NAME=VALUE\n"
    bad_json = toolgate("call", "fs.read_file", "--args-json", "{x", cwd=project, key="k")
    assert bad_json.returncode == 2 and "Traceback" not in bad_json.stderr
    assert bad_json.stderr.startswith("toolgate: --args-json is not JSON: ")
    missing = toolgate("policy", "eval", "--input", str(tmp_path / "none.json"), cwd=project)
    assert missing.returncode == 2
    assert missing.stderr.startswith(f"toolgate: {tmp_path / 'none.json'}: cannot read")
    broken = toolgate("--config", str(tmp_path / "none.yaml"), "check", cwd=project)
    assert broken.stderr.startswith("toolgate: configuration is not valid:")


def test_serve_refuses_to_start_on_a_broken_catalogue(project: Path) -> None:
    (project / "tools.d" / "dup.yaml").write_text(
        (project / "tools.d" / "fs.read_file.yaml").read_text()
    )
    done = toolgate("serve", "--port", str(free_port()), cwd=project)
    assert done.returncode == 2
    assert "declared twice" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_a_port_in_use_says_so_in_one_line_and_exits_4(
    project: Path, workers: str
) -> None:
    """Issue 29.5: it printed ``listening on`` and then uvicorn's raw ``[Errno 98]``."""
    with socket.socket() as held:  # another gateway, as far as serve can tell
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = toolgate("serve", "--port", str(port), "--workers", workers, cwd=project)
    assert done.returncode == 4
    assert done.stderr == (
        f"toolgate: cannot listen on 127.0.0.1:{port}: the address is in use (another gateway?"
        " choose a port with --port, TOOLGATE_PORT or port: in toolgate.yaml)\n"
    )
    assert "listening on" not in done.stdout


@pytest.mark.slow
def test_serve_says_listening_on_once_bound_and_names_the_port_it_got(project: Path) -> None:
    """``port: 0`` (any free port): the banner's first line names the port bound."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--port", "0", "--log-level", "warning"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode()
        assert first.startswith("toolgate: listening on http://127.0.0.1:"), first
        url = first.removeprefix("toolgate: listening on ").strip()
        assert not url.endswith(":0")
        wait_healthy(url, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()


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
    (tmp_path / "tools.d" / "fs.write_reviewed.yaml").write_text(REVIEWED_TOOL)
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
        listed = _approvals(config, url, "list", "--status", "pending")
        assert approval in listed.stdout
        approved = _approvals(config, url, "approve", approval, "--comment", "fine")
        assert approved.returncode == 0, approved.stdout
        refused = _approvals(config, url, "list", key=ALICE)
        assert refused.returncode == 1 and "not_an_approver" in refused.stdout
        draft = _call(config, url, "fs.write_reviewed", "--arg", "path=r.txt", "--arg", "content=x")
        reviewed = json.loads(draft.stdout)["approval"]["id"]
        fixed = _approvals(config, url, "approve", reviewed, "--edit", "create_dirs=false")
        assert fixed.returncode == 1 and "argument_not_editable" in fixed.stdout, fixed.stdout
        bad = _approvals(config, url, "approve", reviewed, "--edit", "content")
        assert bad.returncode == 2 and "--edit 'content': use NAME=VALUE" in bad.stderr
        edited = _approvals(config, url, "approve", reviewed, "--edit", "content=edited")
        assert edited.returncode == 0, edited.stdout
        assert json.loads(edited.stdout)["arguments"]["content"] == "edited"
        done = httpx.get(
            f"{url}/v1/executions/{json.loads(draft.stdout)['id']}?wait=20",
            headers={"Authorization": f"Bearer {ALICE}"},
        ).json()
        assert done["result"]["outcome"] == "succeeded", done
        assert (tmp_path / "var/workspaces/demo/r.txt").read_text() == "edited"


def _approvals(
    config: Path, url: str, *args: str, key: str = BOB
) -> subprocess.CompletedProcess[str]:
    return toolgate(
        "--config", str(config), "approvals", *args, "--url", url, cwd=config.parent, key=key
    )


def _call(config: Path, url: str, *args: str, key: str = ALICE) -> subprocess.CompletedProcess[str]:
    return toolgate(
        "--config", str(config), "call", *args, "--url", url, cwd=config.parent, key=key
    )


@pytest.mark.slow
def test_call_ids_agent_and_idempotency_key(tmp_path: Path) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    with gateway(config) as url:
        write = ("fs.write_file", "--arg", "path=notes/a.txt", "--arg", "content=hi")
        first = _call(
            config, url, *write, "--run-id", "r-cli", "--call-id", "c-1", "--agent-id", "planner"
        )
        assert first.returncode == 0, first.stdout + first.stderr
        execution = json.loads(first.stdout)
        assert (execution["run_id"], execution["call_id"]) == ("r-cli", "c-1")
        assert execution["actor"] == {"user_id": "alice", "agent_id": "planner"}
        again = json.loads(
            _call(
                config,
                url,
                *write,
                "--run-id",
                "r-cli",
                "--call-id",
                "c-1",
                "--agent-id",
                "planner",
            ).stdout
        )
        assert again["id"] == execution["id"]  # the same call: replayed, not run again
        fresh = [json.loads(_call(config, url, *write).stdout) for _ in range(2)]
        assert fresh[0]["actor"]["agent_id"] == "cli"
        assert fresh[0]["run_id"] != fresh[1]["run_id"]
        assert fresh[0]["call_id"] != fresh[1]["call_id"]
        keyed = [
            json.loads(_call(config, url, *write, "--idempotency-key", "k-cli").stdout)
            for _ in range(2)
        ]
        assert keyed[0]["id"] == keyed[1]["id"]  # new call ids, one key: one execution
        events = toolgate(
            "--config",
            str(config),
            "executions",
            "events",
            execution["id"],
            "--after",
            "3",
            "--url",
            url,
            cwd=tmp_path,
            key=ALICE,
        )
        assert events.returncode == 0, events.stdout + events.stderr
        seqs = [e["seq"] for e in json.loads(events.stdout)["items"]]
        assert seqs and min(seqs) == 4


def _pending_approval(config: Path, url: str) -> str:
    def pending() -> list[dict[str, object]]:
        listed = _approvals(config, url, "list", "--status", "pending", "--json")
        return list(json.loads(listed.stdout)["items"])

    return str(wait_until(pending, "an approval to become pending", every=0.2)[0]["id"])


@pytest.mark.slow
def test_call_wait_follows_an_approval_and_an_async_call_to_the_end(tmp_path: Path) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    (tmp_path / "var/workspaces/demo/notes").mkdir(parents=True)
    (tmp_path / "var/workspaces/demo/notes/old.txt").write_text("old")
    with gateway(config) as url:
        env = {**os.environ, "RUST_LIB_BACKTRACE": "0", "TOOLGATE_API_KEY": ALICE}
        waiting = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "--config",
                str(config),
                "call",
                "fs.delete_file",
                "--arg",
                "path=notes/old.txt",
                "--idempotency-key",
                "del-1",
                "--wait",
                "--url",
                url,
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            approval = _pending_approval(config, url)
            approved = _approvals(config, url, "approve", approval)
            assert approved.returncode == 0, approved.stdout
            out, err = waiting.communicate(timeout=60)
        finally:
            waiting.kill()
        assert waiting.returncode == 0, out + err
        final = json.loads(out)  # one document: the final execution, not the 202 first
        assert final["status"] == "completed" and final["result"]["outcome"] == "succeeded"
        assert final["approval"]["status"] == "used"
        assert not (tmp_path / "var/workspaces/demo/notes/old.txt").exists()
        later = _call(
            config,
            url,
            "fs.write_file",
            "--arg",
            "path=notes/later.txt",
            "--arg",
            "content=later",
            "--async",
            "--wait",
            "30",
        )
        assert later.returncode == 0, later.stdout + later.stderr
        assert json.loads(later.stdout)["result"]["outcome"] == "succeeded"
        parked = _call(
            config,
            url,
            "fs.delete_file",
            "--arg",
            "path=notes/later.txt",
            "--idempotency-key",
            "del-2",
            "--wait",
            "0.5",
        )
        assert parked.returncode == 1  # not completed within the wait: the execution so far
        assert json.loads(parked.stdout)["status"] == "awaiting_approval"


def test_tools_prints_a_table_or_json(project: Path) -> None:
    listed = toolgate("tools", cwd=project)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["TOOL", "VERSION", "RISK", "SIDE", "EFFECT", "STATE"]
    write = next(r for r in rows if r.startswith("fs.write_file ") and "1.2.0" in r)
    assert write.split()[1:4] == ["1.2.0", "medium", "write"]
    assert header.index("VERSION") == write.index("1.2.0")  # the columns line up
    items = json.loads(toolgate("tools", "--json", cwd=project).stdout)["items"]
    assert {"name": "fs.write_file", "version": "1.0.0"}.items() <= next(
        i for i in items if i["name"] == "fs.write_file" and i["version"] == "1.0.0"
    ).items()
    assert len(items) == len(rows)


@pytest.mark.slow
def test_approvals_and_executions_list_as_tables_or_json(tmp_path: Path) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    (tmp_path / "var/workspaces/demo").mkdir(parents=True, exist_ok=True)
    (tmp_path / "var/workspaces/demo/gone.txt").write_text("x")
    with gateway(config) as url:
        wrote = _call(
            config,
            url,
            "fs.write_file",
            "--arg",
            "path=t.txt",
            "--arg",
            "content=hi",
            "--run-id",
            "run-tables",
        )
        assert wrote.returncode == 0, wrote.stdout
        parked = json.loads(
            _call(
                config,
                url,
                "fs.delete_file",
                "--arg",
                "path=gone.txt",
                "--run-id",
                "run-tables",
                "--idempotency-key",
                "tables-k",
            ).stdout
        )
        assert parked.get("approval"), parked
        approval = parked["approval"]["id"]

        def cli(*args: str, key: str) -> subprocess.CompletedProcess[str]:
            return toolgate("--config", str(config), *args, "--url", url, cwd=tmp_path, key=key)

        pending = cli("approvals", "list", "--status", "pending", key=BOB)
        assert pending.returncode == 0, pending.stdout
        header, row = pending.stdout.splitlines()
        assert header.split()[:3] == ["ID", "STATUS", "TOOL"]
        assert row.split()[:4] == [approval, "pending", "fs.delete_file@1.0.0", "alice"]
        as_json = json.loads(cli("approvals", "list", "--json", key=BOB).stdout)
        assert [a["id"] for a in as_json["items"]] == [approval]

        listed = cli("executions", "list", "--run-id", "run-tables", key=ALICE)
        assert listed.returncode == 0, listed.stdout
        header, *rows = listed.stdout.splitlines()
        assert header.split() == [
            "ID",
            "RUN",
            "CALL",
            "TOOL",
            "STATUS",
            "OUTCOME",
            "ERROR",
            "CREATED",
        ]
        by_tool = {r.split()[3]: r.split() for r in rows}
        assert by_tool["fs.write_file@1.2.0"][4:6] == ["completed", "succeeded"]
        assert by_tool["fs.delete_file@1.0.0"][4:6] == ["awaiting_approval", "-"]
        items = json.loads(
            cli("executions", "list", "--run-id", "run-tables", "--json", key=ALICE).stdout
        )["items"]
        assert {i["id"] for i in items} == {parked["id"], json.loads(wrote.stdout)["id"]}
        none = cli("executions", "list", "--run-id", "no-such-run", key=ALICE)
        assert none.stdout.strip() == "(none)"
        refused = cli("approvals", "list", key=ALICE)  # errors stay the problem's JSON
        assert refused.returncode == 1 and json.loads(refused.stdout)["code"] == "not_an_approver"


@pytest.mark.slow
def test_a_log_longer_than_a_page_is_read_whole(tmp_path: Path) -> None:
    """The gateway answers an execution's events a page at a time: ``executions events``
    prints the whole log (every page's items, ``next`` null), and ``policy input`` finds
    the last decision wherever in the log it is."""
    database = f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}"
    config = make_project(tmp_path, database)
    with gateway(config) as url:
        write = ("fs.write_file", "--arg", "path=notes/a.txt", "--arg", "content=hi")
        execution_id = json.loads(_call(config, url, *write).stdout)["id"]

        async def append() -> None:  # slow output's many events, then a later decision
            store = Store(database)
            await store.open()
            out = {"stream": "stdout", "text": "a line\n"}
            made = [make_event(execution_id, 0, "tool.output", out) for _ in range(450)]
            decided = {"result": "allow", "reasons": [], "input": {"marker": "the last"}}
            made.append(make_event(execution_id, 0, "policy.decided", decided))
            await store.append(execution_id, made)
            await store.aclose()

        anyio.run(append)

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return toolgate("--config", str(config), *args, "--url", url, cwd=tmp_path, key=ALICE)

        events = cli("executions", "events", execution_id)
        assert events.returncode == 0, events.stdout + events.stderr
        answer = json.loads(events.stdout)
        assert [e["seq"] for e in answer["items"]] == list(range(len(answer["items"])))
        assert answer["items"][-1]["type"] == "policy.decided" and answer["next"] is None
        later = json.loads(cli("executions", "events", execution_id, "--after", "3").stdout)
        assert later["items"] == answer["items"][4:]
        found = cli("policy", "input", execution_id)
        assert found.returncode == 0, found.stdout + found.stderr
        assert json.loads(found.stdout) == {"marker": "the last"}
