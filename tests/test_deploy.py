"""The deployment files (Dockerfile, docker-compose.yml, deploy/) are right, and the topology
they describe works here without Docker: two ``toolgate serve`` replicas on one PostgreSQL with
``policy_backend: opa`` against the loopback OPA stand-in serving the gateway's own bundle, a
call sent alternately to both."""

from __future__ import annotations

import re
import shutil
import sys
import time
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from gateway.policy.standin import StandIn
from gateway.server.app import create_app
from gateway.settings import ENV_VARIABLES, hash_key, load_settings
from gateway.testing import free_port, gateway, make_project
from tests.helpers import ALICE, BOB, COMPOSE_GATEWAYS, REPO, env_default, gateway_volumes

COMPOSE = REPO / "docker-compose.yml"
GATEWAYS = COMPOSE_GATEWAYS
NOT_TOOLGATE = {"PGPASSWORD", "FORWARDED_ALLOW_IPS"}
"""Environment variables of the gateway that are not Toolgate settings: libpq reads PGPASSWORD,
so that the password stays out of the database URL; uvicorn reads FORWARDED_ALLOW_IPS (whose
X-Forwarded-Proto and X-Forwarded-For it believes: the proxy's)."""


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def test_the_services_and_their_images(compose: dict[str, Any]) -> None:
    found = services(compose)
    assert set(found) == {"postgres", *GATEWAYS, "opa", "proxy"}
    assert found["postgres"]["image"].startswith("postgres:")
    assert found["opa"]["image"].startswith("openpolicyagent/opa:")
    assert found["proxy"]["image"].startswith("nginx:")
    for name in GATEWAYS:
        build = found[name]["build"]
        assert (REPO / build["context"] / build.get("dockerfile", "Dockerfile")).is_file()
        dockerfile = (REPO / build["context"] / "Dockerfile").read_text()
        for arg in build.get("args", {}):
            assert re.search(rf"^ARG {arg}\b", dockerfile, re.M), arg
    command = found["opa"]["command"]
    assert command[:2] == ["run", "--server"]


def test_only_the_proxy_is_published_and_everything_has_a_health_check(
    compose: dict[str, Any],
) -> None:
    found = services(compose)
    published = {name for name, service in found.items() if service.get("ports")}
    assert published == {"proxy"}
    assert found["proxy"]["ports"] == ["127.0.0.1:8080:8080"]
    for name, service in found.items():
        check = service.get("healthcheck")
        assert check and check["test"][0] in ("CMD", "CMD-SHELL"), name
    for name in GATEWAYS:
        assert "/readyz" in " ".join(found[name]["healthcheck"]["test"])
        assert found[name]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_the_gateway_environment_is_real_settings(compose: dict[str, Any]) -> None:
    found = services(compose)
    for name in GATEWAYS:
        env = {k: env_default(str(v)) for k, v in found[name]["environment"].items()}
        assert set(env) - NOT_TOOLGATE <= ENV_VARIABLES, set(env) - ENV_VARIABLES
        settings = load_settings(
            REPO / "deploy" / "toolgate.yaml",
            env={k: v for k, v in env.items() if k.startswith("TOOLGATE_")},
        )
        assert settings.policy_backend == "opa"
        assert settings.host == "0.0.0.0"
        opa = urlsplit(settings.opa_url)
        assert opa.hostname == "opa" and opa.port == 8181
        assert "--addr=0.0.0.0:8181" in found["opa"]["command"]
        database = urlsplit(settings.database_url)
        assert database.hostname == "postgres" and database.password is None
        assert database.path == "/" + found["postgres"]["environment"]["POSTGRES_DB"]
        assert env["PGPASSWORD"] == env_default(
            found["postgres"]["environment"]["POSTGRES_PASSWORD"]
        )
        assert settings.approval_secret is not None  # the same on every replica
    assert found["gateway-1"]["environment"] == found["gateway-2"]["environment"]


def test_every_referenced_file_exists(compose: dict[str, Any]) -> None:
    for name, service in services(compose).items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (REPO / source).is_file(), f"{name}: {source}"
    dockerfile = (REPO / "Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (REPO / source).exists(), source
    opa = services(compose)["opa"]
    (config,) = [c for c in opa["command"] if c.startswith("--config-file=")]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in opa["volumes"]}
    assert (REPO / mounted[config.split("=", 1)[1]]).is_file()


def test_the_dockerfile() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert text.startswith("#") and "\nFROM python:3.11-slim\n" in text
    user = re.findall(r"^USER (\S+)$", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert re.search(
        r'if \[ "\$WITH_CHROMIUM" = "true" \].*apt-get install[^\n]*chromium', text, re.S
    )
    (check,) = [line for line in text.splitlines() if "urlopen" in line]
    assert "http://127.0.0.1:8080/healthz" in check
    assert "postgres" in image_extras(text)
    assert (REPO / "deploy" / "toolgate.yaml").is_file()


def image_extras(dockerfile: str) -> set[str]:
    """The extras of the project that the image installs (``pip install ".[a,b]"``)."""
    (extras,) = re.findall(r'pip install "\.\[([\w,-]+)\]"', dockerfile)
    return set(extras.split(","))


def image_packages(dockerfile: str) -> set[str]:
    """The distributions the image installs from the project: its dependencies and those of
    the extras the Dockerfile names (lower-case names, no versions)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in image_extras(dockerfile):
        wanted += project["optional-dependencies"][extra]
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in wanted}


def test_the_image_installs_what_the_shipped_tools_run() -> None:
    """Every ``python -m MODULE`` a shipped process tool runs finds MODULE in the image: the
    standard library, or a distribution of that name the Dockerfile installs (proc.run_tests
    runs pytest)."""
    installed = image_packages((REPO / "Dockerfile").read_text())
    modules = {}
    for path in sorted((REPO / "tools.d").glob("*.yaml")):
        tool = yaml.safe_load(path.read_text())
        command = tool.get("command") or []
        if tool.get("adapter") == "process" and command[:2] == ["python", "-m"]:
            modules[tool["name"]] = command[2].split(".")[0]
    assert modules.get("proc.run_tests") == "pytest"  # the check sees what it is for
    missing = {
        tool: module
        for tool, module in modules.items()
        if module not in sys.stdlib_module_names and module.lower() not in installed
    }
    assert not missing, f"not installed in the image: {missing}"


def replica_files() -> dict[str, str]:
    """The directories the gateway of the image reads and writes for calls, relative to its
    working directory, each with what it is: the workspaces of the policy data, the
    artifacts, and the directory of each SQLite database of the database adapter."""
    from gateway.adapters.shared.artifacts import ArtifactStore

    settings = load_settings(REPO / "deploy" / "toolgate.yaml", env={})
    base = settings.base_dir
    found = {}
    workspaces = yaml.safe_load((REPO / settings.policies_dir / "workspaces.yaml").read_text())
    for ws_id, spec in workspaces["workspaces"].items():
        found[spec["root"]] = f"workspace {ws_id}"
    found[str(ArtifactStore.of(settings).root.relative_to(base))] = "the artifacts"
    connections = settings.adapters.get("database", {}).get("connections", {})
    for name, spec in connections.items():
        url = spec if isinstance(spec, str) else spec["url"]
        if url.startswith("sqlite:///"):
            database = Path(url.removeprefix("sqlite:///").split("?", 1)[0])
            found[str(database.parent)] = f"the SQLite database {name}"
    return found


def test_the_replicas_share_what_they_read_and_write(compose: dict[str, Any]) -> None:
    """A file one replica writes is read by the other: each directory the image's gateway
    keeps call data in is inside a named volume mounted on both replicas, whose mount point
    the image creates for its user (a new volume takes that owner)."""
    dockerfile = (REPO / "Dockerfile").read_text()
    (workdir,) = re.findall(r"^WORKDIR\s+(\S+)\s*$", dockerfile, re.M)
    user = re.findall(r"^USER (\S+)$", dockerfile, re.M)[-1]
    mounts = {point: volume for volume, point in gateway_volumes(compose).items()}
    made = set(re.findall(r"mkdir -p ((?:/\S+\s*)+)", dockerfile.replace("\\\n", " "))[0].split())
    owned = re.findall(rf"chown -R {user}:{user} (\S+)", dockerfile)
    for point in mounts:
        assert any(Path(m).is_relative_to(point) for m in made), f"{point} is not made"
        assert any(Path(point).is_relative_to(o) for o in owned), f"{point} is not {user}'s"
    for path, what in replica_files().items():
        where = Path(workdir) / path
        assert any(where.is_relative_to(point) for point in mounts), (
            f"{what} ({where}) is on no volume shared by the replicas: {sorted(mounts)}"
        )


def test_the_proxy_balances_both_replicas_without_affinity() -> None:
    """Round robin but for 2025-11-25 MCP sessions: the upstream hashes a key that is empty
    (round robin, for nginx) unless the request is /mcp of that era (tests/integration/
    test_proxy.py shows it with nginx)."""
    conf = (REPO / "deploy" / "nginx.conf").read_text()
    conf = "\n".join(line.split("#", 1)[0] for line in conf.splitlines())
    (upstream,) = re.findall(r"upstream\s+(\w+)\s*\{([^}]*)\}", conf)
    name, body = upstream
    servers = re.findall(r"^\s*server\s+([\w.-]+:\d+)", body, re.M)
    assert sorted(servers) == [f"{g}:8080" for g in GATEWAYS]
    for directive in ("ip_hash", "sticky", "least_conn", "random"):
        assert directive not in body, directive
    (key,) = re.findall(r"^\s*hash\s+\$(\w+)\s+consistent;", body, re.M)
    (mapped,) = re.findall(rf'map\s+("[^"]*"|\S+)\s+\${key}\s*\{{([^}}]*)\}}', conf)
    source, rules = mapped
    assert re.search(r'^\s*default\s+"";', rules, re.M), rules
    assert source == '"$uri $http_mcp_protocol_version"'
    assert "proxy_set_header Host $http_host;" in conf  # the port too: /mcp's Host check
    assert f"proxy_pass http://{name};" in conf
    assert re.search(r"listen\s+8080;", conf)


def test_opa_polls_the_bundle_route_with_a_key_of_the_gateway(compose: dict[str, Any]) -> None:
    config = yaml.safe_load((REPO / "deploy" / "opa.yaml").read_text())
    (service,) = config["services"].values()
    base = urlsplit(service["url"])
    assert base.hostname == "proxy" and base.port == 8080
    bundle = config["bundles"]["toolgate"]
    route = f"{base.path.rstrip('/')}/{bundle['resource']}"
    paths = {getattr(r, "path", None) for r in create_app_routes()}
    assert route == "/v1/policy/bundle" and route in paths
    assert config["decision_logs"]["console"] is True
    token = service["credentials"]["bearer"]["token"]
    (variable,) = re.findall(r"^\$\{([A-Z0-9_]+)\}$", token)
    key = env_default(str(services(compose)["opa"]["environment"][variable]))
    principals = load_settings(REPO / "deploy" / "toolgate.yaml", env={}).principals
    assert hash_key(key) in {p.key_sha256 for p in principals}


def create_app_routes() -> list[Any]:
    settings = load_settings(REPO / "deploy" / "toolgate.yaml", env={})
    return list(create_app(settings).routes)


def test_the_deploy_configuration_loads(tmp_path: Path) -> None:
    """deploy/toolgate.yaml with the image's layout (/app/tools.d, rego, policies) checks."""
    from gateway.runtime.bootstrap import load_sources

    for name in ("tools.d", "rego", "policies", "examples"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy(REPO / "deploy" / "toolgate.yaml", tmp_path / "toolgate.yaml")
    loaded = load_sources(load_settings(tmp_path / "toolgate.yaml", env={}))
    assert len(loaded.catalogue) > 0


def test_deploy_md_links_resolve_and_names_every_compose_variable(
    compose: dict[str, Any],
) -> None:
    from tests.test_docs import anchors, links

    docs = REPO / "docs"
    page = (docs / "deploy.md").read_text()
    broken = []
    for file, anchor in links(page):
        target = (docs / file) if file else (docs / "deploy.md")
        if not target.is_file():
            broken.append(f"{file}: no such file")
        elif anchor and anchor not in anchors(target.read_text()):
            broken.append(f"{file or 'deploy.md'}#{anchor}: no such heading")
    assert not broken, broken
    for name in services(compose)["gateway-1"]["environment"]:
        assert f"`{name}`" in page, name
    for variable in set(re.findall(r"\$\{([A-Z0-9_]+)", COMPOSE.read_text())):
        assert f"`{variable}`" in page, variable


# --- the same topology without Docker --------------------------------------------------------


def wait_ready(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{url}/readyz", timeout=30).status_code != 200:
        assert time.monotonic() < deadline, f"{url} is not ready"
        time.sleep(0.1)


def post(url: str, body: dict[str, Any], key: str = ALICE) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/executions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


@pytest.mark.postgres
@pytest.mark.slow
def test_two_replicas_on_postgresql_behind_opa(tmp_path: Path, pg_url: str) -> None:
    config = make_project(tmp_path, pg_url)
    workspace = tmp_path / "var" / "workspaces" / "demo"
    (workspace / "notes").mkdir(parents=True, exist_ok=True)
    (workspace / "notes" / "old.txt").write_text("old")
    opa_port = free_port()
    env = {
        "TOOLGATE_POLICY_BACKEND": "opa",
        "TOOLGATE_OPA_URL": f"http://127.0.0.1:{opa_port}",
        "TOOLGATE_OPA_TIMEOUT": "2s",
    }
    # Not ready until their OPA answers, which loads its bundle from them: alive is enough.
    with (
        gateway(config, env, probe="/healthz") as one,
        gateway(config, env, probe="/healthz") as two,
    ):
        assert httpx.get(f"{one}/readyz", timeout=30).json()["policy_backend"] == "unavailable"
        # OPA loads the gateway's own bundle, as deploy/opa.yaml has it poll it.
        served = httpx.get(
            f"{two}/v1/policy/bundle", headers={"Authorization": f"Bearer {ALICE}"}, timeout=30
        )
        assert served.status_code == 200
        opa = StandIn.from_bundle(served.content, port=opa_port).start()
        try:
            for replica in (one, two):  # ready once OPA answers their health probe
                wait_ready(replica)
            request = {
                "run_id": "deploy",
                "call_id": "delete-old",
                "idempotency_key": "deploy-delete-old",
                "tool": {"name": "fs.delete_file"},
                "arguments": {"path": "notes/old.txt"},
                "workspace": {"id": "demo"},
            }
            parked = post(one, request)
            assert parked.status_code == 202, parked.text
            execution = parked.json()
            assert execution["status"] == "awaiting_approval"
            approval = execution["approval"]["id"]
            approved = httpx.post(
                f"{two}/v1/approvals/{approval}/approve",
                headers={"Authorization": f"Bearer {BOB}"},
                timeout=30,
            )
            assert approved.status_code == 202, approved.text  # resumed in the background
            done = httpx.get(
                f"{one}/v1/executions/{execution['id']}?wait=30",
                headers={"Authorization": f"Bearer {ALICE}"},
                timeout=60,
            ).json()
            assert done["status"] == "completed", done
            assert done["result"]["outcome"] == "succeeded", done
            assert not (workspace / "notes" / "old.txt").exists()
            events = httpx.get(
                f"{one}/v1/executions/{execution['id']}/events",
                headers={"Authorization": f"Bearer {ALICE}"},
                timeout=30,
            ).json()["items"]
            decided = [e["data"] for e in events if e["type"] == "policy.decided"]
            assert [d["result"] for d in decided] == ["require_approval", "allow"]
            assert all(d.get("decision_id") for d in decided)  # both decided by "OPA"

            again = post(two, request)  # an idempotent retry through the other replica
            assert again.status_code == 200, again.text
            assert again.json()["id"] == execution["id"]
            assert again.json()["result"] == done["result"]
            after = httpx.get(
                f"{two}/v1/executions/{execution['id']}/events",
                headers={"Authorization": f"Bearer {ALICE}"},
                timeout=30,
            ).json()["items"]
            assert after == events  # answered from the record: nothing ran again
        finally:
            opa.stop()
