"""A start that fails leaves nothing open: ``open_runtime`` on a real store (a SQLite file,
whose open descriptors are counted in ``/proc/self/fd``, or a PostgreSQL database, whose
connections are counted in ``pg_stat_activity``) with a fault at each step from the store's
own open on: the store (a schema too new), telemetry, the policy backend, the adapters, the
notifications, the audit key.
And ``close_runtime`` closes in the reverse order of opening."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.adapters import registry
from gateway.errors import ConfigError, StoreError
from gateway.observability.telemetry import Telemetry
from gateway.runtime.bootstrap import close_runtime, open_runtime
from gateway.settings import Settings, load_settings
from gateway.store.store import Store
from gateway.testing import load_catalogue
from tests.helpers import REPO, disposed_engines, pg_admin, until

pytestmark = pytest.mark.anyio


def _configured(
    project: Path, database_url: str, change: Callable[[dict[str, Any]], Any]
) -> Settings:
    config = yaml.safe_load((project / "toolgate.yaml").read_text())
    change(config)
    (project / "toolgate.yaml").write_text(yaml.safe_dump(config))
    return load_settings(project / "toolgate.yaml", env={}, database_url=database_url)


def _opened_files(path: Path) -> int:
    """This process's descriptors open on ``path`` (or its -wal and -shm files)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed since listed
        found += target.startswith(str(path))
    return found


def _store_connections(database_url: str) -> int:
    """What the store holds open: descriptors on the SQLite file, or the PostgreSQL
    database's backends."""
    if database_url.startswith("sqlite"):
        return _opened_files(Path(database_url.removeprefix("sqlite:///")))
    with pg_admin() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
            (database_url.rsplit("/", 1)[1],),
        ).fetchone()
    return int(row[0])


def _bad_decision_log(config: dict[str, Any]) -> None:
    config["decision_log"] = {"enabled": True, "path": "tools.d"}


def _driver_not_installed(config: dict[str, Any]) -> None:
    config["adapters"]["database"]["connections"]["orders"] = {"url": "mysql+mysqldb://db/orders"}


def _notification_secret_unset(config: dict[str, Any]) -> None:
    config["notifications"] = {
        "endpoints": [{"url": "http://127.0.0.1:9/hook", "secret_env": "TOOLGATE_TEST_NO_SUCH"}]
    }


def _audit_key_not_pem(config: dict[str, Any]) -> None:
    config["audit"] = {"checkpoint_interval": "60s", "signing_key": "toolgate.yaml"}


FAILED_STARTS = {
    "telemetry": _bad_decision_log,
    "adapters": _driver_not_installed,
    "notifications": _notification_secret_unset,
    "audit key": _audit_key_not_pem,
}


@pytest.mark.parametrize("step", FAILED_STARTS)
async def test_a_start_that_fails_leaves_the_store_closed(
    project: Path, database_url: str, step: str
) -> None:
    settings = _configured(project, database_url, FAILED_STARTS[step])
    with pytest.raises(ConfigError):
        await open_runtime(settings)
    await until(lambda: _store_connections(database_url) == 0, "the store closed", limit=5)


async def test_a_store_too_new_to_open_is_closed(project: Path, database_url: str) -> None:
    settings = _configured(project, database_url, lambda config: None)
    store = Store(database_url)
    await store.open()
    await store._write(lambda db: db.run("UPDATE schema_version SET version = 999 WHERE id = 1"))
    await store.aclose()
    with pytest.raises(StoreError, match="newer"):
        await open_runtime(settings)
    await until(lambda: _store_connections(database_url) == 0, "the store closed", limit=5)


async def test_a_start_whose_policy_backend_fails_leaves_the_store_and_telemetry_closed(
    project: Path, database_url: str
) -> None:
    """An OPA that is not up does not fail a start (a warning, calls refused until it
    answers: ``open_backend``), so the backend's own refusal is what fails it here."""

    def decision_log(config: dict[str, Any]) -> None:
        config["decision_log"] = {"enabled": True, "path": "var/decisions.log"}

    settings = _configured(project, database_url, decision_log)
    settings = settings.model_copy(update={"policy_backend": "none such"})
    with pytest.raises(ConfigError, match="policy_backend"):
        await open_runtime(settings)
    await until(lambda: _store_connections(database_url) == 0, "the store closed", limit=5)
    assert _opened_files(project / "var" / "decisions.log") == 0


async def test_close_runtime_closes_in_the_reverse_order_of_opening(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = await open_runtime(settings)
    closed: list[str] = []

    def record(name: str, close: Callable[[], Any]) -> Callable[[], Any]:
        def closing(*args: Any) -> Any:
            closed.append(name)
            return close(*args)

        return closing

    parts = [(kind, adapter) for kind, adapter in runtime.adapters.items()]
    parts += [("policy", runtime.policy), ("store", runtime.store)]
    for name, part in parts:
        monkeypatch.setattr(part, "aclose", record(name, part.aclose))
    telemetry_close = Telemetry.close  # a frozen record: its class's method is wrapped
    monkeypatch.setattr(Telemetry, "close", lambda t: record("telemetry", telemetry_close)(t))
    await close_runtime(runtime)
    opened = ["store", "telemetry", "policy", *runtime.adapters]
    assert closed == opened[::-1]


def _http_ca_bundle_missing(config: dict[str, Any]) -> None:
    config["adapters"]["http"]["ca_bundle"] = "no-such-ca.pem"


async def test_a_start_whose_later_adapter_fails_closes_the_adapters_built_before(
    project: Path, database_url: str
) -> None:
    """The kinds are built in order (file, process, browser, database, http): the http
    adapter's fault closes the database adapter built before it (its engine disposed)."""
    settings = _configured(project, database_url, _http_ca_bundle_missing)
    with disposed_engines() as disposed, pytest.raises(ConfigError) as refused:
        await open_runtime(settings)
    assert refused.value.problems == [
        f"adapters.http.ca_bundle: {project / 'no-such-ca.pem'} is not a file"
    ]
    orders = str(project / "var" / "examples" / "orders.db")
    assert [database for database in disposed if database == orders] == [orders]


async def test_an_unexpected_error_building_an_adapter_closes_those_built_in_reverse(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a ConfigError (a bug, an OSError): the same closing, last built first, and the
    error itself goes on. The fault is injected where the http adapter is built; the others
    are the real ones, each close recorded."""
    build = registry.build_adapter
    closed: list[str] = []

    def building(settings: Settings, kind: str, catalogue: Any) -> Any:
        if kind == "http":
            raise RuntimeError("the http adapter could not be built")
        adapter = build(settings, kind, catalogue)
        close = adapter.aclose

        async def closing() -> None:
            closed.append(kind)
            await close()

        monkeypatch.setattr(adapter, "aclose", closing)
        return adapter

    monkeypatch.setattr(registry, "build_adapter", building)
    catalogue = load_catalogue(REPO / "tools.d")
    with disposed_engines() as disposed, pytest.raises(RuntimeError, match="could not be built"):
        await registry.build_adapters(settings, catalogue)
    assert closed == ["database", "browser", "process", "file"]
    orders = str(settings.base_dir / "var" / "examples" / "orders.db")
    assert [database for database in disposed if database == orders] == [orders]
