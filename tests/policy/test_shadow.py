"""Shadow policies (docs/policies.md#shadow-policies): a candidate decided beside the
enforcing policy on every call and never enforced. Its differences are counted exactly under
load across two replicas on PostgreSQL (``toolgate policy shadow report``); a candidate that
fails (an evaluation error, a hung OPA) changes no enforced decision; a reload switches it,
and ``toolgate policy promote`` makes it the enforcing one."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.policy import bundle
from gateway.policy.loader import load_policy_sources
from gateway.server.app import create_app
from gateway.settings import load_settings
from gateway.testing import gateway, make_project
from tests.helpers import ALICE, wait_until
from tests.policy.helpers import toolgate
from tests.policy.opa_helpers import Hanging, standin

AUTH = {"Authorization": f"Bearer {ALICE}"}
CANDIDATE_RULE = """\
package toolgate

deny_reasons contains "candidate: no files named deny-*" if {
\tstartswith(input.arguments.path, "deny-")
}
"""
"""The candidate's one change of the rules: it denies a write the shipped policy allows."""

pytestmark = pytest.mark.slow  # gateways and the toolgate command run as processes


def project(root: Path, database_url: str, **shadow: Any) -> Path:
    """The shipped project, and a candidate under ``candidate/``: the shipped policy plus
    CANDIDATE_RULE, and alice a member of workspace ops (which the shipped data refuses her)."""
    config = make_project(root, database_url)
    candidate = root / "candidate"
    shutil.copytree(root / "rego", candidate / "rego")
    shutil.copytree(root / "policies", candidate / "policies")
    (candidate / "rego/candidate.rego").write_text(CANDIDATE_RULE)
    spaces = candidate / "policies/workspaces.yaml"
    data = yaml.safe_load(spaces.read_text())
    data["workspaces"]["ops"]["members"] = ["bob", "alice"]
    spaces.write_text(yaml.safe_dump(data))
    settings = yaml.safe_load(config.read_text())
    settings.update(admins=["alice"], metrics={"open": True})
    settings["shadow"] = {
        "rego_dir": "candidate/rego",
        "policies_dir": "candidate/policies",
        **shadow,
    }
    config.write_text(yaml.safe_dump(settings))
    for ws in ("demo", "ops"):
        (root / "var/workspaces" / ws).mkdir(parents=True, exist_ok=True)
    return config


def call(name: str, path: str, workspace: str = "demo") -> dict[str, Any]:
    return {
        "run_id": "shadow",
        "call_id": name,
        "tool": {"name": "fs.write_file"},
        "arguments": {"path": path, "content": name},
        "workspace": {"id": workspace},
    }


def outcome(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    result: str = answer.json()["result"]["outcome"]
    return result


def series(metrics: str, name: str, labels: str = "") -> float:
    """The value of one series of a scrape (0 when absent)."""
    shown = "{" + labels + "}" if labels else ""
    found = re.search(rf"^{name}{re.escape(shown)} (\S+)$", metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def report(root: Path, *args: str) -> dict[str, Any]:
    done = toolgate("policy", "shadow", "report", "--json", *args, cwd=root)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


# --- under load, two replicas, one PostgreSQL store --------------------------------------


@pytest.mark.slow
@pytest.mark.postgres
def test_differences_under_load_are_counted_exactly_across_replicas(
    tmp_path: Path, pg_url: str
) -> None:
    config = project(tmp_path, pg_url)
    calls = (
        [call(f"agree-{i}", f"notes/agree-{i}.txt") for i in range(30)]  # both allow
        + [call(f"stricter-{i}", f"deny-{i}.txt") for i in range(30)]  # allow_to_deny
        + [call(f"looser-{i}", f"x-{i}.txt", "ops") for i in range(30)]  # deny_to_allow
    )
    with gateway(config) as one, gateway(config) as two:
        urls = [one, two]

        def send(index: int) -> str:
            url = urls[index % 2]
            body = calls[index]
            return outcome(httpx.post(f"{url}/v1/executions", json=body, headers=AUTH, timeout=60))

        with ThreadPoolExecutor(max_workers=16) as pool:
            outcomes = list(pool.map(send, range(len(calls))))
        # Enforced: the shipped policy, whatever the candidate said.
        assert outcomes == ["succeeded"] * 60 + ["failed"] * 30, outcomes
        assert (tmp_path / "var/workspaces/demo/deny-0.txt").read_text() == "stricter-0"

        def compared() -> bool:
            total = sum(
                series(
                    httpx.get(f"{u}/metrics", timeout=10).text,
                    "toolgate_policy_shadow_decisions_total",
                )
                for u in urls
            )
            return total == len(calls)

        wait_until(compared, "the shadow to compare every decision")
        scraped = [httpx.get(f"{u}/metrics", timeout=10).text for u in urls]
    kinds = ("allow_to_deny", "deny_to_allow")
    counted = {
        kind: sum(
            series(m, "toolgate_policy_shadow_differences_total", f'kind="{kind}"') for m in scraped
        )
        for kind in kinds
    }
    assert counted == {"allow_to_deny": 30, "deny_to_allow": 30}, counted
    found = report(tmp_path, "--since", "1h", "--limit", "1")
    assert found["differences"] == 60, found
    assert found["by_kind"] == {"allow_to_deny": 30, "deny_to_allow": 30}, found
    assert found["by_tool"] == {"fs.write_file": {"allow_to_deny": 30, "deny_to_allow": 30}}
    (latest,) = found["latest"]
    assert latest["enforced"]["result"] != latest["candidate"]["result"], latest
    assert (
        latest["candidate"]["revision"]
        == load_policy_sources(
            tmp_path / "candidate/rego", tmp_path / "candidate/policies"
        ).revision()
    )


# --- a failing shadow never changes the enforced decision ------------------------------------


@asynccontextmanager
async def app_client(config: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(load_settings(config))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as c:
            yield c


async def settled(c: httpx.AsyncClient, compared: float, skipped: float) -> str:
    """The scrape once the shadow compared ``compared`` decisions and skipped ``skipped``."""
    deadline = time.monotonic() + 30
    while True:
        metrics = (await c.get("/metrics")).text
        done = series(metrics, "toolgate_policy_shadow_decisions_total")
        dropped = sum(
            float(v)
            for v in re.findall(
                r"^toolgate_policy_shadow_skipped_total\{.*\} (\S+)$", metrics, re.M
            )
        )
        if done >= compared and dropped >= skipped:
            return metrics
        assert time.monotonic() < deadline, metrics
        await asyncio.sleep(0.05)


@pytest.mark.anyio
async def test_a_candidate_that_fails_to_evaluate_changes_no_enforced_decision(
    tmp_path: Path,
) -> None:
    config = project(tmp_path, f"sqlite:///{tmp_path / 'toolgate.db'}")
    settings = yaml.safe_load(config.read_text())
    settings["decision_log"] = {"enabled": True, "path": "var/decisions.jsonl"}
    config.write_text(yaml.safe_dump(settings))
    (tmp_path / "candidate/rego/candidate.rego").write_text(
        'package toolgate\n\ndeny_reasons contains "x" if {\n\t1 / count(input.paths) == 0\n}\n'
        'deny_reasons contains sprintf("%v", [1 / 0]) if { true }\n'
    )
    async with app_client(config) as c:
        allowed = await c.post("/v1/executions", json=call("ok", "notes/ok.txt"), headers=AUTH)
        denied = await c.post("/v1/executions", json=call("no", "x.txt", "ops"), headers=AUTH)
        assert outcome(allowed) == "succeeded"
        assert outcome(denied) == "failed"
        assert denied.json()["result"]["error"]["type"] == "policy_denied"
        metrics = await settled(c, 2, 0)
    # The candidate's error denies (fail closed): a difference for the allowed call, none
    # for the denied one; the enforced outcomes above are the shipped policy's.
    assert series(metrics, "toolgate_policy_shadow_differences_total", 'kind="allow_to_deny"') == 1
    assert series(metrics, "toolgate_policy_shadow_differences_total", 'kind="deny_to_allow"') == 0
    found = report(tmp_path)
    (latest,) = found["latest"]
    assert latest["candidate"]["reasons"][0].startswith("policy error:"), latest
    lines = (tmp_path / "var/decisions.jsonl").read_text().splitlines()
    (event,) = [e for e in map(json.loads, lines) if e["path"] == "toolgate/shadow"]
    assert event["result"]["result"] == "allow" and event["result"]["reasons"], event
    assert event["shadow"]["result"]["result"] == "deny", event
    assert event["shadow"]["result"]["reasons"][0].startswith("policy error:"), event
    assert event["shadow"]["difference"] == "allow_to_deny", event
    assert event["toolgate"]["execution_id"] == allowed.json()["id"], event


@pytest.mark.anyio
async def test_a_hung_shadow_opa_changes_no_enforced_decision(tmp_path: Path) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'toolgate.db'}")
    (tmp_path / "var/workspaces/demo").mkdir(parents=True, exist_ok=True)
    (tmp_path / "var/workspaces/ops").mkdir(parents=True, exist_ok=True)
    sources = load_policy_sources(tmp_path / "rego", tmp_path / "policies")
    with standin(sources) as enforcing, standin(sources, Hanging) as hung:
        hung.hangs = "/v1/data/toolgate/decision"
        settings = yaml.safe_load(config.read_text())
        settings.update(
            policy_backend="opa",
            opa_url=enforcing.url,
            opa_timeout=2.0,
            metrics={"open": True},
            shadow={
                "rego_dir": "rego",
                "policies_dir": "policies",
                "opa_url": hung.url,
                "timeout": "100ms",
                "queue": 4,
            },
        )
        config.write_text(yaml.safe_dump(settings))
        async with app_client(config) as c:
            for i in range(6):
                allowed = await c.post(
                    "/v1/executions", json=call(f"ok-{i}", f"notes/{i}.txt"), headers=AUTH
                )
                assert outcome(allowed) == "succeeded"
                denied = await c.post(
                    "/v1/executions", json=call(f"no-{i}", f"{i}.txt", "ops"), headers=AUTH
                )
                assert outcome(denied) == "failed"
                assert denied.json()["result"]["error"]["type"] == "policy_denied"
            metrics = await settled(c, 0, 12)
    timeouts = series(metrics, "toolgate_policy_shadow_skipped_total", 'reason="timeout"')
    full = series(metrics, "toolgate_policy_shadow_skipped_total", 'reason="queue_full"')
    assert timeouts >= 1 and timeouts + full == 12, metrics
    assert series(metrics, "toolgate_policy_shadow_decisions_total") == 0


@pytest.mark.anyio
async def test_on_the_opa_backend_a_second_opa_decides_the_candidate(tmp_path: Path) -> None:
    config = project(tmp_path, f"sqlite:///{tmp_path / 'toolgate.db'}")
    enforcing_sources = load_policy_sources(tmp_path / "rego", tmp_path / "policies")
    candidate_sources = load_policy_sources(
        tmp_path / "candidate/rego", tmp_path / "candidate/policies"
    )
    with standin(enforcing_sources) as enforcing, standin(candidate_sources) as candidate:
        settings = yaml.safe_load(config.read_text())
        settings.update(policy_backend="opa", opa_url=enforcing.url, opa_timeout=2.0)
        settings["shadow"]["opa_url"] = candidate.url
        config.write_text(yaml.safe_dump(settings))
        async with app_client(config) as c:
            stricter = await c.post("/v1/executions", json=call("s", "deny-s.txt"), headers=AUTH)
            looser = await c.post("/v1/executions", json=call("l", "l.txt", "ops"), headers=AUTH)
            assert (outcome(stricter), outcome(looser)) == ("succeeded", "failed")
            metrics = await settled(c, 2, 0)
    for kind in ("allow_to_deny", "deny_to_allow"):
        assert series(metrics, "toolgate_policy_shadow_differences_total", f'kind="{kind}"') == 1
    found = report(tmp_path)
    assert found["by_kind"] == {"allow_to_deny": 1, "deny_to_allow": 1}, found
    assert {d["candidate"]["revision"] for d in found["latest"]} == {candidate_sources.revision()}


@pytest.mark.anyio
async def test_a_bundle_file_is_a_candidate_too(tmp_path: Path) -> None:
    config = project(tmp_path, f"sqlite:///{tmp_path / 'toolgate.db'}")
    candidate = load_policy_sources(tmp_path / "candidate/rego", tmp_path / "candidate/policies")
    (tmp_path / "candidate.tar.gz").write_bytes(bundle.build(candidate).data)
    settings = yaml.safe_load(config.read_text())
    settings["shadow"] = {"bundle": "candidate.tar.gz"}
    config.write_text(yaml.safe_dump(settings))
    async with app_client(config) as c:
        stricter = await c.post("/v1/executions", json=call("s", "deny-s.txt"), headers=AUTH)
        assert outcome(stricter) == "succeeded"
        metrics = await settled(c, 1, 0)
    assert series(metrics, "toolgate_policy_shadow_differences_total", 'kind="allow_to_deny"') == 1


def test_settings_name_what_a_shadow_lacks(tmp_path: Path) -> None:
    config = project(tmp_path, f"sqlite:///{tmp_path / 'toolgate.db'}")
    settings = yaml.safe_load(config.read_text())
    settings["shadow"] = {"rego_dir": "candidate/rego"}
    config.write_text(yaml.safe_dump(settings))
    done = toolgate("check", cwd=tmp_path)
    assert done.returncode != 0
    assert "shadow" in done.stderr and "policies_dir" in done.stderr, done.stderr
    settings["shadow"] = {"rego_dir": "candidate/rego", "policies_dir": "nowhere"}
    config.write_text(yaml.safe_dump(settings))
    done = toolgate("check", cwd=tmp_path)
    assert done.returncode != 0
    assert "shadow" in done.stderr and "nowhere" in done.stderr, done.stderr


# --- reload switches the candidate; promote makes it the enforcing policy ----------------


@contextmanager
def one_gateway(root: Path) -> Iterator[str]:
    config = project(root, f"sqlite:///{root / 'var' / 'toolgate.db'}")
    with gateway(config) as url:
        yield url


@pytest.mark.slow
def test_reload_switches_the_candidate_and_promote_enforces_it(tmp_path: Path) -> None:
    with one_gateway(tmp_path) as url:

        def post(name: str, path: str) -> str:
            answer = httpx.post(
                f"{url}/v1/executions", json=call(name, path), headers=AUTH, timeout=60
            )
            return outcome(answer)

        def differences(expected: int) -> dict[str, Any]:
            return wait_until(
                lambda: (r := report(tmp_path, "--limit", "100"))["differences"] == expected and r,
                f"{expected} differences",
            )

        assert post("first", "deny-first.txt") == "succeeded"  # the candidate would deny it
        first = differences(1)["latest"][0]
        # The candidate changes: it now also denies notes/; a reload switches to it.
        rule = (tmp_path / "candidate/rego/candidate.rego").read_text()
        (tmp_path / "candidate/rego/candidate.rego").write_text(
            rule + '\ndeny_reasons contains "candidate: no notes" if {\n'
            '\tstartswith(input.arguments.path, "notes/")\n}\n'
        )
        reloaded = toolgate("reload", "--url", url, "--key", ALICE, cwd=tmp_path)
        assert reloaded.returncode == 0, reloaded.stderr + reloaded.stdout
        assert post("second", "notes/second.txt") == "succeeded"
        latest = differences(2)["latest"][0]
        assert latest["call_id"] == "second", latest
        assert latest["candidate"]["revision"] != first["candidate"]["revision"]
        # the answer (the CLI prints the route's) names the candidate it now compares
        switched = {
            "revision": latest["candidate"]["revision"],
            "previous": first["candidate"]["revision"],
        }
        assert json.loads(reloaded.stdout)["shadow"] == switched, reloaded.stdout

        broken = tmp_path / "candidate/rego/broken.rego"
        broken.write_text("package toolgate\n\nthis is not rego\n")
        refused = httpx.post(f"{url}/v1/admin/reload", headers=AUTH, timeout=60)
        assert refused.status_code != 200 and "shadow: " in refused.text, refused.text
        broken.unlink()

        promoted = toolgate("policy", "promote", "--url", url, "--key", ALICE, cwd=tmp_path)
        assert promoted.returncode == 0, promoted.stderr + promoted.stdout
        assert json.loads(promoted.stdout)["status"] == "applied", promoted.stdout
        assert (tmp_path / "rego/candidate.rego").read_text() == (
            tmp_path / "candidate/rego/candidate.rego"
        ).read_text()
        assert post("third", "deny-third.txt") == "failed"  # now enforced
        assert not (tmp_path / "var/workspaces/demo/deny-third.txt").exists()
        assert post("fourth", "x.txt") == "succeeded"
    assert report(tmp_path, "--limit", "0")["differences"] == 2  # the candidate now agrees


class Raising:
    """A candidate backend that fails every way a backend should not."""

    async def decide(self, document: Any) -> Any:
        raise RuntimeError("the candidate broke")

    async def listed(self, documents: Any) -> None:
        return None

    async def aclose(self) -> None:
        pass


@pytest.mark.anyio
async def test_a_raising_candidate_is_counted_and_nothing_flows_back(tmp_path: Path) -> None:
    from gateway.observability.metrics import Metrics
    from gateway.observability.telemetry import Telemetry
    from gateway.policy.shadow import Shadow
    from gateway.settings import ShadowSettings
    from gateway.store.store import Store
    from gateway.types import Decision, DecisionResult

    store = Store(f"sqlite:///{tmp_path / 'toolgate.db'}")
    await store.open()
    metrics = Metrics()
    config = ShadowSettings(rego_dir=Path("r"), policies_dir=Path("p"), queue=2)
    shadow = Shadow(Raising(), "rev", config, store, Telemetry(metrics=metrics))
    denied = Decision(DecisionResult.DENY, ("enforced",))
    try:
        for i in range(5):  # two are queued, three find the queue full
            shadow.submit({"tool": {"name": "t"}}, denied, {"call_id": str(i)}, "enforcing")
        await shadow.settled()
    finally:
        await shadow.aclose()
        await store.aclose()
    assert metrics.shadow_skipped.values == {("queue_full",): 3, ("error",): 2}
    assert denied == Decision(DecisionResult.DENY, ("enforced",))


def test_promote_refuses_a_candidate_that_does_not_load_and_changes_nothing(
    tmp_path: Path,
) -> None:
    config = project(tmp_path, f"sqlite:///{tmp_path / 'toolgate.db'}")
    before = {p.name: p.read_text() for p in (tmp_path / "rego").iterdir()}
    (tmp_path / "candidate/rego/candidate.rego").write_text("package toolgate\n\nnot rego at all\n")
    done = toolgate("--config", str(config), "policy", "promote", "--no-reload", cwd=tmp_path)
    assert done.returncode != 0
    assert "candidate.rego" in done.stderr, done.stderr
    assert {p.name: p.read_text() for p in (tmp_path / "rego").iterdir()} == before
    assert not list(tmp_path.glob(".rego*")), list(tmp_path.iterdir())
