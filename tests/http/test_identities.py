"""Identities on a real gateway process: API keys with ids, expiry, several per principal and
revocation; the provider's JWTs at the REST door, at ``/mcp`` (an OAuth protected resource)
and on the approvals page; the token's roles in the recorded policy input, where the Rego
decides what they allow."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import uuid
from typing import Any

import anyio
import httpx
import pytest

from gateway.cli import main
from tests.helpers import ALICE, BOB
from tests.http.helpers import OLD_KEY, RESOURCE, SECOND_KEY, IdentityGateway
from tests.mcp.helpers import connect

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def get(gw: IdentityGateway, path: str, credential: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {credential}"} if credential else {}
    return httpx.get(gw.url + path, headers=headers, timeout=10)


def toolgate(gw: IdentityGateway, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``toolgate`` command, run in this process (the store is the gateway's file)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--config", str(gw.config), *args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def write(gw: IdentityGateway, credential: str, path: str) -> dict[str, Any]:
    body = {
        "run_id": f"r-{uuid.uuid4().hex[:8]}",
        "call_id": "c1",
        "tool": {"name": "fs.write_file"},
        "arguments": {"path": path, "content": "hi"},
        "workspace": {"id": "demo"},
        "idempotency_key": uuid.uuid4().hex,
    }
    headers = {"Authorization": f"Bearer {credential}"}
    response = httpx.post(gw.url + "/v1/executions", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text  # a synchronous write completes
    result: dict[str, Any] = response.json()
    return result


def decided_input(gw: IdentityGateway, credential: str, execution_id: str) -> dict[str, Any]:
    events = get(gw, f"/v1/executions/{execution_id}/events", credential).json()["items"]
    (decided,) = [e for e in events if e["type"] == "policy.decided"]
    found: dict[str, Any] = decided["data"]["input"]
    return found


# --- API keys -------------------------------------------------------------------------------


def test_every_key_of_a_principal_works_and_an_expired_one_is_refused(
    identity_gw: IdentityGateway,
) -> None:
    for key in (ALICE, SECOND_KEY):
        assert get(identity_gw, "/v1/tools", key).status_code == 200
    expired = get(identity_gw, "/v1/tools", OLD_KEY)
    assert expired.status_code == 401
    assert expired.json()["code"] == "api_key_expired"
    assert "alice-old" in expired.json()["detail"] and OLD_KEY not in expired.text
    assert get(identity_gw, "/v1/tools", "tg_nobody").json()["code"] == "invalid_api_key"
    assert get(identity_gw, "/v1/tools").json()["code"] == "missing_api_key"


def test_a_revoked_key_is_refused_at_once_and_the_other_keys_still_work(
    identity_gw: IdentityGateway,
) -> None:
    assert get(identity_gw, "/v1/tools", SECOND_KEY).status_code == 200
    revoked = toolgate(identity_gw, "keys", "revoke", "alice-2", "--reason", "left on a laptop")
    assert revoked.returncode == 0, revoked.stderr
    assert "revoked key alice-2 (principal alice)" in revoked.stdout
    refused = get(identity_gw, "/v1/tools", SECOND_KEY)
    assert refused.status_code == 401 and refused.json()["code"] == "api_key_revoked"
    assert get(identity_gw, "/v1/tools", ALICE).status_code == 200
    listed = toolgate(identity_gw, "keys", "list").stdout
    assert re.search(r"alice-2\s+alice\s+never\s+revoked", listed), listed
    assert re.search(r"alice-old\s+alice\s+2020-01-01.*expired", listed), listed
    assert toolgate(identity_gw, "keys", "unrevoke", "alice-2").returncode == 0
    assert get(identity_gw, "/v1/tools", SECOND_KEY).status_code == 200


def test_revoking_an_id_that_is_not_configured_is_refused(identity_gw: IdentityGateway) -> None:
    typo = toolgate(identity_gw, "keys", "revoke", "alice-22")
    assert typo.returncode != 0
    assert "no configured key has the id 'alice-22'" in typo.stderr
    assert "Traceback" not in typo.stderr
    assert "alice-22" not in toolgate(identity_gw, "keys", "list").stdout


# --- JWT bearer tokens ----------------------------------------------------------------------


def test_a_token_of_the_provider_authenticates_at_the_rest_door(
    identity_gw: IdentityGateway,
) -> None:
    token = identity_gw.issuer.token(realm_access={"roles": ["toolgate-writers"]})
    assert get(identity_gw, "/v1/tools", token).status_code == 200
    other = identity_gw.issuer.token(aud="https://elsewhere.example/mcp")
    refused = get(identity_gw, "/v1/tools", other)
    assert refused.status_code == 401 and refused.json()["code"] == "invalid_token"
    assert "not for this resource" in refused.json()["detail"]


def test_the_tokens_roles_reach_the_policy_input_and_the_rego_decides(
    identity_gw: IdentityGateway,
) -> None:
    writer = identity_gw.issuer.token(realm_access={"roles": ["toolgate-writers"]})
    done = write(identity_gw, writer, "notes/by-token.txt")
    assert done["result"]["outcome"] == "succeeded", done
    recorded = decided_input(identity_gw, writer, done["id"])
    assert recorded["actor"]["user_id"] == "oidc:dave"
    assert recorded["actor"]["credential"] == {"method": "jwt", "roles": ["agent"]}
    assert recorded["actor"]["roles"] == ["agent"]
    # the same person with a contractor role: the Rego rule keyed on that role refuses
    contractor = identity_gw.issuer.token(
        sub="erin", realm_access={"roles": ["toolgate-writers", "toolgate-contractors"]}
    )
    denied = write(identity_gw, contractor, "notes/by-contractor.txt")
    error = denied["result"]["error"]
    assert denied["result"]["outcome"] == "failed" and error["phase"] == "policy"
    assert "contractors may not run fs.write_file (rule: identity_rules)" in error["message"]
    # no role at all: unknown to the policy data, so denied
    nobody = write(identity_gw, identity_gw.issuer.token(sub="frank"), "notes/x.txt")
    assert "actor 'oidc:frank' is unknown" in nobody["result"]["error"]["message"]


def test_a_key_the_provider_rotates_in_is_fetched(identity_gw: IdentityGateway) -> None:
    assert get(identity_gw, "/v1/tools", identity_gw.issuer.token()).status_code == 200
    before = identity_gw.jwks.hits
    identity_gw.issuer.add_key("k-rotated", "EC")
    token = identity_gw.issuer.token("k-rotated")
    assert get(identity_gw, "/v1/tools", token).status_code == 200
    assert identity_gw.jwks.hits > before


# --- /mcp as an OAuth protected resource ----------------------------------------------------


def test_the_resource_metadata_is_served_at_the_well_known_paths(
    identity_gw: IdentityGateway,
) -> None:
    for path in (WELL_KNOWN + "/mcp", WELL_KNOWN):
        response = get(identity_gw, path)
        assert response.status_code == 200, path
        document = response.json()
        assert document["resource"] == RESOURCE
        assert document["authorization_servers"] == [identity_gw.issuer.claims()["iss"]]
        assert document["bearer_methods_supported"] == ["header"]
        assert document["scopes_supported"] == ["toolgate:call"]
    assert get(identity_gw, WELL_KNOWN + "/elsewhere").status_code == 404


def test_mcp_401s_point_at_the_metadata_and_refuse_a_token_for_another_resource(
    identity_gw: IdentityGateway,
) -> None:
    metadata = f'resource_metadata="https://toolgate.example.test{WELL_KNOWN}/mcp"'
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    bare = httpx.post(identity_gw.url + "/mcp", json=body, timeout=10)
    assert bare.status_code == 401
    assert metadata in bare.headers["www-authenticate"]
    assert "error=" not in bare.headers["www-authenticate"]
    token = identity_gw.issuer.token(aud="https://other.example/mcp")
    headers = {"Authorization": f"Bearer {token}"}
    refused = httpx.post(identity_gw.url + "/mcp", json=body, headers=headers, timeout=10)
    assert refused.status_code == 401 and refused.json()["code"] == "invalid_token"
    challenge = refused.headers["www-authenticate"]
    assert metadata in challenge and 'error="invalid_token"' in challenge


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
def test_an_mcp_client_with_a_token_lists_what_its_roles_allow(
    identity_gw: IdentityGateway, era: str
) -> None:
    writer = identity_gw.issuer.token(realm_access={"roles": ["toolgate-writers"]})
    plain = identity_gw.issuer.token(sub="frank")

    async def names(credential: str) -> set[str]:
        async with connect(identity_gw.url, era, key=credential) as client:
            return {t.name for t in (await client.list_tools()).tools}

    assert "fs.write_file" in anyio.run(names, writer)
    assert "fs.write_file" not in anyio.run(names, plain)


# --- the approvals page ---------------------------------------------------------------------


def signin(client: httpx.Client, credential: str) -> httpx.Response:
    client.cookies.clear()
    form = client.get("/ui/signin")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert token is not None
    return client.post(
        "/ui/signin", data={"csrf": token.group(1), "api_key": credential}, follow_redirects=False
    )


def test_the_page_takes_the_same_credentials(identity_gw: IdentityGateway) -> None:
    with httpx.Client(base_url=identity_gw.url, timeout=10) as client:
        assert signin(client, BOB).status_code == 303
        assert client.get("/ui/executions").status_code == 200
        expired = signin(client, OLD_KEY)
        assert expired.status_code == 401 and "has expired" in expired.text
        assert signin(client, identity_gw.issuer.token(sub="bob")).status_code == 303
        assert client.get("/ui/executions").status_code == 200
        forged = signin(client, identity_gw.issuer.token(iss="https://evil.example"))
        assert forged.status_code == 401 and "not issued by" in forged.text
        assert client.get("/ui/executions", follow_redirects=False).status_code == 303


def test_revoking_a_key_ends_the_page_sessions_opened_with_it(
    identity_gw: IdentityGateway,
) -> None:
    with httpx.Client(base_url=identity_gw.url, timeout=10) as client:
        assert signin(client, SECOND_KEY).status_code == 303
        assert client.get("/ui/executions").status_code == 200
        assert toolgate(identity_gw, "keys", "revoke", "alice-2").returncode == 0
        try:
            after = client.get("/ui/executions", follow_redirects=False)
            assert after.status_code == 303 and "/ui/signin" in after.headers["location"]
        finally:
            assert toolgate(identity_gw, "keys", "unrevoke", "alice-2").returncode == 0
