"""OPA bundles of the policy sources: build, sign, read back and verify.

A bundle (https://www.openpolicyagent.org/docs/management-bundles) is a gzipped tar of:

- ``toolgate/<file>.rego``: every policy module of ``rego/`` (not the ``*_test.rego``
  modules: their package lies outside the bundle's roots);
- ``toolgate/data.json``: the policy data of ``policies/``, which OPA mounts at
  ``data.toolgate`` (a data file's directory is its place in ``data``);
- ``.manifest``: ``revision`` (derived from the content: the same sources give the same
  revision, byte for byte the same bundle), ``roots`` (``toolgate`` and every other package
  of the modules) and ``rego_version: 1``;
- optionally ``.signatures.json``: ``{"signatures": [JWT]}``, the JWT's claims listing every
  other file as ``{name, hash, algorithm: "SHA-256"}`` (and ``keyid``/``scope`` when given),
  signed HS256 (a shared secret) or RS256 (a PEM private key; needs ``cryptography``).

JSON files are written in the canonical form OPA hashes them in (sorted keys, no spaces, UTF-8
as is), so the hash of their bytes is the hash OPA computes when it verifies. The tar entries
have fixed times and owners and the gzip header no time, so the bundle's bytes, and with them
its ETag, depend on the sources only.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import io
import json
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway import b64url
from gateway.errors import ConfigError
from gateway.policy.loader import DATA_ROOT, PolicySources, engine_call, new_engine, ref_path

MANIFEST = ".manifest"
SIGNATURES = ".signatures.json"
DATA_FILE = f"{DATA_ROOT}/data.json"
ALGORITHMS = ("HS256", "RS256")


@dataclass(frozen=True)
class Bundle:
    """A built bundle: its bytes (a .tar.gz) and what its manifest says."""

    data: bytes
    revision: str
    roots: tuple[str, ...]
    files: Mapping[str, bytes]
    """Every file by its name in the tar (``.signatures.json`` included when signed)."""

    @property
    def etag(self) -> str:
        return f'"{self.revision}"'


def canonical_json(value: Any) -> bytes:
    """JSON the way OPA hashes a data file: sorted keys, no whitespace, UTF-8 unescaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # Go's encoder escapes these two (JavaScript line terminators); so must the file.
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode("utf-8")


def content_files(sources: PolicySources) -> dict[str, bytes]:
    """The bundle's policy files (modules and data), without manifest or signatures."""
    files = {f"{DATA_ROOT}/{Path(name).name}": text.encode() for name, text in sources.modules}
    files[DATA_FILE] = canonical_json(sources.data)
    return files


def revision_of(files: Mapping[str, bytes]) -> str:
    """A digest of the files' names and contents: the bundle's revision."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode("utf-8") + b"\0")
        digest.update(hashlib.sha256(files[name]).digest())
    return digest.hexdigest()[:32]


def source_revision(sources: PolicySources) -> str:
    """The revision a bundle of these sources carries (what OPA reports once it runs it)."""
    return revision_of(content_files(sources))


def roots_of(sources: PolicySources) -> tuple[str, ...]:
    """``toolgate`` and the package of every module that is not below it."""
    packages = {DATA_ROOT}
    engine = new_engine(sources.modules, "{}")
    for module in json.loads(engine_call(engine.get_ast_as_json)):
        packages.add("/".join(ref_path(module["ast"]["package"]["refr"])))
    return tuple(sorted(p for p in packages if not any(p.startswith(q + "/") for q in packages)))


def build(
    sources: PolicySources,
    *,
    key: bytes | None = None,
    algorithm: str = "HS256",
    keyid: str | None = None,
    scope: str | None = None,
) -> Bundle:
    """The bundle of ``sources``; signed when a ``key`` is given (see the module docstring)."""
    files = content_files(sources)
    revision = revision_of(files)
    roots = roots_of(sources)
    manifest = {"revision": revision, "roots": list(roots), "rego_version": 1}
    files[MANIFEST] = canonical_json(manifest)
    if key is not None:
        files[SIGNATURES] = canonical_json(
            {"signatures": [sign(files, key, algorithm, keyid, scope)]}
        )
    return Bundle(_tar_gz(files), revision, roots, files)


def served(backend: object, settings: Any) -> Bundle:
    """The bundle ``GET /v1/policy/bundle`` serves: of the sources the gateway's policy backend
    runs (loaded from ``rego_dir``/``policies_dir`` when the backend does not tell)."""
    sources = getattr(backend, "sources", None)
    if not isinstance(sources, PolicySources):
        from gateway.policy.loader import load_policy_sources

        sources = load_policy_sources(
            settings.path(settings.rego_dir), settings.path(settings.policies_dir)
        )
    return build(sources)


def etag_matches(header: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (or ``*``)."""
    if not header:
        return False
    tags = {t.strip().removeprefix("W/") for t in header.split(",")}
    return etag in tags or "*" in tags


def _tar_gz(files: Mapping[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(files[name]), 0, 0o644
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(files[name]))
    return gzip.compress(raw.getvalue(), mtime=0)


def read(data: bytes) -> dict[str, bytes]:
    """The files of a bundle by name; ConfigError if it is not a gzipped tar."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            out: dict[str, bytes] = {}
            for member in tar.getmembers():
                if member.isfile():
                    handle = tar.extractfile(member)
                    assert handle is not None
                    out[member.name.lstrip("/")] = handle.read()
            return out
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ConfigError(f"not a bundle (a gzipped tar): {exc}") from exc


def sources_of(files: Mapping[str, bytes]) -> PolicySources:
    """The modules and the ``data.toolgate`` document of a bundle's files (``read``)."""
    modules = tuple(
        (Path(name).name, text.decode("utf-8"))
        for name, text in sorted(files.items())
        if name.endswith(".rego")
    )
    data: dict[str, Any] = {}
    for name, text in sorted(files.items()):
        if Path(name).name != "data.json":
            continue
        node = data
        for part in Path(name).parent.parts:
            node = node.setdefault(part, {})
        node.update(json.loads(text))
    return PolicySources(modules, (), data.get(DATA_ROOT, {}))


# --- signatures -----------------------------------------------------------------------------


def file_claims(files: Mapping[str, bytes]) -> list[dict[str, str]]:
    """``files`` of the JWT: every file but the signatures, by name."""
    return [
        {"name": name, "hash": hashlib.sha256(files[name]).hexdigest(), "algorithm": "SHA-256"}
        for name in sorted(files)
        if name != SIGNATURES
    ]


def sign(
    files: Mapping[str, bytes],
    key: bytes,
    algorithm: str = "HS256",
    keyid: str | None = None,
    scope: str | None = None,
) -> str:
    """The JWT of ``.signatures.json`` over ``files``."""
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"bundle signing: algorithm {algorithm!r} is not one of {ALGORITHMS}")
    header = {"alg": algorithm, "typ": "JWT", **({"kid": keyid} if keyid else {})}
    claims: dict[str, Any] = {"files": file_claims(files)}
    if keyid:
        claims["keyid"] = keyid
    if scope:
        claims["scope"] = scope
    signing_input = (
        f"{b64url.encode(canonical_json(header))}.{b64url.encode(canonical_json(claims))}"
    )
    return f"{signing_input}.{b64url.encode(_signature(signing_input.encode(), key, algorithm))}"


def _signature(message: bytes, key: bytes, algorithm: str) -> bytes:
    if algorithm == "HS256":
        return hmac.new(key, message, hashlib.sha256).digest()
    hashes, padding, serialization = _crypto()
    try:
        private = serialization.load_pem_private_key(key, password=None)
        return bytes(private.sign(message, padding.PKCS1v15(), hashes.SHA256()))
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"bundle signing: not an RSA private key in PEM form: {exc}") from exc


def verify(data: bytes, key: bytes, algorithm: str = "HS256") -> dict[str, Any]:
    """Check a signed bundle as OPA does; its JWT claims, or ConfigError saying why not.

    ``key``: the HS256 secret, or the RS256 public key (PEM).
    """
    files = read(data)
    if SIGNATURES not in files:
        raise ConfigError("bundle verification: the bundle has no .signatures.json")
    try:
        (token,) = json.loads(files[SIGNATURES])["signatures"]
        head, body, signature = token.split(".")
        header, claims = json.loads(b64url.decode(head)), json.loads(b64url.decode(body))
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"bundle verification: malformed .signatures.json: {exc}") from exc
    if header.get("alg") != algorithm:
        raise ConfigError(f"bundle verification: signed {header.get('alg')}, not {algorithm}")
    if not _signature_ok(f"{head}.{body}".encode(), b64url.decode(signature), key, algorithm):
        raise ConfigError("bundle verification: the signature does not match the key")
    if claims.get("files") != file_claims(files):
        raise ConfigError("bundle verification: the files do not match their signed hashes")
    return dict(claims)


def _signature_ok(message: bytes, signature: bytes, key: bytes, algorithm: str) -> bool:
    if algorithm == "HS256":
        return hmac.compare_digest(hmac.new(key, message, hashlib.sha256).digest(), signature)
    hashes, padding, serialization = _crypto()
    from cryptography.exceptions import InvalidSignature

    try:
        public = serialization.load_pem_public_key(key)
        public.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def _crypto() -> tuple[Any, Any, Any]:
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding
    except ImportError as exc:
        raise ConfigError(
            "bundle signing: RS256 needs the cryptography package (pip install 'toolgate[signing]')"
        ) from exc
    return hashes, padding, serialization
