"""``toolgate policy replay``: real calls through a gateway on the shipped policy are recorded;
a candidate policy that flips one rule names exactly the executions whose decision changes and
exits 1; the unchanged policy exits 0; truncated and masked inputs are not replayable."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient

from gateway.policy.loader import load_policy_sources
from gateway.policy.replay import RecordedDecision, replay
from gateway.server.app import create_app
from gateway.settings import load_settings
from tests.helpers import ALICE, BOB
from tests.policy.helpers import REPO, WritePolicy, make_input, toolgate

pytestmark = pytest.mark.slow  # every test here starts a process itself


def call(client: TestClient, name: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = client.post(
        "/v1/executions",
        json={
            "run_id": "replay",
            "call_id": name,
            "tool": {"name": tool},
            "arguments": arguments,
            "workspace": {"id": "demo"},
            "idempotency_key": f"replay-{name}",
        },
        headers={"Authorization": f"Bearer {ALICE}"},
    )
    assert response.status_code < 500, response.text
    body: dict[str, Any] = response.json()
    return body


def record(project: Path, mask: list[str] | None = None) -> dict[str, str]:
    """Run real calls on the shipped policy; their execution ids by name."""
    if mask:
        config = yaml.safe_load((project / "toolgate.yaml").read_text())
        config["policy_input_mask"] = mask
        (project / "toolgate.yaml").write_text(yaml.safe_dump(config))
    settings = load_settings(project / "toolgate.yaml", env={})
    workspace = project / "var" / "workspaces" / "demo"
    (workspace / "notes").mkdir(parents=True, exist_ok=True)
    (workspace / "notes" / "r.txt").write_text("read me")
    ids: dict[str, str] = {}
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        steps = {
            "read": ("fs.read_file", {"path": "notes/r.txt"}),
            "write": ("fs.write_file", {"path": "notes/w.txt", "content": "hi"}),
            "long_write": ("fs.write_file", {"path": "notes/l.txt", "content": "x" * 5000}),
            "protected": ("fs.write_file", {"path": ".git/config", "content": "x"}),
            "delete": ("fs.delete_file", {"path": "notes/r.txt"}),
        }
        for name, (tool, arguments) in steps.items():
            ids[name] = call(client, name, tool, arguments)["id"]
        parked = client.get(f"/v1/executions/{ids['delete']}", headers=auth(ALICE)).json()
        approved = client.post(
            f"/v1/approvals/{parked['approval']['id']}/approve", headers=auth(BOB)
        )
        assert approved.status_code == 202, approved.text  # resumed in the background
        done = client.get(f"/v1/executions/{ids['delete']}?wait=30", headers=auth(ALICE))
        assert done.json()["status"] == "completed", done.text
    return ids


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def candidate(project: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The shipped policy with one rule flipped: fs.write_file needs approval."""
    root = tmp_path / "candidate"
    shutil.copytree(project / "rego", root / "rego")
    shutil.copytree(project / "policies", root / "policies")
    rules = root / "policies" / "rules.yaml"
    data = yaml.safe_load(rules.read_text())
    data["tool_overrides"]["fs.write_file"] = {"approval": True}
    rules.write_text(yaml.safe_dump(data))
    return root / "rego", root / "policies"


@pytest.fixture
def recorded(project: Path) -> dict[str, str]:
    return record(project)


def test_a_flipped_rule_names_exactly_the_changed_executions(
    project: Path, tmp_path: Path, recorded: dict[str, str]
) -> None:
    rego, data = candidate(project, tmp_path)
    done = toolgate(
        "policy", "replay", "--since", "1h", "--rego", str(rego), "--data", str(data), cwd=project
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    changed = [line for line in lines if line.startswith("changed: ")]
    assert changed == [
        f"changed: {recorded['write']} fs.write_file: allow -> require_approval "
        "(tool fs.write_file requires approval (rule: tool_overrides.fs.write_file.approval))"
    ]
    assert f"{recorded['long_write']} fs.write_file: not replayable: " in done.stdout
    assert "input_truncated" in done.stdout
    # 5 executions; the delete was decided twice (parked, then approved: allow either way)
    assert lines[-1] == (
        "5 executions, 6 decisions: 5 replayed, 1 would change, 1 not replayable"
    ), lines
    assert "Traceback" not in done.stderr


def test_the_unchanged_policy_changes_nothing(project: Path, recorded: dict[str, str]) -> None:
    done = toolgate("policy", "replay", "--since", "24h", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(line.startswith("changed: ") for line in done.stdout.splitlines())
    assert done.stdout.splitlines()[-1].startswith("5 executions, 6 decisions: 5 replayed, 0 ")


def test_the_window_and_the_limit(project: Path, recorded: dict[str, str], tmp_path: Path) -> None:
    rego, data = candidate(project, tmp_path)
    flip = ("--rego", str(rego), "--data", str(data))
    newest = toolgate("policy", "replay", "--limit", "2", *flip, cwd=project)
    # the newest two executions are the protected write (deny either way) and the delete
    assert newest.returncode == 0, newest.stdout + newest.stderr
    assert newest.stdout.splitlines()[-2].startswith("2 executions, 3 decisions: 3 replayed")
    assert newest.stdout.splitlines()[-1].startswith("note: more executions than the limit")
    bad = toolgate("policy", "replay", "--since", "yesterday", cwd=project)
    assert bad.returncode == 2
    assert bad.stderr.startswith("toolgate: --since 'yesterday': ")


def test_a_masked_value_the_policy_reads_is_not_replayable(project: Path, tmp_path: Path) -> None:
    ids = record(project, mask=["arguments.content", "paths.relative"])
    rego, data = candidate(project, tmp_path)
    done = toolgate("policy", "replay", "--rego", str(rego), "--data", str(data), cwd=project)
    # Every call has a path, the policy reads paths: nothing is replayed, nothing changes.
    # arguments.content is masked too, but the policy never reads it: not the reason given.
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if ": not replayable: " in line]
    assert len(skipped) == 6, done.stdout
    assert (
        f"{ids['write']} fs.write_file: not replayable: paths.relative is masked "
        "(policy_input_mask) and the policy reads it"
    ) in skipped


def test_no_store_is_a_clear_error(project: Path) -> None:
    done = toolgate("policy", "replay", cwd=project)
    assert done.returncode == 2
    assert done.stderr.startswith("toolgate: no store at ")
    assert not (project / "var" / "toolgate.db").exists()


def loosened(project: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The shipped policy with one rule lifted: fs.delete_file needs no approval."""
    root = tmp_path / "loosened"
    shutil.copytree(project / "rego", root / "rego")
    shutil.copytree(project / "policies", root / "policies")
    rules = root / "policies" / "rules.yaml"
    data = yaml.safe_load(rules.read_text())
    data["tool_overrides"]["fs.delete_file"] = {"approval": False}
    rules.write_text(yaml.safe_dump(data))
    return root / "rego", root / "policies"


def test_fail_on_picks_the_direction_of_the_changes_that_fail(
    project: Path, tmp_path: Path, recorded: dict[str, str]
) -> None:
    """A stricter candidate (writes need approval) fails --fail-on allow-to-deny and any, not
    deny-to-allow; a looser one (deletes need none) the other way round."""
    stricter, looser = candidate(project, tmp_path), loosened(project, tmp_path)
    codes = {}
    for name, (rego, data) in (("stricter", stricter), ("looser", looser)):
        for fail_on in ("allow-to-deny", "deny-to-allow", "any"):
            done = toolgate(
                "policy", "replay", "--rego", str(rego), "--data", str(data),
                "--fail-on", fail_on, cwd=project,
            )  # fmt: skip
            assert "Traceback" not in done.stderr
            codes[name, fail_on] = done.returncode
    assert codes == {
        ("stricter", "allow-to-deny"): 1,
        ("stricter", "deny-to-allow"): 0,
        ("stricter", "any"): 1,
        ("looser", "allow-to-deny"): 0,
        ("looser", "deny-to-allow"): 1,
        ("looser", "any"): 1,
    }
    bad = toolgate("policy", "replay", "--fail-on", "sometimes", cwd=project)
    assert bad.returncode == 2 and "--fail-on" in bad.stderr


def test_json_reports_every_change_and_every_input_not_replayed(
    project: Path, tmp_path: Path, recorded: dict[str, str]
) -> None:
    rego, data = loosened(project, tmp_path)
    done = toolgate(
        "policy", "replay", "--rego", str(rego), "--data", str(data), "--json",
        "--fail-on", "deny-to-allow", cwd=project,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    (change,) = report["changes"]
    assert change == {
        "execution_id": recorded["delete"],
        "tool": "fs.delete_file",
        "seq": change["seq"],
        "from": "require_approval",
        "to": "allow",
        "direction": "deny-to-allow",
        "reasons": [
            "high-risk tool fs.delete_file allowed for actor 'alice' (rule: risk_rules.high.roles)"
        ],
    }
    (skipped,) = report["not_replayable"]
    assert skipped["execution_id"] == recorded["long_write"]
    assert "input_truncated" in skipped["why"]
    assert {k: report[k] for k in ("executions", "decisions", "replayed", "failed")} == {
        "executions": 5,
        "decisions": 6,
        "replayed": 5,
        "failed": True,
    }
    assert report["fail_on"] == "deny-to-allow" and report["more"] is False


def test_an_input_recorded_without_the_action_is_not_replayable_when_the_policy_reads_it(
    write_policy: WritePolicy,
) -> None:
    """A decision recorded by a gateway older than input.action: a candidate reading it does
    not replay it (rather than guess); one that never reads it replays it as before."""
    old_input = {k: v for k, v in make_input().items() if k != "action"}
    recorded = RecordedDecision("ex_1", "fs.write_file", 0, 3, "allow", (), old_input, False)
    reads_it = """
        package toolgate

        import rego.v1

        decision := {"result": "deny", "reasons": ["post"]} if input.action.method == "POST"
        else := {"result": "allow", "reasons": []}
    """
    report = asyncio.run(
        replay([recorded], load_policy_sources(*write_policy({"a.rego": reads_it})))
    )
    assert [s.why for s in report.skipped] == [
        "it was recorded without input.action (by an older gateway) and the policy reads it"
    ]
    shipped = load_policy_sources(REPO / "rego", REPO / "policies")
    again = asyncio.run(replay([recorded], shipped))
    assert again.skipped == [] and again.changes == []
