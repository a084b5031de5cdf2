"""Hot reload in one process: ``Reloader`` on a real runtime (real files, SQLite, the embedded
policy) and ``POST /v1/admin/reload`` through the app.

- a valid change swaps in a new generation; a call leased before keeps the old one (its
  catalogue, its policy backend, still open) until it lets go, then what only the old one held
  is closed;
- a broken YAML, a broken Rego and a fault only an adapter's check sees are refused with the
  faults, and nothing changes;
- unchanged files change nothing (the route's test) and are logged at INFO, a change at
  WARNING; the same files in another directory
  give the same revisions;
- the route: 401 without a key, 403 problem+json for a non-admin, 200 for an admin, 422 with
  the faults for a broken change; ``/readyz``, the events and plans name the revisions.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient

from gateway.adapters import registry
from gateway.errors import ConfigError, ReloadRefused
from gateway.policy.backends import open_backend
from gateway.runtime.bootstrap import close_runtime, open_runtime
from gateway.runtime.container import Runtime
from gateway.runtime.reload import Reloader
from gateway.runtime.signals import Generations
from gateway.server.app import create_app
from gateway.settings import Settings, load_settings
from gateway.testing import SAMPLE_POLICY_INPUT
from gateway.types import DecisionResult, PolicyBackend
from tests.helpers import ALICE, CAROL, disposed_engines
from tests.server.helpers import auth, body

pytestmark = pytest.mark.anyio

BROKEN_YAML = "name: fs.broken\nversion: [1.0.0\n"
BROKEN_REGO = "package toolgate\n\nnot_rego if {\n"


def _settings(project: Path) -> Settings:
    config = yaml.safe_load((project / "toolgate.yaml").read_text())
    config["admins"] = ["carol"]
    config["approval_secret"] = "s" * 40
    (project / "toolgate.yaml").write_text(yaml.safe_dump(config))
    url = f"sqlite:///{project / 'var' / 'toolgate.db'}"
    return load_settings(project / "toolgate.yaml", env={}, database_url=url)


def _new_tool(project: Path, name: str = "fs.read_file_again") -> None:
    """A copy of fs.read_file under another name (a valid change to tools.d)."""
    source = (project / "tools.d" / "fs.read_file.yaml").read_text()
    text = source.replace("name: fs.read_file", f"name: {name}", 1)
    (project / "tools.d" / f"{name}.yaml").write_text(text)


def _deny_everyone(project: Path) -> None:
    """A valid policy change: no actor has a role any more."""
    (project / "policies" / "actors.yaml").write_text("actors: {}\n")


def test_generations_hand_over_a_retired_generation_only_once_no_lease_holds_it() -> None:
    generations: Generations[str] = Generations()
    released: list[int] = []
    generations.on_release(lambda: released.append(generations.number))
    with generations.lease("boot") as held:
        assert held == "boot"  # before the first swap: itself
    one, two = "one", "two"
    generations.swap(one)
    with generations.lease(one) as first, generations.lease(one) as again:
        assert first is again is one
        generations.swap(two)
        with generations.lease(one) as newer:  # asked by an older generation: the newest
            assert newer is two and generations.alive() == [one, two]
        with generations.lease("a copy") as copy:
            assert copy == "a copy"  # not a generation: itself
        assert generations.drained() == [] and released == []  # "one" is still held twice
    assert released == [2] and generations.drained() == ["one"]
    assert generations.drained() == [] and generations.retired() == []
    assert generations.alive() == ["two"]


@pytest.fixture
async def runtime(project: Path) -> AsyncIterator[Runtime]:
    opened = await open_runtime(_settings(project))
    try:
        yield opened
    finally:
        await close_runtime(opened)


async def test_a_valid_change_swaps_in_a_generation_and_the_old_one_closes_when_unused(
    runtime: Runtime, project: Path
) -> None:
    reloader = Reloader(runtime)
    before = runtime.latest
    with runtime.lease() as held:  # a call that started before the reload
        _new_tool(project)
        _deny_everyone(project)
        done = await reloader.reload()
        assert done.applied
        newest = runtime.latest
        assert newest is not before and held is before
        assert newest.revisions.catalogue != before.revisions.catalogue
        assert newest.revisions.policy != before.revisions.policy
        assert done.previous == before.revisions and done.revisions == newest.revisions
        assert newest.catalogue.resolve("fs.read_file_again").name == "fs.read_file_again"
        assert "fs.read_file_again" not in held.catalogue.names  # the call's own catalogue
        # Its policy backend is still open and still the old policy: alice is an agent there.
        assert (await held.policy.decide(SAMPLE_POLICY_INPUT)).result is DecisionResult.ALLOW
        assert (await newest.policy.decide(SAMPLE_POLICY_INPUT)).result is DecisionResult.DENY
        assert newest.store is held.store and newest.active is held.active  # shared parts
        assert "file" in done.rebuilt  # its tools changed; the database's did not
        assert newest.adapters["database"] is held.adapters["database"]
        assert await reloader.close_drained() == 0  # still leased: nothing closed
    assert await reloader.close_drained() == 2  # the old policy backend and file adapter
    closed = await held.policy.decide(SAMPLE_POLICY_INPUT)
    assert closed.result is DecisionResult.DENY and "closed" in closed.reasons[0]
    assert (await newest.policy.decide({**SAMPLE_POLICY_INPUT})).result is DecisionResult.DENY


@pytest.mark.parametrize(
    ("where", "text", "named"),
    [
        ("tools.d/fs.broken.yaml", BROKEN_YAML, "fs.broken.yaml:3: YAML error"),
        ("rego/broken.rego", BROKEN_REGO, "broken.rego"),
        (
            "tools.d/db.elsewhere.yaml",
            None,  # a database tool on a connection the configuration does not declare
            "connection 'elsewhere'",
        ),
    ],
)
async def test_a_broken_change_is_refused_and_nothing_changes(
    runtime: Runtime, project: Path, where: str, text: str | None, named: str
) -> None:
    reloader = Reloader(runtime)
    before = runtime.latest
    if text is None:
        source = (project / "tools.d" / "db.query_orders.yaml").read_text()
        text = source.replace("name: db.query_orders", "name: db.elsewhere").replace(
            "connection: orders", "connection: elsewhere"
        )
    _new_tool(project)  # a valid change beside the broken one is not applied either
    (project / where).write_text(text)
    with pytest.raises(ReloadRefused) as refused:
        await reloader.reload()
    faults = refused.value.details["faults"]
    assert any(named in fault for fault in faults), faults
    assert refused.value.details["revisions"] == before.revisions.to_json()
    assert runtime.latest is before and runtime.generations.number == 1
    assert "fs.read_file_again" not in runtime.latest.catalogue.names
    assert await reloader.close_drained() == 0


async def test_a_reload_refused_half_way_closes_what_it_built_and_only_that(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload whose candidate fails to open after the new policy backend opened: the new
    backend is closed, the running one still decides. (Loading checks the candidate first,
    so the fault is injected at ``open_shadow``, where an OPA candidate's client opens.)"""
    runtime = await open_runtime(_candidate(project))
    opened: list[PolicyBackend] = []

    async def opening(settings: Settings, sources: Any) -> PolicyBackend:
        opened.append(await open_backend(settings, sources))
        return opened[-1]

    async def refusing(*args: Any) -> None:
        raise ConfigError("shadow: the candidate's OPA refused its client")

    monkeypatch.setattr("gateway.runtime.reload.open_backend", opening)
    monkeypatch.setattr("gateway.runtime.reload.open_shadow", refusing)
    try:
        before = runtime.latest
        (project / "policies" / "notes.yaml").write_text("notes: {changed: true}\n")
        (project / "candidate" / "policies" / "notes.yaml").write_text("notes: {next: true}\n")
        with pytest.raises(ReloadRefused):
            await Reloader(runtime).reload()
        assert runtime.latest is before and len(opened) == 1
        running = await before.policy.decide(SAMPLE_POLICY_INPUT)
        built = await opened[0].decide(SAMPLE_POLICY_INPUT)
    finally:
        await close_runtime(runtime)
    assert running.result is DecisionResult.ALLOW, running.reasons
    assert built.result is DecisionResult.DENY and "closed" in built.reasons[0], built


@pytest.mark.parametrize("fault", ["config", "unexpected"])
async def test_a_reload_whose_adapter_fails_to_build_closes_the_adapters_it_built(
    runtime: Runtime, project: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """A new database connection in toolgate.yaml, and the http adapter (built after the
    database's) fails: with a fault of its section (refused) or unexpectedly (the error goes
    on). Either way the database adapter the reload built is closed (its engines disposed),
    the running one is not, and nothing changes."""
    config = yaml.safe_load((project / "toolgate.yaml").read_text())
    config["adapters"]["database"]["connections"]["kb"] = {"url": "sqlite:///var/kb.db"}
    if fault == "config":
        config["adapters"]["http"]["ca_bundle"] = "no-such-ca.pem"
    else:
        build = registry.build_adapter

        def building(settings: Settings, kind: str, catalogue: Any) -> Any:
            if kind == "http":
                raise RuntimeError("the http adapter could not be built")
            return build(settings, kind, catalogue)

        monkeypatch.setattr(registry, "build_adapter", building)
    (project / "toolgate.yaml").write_text(yaml.safe_dump(config))
    before = runtime.latest
    expected = ReloadRefused if fault == "config" else RuntimeError
    with disposed_engines() as disposed, pytest.raises(expected):
        await Reloader(runtime).reload()
    var = project / "var"
    assert sorted(disposed) == [str(var / "examples" / "orders.db"), str(var / "kb.db")]
    assert runtime.latest is before
    assert "kb" not in runtime.latest.settings.adapters["database"]["connections"]


async def test_a_reload_whose_policy_backend_fails_to_open_leaves_the_running_one_open(
    runtime: Runtime, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Loading checks the policy first, so the fault is injected at ``open_backend``, where
    the OPA backend's client opens.)"""

    async def refusing(*args: Any) -> None:
        raise ConfigError("policy: OPA refused the client")

    monkeypatch.setattr("gateway.runtime.reload.open_backend", refusing)
    before = runtime.latest
    _deny_everyone(project)
    with pytest.raises(ReloadRefused):
        await Reloader(runtime).reload()
    assert runtime.latest is before
    running = await before.policy.decide(SAMPLE_POLICY_INPUT)
    assert running.result is DecisionResult.ALLOW, running.reasons


async def test_a_reload_that_finds_nothing_changed_logs_at_info_and_a_change_at_warning(
    runtime: Runtime, project: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29.5: an unchanged reload (a SIGHUP from a script, a timer) is routine, not a
    warning; an applied one changes what runs and stays a warning."""
    reloader = Reloader(runtime)
    with caplog.at_level(logging.INFO, logger="toolgate.reload"):
        assert not (await reloader.reload(by="carol")).applied
        _new_tool(project)
        assert (await reloader.reload(by="carol")).applied
    levels = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "toolgate.reload"]
    assert [level for level, _ in levels] == [logging.INFO, logging.WARNING], levels
    assert "found nothing changed" in levels[0][1] and "applied" in levels[1][1]


async def test_toolgate_yaml_applies_the_adapters_and_names_what_needs_a_restart(
    runtime: Runtime, project: Path
) -> None:
    """Issue 29.3: the adapters' sections of toolgate.yaml are reloaded (the database adapter
    is rebuilt with the new connection, the others keep their instance); a changed key that
    needs a restart is named, one level into its section, and keeps its running value."""
    config = yaml.safe_load((project / "toolgate.yaml").read_text())
    config["adapters"]["database"]["connections"]["kb"] = {"url": "sqlite:///var/kb.db"}
    config["mcp"]["allowed_hosts"] = ["toolgate:*"]
    (project / "toolgate.yaml").write_text(yaml.safe_dump(config))
    before = runtime.latest
    outcome = await Reloader(runtime).reload()
    assert outcome.applied and outcome.rebuilt == ("database",)
    assert outcome.settings_applied == ("adapters",)
    assert outcome.restart_needed == ("mcp.allowed_hosts",)
    newer = runtime.latest
    assert "kb" in newer.settings.adapters["database"]["connections"]
    assert newer.settings.mcp == before.settings.mcp  # not applied
    assert newer.adapters["file"] is before.adapters["file"]
    again = await Reloader(runtime).reload()  # the file as it is: nothing more to apply
    assert not again.applied and again.restart_needed == ("mcp.allowed_hosts",)


async def test_the_same_files_elsewhere_have_the_same_revisions(
    runtime: Runtime, project: Path, tmp_path: Path
) -> None:
    other = tmp_path / "elsewhere"
    for name in ("tools.d", "rego", "policies", "examples", "toolgate.yaml"):
        source = project / name
        if source.is_dir():
            shutil.copytree(source, other / name)
        else:
            shutil.copy(source, other / name)
    copy = await open_runtime(_settings(other))
    try:
        assert copy.revisions == runtime.revisions
        assert len(copy.revisions.catalogue) == len(copy.revisions.policy) == 32
    finally:
        await close_runtime(copy)


# --- the route ----------------------------------------------------------------------------


@pytest.fixture
def client(project: Path) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(project)), raise_server_exceptions=False) as test_client:
        yield test_client


def test_only_an_admin_may_reload(client: TestClient) -> None:
    assert client.post("/v1/admin/reload").status_code == 401
    refused = client.post("/v1/admin/reload", headers=auth(ALICE))
    assert refused.status_code == 403
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "not_an_admin"
    done = client.post("/v1/admin/reload", headers=auth(CAROL))  # the files did not change
    assert done.status_code == 200 and done.json()["status"] == "unchanged"
    assert (
        done.json()["revisions"]
        == done.json()["previous"]
        == client.get("/readyz").json()["revisions"]
    )


def test_the_route_reloads_and_every_execution_names_its_revisions(
    client: TestClient, project: Path
) -> None:
    ready = client.get("/readyz").json()
    first = ready["revisions"]
    assert first["catalogue"] and first["policy"] and ready["generation"] == 1
    call = client.post(
        "/v1/executions", json=body("fs.list_dir", {"path": "."}), headers=auth(ALICE)
    ).json()
    bundle = client.get("/v1/policy/bundle", headers=auth(ALICE))
    assert bundle.headers["etag"] == f'"{first["policy"]}"'  # the bundle's own revision
    _new_tool(project)
    (project / "policies" / "notes.yaml").write_text("notes: {reloaded: true}\n")
    done = client.post("/v1/admin/reload", headers=auth(CAROL))
    assert done.status_code == 200, done.text
    answer = done.json()
    assert answer["status"] == "applied" and answer["previous"] == first
    assert answer["revisions"]["catalogue"] != first["catalogue"]
    assert answer["revisions"]["policy"] != first["policy"]
    bundle = client.get("/v1/policy/bundle", headers=auth(ALICE))
    assert bundle.headers["etag"] == f'"{answer["revisions"]["policy"]}"'  # OPA polls this
    ready = client.get("/readyz").json()
    assert ready["revisions"] == answer["revisions"] and ready["generation"] == 2
    assert client.get("/v1/tools/fs.read_file_again", headers=auth(ALICE)).status_code == 200
    later = client.post(
        "/v1/executions", json=body("fs.read_file_again", {"path": "x.txt"}), headers=auth(ALICE)
    ).json()
    for execution, revisions in ((call, first), (later, answer["revisions"])):
        events = client.get(f"/v1/executions/{execution['id']}/events", headers=auth(ALICE))
        requested = events.json()["items"][0]
        assert requested["type"] == "tool.requested"
        assert requested["data"]["revisions"] == revisions
    plan = client.post("/v1/plans", json=body("fs.list_dir", {"path": "."}), headers=auth(ALICE))
    assert plan.json()["revisions"] == answer["revisions"]


def _candidate(project: Path) -> Settings:
    """The settings of ``_settings`` with a shadow (candidate) policy: a copy of the shipped
    one under ``candidate/``."""
    for name in ("rego", "policies"):
        shutil.copytree(project / name, project / "candidate" / name)
    config = yaml.safe_load((project / "toolgate.yaml").read_text())
    config["shadow"] = {"rego_dir": "candidate/rego", "policies_dir": "candidate/policies"}
    (project / "toolgate.yaml").write_text(yaml.safe_dump(config))
    return _settings(project)


def test_the_route_names_the_candidate_a_reload_switched_to(project: Path) -> None:
    settings = _candidate(project)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        before = client.app.state.services.shadow.revision
        unchanged = client.post("/v1/admin/reload", headers=auth(CAROL)).json()
        assert unchanged["shadow"] == {"revision": before, "previous": before}
        (project / "candidate" / "policies" / "notes.yaml").write_text("notes: {next: true}\n")
        answer = client.post("/v1/admin/reload", headers=auth(CAROL)).json()
        after = client.app.state.services.latest.shadow.revision
    assert after != before
    assert answer["shadow"] == {"revision": after, "previous": before}, answer


def test_without_a_candidate_the_answer_names_none(client: TestClient) -> None:
    assert client.post("/v1/admin/reload", headers=auth(CAROL)).json()["shadow"] is None


def test_a_refused_reload_answers_the_faults(client: TestClient, project: Path) -> None:
    first = client.get("/readyz").json()["revisions"]
    (project / "rego" / "broken.rego").write_text(BROKEN_REGO)
    (project / "tools.d" / "fs.broken.yaml").write_text(BROKEN_YAML)
    refused = client.post("/v1/admin/reload", headers=auth(CAROL))
    assert refused.status_code == 422
    assert refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert problem["code"] == "reload_refused" and problem["revisions"] == first
    faults = problem["faults"]
    assert any("fs.broken.yaml:3: YAML error" in f for f in faults), faults
    assert any("broken.rego" in f for f in faults), faults
    assert "Traceback" not in refused.text
    assert client.get("/readyz").json()["revisions"] == first
