"""What a gateway does not load until it is needed: jinja2 until the first page, PyJWT until
JWTs are configured (about 4 MB of every REST-only gateway's memory, docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.testing import make_project
from tests.helpers import ALICE, REPO

pytestmark = pytest.mark.slow  # every test here starts a process itself

CHILD = """
import asyncio, json, sys
import httpx
from gateway.server.app import create_app
from gateway.settings import load_settings

async def main():
    from pathlib import Path
    app = create_app(load_settings(Path(sys.argv[1])))
    async with app.router.lifespan_context(app):
        seen = {"start": ["jinja2" in sys.modules, "jwt" in sys.modules]}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as c:
            rest = await c.get("/v1/tools", headers={"Authorization": "Bearer " + sys.argv[2]})
            seen["rest"] = [rest.status_code, "jinja2" in sys.modules, "jwt" in sys.modules]
            page = await c.get("/ui/signin")
            seen["page"] = [page.status_code, "<form" in page.text, "jinja2" in sys.modules]
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_jinja2_loads_with_the_first_page_and_pyjwt_not_at_all_without_jwts(
    tmp_path: Path,
) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path}/toolgate.db")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(config), ALICE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["start"] == [False, False], seen
    assert seen["rest"] == [200, False, False], seen
    assert seen["page"] == [200, True, True], seen
