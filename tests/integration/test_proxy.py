"""The topology of docker-compose.yml without Docker: Debian's nginx running the shipped
``deploy/nginx.conf`` (only its upstream addresses and its listen port rewritten) in front of
two ``toolgate serve`` replicas on one PostgreSQL, with the image's configuration and the
gateway environment of the compose file. Each replica runs in a directory of its own, as each
container has its own ``/app``; the directories compose mounts as named volumes on both
replicas are shared here, and nothing else is. Through the proxy: a REST call, an MCP call of
each protocol era with the official SDK client, and the approval page its answer links to,
followed, signed in to and decided (docs/deploy.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
import yaml

from gateway.mcp import meta
from gateway.store.store import Store
from gateway.testing import free_port, stop
from tests.helpers import (
    ALICE,
    BOB,
    COMPOSE_GATEWAYS,
    IN_CI,
    REPO,
    env_default,
    gateway_volumes,
)
from tests.integration.helpers import Replica, start_replicas
from tests.mcp.helpers import ERAS, connect, meta_of

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

COMPOSE = REPO / "docker-compose.yml"
NGINX_CONF = REPO / "deploy" / "nginx.conf"
GATEWAYS = COMPOSE_GATEWAYS
NOT_HERE = {"TOOLGATE_POLICY_BACKEND", "TOOLGATE_OPA_URL", "TOOLGATE_OPA_TIMEOUT"}
"""Compose settings the test leaves out: the policy is decided in-process here (the OPA
server of compose is tests/test_deploy.py's subject)."""
START_TIMEOUT = 60.0


def require_nginx() -> str:
    """Debian's nginx; a skip (off CI) or a failure (CI) saying how to install it."""
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )
    if found is not None:
        return found
    reason = "nginx is not installed (as root: apt-get update && apt-get install -y nginx)"
    if IN_CI:
        pytest.fail(f"{reason}; CI requires it", pytrace=False)
    pytest.skip(reason)


def image_workdir() -> PurePosixPath:
    """The image's ``WORKDIR`` (``/app``): where the gateway runs in a container."""
    (workdir,) = re.findall(r"^WORKDIR\s+(\S+)\s*$", (REPO / "Dockerfile").read_text(), re.M)
    return PurePosixPath(workdir)


def shared_mounts(compose: dict[str, Any]) -> dict[str, PurePosixPath]:
    """The named volumes both gateway replicas mount, by name: where each is mounted,
    relative to the image's working directory."""
    app = image_workdir()
    return {
        volume: PurePosixPath(point).relative_to(app)
        for volume, point in gateway_volumes(compose).items()
    }


def proxy_conf(shipped: str, upstreams: Mapping[str, str], port: int) -> str:
    """``shipped`` with each ``server <replica>:<port>`` of its upstream pointed at that
    replica's loopback address (``upstreams``: name → host:port) and its ``listen`` at
    ``127.0.0.1:port``; every other line as shipped."""
    seen: list[str] = []

    def upstream(match: re.Match[str]) -> str:
        seen.append(match.group(2))
        return f"{match.group(1)}{upstreams[match.group(2)]}"

    conf = re.sub(r"^(\s*server\s+)([\w-]+):\d+(?=[\s;])", upstream, shipped, flags=re.M)
    conf, listens = re.subn(r"^(\s*listen\s+)\d+;", rf"\g<1>127.0.0.1:{port};", conf, flags=re.M)
    assert sorted(seen) == sorted(upstreams) and listens == 1, (seen, listens)
    return conf


MAIN_CONF = """\
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 256; }}
http {{
    log_format upstreams '$request_method $uri $status upstream=$upstream_addr '
                         'host=$http_host version=$http_mcp_protocol_version '
                         'session=$http_mcp_session_id probe=$http_x_probe';
    access_log {dir}/access.log upstreams;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    include {dir}/default.conf;
}}
"""
"""What the nginx image's /etc/nginx/nginx.conf does for the shipped file (included in its
``http`` block as conf.d/default.conf), with every file of nginx under the test's directory
and one process in the foreground (``master_process off``: no privilege drop to a user that
could not read the test's files)."""


def start_nginx(nginx: str, folder: Path, upstreams: Mapping[str, str], stack: ExitStack) -> str:
    """nginx on the shipped configuration in front of ``upstreams``; its URL once
    ``/healthz`` answers through it."""
    (folder / "tmp").mkdir(parents=True)
    port = free_port()
    (folder / "default.conf").write_text(proxy_conf(NGINX_CONF.read_text(), upstreams, port))
    (folder / "nginx.conf").write_text(MAIN_CONF.format(dir=folder))
    log = (folder / "nginx.out").open("wb")
    stack.callback(log.close)
    proc = subprocess.Popen(
        [nginx, "-p", str(folder), "-e", str(folder / "error.log"), "-c", "nginx.conf"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    stack.callback(stop, proc)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            errors = (folder / "error.log").read_text(errors="replace")
            raise RuntimeError(f"nginx exited with {proc.returncode}: {errors}")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("nginx did not answer /healthz through a replica")


def replica_root(root: Path, shared: Path, mounts: Mapping[str, PurePosixPath]) -> Path:
    """One replica's ``/app``: what the Dockerfile copies there, deploy/toolgate.yaml as its
    configuration, and each shared volume's mount point a link to one directory of
    ``shared``. Returns its toolgate.yaml."""
    for name in ("tools.d", "rego", "policies", "examples"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "deploy" / "toolgate.yaml", root / "toolgate.yaml")
    for volume, where in mounts.items():
        (shared / volume).mkdir(parents=True, exist_ok=True)
        (root / where).parent.mkdir(parents=True, exist_ok=True)
        (root / where).symlink_to(shared / volume, target_is_directory=True)
    return root / "toolgate.yaml"


def gateway_env(compose: dict[str, Any], database_url: str) -> dict[str, str]:
    """The gateway environment of the compose file (defaults of ``${...}`` taken), on the
    test's database and loopback."""
    env = {
        k: env_default(str(v))
        for k, v in compose["services"][GATEWAYS[0]]["environment"].items()
        if k not in NOT_HERE
    }
    env.update(TOOLGATE_DATABASE_URL=database_url, TOOLGATE_HOST="127.0.0.1")
    return env


@dataclass
class Proxied:
    url: str
    replicas: dict[str, Replica]
    shared: Path
    proxy: Path
    """nginx's directory: its configuration and logs (``access.log``: the replica of each
    request)."""

    def workspace(self, name: str = "demo") -> Path:
        return self.shared / "workspaces" / name


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory, pg_module_url: str) -> Iterator[Proxied]:
    nginx = require_nginx()
    compose: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    root = tmp_path_factory.mktemp("proxied")
    mounts = shared_mounts(compose)
    configs = {name: replica_root(root / name, root / "shared", mounts) for name in GATEWAYS}
    store = Store(pg_module_url)
    store.open_sync()  # the schema, before both replicas race to create it
    store.engine.dispose()
    env = gateway_env(compose, pg_module_url)
    with ExitStack() as stack:
        replicas = start_replicas(configs, {name: env for name in GATEWAYS}, stack)
        upstreams = {name: urlsplit(r.url).netloc for name, r in replicas.items()}
        url = start_nginx(nginx, root / "proxy", upstreams, stack)
        yield Proxied(url, replicas, root / "shared", root / "proxy")


def rest(url: str, key: str = ALICE) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def run(url: str, tool: str, arguments: dict[str, Any], **request: Any) -> dict[str, Any]:
    """``tool`` called by alice in the workspace demo through ``url``; its execution, which
    must have succeeded."""
    body = {
        "run_id": "proxy",
        "call_id": f"c-{uuid.uuid4().hex}",
        "tool": {"name": tool},
        "arguments": arguments,
        "workspace": {"id": "demo"},
        **request,
    }
    with rest(url) as client:
        response = client.post("/v1/executions", json=body)
    assert response.status_code == 200, response.text
    execution: dict[str, Any] = response.json()
    assert execution["result"]["outcome"] == "succeeded", execution
    return execution


def access_log(proxied: Proxied) -> list[dict[str, str]]:
    """The proxy's access log: each request's method, path, status, and the ``upstream``,
    ``host``, ``version``, ``session`` and ``probe`` fields of ``MAIN_CONF``'s format."""
    lines = (proxied.proxy / "access.log").read_text().splitlines()
    return [
        {"method": m, "path": p, "status": s, **dict(f.split("=", 1) for f in fields)}
        for m, p, s, *fields in (line.split() for line in lines)
    ]


def served_by(proxied: Proxied, path: str, count: int) -> list[str]:
    """The replicas (their host:port) that served the ``count`` requests for ``path`` the
    proxy's access log shows, once it shows them (nginx logs a request after answering)."""
    deadline = time.monotonic() + 10
    while True:
        found = [r["upstream"] for r in access_log(proxied) if r["path"] == path]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_a_rest_call_through_the_proxy_on_either_replica(proxied: Proxied) -> None:
    name = f"rest-{uuid.uuid4().hex[:8]}.txt"
    written = run(proxied.url, "fs.write_file", {"path": name, "content": "through nginx\n"})
    execution = written["links"]["self"]
    with rest(proxied.url) as client:
        for _ in GATEWAYS:
            assert client.get(execution).json()["status"] == "completed"
    assert (proxied.workspace() / name).read_text() == "through nginx\n"
    replicas = {urlsplit(r.url).netloc for r in proxied.replicas.values()}
    assert set(served_by(proxied, execution, len(GATEWAYS))) == replicas  # no affinity


def test_the_replicas_share_the_example_database(proxied: Proxied) -> None:
    """A row db.mark_shipped changes through one replica is read through the other: compose
    shares the database's directory (tests/test_deploy.py), and so does this topology."""
    one, two = (proxied.replicas[name].url for name in GATEWAYS)
    paid = run(two, "db.query_orders", {"status": "paid", "limit": 1})["result"]["data"]
    order = paid["rows"][0]["id"]
    tracking = f"TRK-{uuid.uuid4().hex[:10]}"
    arguments = {"order_id": order, "carrier": "dhl", "tracking": tracking}
    run(one, "db.mark_shipped", arguments, idempotency_key=f"ship-{tracking}")
    after = {"status": "shipped", "after_id": order - 1, "limit": 1}
    shipped = run(two, "db.query_orders", after)["result"]["data"]["rows"]
    assert [(r["id"], r["tracking"]) for r in shipped] == [(order, tracking)]


@pytest.mark.parametrize("era", ERAS)
def test_mcp_through_the_proxy_and_the_approval_page_it_links_to(
    proxied: Proxied, era: str
) -> None:
    probe = {"X-Probe": uuid.uuid4().hex}  # this test's requests in the log, not the last one's
    path = f"doomed-{era}-{uuid.uuid4().hex[:6]}.txt"
    (proxied.workspace() / path).write_text("bye")
    ids = {meta.IDEMPOTENCY_KEY: f"proxy-{uuid.uuid4().hex}"}

    async def call() -> Any:
        async with connect(proxied.url, era, headers=probe) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            assert "fs.delete_file" in listed
            return await client.call_tool("fs.delete_file", {"path": path}, meta=ids)

    pending = anyio.run(call)
    assert not pending.is_error, pending
    body = pending.structured_content or {}
    assert body["status"] == "awaiting_approval", body
    page = body["approval"]["page"]
    assert page == f"{proxied.url}/ui/approvals/{body['approval']['id']}"  # with the port
    assert body["links"]["approval_page"] == page
    assert body["links"]["execution"] == f"{proxied.url}/v1/executions/{body['execution_id']}"

    approve_on_the_page(page, BOB)

    async def outcome() -> Any:
        async with connect(proxied.url, era, headers=probe) as client:
            return await client.call_tool(
                "toolgate.execution_status", {"execution_id": body["execution_id"], "wait_s": 30}
            )

    status = anyio.run(outcome)
    assert meta_of(status)[meta.OUTCOME] == "succeeded", status
    assert not (proxied.workspace() / path).exists()
    sessions: dict[str, set[str]] = {}
    # nginx logs a request once it has answered it, so the last test's closing DELETE of its
    # session may be logged after this test began: the probe header tells this test's apart.
    for request in access_log(proxied):
        if request["probe"] == probe["X-Probe"] and request["session"] != "-":
            sessions.setdefault(request["session"], set()).add(request["upstream"])
    assert all(len(replicas) == 1 for replicas in sessions.values()), sessions
    assert bool(sessions) == (era == "legacy"), sessions  # a 2025-11-25 session, kept on one


def approve_on_the_page(page: str, key: str) -> None:
    """Follow ``page`` as a browser would: to the sign-in form, signed in with ``key``, back
    to the page, then its Approve button."""
    with httpx.Client(follow_redirects=True, timeout=60) as browser:
        signin = browser.get(page)
        assert signin.status_code == 200 and signin.url.path == "/ui/signin", signin.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', signin.text)
        following = re.search(r'name="next" value="([^"]+)"', signin.text)
        assert csrf and following, signin.text
        shown = browser.post(
            signin.url.copy_with(query=None),
            data={"csrf": csrf.group(1), "api_key": key, "next": following.group(1)},
        )
        assert shown.status_code == 200 and str(shown.url) == page, (shown.url, shown.text)
        token = re.search(r'name="csrf" value="([^"]+)"', shown.text)
        assert token, shown.text
        decided = browser.post(
            page + "/decide", data={"csrf": token.group(1), "decision": "approve"}
        )
        assert decided.status_code == 200 and str(decided.url) == page, decided.text
        assert "approved" in decided.text.lower(), decided.text
