"""The deployment files (Dockerfile, docker-compose.yml, deploy/) are right, and the topology
they describe works here without Docker: two ``toolgate serve`` replicas on one PostgreSQL with
``policy_backend: opa`` against the loopback OPA stand-in serving the gateway's own bundle, a
call sent alternately to both."""

from __future__ import annotations

import re
import shutil
import time
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
from tests.helpers import ALICE, BOB, REPO

COMPOSE = REPO / "docker-compose.yml"
GATEWAYS = ("gateway-1", "gateway-2")
NOT_TOOLGATE = {"PGPASSWORD"}
"""Environment variables of the gateway that are not Toolgate settings: libpq reads PGPASSWORD,
so that the password stays out of the database URL."""


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def env_default(value: str) -> str:
    """``${NAME:-default}`` → default (what ``docker compose up`` uses when NAME is unset)."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


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
    assert 'pip install ".[postgres]"' in text
    assert (REPO / "deploy" / "toolgate.yaml").is_file()


def test_the_proxy_balances_both_replicas_without_affinity() -> None:
    conf = (REPO / "deploy" / "nginx.conf").read_text()
    conf = "\n".join(line.split("#", 1)[0] for line in conf.splitlines())
    (upstream,) = re.findall(r"upstream\s+(\w+)\s*\{([^}]*)\}", conf)
    name, body = upstream
    servers = re.findall(r"^\s*server\s+([\w.-]+:\d+)", body, re.M)
    assert sorted(servers) == [f"{g}:8080" for g in GATEWAYS]
    for directive in ("ip_hash", "hash ", "sticky", "least_conn"):
        assert directive not in body, directive
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
            assert approved.status_code in (200, 202), approved.text
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
