"""Attack corpora kept as tests: each entry must be refused. ``CORPORA`` counts them per
category, and ``test_the_corpora_keep_their_size`` pins the counts, so an entry cannot drop
out unnoticed (docs/security.md, "Tested, not promised", shows the table).

- path escapes, against a workspace with symlinks out of it;
- SSRF destinations in every notation (decimal, octal, hex, short, IPv6-mapped, NAT64, 6to4,
  ``localhost.``, names resolving to refused ranges) and redirects to them, through the real
  HTTP adapter and the example service on 127.0.0.1;
- approval-token tampering (every byte, truncation, other keys, re-signed claims) and replay;
- cross-principal reads of executions, events, approvals and artifacts on a real gateway."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

import httpx
import pytest

from examples.orders_service import create_app as orders_app
from examples.orders_service import serving
from gateway import b64url
from gateway.adapters.http import adapter as http
from gateway.adapters.http.options import HttpConfig
from gateway.adapters.shared.artifacts import ArtifactStore
from gateway.adapters.shared.egress import EgressPolicy, EgressRefused, check_url
from gateway.approvals import tokens
from gateway.errors import PolicyDenied, ValidationError
from gateway.settings import load_settings
from gateway.testing import adapter_call, load_declaration
from gateway.workspace import Workspace, confine
from tests.helpers import ALICE, BOB, CAROL

CORPORA: dict[str, int] = {}
"""Entries tried per category (filled as the corpora are built, at import)."""


def _count(category: str, entries: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    CORPORA[category] = len(entries)
    return tuple(entries)


# --- path escapes --------------------------------------------------------------------------

PATH_ESCAPES = _count(
    "path escapes",
    [
        "..",
        "../",
        "../x",
        "a/../../x",
        "a/b/../../../x",
        "./../x",
        ".//..//x",
        "a/./../..",
        "..\\x",
        "a\\..\\..\\x",
        "\\..\\x",
        "/etc/passwd",
        "/",
        "//x",
        "\\\\server\\share",
        "C:\\x",
        "C:x",
        "c:/x",
        "./C:x",
        "a/../C:x",
        "x\x00",
        "\x00",
        "a/\x00/b",
        "x" * 5000,
        "out",
        "out/secret",
        "./out/secret",
        "a/up/secret",
        "abs",
        "abs/x",
        "chain",
        "chain/secret",
        "a/up",
        "a/../out",
        "deep/../out/x",
        "rootlink/../outside",
        "outdir/../outside/secret",
        "dotdot",
    ],
)


@pytest.fixture
def escape_workspace(tmp_path: Path) -> Workspace:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("s")
    (root / "out").symlink_to(outside)
    (root / "a" / "up").symlink_to("../../outside")
    (root / "abs").symlink_to("/etc")
    (root / "chain").symlink_to("out")
    (root / "rootlink").symlink_to(root)
    (root / "outdir").symlink_to(outside / "..")
    (root / "dotdot").symlink_to("..")
    return Workspace.declare("w", root)


@pytest.mark.parametrize("raw", PATH_ESCAPES, ids=range(len(PATH_ESCAPES)))
def test_path_escapes_are_refused(escape_workspace: Workspace, raw: str) -> None:
    with pytest.raises(ValidationError) as caught:
        confine(escape_workspace, raw)
    assert caught.value.code in {"path_escape", "invalid_path"}


# --- SSRF ----------------------------------------------------------------------------------

SSRF_HOSTS = _count(
    "SSRF addresses",
    [
        # loopback in every notation
        "127.0.0.1",
        "127.1",
        "127.0.1",
        "2130706433",
        "0x7f000001",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "0177.0.0.01",
        "017700000001",
        "127.255.255.254",
        "[::1]",
        "[0:0:0:0:0:0:0:1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[0:0:0:0:0:ffff:127.0.0.1]",
        "[64:ff9b::7f00:1]",
        "[2002:7f00:1::]",
        "localhost",
        "localhost.",
        "LOCALHOST",
        "LocalHost.",
        "x.localhost",
        "127.0.0.1.",
        "[::1]",
        "localhost..",
        # unspecified
        "0",
        "0.0.0.0",
        "[::]",
        "0x0",
        # cloud metadata
        "169.254.169.254",
        "2852039166",
        "0xa9fea9fe",
        "0251.0376.0251.0376",
        "[::ffff:169.254.169.254]",
        "[::ffff:a9fe:a9fe]",
        "[64:ff9b::a9fe:a9fe]",
        "[fd00:ec2::254]",
        "169.254.170.2",
        # private, shared, link-local, multicast, reserved, broadcast
        "10.0.0.1",
        "012.0.0.1",
        "0xa.0.0.1",
        "167772161",
        "172.16.0.1",
        "192.168.0.1",
        "[::ffff:10.0.0.1]",
        "[::ffff:192.168.1.1]",
        "100.64.0.1",
        "169.254.0.1",
        "[fe80::1]",
        "[fc00::1]",
        "[fd12:3456::1]",
        "224.0.0.1",
        "[ff02::1]",
        "240.0.0.1",
        "255.255.255.255",
        "198.18.0.1",
        "192.0.2.1",
        "[2001:db8::1]",
    ],
)
OPEN = EgressPolicy.build(["*"], [])


@pytest.mark.anyio
@pytest.mark.parametrize("host", SSRF_HOSTS, ids=range(len(SSRF_HOSTS)))
async def test_ssrf_addresses_are_refused_before_connecting(host: str) -> None:
    with pytest.raises(EgressRefused):
        await check_url(f"http://{host}:8080/latest/meta-data/", OPEN)


REDIRECT_TARGETS = _count(
    "SSRF redirects",
    [
        f"http://{host}/latest/"
        for host in (
            *SSRF_HOSTS[SSRF_HOSTS.index("0") :],
            *("[::1]", "2130706434", "127.0.0.2", "[::ffff:127.0.0.2]", "0x7f000002"),
        )
    ]
    + ["HTTP://169.254.169.254/", "http://user@10.0.0.1/", "http://169.254.169.254.:80/"],
)
"""Where the example service on 127.0.0.1 (allowed: 127.0.0.1/32 only) redirects a tool."""


@pytest.fixture(scope="module")
def orders_base() -> Iterator[str]:
    with serving(orders_app(token="t")) as base:
        yield base


@pytest.mark.anyio
async def test_redirects_to_ssrf_addresses_are_refused_per_hop(
    orders_base: str, tmp_path: Path
) -> None:
    config = HttpConfig.model_validate({"services": {}})
    adapter = http.HttpAdapter(config)
    refused = 0
    try:
        for target in REDIRECT_TARGETS:
            text = (
                "name: t.hop\nversion: 1.0.0\ndescription: A test tool.\nadapter: http\n"
                "operation: request\nrisk: low\nside_effect: read\nmethod: GET\n"
                f"url: {orders_base}/redirect?to={httpx.QueryParams({'x': target})['x']}\n"
                "redirects: 3\negress: {allow_hosts: ['*'], allow_networks: [127.0.0.1/32]}\n"
            )
            (tmp_path / "t.yaml").write_text(text)
            tool = load_declaration(tmp_path / "t.yaml")[0]
            with pytest.raises(EgressRefused):
                await adapter.execute(adapter_call(tool))
            refused += 1
    finally:
        await adapter.aclose()
    assert refused == len(REDIRECT_TARGETS)


# --- approval tokens -----------------------------------------------------------------------

KEY = b"k" * 40
CLAIMS = tokens.TokenClaims(
    approval_id="apr_1",
    tool="fs.delete_file",
    version="1.0.0",
    arguments_sha256="ab" * 32,
    actor="alice",
    workspace="demo",
    expires_ms=int(time.time() * 1000) + 3_600_000,
)


def _resign(payload: bytes, key: bytes = KEY) -> str:
    mac = hmac.new(key, payload, hashlib.sha256).digest()
    return f"{b64url.encode(payload)}.{b64url.encode(mac)}"


def _tampered() -> list[str]:
    good = tokens.sign(CLAIMS, KEY)
    out: list[str] = []
    for i, ch in enumerate(good):  # every character of the token changed
        swap = "A" if ch != "A" else "B"
        if ch == ".":
            swap = "_"
        out.append(good[:i] + swap + good[i + 1 :])
    payload, mac = good.split(".")
    out += [
        "",
        ".",
        good + ".",
        "." + good,
        good[:-1],
        good[:-4],
        payload,
        payload + ".",
        "." + mac,
        f"{mac}.{payload}",
        good + "A",
        f"{payload}.{mac}.{mac}",
        good.upper(),
        f"{payload}=.{mac}",
        f"{payload}.{mac}=",
        f"{payload}.{mac[:-1]}{chr(ord(mac[-1]) + 1)}",
        good.replace(".", ".."),
        "x" * 10_000,
        "\x00" + good,
        tokens.sign(CLAIMS, b"another gateway's key" * 2),  # another key
        tokens.sign(replace(CLAIMS, expires_ms=int(time.time() * 1000) - 1), KEY),  # expired
        _resign(b"[]"),
        _resign(b"null"),
        _resign(b"{}"),
        _resign(b"\xff\xfe"),
        _resign(json.dumps({**asdict(CLAIMS), "expires_ms": "9" * 20}).encode()),
        _resign(json.dumps({**asdict(CLAIMS), "expires_ms": 1e30}).encode()),
        _resign(json.dumps({**asdict(CLAIMS), "expires_ms": True}).encode()),
        _resign(json.dumps({**asdict(CLAIMS), "actor": None}).encode()),
        _resign(json.dumps({**asdict(CLAIMS), "admin": True}).encode()),
        _resign(b"[" * 100_000 + b"]" * 100_000),
    ]
    return out


TAMPERED_TOKENS = _count("approval-token tampering", _tampered())
MISBOUND = _count(
    "approval-token misuse",
    ["tool", "version", "arguments_sha256", "actor", "workspace"],
)


@pytest.mark.parametrize("token", TAMPERED_TOKENS, ids=range(len(TAMPERED_TOKENS)))
def test_tampered_tokens_are_refused(token: str) -> None:
    with pytest.raises(PolicyDenied) as caught:
        tokens.verify(token, KEY)
    assert caught.value.code == "approval_token_invalid"


def test_an_untampered_token_verifies_and_binds_only_its_call() -> None:
    claims = tokens.verify(tokens.sign(CLAIMS, KEY), KEY)
    assert claims == CLAIMS
    actual = {f: getattr(CLAIMS, f) for f in MISBOUND}
    tokens.check_binding(claims, **actual)
    for field in MISBOUND:
        with pytest.raises(PolicyDenied):
            tokens.check_binding(claims, **{**actual, field: actual[field] + "x"})


# --- cross-principal reads -----------------------------------------------------------------

CROSS_PRINCIPAL = _count(
    "cross-principal reads",
    [
        "GET /v1/executions/{done}",
        "GET /v1/executions/{done}/events",
        "GET /v1/executions/{done}/events (event stream)",
        "GET /v1/executions/{parked}",
        "GET /v1/executions/{parked}/events",
        "GET /v1/executions?run_id={run}",
        "GET /v1/runs/{run}/events",
        "POST /v1/executions/{parked}/cancel",
        "POST /v1/executions/{parked}/resolve",
        "GET /v1/approvals/{approval}",
        "GET /v1/approvals",
        "POST /v1/approvals/{approval}/approve",
        "POST /v1/approvals/{approval}/deny",
        "GET /v1/artifacts/{artifact}",
        "GET /v1/artifacts/{artifact} (as bob, an approver)",
        "MCP tasks/get {done}",
    ],
)
RUN = "run-c9"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _carols_call(tool: str, arguments: dict[str, object], call: str, **extra: object) -> dict:
    return {
        "run_id": RUN,
        "turn_id": "t1",
        "call_id": call,
        "tool": {"name": tool},
        "arguments": arguments,
        "actor": {"user_id": "carol", "agent_id": "x"},
        "workspace": {"id": "demo"},
        **extra,
    }


def _mcp_tasks_get(client: httpx.Client, task_id: str) -> httpx.Response:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tasks/get",
        "params": {"taskId": task_id, "_meta": meta},
    }
    headers = {
        **_auth(ALICE),
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tasks/get",
    }
    return client.post("/mcp", json=message, headers=headers)


def test_another_principals_executions_events_approvals_and_artifacts_stay_hidden(
    served_project: tuple[str, Path],
) -> None:
    url, config = served_project
    workspace = config.parent / "var" / "workspaces" / "demo"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "carols.txt").write_text("carol's")
    with httpx.Client(base_url=url, timeout=30) as client:
        done = client.post(
            "/v1/executions",
            json=_carols_call("fs.read_file", {"path": "carols.txt"}, "c1"),
            headers={**_auth(CAROL), "Prefer": "wait=10"},
        ).json()
        assert done["status"] == "completed", done
        parked = client.post(
            "/v1/executions",
            json=_carols_call("fs.delete_file", {"path": "carols.txt"}, "c2", idempotency_key="k"),
            headers=_auth(CAROL),
        ).json()
        approval = parked["approval"]["id"]
        settings = load_settings(config)
        artifact = ArtifactStore.of(settings).save(
            b"\x89PNG carol",
            content_type="image/png",
            owner="carol",
            workspace="demo",
            execution_id=done["id"],
        )
        # the owner sees each of them (so the refusals below are about who asks)
        assert client.get(f"/v1/executions/{done['id']}", headers=_auth(CAROL)).status_code == 200
        assert client.get(artifact.href, headers=_auth(CAROL)).content == b"\x89PNG carol"

        ids = {
            "done": done["id"],
            "parked": parked["id"],
            "run": RUN,
            "approval": approval,
            "artifact": artifact.id,
        }
        refused = 0
        for entry in CROSS_PRINCIPAL:
            method, rest = entry.split(" ", 1)
            path = rest.split(" (")[0].format(**ids)
            key = BOB if "as bob" in entry else ALICE
            headers = _auth(key)
            if "event stream" in entry:
                headers["Accept"] = "text/event-stream"
            if method == "MCP":
                response = _mcp_tasks_get(client, done["id"])
                assert response.status_code < 500
                assert "error" in response.text and "carols.txt" not in response.text, entry
                refused += 1
                continue
            response = client.request(
                method, path, headers=headers, json={} if method == "POST" else None
            )
            assert response.status_code < 500, (entry, response.text)
            text = response.text
            if response.status_code == 200:  # a listing: nothing of carol's in it
                assert done["id"] not in text and parked["id"] not in text, (entry, text)
                assert "carol" not in text, (entry, text)
            else:
                assert response.status_code in (403, 404), (entry, response.status_code, text)
                assert response.headers["content-type"].startswith("application/problem+json")
                assert "carols.txt" not in text and "PNG" not in text, (entry, text)
            refused += 1
        assert refused == len(CROSS_PRINCIPAL)
        # nothing changed: carol's call still waits for its approval, her file is there
        still = client.get(f"/v1/executions/{parked['id']}", headers=_auth(CAROL)).json()
        assert still["status"] == parked["status"]
        assert (workspace / "carols.txt").exists()


def test_an_approval_token_is_spent_once_and_by_its_actor_only(
    served_project: tuple[str, Path],
) -> None:
    url, config = served_project
    workspace = config.parent / "var" / "workspaces" / "demo"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "doomed.txt").write_text("bye")
    args = {"path": "doomed.txt"}
    with httpx.Client(base_url=url, timeout=30) as client:
        parked = client.post(
            "/v1/executions",
            json=_carols_call("fs.delete_file", args, "r1", idempotency_key="r1"),
            headers=_auth(CAROL),
        ).json()
        granted = client.post(
            f"/v1/approvals/{parked['approval']['id']}/approve",
            json={"resume": False},
            headers=_auth(BOB),
        )
        assert granted.status_code == 200, granted.text
        token = granted.json()["approval_token"]
        # alice replays carol's token for the same call: refused, nothing deleted
        alices = _carols_call(
            "fs.delete_file", args, "r2", idempotency_key="r2", approval_token=token
        )
        alices["actor"] = {"user_id": "alice", "agent_id": "coder"}
        theft = client.post(
            "/v1/executions", json=alices, headers={**_auth(ALICE), "Prefer": "wait=10"}
        ).json()
        assert theft["result"]["error"]["type"] == "approval_token_invalid", theft
        assert (workspace / "doomed.txt").exists()
        spend = _carols_call(
            "fs.delete_file", args, "r3", idempotency_key="r3", approval_token=token
        )
        first = client.post(
            "/v1/executions", json=spend, headers={**_auth(CAROL), "Prefer": "wait=10"}
        ).json()
        assert first["result"]["outcome"] == "succeeded", first
        (workspace / "doomed.txt").write_text("again")
        replay = {**spend, "call_id": "r4", "idempotency_key": "r4"}
        second = client.post(
            "/v1/executions", json=replay, headers={**_auth(CAROL), "Prefer": "wait=10"}
        ).json()
        assert second["result"]["error"]["type"] == "approval_token_used", second
        assert (workspace / "doomed.txt").read_text() == "again"


EXPECTED = {
    "path escapes": 38,
    "SSRF addresses": 58,
    "SSRF redirects": 41,
    "approval-token tampering": 359,
    "approval-token misuse": 5,
    "cross-principal reads": 16,
}


def test_b64url_has_one_spelling() -> None:
    """Regression: the stdlib decoder skipped junk, padding and spare bits."""
    assert b64url.decode(b64url.encode(b"toolgate")) == b"toolgate"
    for other in (
        "\x00dG9vbGdhdGU",
        "dG9vbGdhdGU=",
        "dG9v bGdhdGU",
        "dG9vbGdhdGV",
        "dG9v\nbGdhdGU",
    ):
        with pytest.raises(ValueError):
            b64url.decode(other)


def test_the_corpora_keep_their_size() -> None:
    print("\n".join(f"{name}: {count}" for name, count in CORPORA.items()))
    assert CORPORA == EXPECTED
