"""JWT bearer tokens checked against a JWKS served over real HTTP (gateway/http/oidc.py,
gateway/http/jwks.py): every way a token can be wrong is refused, with its reason."""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.errors import ConfigError
from gateway.http.jwks import JwksUnavailable, KeySet
from gateway.http.oidc import InvalidToken, TokenVerifier
from gateway.settings import JwtSettings, load_settings
from tests.http.helpers import ISSUER, RESOURCE, Issuer, JwksServer, jwt_section, unsigned

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def verifier(server: JwksServer, clock: Clock | None = None, **changes: Any) -> TokenVerifier:
    settings = JwtSettings.model_validate(jwt_section(server.url, **changes))
    keys = KeySet(
        url=settings.jwks_url,
        max_age=settings.jwks_max_age,
        min_refetch=settings.jwks_min_refetch,
        timeout=settings.jwks_timeout,
        clock=clock or Clock(),
    )
    return TokenVerifier(settings, keys)


async def fetch_fails(check: TokenVerifier, token: str, caplog: pytest.LogCaptureFixture) -> str:
    """The log of a fetch that failed with no keys held: the token is 503, retryable."""
    with (
        caplog.at_level(logging.WARNING, logger="toolgate.auth"),
        pytest.raises(JwksUnavailable) as caught,
    ):
        await check.verify(token)
    assert caught.value.http_status == 503 and caught.value.retryable
    return caplog.text


async def until(condition: Callable[[], bool], limit: float = 20.0) -> None:
    """Wait for ``condition`` (a server thread's event), failing after ``limit`` seconds."""
    with anyio.fail_after(limit):
        while not condition():
            await anyio.sleep(0.01)


async def refused(check: TokenVerifier, token: str) -> str:
    with pytest.raises(InvalidToken) as caught:
        await check.verify(token)
    assert caught.value.http_status == 401 and caught.value.code == "invalid_token"
    return caught.value.message


async def test_a_valid_token_gives_its_principal_and_mapped_roles(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    check = verifier(jwks_server)
    roles = {"roles": ["toolgate-writers", "unlisted", "toolgate-contractors"]}
    claims = await check.verify(issuer.token(realm_access=roles))
    assert claims["sub"] == "dave"
    assert check.principal(claims) == "oidc:dave"
    assert check.roles(claims) == ("agent", "contractor")  # "unlisted" is dropped


async def test_unmapped_roles_pass_only_when_configured(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    check = verifier(jwks_server, keep_unmapped_roles=True, roles_claim="scope", role_map={})
    claims = await check.verify(issuer.token(scope="read write"))
    assert check.roles(claims) == ("read", "write")


async def test_a_forged_signature_is_refused(issuer: Issuer, jwks_server: JwksServer) -> None:
    check = verifier(jwks_server)
    other = Issuer()
    other.add_key("k1")  # the same key id, another key
    assert "signature" in await refused(check, other.token())
    head, body, _ = issuer.token().split(".")
    tampered = issuer.token(sub="mallory").split(".")[1]
    assert "signature" in await refused(check, f"{head}.{tampered}.{_}")
    assert body != tampered


async def test_wrong_issuer_and_audience_are_refused(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    check = verifier(jwks_server)
    assert ISSUER in await refused(check, issuer.token(iss="https://evil.example"))
    message = await refused(check, issuer.token(aud="https://other.example/mcp"))
    assert "not for this resource" in message and RESOURCE in message
    assert "aud" in await refused(check, issuer.token(aud=None))


async def test_expired_and_not_yet_valid_tokens_are_refused(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    check = verifier(jwks_server, leeway=30)
    now = int(time.time())
    assert "expired" in await refused(check, issuer.token(exp=now - 120))
    assert "not valid yet" in await refused(check, issuer.token(nbf=now + 120))
    assert "'exp'" in await refused(check, issuer.token(exp=None))
    await check.verify(issuer.token(exp=now - 5))  # within the leeway


async def test_alg_none_is_refused(issuer: Issuer, jwks_server: JwksServer) -> None:
    check = verifier(jwks_server)
    token = unsigned({"alg": "none", "kid": "k1", "typ": "JWT"}, issuer.claims())
    assert "algorithm 'none' is not accepted" in await refused(check, token)


async def test_hs256_signed_with_the_public_key_is_refused(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    check = verifier(jwks_server)
    token = unsigned({"alg": "HS256", "kid": "k1"}, issuer.claims(), issuer.public_pem("k1"))
    assert "algorithm 'HS256' is not accepted" in await refused(check, token)


async def test_an_algorithm_that_does_not_fit_the_key_is_refused(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    issuer.add_key("e1", "EC")
    check = verifier(jwks_server, algorithms=["RS256", "ES256", "PS256"])
    token = issuer.token("e1")  # ES256 on its own key: fine
    await check.verify(token)
    forged = unsigned({"alg": "ES256", "kid": "k1"}, issuer.claims(), b"x")
    assert "does not fit its key" in await refused(check, forged)
    # an RSA key declared RS256 in its JWK does not verify PS256
    assert "does not fit its key" in await refused(check, issuer.token("k1", alg="PS256"))


async def test_an_unknown_key_id_and_a_token_without_one_are_refused(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    check = verifier(jwks_server)
    stranger = Issuer()
    stranger.add_key("nobody")
    assert "not one of the provider's keys" in await refused(check, stranger.token("nobody"))
    token = unsigned({"alg": "RS256"}, issuer.claims(), None)
    assert "names no key" in await refused(check, token)
    assert "not a JWT" in await refused(check, "ey.not-base64.x")


async def test_a_new_key_is_fetched_and_a_flood_of_unknown_ids_fetches_once_per_interval(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    clock = Clock()
    check = verifier(jwks_server, clock, jwks_min_refetch=30, jwks_max_age=600)
    await check.verify(issuer.token())
    assert jwks_server.hits == 1
    stranger = Issuer()
    stranger.add_key("made-up")
    await refused(check, stranger.token("made-up"))
    assert jwks_server.hits == 1  # just fetched: an unknown id waits for the interval
    clock.now += 31
    for _ in range(50):
        await refused(check, stranger.token("made-up"))
    assert jwks_server.hits == 2  # one fetch for the first unknown id, none after it
    issuer.add_key("k2")  # the provider rotates: a new key appears
    assert "not one of" in await refused(check, issuer.token("k2"))  # within the interval
    clock.now += 31
    await check.verify(issuer.token("k2"))
    assert jwks_server.hits == 3
    await check.verify(issuer.token("k1"))  # the old key still verifies
    assert jwks_server.hits == 3


async def test_a_stale_set_is_fetched_again_and_an_outage_keeps_the_keys_held(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    clock = Clock()
    check = verifier(jwks_server, clock, jwks_max_age=60, jwks_min_refetch=10)
    await check.verify(issuer.token())
    clock.now += 61
    jwks_server.failing = True
    await check.verify(issuer.token())  # fetched again, failed, the held key serves
    assert jwks_server.hits == 2
    del issuer.private["k1"], issuer.algs["k1"]  # the provider drops the key
    issuer.add_key("k3")
    jwks_server.failing = False
    clock.now += 11
    assert "not one of" in await refused(check, _signed_by_dropped(check))
    assert jwks_server.hits == 3


def _signed_by_dropped(check: TokenVerifier) -> str:
    """A token naming k1, which the provider no longer publishes (stale set refetched)."""
    other = Issuer()
    other.add_key("k1")
    return other.token()


async def test_an_unreachable_provider_with_no_keys_held_is_503(issuer: Issuer) -> None:
    server = JwksServer(issuer)
    url = server.url
    server.httpd.server_close()  # nothing listens there any more
    settings = JwtSettings.model_validate(jwt_section(url))
    check = TokenVerifier(settings, KeySet(url=url, timeout=1))
    with pytest.raises(JwksUnavailable) as caught:
        await check.verify(issuer.token())
    assert caught.value.http_status == 503 and caught.value.retryable


async def test_the_key_set_is_never_fetched_from_a_cloud_metadata_address(
    issuer: Issuer, caplog: pytest.LogCaptureFixture
) -> None:
    """The fetch goes through the server's one HTTP client and its egress check: the URL is
    the operator's, so any network is allowed, but not the metadata endpoints."""
    url = "http://169.254.169.254/latest/keys"
    check = TokenVerifier(JwtSettings.model_validate(jwt_section(url)), KeySet(url=url))
    with pytest.raises(JwksUnavailable):
        await check.verify(issuer.token())
    assert "cloud metadata" in caplog.text


async def test_a_dripping_key_server_costs_one_bounded_fetch_and_held_keys_keep_serving(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    """jwt.jwks_timeout bounds the whole fetch, not each read; while a fetch is in flight a
    token whose key is held is answered at once, even when the set is stale (issue 28.2)."""
    clock = Clock()
    check = verifier(jwks_server, clock, jwks_max_age=60, jwks_min_refetch=10, jwks_timeout="1s")
    await check.verify(issuer.token())
    jwks_server.drip = 0.3  # 20 bytes: 6 s to send the whole answer
    clock.now += 61  # the set is stale and a fetch is due
    stranger = Issuer()
    stranger.add_key("made-up")
    outcome: dict[str, str] = {}

    async def unknown_key() -> None:
        outcome["unknown"] = await refused(check, stranger.token("made-up"))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(unknown_key)  # fetches the set, from the dripping server
        await until(jwks_server.began.is_set)
        clock.now += 11  # a fetch would be due again: the one in flight is enough
        claims = await check.verify(issuer.token())
        assert claims["sub"] == "dave"
        assert "unknown" not in outcome  # answered while the fetch was still in flight
    assert "not one of" in outcome["unknown"]  # a failed fetch; the held keys are kept
    await until(jwks_server.cut.is_set)  # the fetch gave up before the answer was sent
    assert not jwks_server.sent_all.is_set()
    assert jwks_server.hits == 2
    jwks_server.drip = None
    issuer.add_key("k2")
    clock.now += 11
    await check.verify(issuer.token("k2"))  # nothing left holding the set: fetched again
    assert jwks_server.hits == 3


async def test_a_dripping_key_server_with_no_keys_held_is_503_for_each_waiting_request(
    issuer: Issuer, jwks_server: JwksServer
) -> None:
    """Requests that need a key wait for the one fetch in flight and take its outcome: they
    do not fetch again when it fails, even with a fetch due again (jwks_min_refetch)."""
    clock = Clock()
    check = verifier(jwks_server, clock, jwks_timeout="500ms", jwks_min_refetch="10ms")
    jwks_server.drip = 0.3
    failures: list[JwksUnavailable] = []

    async def login() -> None:
        with pytest.raises(JwksUnavailable) as caught:
            await check.verify(issuer.token())
        failures.append(caught.value)

    async with anyio.create_task_group() as tasks:
        for _ in range(3):
            tasks.start_soon(login)
        await until(jwks_server.began.is_set)
        clock.now += 1  # a fetch is due again by the time the one in flight fails
    assert len(failures) == 3 and all(f.http_status == 503 for f in failures)
    assert jwks_server.hits == 1  # the requests waited for one fetch
    await until(jwks_server.cut.is_set)
    assert not jwks_server.sent_all.is_set()


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "streamed"])
async def test_an_oversized_key_set_is_refused_without_being_read(
    issuer: Issuer, jwks_server: JwksServer, declared: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The size limit stops the read (or refuses a Content-Length over it) instead of
    reading the whole answer first (issue 28.3)."""
    jwks_server.oversize = 16 * 1024 * 1024
    jwks_server.declare_length = declared
    check = verifier(jwks_server)
    log = await fetch_fails(check, issuer.token(), caplog)
    assert "larger than 524288 bytes" in log
    await until(lambda: jwks_server.cut.is_set() or jwks_server.sent_all.is_set())
    assert jwks_server.cut.is_set() and not jwks_server.sent_all.is_set()


async def test_a_compressed_key_set_is_refused_rather_than_inflated(
    issuer: Issuer, jwks_server: JwksServer, caplog: pytest.LogCaptureFixture
) -> None:
    """16 MiB gzipped to 16 KiB: inflating it would pass the limit in memory before any
    check, so the fetch asks for an unencoded answer and refuses an encoded one."""
    jwks_server.oversize = 16 * 1024 * 1024
    jwks_server.gzip = True
    check = verifier(jwks_server)
    log = await fetch_fails(check, issuer.token(), caplog)
    assert jwks_server.accept_encoding == "identity"
    assert "the JWKS came encoded (gzip), not as asked" in log


async def test_a_key_server_that_redirects_is_not_followed(
    issuer: Issuer, jwks_server: JwksServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The keys come only from jwt.jwks_url: a 3xx is a failed fetch, never followed to
    another origin (issue 28.1)."""
    with JwksServer(issuer).running() as elsewhere:
        jwks_server.redirect_to = elsewhere.url
        check = verifier(jwks_server)
        log = await fetch_fails(check, issuer.token(), caplog)
        assert elsewhere.hits == 0
    assert "answered 302, a redirect, which is not followed" in log
    assert jwks_server.hits == 1


async def test_a_jwks_file_is_read_and_symmetric_keys_in_it_are_ignored(
    issuer: Issuer, tmp_path: Path
) -> None:
    document = issuer.jwks()
    document["keys"].append({"kty": "oct", "kid": "shared", "k": "c2VjcmV0"})
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(document))
    settings = JwtSettings.model_validate(
        {"issuer": ISSUER, "resource": RESOURCE, "jwks_file": str(path)}
    )
    keys = KeySet(file=path)
    check = TokenVerifier(settings, keys)
    await check.verify(issuer.token())
    assert await keys.key("shared") is None


@pytest.mark.parametrize(
    ("changes", "fault"),
    [
        ({"algorithms": ["none"]}, "jwt.algorithms.0"),
        ({"algorithms": ["HS256"]}, "jwt.algorithms.0"),
        ({"jwks_url": None}, "exactly one of jwks_file and jwks_url"),
        ({"jwks_file": "jwks.json"}, "exactly one of jwks_file and jwks_url"),
        ({"resource": "toolgate/mcp"}, "jwt.resource"),
        ({"jwks_url": "file:///etc/passwd"}, "http(s) URL"),
        ({"leeway": "1h"}, "jwt.leeway"),
    ],
)
def test_a_bad_jwt_section_is_refused_at_load(
    tmp_path: Path, changes: dict[str, Any], fault: str
) -> None:
    section = {**jwt_section("http://127.0.0.1:1/j"), **changes}
    section = {k: v for k, v in section.items() if v is not None}
    config = tmp_path / "toolgate.yaml"
    config.write_text(json.dumps({"jwt": section}))
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    assert fault in str(caught.value)


@pytest.mark.parametrize(
    ("principals", "fault"),
    [
        ([{"id": "a"}], "principal a has no key"),
        (
            [
                {
                    "id": "a",
                    "keys": [{"id": "k", "sha256": "1" * 64}, {"id": "k", "sha256": "2" * 64}],
                }
            ],
            "two keys have the id 'k'",
        ),
        (
            [
                {"id": "a", "key_sha256": "1" * 64},
                {"id": "b", "keys": [{"id": "b1", "sha256": "1" * 64}]},
            ],
            "two keys share one hash (b, key b1)",
        ),
        ([{"id": "a", "keys": [{"id": "a 1", "sha256": "1" * 64}]}], "principals.0.keys.0.id"),
        ([{"id": "a", "keys": [{"id": "a1", "sha256": "1" * 64, "expires": "soon"}]}], "expires"),
    ],
)
def test_bad_principals_are_refused_at_load(
    tmp_path: Path, principals: list[dict[str, Any]], fault: str
) -> None:
    config = tmp_path / "toolgate.yaml"
    config.write_text(json.dumps({"principals": principals}))
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    assert fault in str(caught.value)


def test_a_key_date_is_midnight_utc_and_the_short_form_is_a_key_named_as_its_principal(
    tmp_path: Path,
) -> None:
    config = tmp_path / "toolgate.yaml"
    config.write_text(
        "principals:\n"
        f"  - id: a\n    key_sha256: '{'1' * 64}'\n"
        f"    keys: [{{id: a-2, sha256: '{'2' * 64}', expires: 2027-03-01}}]\n"
    )
    (principal,) = load_settings(config, env={}).principals
    short, second = principal.all_keys
    assert (short.id, short.expires_ms) == ("a", None)
    midnight = datetime.datetime(2027, 3, 1, tzinfo=datetime.UTC)
    assert second.expires_ms == int(midnight.timestamp() * 1000)
