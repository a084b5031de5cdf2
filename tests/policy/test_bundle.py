"""OPA bundles: built from the shipped sources, read back, signed and verified, and served with
an ETag at GET /v1/policy/bundle."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.errors import ConfigError
from gateway.policy import bundle
from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import PolicySources
from gateway.server.app import create_app
from gateway.settings import Settings
from tests.helpers import require_module
from tests.policy.helpers import BASE_INPUT, REPO


def test_bundle_of_the_shipped_sources(shipped: PolicySources) -> None:
    built = bundle.build(shipped)
    files = bundle.read(built.data)
    assert sorted(files) == [".manifest", "toolgate/data.json", "toolgate/toolgate.rego"]
    manifest = json.loads(files[".manifest"])
    assert manifest == {"revision": built.revision, "roots": ["toolgate"], "rego_version": 1}
    assert json.loads(files["toolgate/data.json"]) == shipped.data
    assert files["toolgate/toolgate.rego"] == (REPO / "rego/toolgate.rego").read_bytes()
    assert bundle.build(shipped).data == built.data  # the bytes depend on the content only
    changed = PolicySources(shipped.modules, (), {**shipped.data, "extra": 1})
    assert bundle.build(changed).revision != built.revision
    back = bundle.sources_of(files)  # what OPA would mount decides the same
    assert EmbeddedPolicy(back).decide_sync(BASE_INPUT) == EmbeddedPolicy(shipped).decide_sync(
        BASE_INPUT
    )


def test_hs256_signature_verifies_with_its_key_only(shipped: PolicySources) -> None:
    built = bundle.build(shipped, key=b"k" * 32, keyid="global", scope="write")
    claims = bundle.verify(built.data, b"k" * 32)
    assert claims["keyid"] == "global" and claims["scope"] == "write"
    names = [f["name"] for f in claims["files"]]
    assert names == [".manifest", "toolgate/data.json", "toolgate/toolgate.rego"]
    for entry in claims["files"]:
        assert entry["algorithm"] == "SHA-256"
        assert entry["hash"] == hashlib.sha256(built.files[entry["name"]]).hexdigest()
    with pytest.raises(ConfigError, match="does not match the key"):
        bundle.verify(built.data, b"another key")
    jwt = require_module("jwt")  # an independent JWT implementation agrees
    (token,) = json.loads(built.files[".signatures.json"])["signatures"]
    assert jwt.decode(token, b"k" * 32, algorithms=["HS256"])["files"] == claims["files"]
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(token, b"o" * 32, algorithms=["HS256"])


def test_rs256_signature_verifies_with_its_public_key_only(shipped: PolicySources) -> None:
    rsa = require_module("cryptography.hazmat.primitives.asymmetric.rsa")
    from cryptography.hazmat.primitives import serialization

    def pair() -> tuple[bytes, bytes]:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return private, public

    (private, public), (_, other) = pair(), pair()
    built = bundle.build(shipped, key=private, algorithm="RS256")
    assert bundle.verify(built.data, public, "RS256")["files"]
    with pytest.raises(ConfigError, match="does not match the key"):
        bundle.verify(built.data, other, "RS256")


def test_a_tampered_bundle_fails_verification(shipped: PolicySources) -> None:
    built = bundle.build(shipped, key=b"secret")
    files = dict(built.files)
    files["toolgate/data.json"] = bundle.canonical_json({"actors": {"mallory": {}}})
    with pytest.raises(ConfigError, match="do not match their signed hashes"):
        bundle.verify(bundle._tar_gz(files), b"secret")


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_the_bundle_route_serves_an_etag_and_304(client: TestClient, project: Path) -> None:
    auth = {"Authorization": "Bearer tg_dev_alice"}
    assert client.get("/v1/policy/bundle").status_code == 401
    first = client.get("/v1/policy/bundle", headers=auth)
    assert first.status_code == 200
    assert first.headers["content-type"] == "application/gzip"
    files = bundle.read(first.content)
    revision = json.loads(files[".manifest"])["revision"]
    assert first.headers["etag"] == f'"{revision}"'
    again = client.get(
        "/v1/policy/bundle", headers={**auth, "If-None-Match": first.headers["etag"]}
    )
    assert again.status_code == 304 and again.content == b""
    other = client.get("/v1/policy/bundle", headers={**auth, "If-None-Match": '"stale"'})
    assert other.status_code == 200 and other.content == first.content
