"""Signing out of the approvals page ends the session on the server, for every copy of its
cookie and on every replica; so does revoking the key it was opened with. Two gateway
processes on one store (SQLite and PostgreSQL): signed in on one, out on the other."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.cli import main
from gateway.settings import hash_key
from gateway.testing import gateway, make_project
from gateway.ui.session import SESSION_COOKIE

pytestmark = [pytest.mark.slow]
SPARE = "tg_bob_spare_key"


def _project(root: Path, database_url: str) -> Path:
    config_path = make_project(root, database_url)
    config = yaml.safe_load(config_path.read_text())
    bob = next(p for p in config["principals"] if p["id"] == "bob")
    bob["keys"] = [{"id": "bob-spare", "sha256": hash_key(SPARE)}]
    config_path.write_text(yaml.safe_dump(config))
    return config_path


def _signed_in(url: str) -> tuple[str, str]:
    """A session opened with the spare key: its cookie and its CSRF token."""
    with httpx.Client(base_url=url, timeout=30) as client:
        form = client.get("/ui/signin")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None
        signed = client.post("/ui/signin", data={"csrf": token.group(1), "api_key": SPARE})
        assert signed.status_code == 303, signed.text
        inbox = client.get("/ui/approvals")
        assert inbox.status_code == 200, inbox.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', inbox.text)
        assert csrf is not None
        return str(client.cookies[SESSION_COOKIE]), csrf.group(1)


def _inbox(url: str, cookie: str) -> httpx.Response:
    """``/ui/approvals`` asked with a copy of the cookie (another client, no redirect)."""
    headers = {"Cookie": f"{SESSION_COOKIE}={cookie}"}
    return httpx.get(url + "/ui/approvals", headers=headers, timeout=30)


def _refused(response: httpx.Response) -> bool:
    return response.status_code == 303 and response.headers["location"].startswith("/ui/signin")


def _toolgate(config: Path, *args: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return main(["--config", str(config), *args])


def test_sign_out_and_revocation_end_every_copy_on_every_replica(
    tmp_path: Path, database_url: str
) -> None:
    config = _project(tmp_path, database_url)
    with gateway(config) as first, gateway(config) as second:
        cookie, csrf = _signed_in(first)
        assert [_inbox(url, cookie).status_code for url in (first, second)] == [200, 200]
        out = httpx.post(
            second + "/ui/signout",
            data={"csrf": csrf},
            headers={"Cookie": f"{SESSION_COOKIE}={cookie}"},
            timeout=30,
        )
        assert out.status_code == 303 and out.headers["location"] == "/ui/signin"
        for url in (first, second):
            assert _refused(_inbox(url, cookie)), url
        posted = httpx.post(
            first + "/ui/signout",
            data={"csrf": csrf},
            headers={"Cookie": f"{SESSION_COOKIE}={cookie}"},
            timeout=30,
        )
        assert posted.status_code == 401 and "Your session has ended" in posted.text

        again, _ = _signed_in(second)  # a new session is a new id: signing out ended one
        assert [_inbox(url, again).status_code for url in (first, second)] == [200, 200]
        assert _toolgate(config, "keys", "revoke", "bob-spare", "--by", "secops") == 0
        for url in (first, second):
            assert _refused(_inbox(url, again)), url
