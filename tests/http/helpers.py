"""A stand-in identity provider for the identity tests: signing keys, tokens, and a JWKS
served over real HTTP on loopback (fixtures: conftest.py)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import hmac
import itertools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from gateway.settings import hash_key
from gateway.testing import make_project

ISSUER = "https://idp.example.test/realms/agents"
RESOURCE = "https://toolgate.example.test/mcp"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_POOL: dict[tuple[str, int], Any] = {}
_made = itertools.count()


def _fresh_key(kind: str) -> Any:
    """A key not handed out by the last 7 calls (a pool of 8: RSA keys are slow to make)."""
    slot = (kind, next(_made) % 8)
    if slot not in _POOL:
        _POOL[slot] = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if kind == "RSA"
            else ec.generate_private_key(ec.SECP256R1())
        )
    return _POOL[slot]


class Issuer:
    """Signing keys by key id, the JWKS of their public halves, and tokens."""

    def __init__(self) -> None:
        self.private: dict[str, Any] = {}
        self.algs: dict[str, str] = {}

    def add_key(self, kid: str, kind: str = "RSA") -> None:
        self.private[kid] = _fresh_key(kind)
        self.algs[kid] = "RS256" if kind == "RSA" else "ES256"

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key in self.private.items():
            alg = self.algs[kid]
            algorithm = jwt.get_algorithm_by_name(alg)
            jwk = json.loads(algorithm.to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": alg})
        return {"keys": keys}

    def public_pem(self, kid: str) -> bytes:
        return bytes(
            self.private[kid]
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def claims(self, **changes: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "aud": RESOURCE,
            "sub": "dave",
            "iat": now,
            "exp": now + 300,
            "jti": f"t-{now}",
        }
        claims.update(changes)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, kid: str = "k1", alg: str | None = None, **changes: Any) -> str:
        """A token signed with ``kid``'s key; a claim given as None is left out."""
        return jwt.encode(
            self.claims(**changes),
            self.private[kid],
            algorithm=alg or self.algs[kid],
            headers={"kid": kid},
        )


def unsigned(header: dict[str, Any], claims: dict[str, Any], secret: bytes | None = None) -> str:
    """A token built by hand: ``alg: none`` with no signature, or HMAC-SHA256 over ``secret``
    (what an attacker does with a public key as the "secret")."""
    head = b64(json.dumps(header).encode())
    body = b64(json.dumps(claims).encode())
    signing_input = f"{head}.{body}".encode()
    signature = (
        "" if secret is None else b64(hmac.new(secret, signing_input, hashlib.sha256).digest())
    )
    return f"{head}.{body}.{signature}"


class JwksServer:
    """The issuer's JWKS at ``/jwks.json`` on a loopback port, counting requests.

    It can also misbehave: answer 503 (``failing``), redirect elsewhere (``redirect_to``),
    drip its answer one byte per ``drip`` seconds, or send ``oversize`` bytes (with or without
    a ``Content-Length``; gzipped if ``gzip``). ``accept_encoding`` is what the last request
    asked for. ``began`` is set when a misbehaving body starts, ``sent_all`` when
    all of it was written, ``cut`` when the client closed the connection before that."""

    def __init__(self, issuer: Issuer) -> None:
        self.issuer = issuer
        self.hits = 0
        self.failing = False
        self.redirect_to: str | None = None
        self.drip: float | None = None
        self.oversize: int | None = None
        self.declare_length = True
        self.gzip = False
        self.accept_encoding: str | None = None
        self.began = threading.Event()
        self.sent_all = threading.Event()
        self.cut = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.hits += 1
                server.accept_encoding = self.headers.get("Accept-Encoding")
                if self.path != "/jwks.json" or server.failing:
                    self.send_response(404 if not server.failing else 503)
                    self.end_headers()
                    return
                if server.redirect_to is not None:
                    self.send_response(302)
                    self.send_header("Location", server.redirect_to)
                    self.end_headers()
                    return
                if server.drip is not None:
                    # 20 bytes of a valid (empty) JWKS, one every ``drip`` seconds
                    self._send(b'{"keys": []}'.ljust(20), 1, server.drip)
                elif server.oversize is not None:
                    body = b'{"keys": [' + b" " * server.oversize + b"]}"
                    self._send(gzip.compress(body) if server.gzip else body, 64 * 1024, 0)
                else:
                    body = json.dumps(server.issuer.jwks()).encode()
                    self._head(len(body))
                    self.wfile.write(body)

            def _head(self, length: int | None) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if length is not None:
                    self.send_header("Content-Length", str(length))
                if server.gzip:
                    self.send_header("Content-Encoding", "gzip")
                self.end_headers()

            def _send(self, body: bytes, chunk: int, pause: float) -> None:
                self._head(len(body) if server.declare_length else None)
                server.began.set()
                try:
                    for start in range(0, len(body), chunk):
                        self.wfile.write(body[start : start + chunk])
                        time.sleep(pause)
                except (BrokenPipeError, ConnectionResetError):
                    server.cut.set()
                    return
                server.sent_all.set()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/jwks.json"

    @contextmanager
    def running(self) -> Iterator[JwksServer]:
        thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()
            thread.join(5)


def jwt_section(jwks_url: str, **changes: Any) -> dict[str, Any]:
    """A ``jwt`` configuration section for the stand-in provider."""
    section: dict[str, Any] = {
        "issuer": ISSUER,
        "resource": RESOURCE,
        "jwks_url": jwks_url,
        "principal_prefix": "oidc:",
        "roles_claim": "realm_access.roles",
        "role_map": {"toolgate-writers": ["agent"], "toolgate-contractors": ["contractor"]},
        "scopes_supported": ["toolgate:call"],
    }
    section.update(changes)
    return section


SECOND_KEY = "tg_alice_second_key"
OLD_KEY = "tg_alice_expired_key"
CONTRACTOR_RULE = """package toolgate

# A rule keyed on a role of the caller's token: contractors may read, never write.
deny_reasons contains msg if {
	"contractor" in input.actor.credential.roles
	input.tool.side_effect in {"write", "external"}
	msg := sprintf("contractors may not run %v (rule: identity_rules)", [input.tool.name])
}
"""


@dataclass(frozen=True)
class IdentityGateway:
    url: str
    config: Path
    issuer: Issuer
    jwks: JwksServer


def identity_project(root: Path, database_url: str, jwks_url: str) -> Path:
    """The shipped project with alice holding three keys (one expired), the provider's
    tokens accepted, workspace demo open to the role agent, and a contractor rule."""
    config_path = make_project(root, database_url)
    config = yaml.safe_load(config_path.read_text())
    alice = next(p for p in config["principals"] if p["id"] == "alice")
    alice["keys"] = [
        {"id": "alice-2", "sha256": hash_key(SECOND_KEY)},
        {"id": "alice-old", "sha256": hash_key(OLD_KEY), "expires": "2020-01-01T00:00:00Z"},
    ]
    config["jwt"] = jwt_section(jwks_url, jwks_min_refetch="50ms")
    config_path.write_text(yaml.safe_dump(config))
    spaces = root / "policies" / "workspaces.yaml"
    data = yaml.safe_load(spaces.read_text())
    data["workspaces"]["demo"]["member_roles"] = ["agent"]
    spaces.write_text(yaml.safe_dump(data))
    (root / "rego" / "identity_rules.rego").write_text(CONTRACTOR_RULE)
    return config_path
