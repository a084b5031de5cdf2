"""Constants and helpers the tests share. Fixtures live in conftest.py; a test imports
from here, never from a conftest (tests/test_hygiene.py checks it)."""

from __future__ import annotations

import inspect
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
PG_HOST = os.environ.get("TOOLGATE_TEST_PG_HOST", "127.0.0.1")
PG_USER = os.environ.get("TOOLGATE_TEST_PG_USER", "postgres")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
FUZZ_SCALE = max(1, int(os.environ.get("TOOLGATE_FUZZ_SCALE", "1") or "1"))
"""Multiplies the examples of the fuzzers and property tests (tests/fuzz, tests/security):
1 in the suite and CI (bounded), more for a longer run (``make fuzz FUZZ_SCALE=20``)."""

GATE = """\
import os, sys, time
deadline = time.monotonic() + 50  # under proc.python's timeout (60s): a test that fails opens none
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.02)
"""
"""A ``proc.python`` script that runs until the test opens its gate (creates the file named
by its first argument, relative to the workspace): the call is in flight for as long as the
test needs, however slow this machine is."""

ALICE = "tg_dev_alice"
BOB = "tg_dev_bob"
CAROL = "tg_dev_carol"


def pg_admin(dbname: str = "postgres") -> Any:
    """An autocommit connection to a database of the PostgreSQL server, ``postgres`` unless
    told."""
    import psycopg

    return psycopg.connect(
        host=PG_HOST, user=PG_USER, dbname=dbname, connect_timeout=3, autocommit=True
    )


EMPTY_PUBLIC_SCHEMA = (
    "SET lock_timeout = '10s'; "
    "DROP SCHEMA public CASCADE; CREATE SCHEMA public AUTHORIZATION pg_database_owner; "
    "GRANT USAGE ON SCHEMA public TO PUBLIC"
)
"""The ``public`` schema made again as CREATE DATABASE makes it (PostgreSQL 15 and later);
a connection still holding a lock there is an error after 10 s, not a hang."""


class Databases:
    """The PostgreSQL databases of one test session (a pytest-xdist worker has its own): a
    test takes one no other test is using, empty. A database a test gave back has its
    connections ended and its ``public`` schema made again, and goes to the next test; all
    are dropped when the session ends. Dropping one per test was the fast tier's largest
    wait: DROP DATABASE makes the server checkpoint and waits for it, every dirty page of
    every database written out (~0.5 s a test with four workers writing)."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self.free: list[str] = []

    def take(self) -> str:
        if self.free:
            return self.free.pop()
        name = f"toolgate_test_{uuid.uuid4().hex[:12]}"
        with pg_admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.made.append(name)
        return name

    def give_back(self, name: str) -> None:
        with pg_admin() as conn:  # as DROP DATABASE ... WITH (FORCE) would
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        with pg_admin(name) as conn:
            conn.execute(EMPTY_PUBLIC_SCHEMA)
        self.free.append(name)

    def drop_all(self) -> None:
        with pg_admin() as conn:
            for name in self.made:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


REVIEWED_TOOL = """\
name: fs.write_reviewed
version: 1.0.0
description: Replace a text file once a person has read (and maybe corrected) it.
adapter: file
operation: atomic_replace
risk: high
side_effect: write
input:
  path: {type: string, required: true, empty: false}
  content: {type: string, required: true}
  create_dirs: {type: boolean, default: true}
paths: [path]
approval:
  editable: [path, content]
locks:
  - {key: "ws:{workspace.id}:file:{arguments.path}"}
verify:
  - {probe: file_sha256, path: "{arguments.path}", equals: "{sha256(arguments.content)}"}
"""
"""A high-risk write (so the shipped policy asks for approval) whose path and content an
approver may edit (``approval.editable``): for the edit-before-approve tests."""


# --- docker-compose.yml (tests/test_deploy.py, tests/integration/test_proxy.py) -----------


def unknown_call(workspace: Path, run_id: str, call_id: str, within_ms: int) -> dict[str, Any]:
    """The body of alice's call whose outcome will be ``unknown``: ``proc.python`` runs a
    script that writes, then runs past the call's deadline (``within_ms`` from now) and is
    killed, and no reconcile probe can tell whether the write happened (docs/failures.md)."""
    (workspace / "hang.py").write_text("open('hung.txt', 'a').write('x')\nwhile True: pass\n")
    return {
        "run_id": run_id,
        "call_id": call_id,
        "tool": {"name": "proc.python"},
        "arguments": {"script": "hang.py"},
        "actor": {"user_id": "alice", "agent_id": "coder"},
        "workspace": {"id": "demo"},
        "deadline": int(time.time() * 1000) + within_ms,
    }


COMPOSE_GATEWAYS = ("gateway-1", "gateway-2")
"""The gateway replicas of docker-compose.yml."""


def env_default(value: str) -> str:
    """``${NAME:-default}`` → default (what ``docker compose up`` uses when NAME is unset)."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def gateway_volumes(compose: dict[str, Any]) -> dict[str, str]:
    """The named volumes of the compose file mounted on its gateway replicas: each volume's
    mount point, which must be the same on every replica (what they share)."""
    named = compose.get("volumes") or {}
    found = [
        {
            volume.split(":")[0]: volume.split(":")[1]
            for volume in compose["services"][name].get("volumes", [])
            if volume.split(":")[0] in named
        }
        for name in COMPOSE_GATEWAYS
    ]
    assert all(mounts == found[0] for mounts in found), found
    return found[0]


# --- waiting for an event ---------------------------------------------------------------------


@contextmanager
def disposed_engines() -> Iterator[list[str]]:
    """The databases (``url.database``) of the SQLAlchemy engines disposed meanwhile, in
    order: how a test sees the database adapter close its connections' pools (SQLAlchemy's
    public ``engine_disposed`` event)."""
    import sqlalchemy as sa

    disposed: list[str] = []

    def record(engine: Any) -> None:
        disposed.append(str(engine.url.database))

    sa.event.listen(sa.engine.Engine, "engine_disposed", record)
    try:
        yield disposed
    finally:
        sa.event.remove(sa.engine.Engine, "engine_disposed", record)


def wait_until(probe: Callable[[], T], what: str, limit: float = 60.0, every: float = 0.05) -> T:
    """Asks ``probe`` again and again until it answers something truthy (a status reached, a
    row or an event written, a log line) and returns that: how a test waits for what it
    waits for, instead of sleeping and hoping it happened. ``limit`` only bounds a failure,
    which names ``what`` and the last answer."""
    deadline = time.monotonic() + limit
    while not (seen := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {limit} s for {what}; the last answer was {seen!r}")
        time.sleep(every)
    return seen


async def until(
    probe: Callable[[], Awaitable[T] | T], what: str, limit: float = 60.0, every: float = 0.05
) -> T:
    """:func:`wait_until` for an async test: ``probe`` may be a coroutine function, and the
    pause lets the event loop run."""
    import anyio

    async def ask() -> T:
        seen = probe()
        return await seen if inspect.isawaitable(seen) else seen  # type: ignore[return-value]

    deadline = time.monotonic() + limit
    while not (seen := await ask()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {limit} s for {what}; the last answer was {seen!r}")
        await anyio.sleep(every)
    return seen


# --- the test tiers (README.md, "Tests"; docs/architecture.md, "Tests and benchmarks") -------

PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.exec", "os.fork", "os.forkpty"}
    | {"os.system", "pty.spawn"}
)
"""The audit events (docs.python.org/3/library/audit_events.html) of starting a process: every
way Python has, asyncio's subprocesses and multiprocessing included."""

STARTS_PROCESSES = "_toolgate_starts_processes"
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def starts_processes(fixture: F) -> F:
    """Tags a fixture function that starts a process (a gateway, a browser, the CLI...):
    tests/conftest.py marks ``slow`` every test that uses it, directly or through another
    fixture, so ``make test-fast`` (``-m "not slow"``) leaves them out. Put it under
    ``@pytest.fixture``."""
    setattr(fixture, STARTS_PROCESSES, True)
    return fixture


OWN_CHILDREN = ("gateway.adapters.process",)
"""Where the children of the code under test come from, which the fast tier allows: the
process adapter runs a tool's command (bounded by its deadline and limits) and probes the
kernel for its isolation once per gateway (``sandbox.probe``, a few milliseconds, at every
in-process gateway's start). They are the work the test exercises, not a process it runs
beside the gateway (a gateway, a browser, the CLI, nginx, OPA, the MCP Inspector)."""


class ProcessWatch:
    """The processes started while one test runs, seen through an audit hook
    (``sys.addaudithook``), so a process started anywhere (the test, a helper, a thread, the
    gateway in-process) is seen, however it is started; but those that ``OWN_CHILDREN``
    start."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if event in PROCESS_EVENTS and not started_by(OWN_CHILDREN):
            self.started.append(f"{event} {describe_command(event, args)}")

    def take(self) -> list[str]:
        """What was started since the last take, and forget it."""
        started, self.started = self.started, []
        return started


def started_by(modules: tuple[str, ...]) -> bool:
    """Whether a module of ``modules`` (or of their packages) is on the calling stack: an
    asyncio or anyio subprocess is started within the awaiting coroutine's frames."""
    frame = inspect.currentframe()
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if any(name == m or name.startswith(m + ".") for m in modules):
            return True
        frame = frame.f_back
    return False


def describe_command(event: str, args: tuple[Any, ...]) -> str:
    """The command of a process-starting audit event, without its environment (which may
    hold secrets): ``subprocess.Popen``, ``os.posix_spawn`` and ``os.exec`` carry
    (executable, argv, ...), ``os.system`` the command line, ``os.fork`` nothing."""
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn") and len(args) > 1:
        argv = args[1]
        words = [argv] if isinstance(argv, str | bytes) else list(argv or [])
        return " ".join(_text(w) for w in words[:4])[:120]
    if event in ("os.system", "pty.spawn") and args:
        return _text(args[0])[:120]
    return ""


def process_fixtures(item: Any) -> list[str]:
    """The fixtures a test uses, directly or through others, that are tagged
    @starts_processes. pytest has no public way from an item to its fixtures' definitions;
    ``_fixtureinfo`` is the one used, here only (tests/test_hygiene.py pins that it works)."""
    defs = item._fixtureinfo.name2fixturedefs
    return sorted(
        name
        for name, found in defs.items()
        if any(getattr(d.func, STARTS_PROCESSES, False) for d in found)
    )


WATCH = ProcessWatch()
"""The one watch, installed by tests/conftest.py as an audit hook for the session."""


def _text(word: Any) -> str:
    return os.fsdecode(word) if isinstance(word, bytes | os.PathLike) else str(word)


def unmarked_process(is_slow: bool, started: list[str]) -> str | None:
    """Why a test fails the tier check, or None: a test not marked ``slow`` started a process."""
    if is_slow or not started:
        return None
    return (
        f"this test is not marked slow but started {len(started)} process(es): {started[:3]}; "
        "tag the fixture that starts them with @starts_processes (tests/helpers.py), or "
        "mark a test that starts one itself @pytest.mark.slow"
    )


def loopback_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A certificate authority of a test's own and a certificate it signed for 127.0.0.1:
    the paths of the authority's PEM, the server's certificate and its key. What an
    operator's internal CA is to the gateway: in no public bundle."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "toolgate test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


def require_module(name: str) -> Any:
    """``pytest.importorskip``, but a failure in CI (``CI=true``): the dev extras install
    every module a test imports this way (``pip install -e '.[dev]'``), so one missing there
    is a broken install, not a machine without an optional service."""
    import importlib

    import pytest

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        reason = f"{name} is not installed ({exc}): pip install -e '.[dev]'"
        if IN_CI:
            pytest.fail(f"{reason}; CI requires it", pytrace=False)
        pytest.skip(reason)


def require_in_ci(reason: str) -> None:
    """Skip with ``reason``, or fail in CI (``CI=true``), where the suite runs as root on a
    machine the project's files set up."""
    import pytest

    if IN_CI:
        pytest.fail(f"{reason}; CI requires it", pytrace=False)
    pytest.skip(reason)
