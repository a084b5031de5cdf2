"""Bad configuration, as a hostile operator writes it, through each way it is read: ``toolgate
check``, ``toolgate serve`` (both real processes) and a reload of a running gateway
(``POST /v1/admin/reload``). Each fault is refused with one line naming the setting and the
fault, never a traceback, and a refused reload leaves the running gateway as it was.

``check`` reads the files and connects to nothing: a store that does not answer, a key or a
log file it would open at start are found by ``serve`` (``check: None`` below)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.settings import load_settings
from gateway.testing import free_port
from tests.helpers import CAROL, REPO
from tests.policy.helpers import toolgate
from tests.server.helpers import auth

Config = dict[str, Any]
NOT_VALID = "toolgate: configuration is not valid:"
URL_FORMS = "sqlite:///path/to/file.db or postgresql+psycopg://user@host:5432/dbname"


def _a_file(root: Path, name: str = "afile") -> Path:
    (root / name).write_text("not a directory\n")
    return root / name


def _workspace_root(root: Path, where: str) -> None:
    path = root / "policies" / "workspaces.yaml"
    data = yaml.safe_load(path.read_text())
    data["workspaces"]["demo"]["root"] = where
    path.write_text(yaml.safe_dump(data))


def connection_dir_is_a_file(root: Path, config: Config) -> None:
    _a_file(root)
    config["adapters"]["database"]["connections"]["orders"]["url"] = "sqlite:///afile/o.db"


def connection_url_malformed(root: Path, config: Config) -> None:
    config["adapters"]["database"]["connections"]["orders"]["url"] = "postgresql://h:port/x"


def store_dir_is_a_file(root: Path, config: Config) -> None:
    _a_file(root)
    config["database_url"] = "sqlite:///afile/toolgate.db"


def store_url_malformed(root: Path, config: Config) -> None:
    config["database_url"] = "postgresql+psycopg://postgres@127.0.0.1:port/x"


def store_url_unsupported(root: Path, config: Config) -> None:
    config["database_url"] = "mysql://u@127.0.0.1/x"


def store_does_not_answer(root: Path, config: Config) -> None:
    config["database_url"] = "postgresql+psycopg://postgres@127.0.0.1:1/x"


def workspace_root_is_a_file(root: Path, config: Config) -> None:
    _workspace_root(root, str(_a_file(root)))


def decision_log_is_a_directory(root: Path, config: Config) -> None:
    (root / "logs").mkdir()
    config["decision_log"] = {"enabled": True, "path": "logs"}


def signing_key_missing(root: Path, config: Config) -> None:
    config["audit"] = {"signing_key": "nokey.pem"}


def opa_url_malformed(root: Path, config: Config) -> None:
    config["policy_backend"] = "opa"
    config["opa_url"] = "http://[::1"


def _jwt(config: Config, **source: str) -> None:
    config["jwt"] = {"issuer": "https://idp.example", "resource": "https://tg.example/mcp"}
    config["jwt"].update(source)


def jwks_url_malformed(root: Path, config: Config) -> None:
    _jwt(config, jwks_url="https://[::1/keys")


def jwks_file_missing(root: Path, config: Config) -> None:
    _jwt(config, jwks_file="nokeys.json")


def jwks_file_not_json(root: Path, config: Config) -> None:
    (root / "keys.json").write_text("{not json")
    _jwt(config, jwks_file="keys.json")


def ca_bundle_not_pem(root: Path, config: Config) -> None:
    (root / "ca.pem").write_text("not a certificate\n")
    config["adapters"]["http"]["ca_bundle"] = "ca.pem"


def public_key_missing(root: Path, config: Config) -> None:
    config["audit"] = {"public_keys": ["old.pem"]}


def var_dir_with_a_nul(root: Path, config: Config) -> None:
    config["var_dir"] = "var\x00"


def workspace_root_with_a_nul(root: Path, config: Config) -> None:
    _workspace_root(root, "var/a\x00b")


def decision_log_under_a_file(root: Path, config: Config) -> None:
    _a_file(root)
    config["decision_log"] = {"enabled": True, "path": "afile/decisions.jsonl"}


def allowed_host_empty(root: Path, config: Config) -> None:
    config["mcp"]["allowed_hosts"] = ["toolgate:8080", ""]


@dataclass(frozen=True)
class Fault:
    """A fault made by ``make``, with ``env`` (``TOOLGATE_*``) set, and what each command
    answers: its exit status and the line that names it (``{root}``: the project)."""

    make: Callable[[Path, Config], None]
    check: str | None
    serve: str | None
    """None: ``serve`` does not use it (it starts; ``audit verify`` reads it)."""
    serve_status: int = 2
    env: tuple[tuple[str, str], ...] = ()


EMPTY_HOST = (
    "  - toolgate.yaml:{empty}: mcp.allowed_hosts.1: String should have at least 1 character"
)
DIR = "cannot create the directory {root}/afile: {root}/afile is not a directory"
FAULTS = [
    Fault(
        connection_dir_is_a_file,
        f"  - adapters.database.connections.orders.url: {DIR}",
        f"  - adapters.database.connections.orders.url: {DIR}",
    ),
    Fault(
        connection_url_malformed,
        "  - adapters.database.connections.orders.url: not a database URL",
        "  - adapters.database.connections.orders.url: not a database URL",
    ),
    Fault(store_dir_is_a_file, None, f"  - database_url: {DIR}"),
    Fault(
        store_url_malformed,
        f"  - database_url: not a database URL ({URL_FORMS})",
        f"  - database_url: not a database URL ({URL_FORMS})",
    ),
    Fault(
        store_url_unsupported,
        f"  - database_url: unsupported database 'mysql' ({URL_FORMS})",
        f"  - database_url: unsupported database 'mysql' ({URL_FORMS})",
    ),
    Fault(
        lambda root, config: None,
        f"  - database_url: not a database URL ({URL_FORMS})",
        f"  - database_url: not a database URL ({URL_FORMS})",
        env=(("TOOLGATE_DATABASE_URL", "::::"),),
    ),
    Fault(
        store_does_not_answer,
        None,
        "toolgate: cannot start: cannot open the store at "
        "postgresql+psycopg://postgres@127.0.0.1:1/x: connection failed: connection to server "
        'at "127.0.0.1", port 1 failed: Connection refused',
        serve_status=3,
    ),
    Fault(
        lambda root, config: _a_file(root),
        "  - var_dir: cannot create the directory {root}/afile: {root}/afile is not a directory",
        "  - var_dir: cannot create the directory {root}/afile: {root}/afile is not a directory",
        env=(("TOOLGATE_VAR_DIR", "afile"),),
    ),
    Fault(
        workspace_root_is_a_file,
        f"  - workspaces.demo.root (policy data): {DIR}",
        f"  - workspaces.demo.root (policy data): {DIR}",
    ),
    Fault(
        decision_log_is_a_directory,
        None,
        "  - decision_log.path: cannot open {root}/logs: Is a directory",
    ),
    Fault(
        signing_key_missing,
        "  - audit.signing_key: cannot read {root}/nokey.pem: No such file or directory",
        "  - audit.signing_key: cannot read {root}/nokey.pem: No such file or directory",
    ),
    Fault(
        public_key_missing,
        "  - audit.public_keys: {root}/old.pem: cannot read the public key: No such file or"
        " directory",
        None,
    ),
    Fault(
        opa_url_malformed,
        "  - opa_url 'http://[::1': Invalid IPv6 URL",
        "  - opa_url 'http://[::1': Invalid IPv6 URL",
    ),
    Fault(
        jwks_url_malformed,
        "  - toolgate.yaml:{jwt}: jwt: jwks_url must be an http(s) URL with a host",
        "  - toolgate.yaml:{jwt}: jwt: jwks_url must be an http(s) URL with a host",
    ),
    Fault(
        jwks_file_missing,
        "  - jwt.jwks_file: cannot read {root}/nokeys.json: No such file or directory",
        "  - jwt.jwks_file: cannot read {root}/nokeys.json: No such file or directory",
    ),
    Fault(
        jwks_file_not_json,
        "  - jwt.jwks_file: {root}/keys.json is not a JWKS document: Expecting property name"
        " enclosed in double quotes: line 1 column 2 (char 1)",
        "  - jwt.jwks_file: {root}/keys.json is not a JWKS document: Expecting property name"
        " enclosed in double quotes: line 1 column 2 (char 1)",
    ),
    Fault(
        ca_bundle_not_pem,
        "  - adapters.http.ca_bundle: {root}/ca.pem is not PEM certificates"
        " (NO_CERTIFICATE_OR_CRL_FOUND)",
        "  - adapters.http.ca_bundle: {root}/ca.pem is not PEM certificates"
        " (NO_CERTIFICATE_OR_CRL_FOUND)",
    ),
    Fault(allowed_host_empty, EMPTY_HOST, EMPTY_HOST),
    Fault(
        var_dir_with_a_nul,
        "  - toolgate.yaml:{var_dir}: var_dir: a path cannot hold a NUL byte",
        "  - toolgate.yaml:{var_dir}: var_dir: a path cannot hold a NUL byte",
    ),
    Fault(
        workspace_root_with_a_nul,
        "  - workspaces.demo.root (policy data): a path cannot hold a NUL byte",
        "  - workspaces.demo.root (policy data): a path cannot hold a NUL byte",
    ),
    Fault(decision_log_under_a_file, None, f"  - decision_log.path: {DIR}"),
]
IDS = [
    fault.make.__name__ if not fault.env else fault.env[0][0].lower() + "_bad" for fault in FAULTS
]


def _project(root: Path, fault: Fault) -> Path:
    """The shipped project under ``root`` with ``fault`` made."""
    for name in ("tools.d", "rego", "policies", "examples"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    config = yaml.safe_load((REPO / "toolgate.yaml").read_text())
    fault.make(root, config)
    (root / "toolgate.yaml").write_text(yaml.safe_dump(config))
    return root


def _expected(line: str, root: Path) -> str:
    """``line`` with the project's path, the line of each top-level key of its file
    (``{jwt}``) and of its first empty list item (``{empty}``)."""
    text = (root / "toolgate.yaml").read_text().splitlines()
    keys = {t.split(":")[0]: n for n, t in enumerate(text, 1) if t[:1].isalpha()}
    empty = [n for n, t in enumerate(text, 1) if t.strip() == "- ''"]
    return line.format(root=root, empty=empty[0] if empty else 0, **keys)


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS, ids=IDS)
def test_check_names_the_fault_in_one_line(fault: Fault, tmp_path: Path) -> None:
    done = toolgate("check", cwd=_project(tmp_path, fault), env=dict(fault.env))
    assert "Traceback" not in done.stderr
    if fault.check is None:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(NOT_VALID + "\n"), done.stderr
    assert _expected(fault.check, tmp_path) in done.stderr.splitlines(), done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault",
    [f for f in FAULTS if f.serve],
    ids=[i for i, f in zip(IDS, FAULTS, strict=True) if f.serve],
)
def test_serve_refuses_to_start_in_one_line_without_a_traceback(
    fault: Fault, tmp_path: Path
) -> None:
    port = str(free_port())
    done = toolgate("serve", "--port", port, cwd=_project(tmp_path, fault), env=dict(fault.env))
    assert "Traceback" not in done.stderr and "Application startup" not in done.stderr
    assert done.returncode == fault.serve_status, done.stderr
    assert fault.serve is not None
    assert _expected(fault.serve, tmp_path) in done.stderr.splitlines(), done.stderr
    if fault.serve_status == 2:
        assert NOT_VALID in done.stderr.splitlines(), done.stderr


# -- a reload of a running gateway -----------------------------------------------------------


@pytest.fixture
def client(project: Path) -> Iterator[TestClient]:
    config = yaml.safe_load((project / "toolgate.yaml").read_text())
    config["admins"] = ["carol"]
    config["approval_secret"] = "s" * 40
    (project / "toolgate.yaml").write_text(yaml.safe_dump(config))
    url = f"sqlite:///{project / 'var' / 'toolgate.db'}"
    settings = load_settings(project / "toolgate.yaml", env={}, database_url=url)
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


RELOAD_FAULTS = {
    "connection_dir_is_a_file": (
        connection_dir_is_a_file,
        f"adapters.database.connections.orders.url: {DIR}",
    ),
    "connection_url_malformed": (
        connection_url_malformed,
        "adapters.database.connections.orders.url: not a database URL",
    ),
    "workspace_root_is_a_file": (
        workspace_root_is_a_file,
        f"workspaces.demo.root (policy data): {DIR}",
    ),
    "workspace_root_with_a_nul": (
        workspace_root_with_a_nul,
        "workspaces.demo.root (policy data): a path cannot hold a NUL byte",
    ),
}


@pytest.mark.parametrize("name", list(RELOAD_FAULTS))
def test_a_reload_names_the_fault_and_changes_nothing(
    name: str, client: TestClient, project: Path
) -> None:
    make, line = RELOAD_FAULTS[name]
    before = client.get("/readyz").json()["revisions"]
    running = client.app.state.services.latest  # type: ignore[attr-defined]
    config = yaml.safe_load((project / "toolgate.yaml").read_text())
    make(project, config)
    (project / "toolgate.yaml").write_text(yaml.safe_dump(config))
    refused = client.post("/v1/admin/reload", headers=auth(CAROL))
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["code"] == "reload_refused"
    assert problem["faults"] == [line.format(root=project)]
    assert client.app.state.services.latest is running  # type: ignore[attr-defined]
    assert client.get("/readyz").json()["revisions"] == before
