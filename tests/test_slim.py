"""What a default gateway does not import (issue 33): a start imports the libraries the
configured tools and doors use, not every library the gateway could use. Checked on module
presence in a fresh interpreter (never on bytes): the gateway of the shipped project, its
lifespan entered, then ``sys.modules`` read."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import yaml

from gateway.cli import main
from gateway.errors import ConfigError
from gateway.runtime.bootstrap import open_runtime
from gateway.settings import load_settings
from gateway.testing import make_project
from tests.helpers import REPO

NOT_AT_START = (
    "playwright",  # the browser adapter's engine: imported when a browser call runs
    "opentelemetry",  # tracing, off by default
    "mcp",  # the MCP SDK: imported by /mcp's first request (gateway/mcp/door.py)
    "psycopg",  # PostgreSQL, not the configured store
    "pymysql",  # MariaDB, no connection of the shipped project uses it
    "langchain_core",  # the client kit's optional framework adapters
    "agents",
)

START = """
import asyncio, json, sys
from pathlib import Path
from gateway.server.app import create_app
from gateway.settings import load_settings

app = create_app(load_settings(Path(sys.argv[1])))

async def main():
    async with app.router.lifespan_context(app):
        names = {name.split(".")[0] for name in sys.modules}
        print(json.dumps(sorted(names & set(sys.argv[2:]))))

asyncio.run(main())
"""


@pytest.mark.slow
def test_a_default_start_imports_no_library_it_does_not_use(tmp_path: Path) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    done = subprocess.run(
        [sys.executable, "-c", START, str(config), *NOT_AT_START],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "RUST_LIB_BACKTRACE": "0", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


SERVE = """
import asyncio, json, sys
from pathlib import Path
import gateway.cli  # what `toolgate serve` imports
from gateway.server.app import create_app
from gateway.settings import load_settings

app = create_app(load_settings(Path(sys.argv[1])))

async def main():
    async with app.router.lifespan_context(app):
        asked = set(sys.argv[2:])
        print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in asked
                                or name in asked)))

asyncio.run(main())
"""
SENDERS = (
    "gateway.adapters.http.adapter",  # the HTTP tools
    "gateway.http.jwks",  # the identity provider's key set
    "gateway.notifications.sender",  # the approval notifications
)


@pytest.mark.slow
def test_the_server_sends_over_one_http_library_and_imports_no_httpx(tmp_path: Path) -> None:
    """Issue 33: every request the server sends goes through aiohttp
    (gateway/adapters/shared/client.py); httpx is the clients' (the kit, the CLI, the stdio
    bridge). A server with HTTP tools, JWTs and a notification endpoint starts without it
    (neither does the MCP SDK's server side import it: it uses httpx2, in its client)."""
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    data = yaml.safe_load(config.read_text())
    data["jwt"] = {
        "issuer": "https://idp.example.com",
        "resource": "https://toolgate.example.com/mcp",
        "jwks_url": "https://idp.example.com/certs",
    }
    data["notifications"] = {
        "endpoints": [{"url": "https://hooks.example.com/toolgate", "secret_env": "WH"}]
    }
    config.write_text(yaml.safe_dump(data))
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(config), "httpx", "httpcore", *SENDERS],
        cwd=tmp_path,
        env={
            "PYTHONPATH": str(REPO),
            "RUST_LIB_BACKTRACE": "0",
            "PATH": "/usr/bin:/bin",
            "WH": secret,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == sorted(SENDERS)


def test_a_connection_whose_driver_is_missing_is_refused_by_check_and_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A driver imported only when its engine is built is still asked for at check and at
    start, not on the first call: the same clear message from both."""
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    data = yaml.safe_load(config.read_text())
    url = "mysql+mysqldb://root@127.0.0.1:3306/orders"  # MySQLdb is not installed
    data["adapters"]["database"]["connections"]["orders"] = {"url": url}
    config.write_text(yaml.safe_dump(data))
    message = (
        "adapters.database.connections.orders.url: the driver 'mysql+mysqldb' is not "
        "installed (pip install 'toolgate[mysql]')"
    )
    assert main(["--config", str(config), "check"]) == 2
    assert message in capsys.readouterr().err
    with pytest.raises(ConfigError) as refused:
        anyio.run(open_runtime, load_settings(config))
    assert refused.value.problems == [message]
