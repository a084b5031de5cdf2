"""The browser tools through the whole gateway API, and GET /v1/artifacts/{id}.

Real Chromium, real pages on 127.0.0.1, embedded Rego and SQLite. The shipped web.* tools
reach public addresses only; these tests let them reach 127.0.0.1 with the gateway-wide
override ``adapters.browser.allow_networks`` (never by editing the tools).
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.settings import Settings, load_settings
from tests.adapters.test_browser import PageServer, require_chromium
from tests.helpers import BOB, REPO, starts_processes, wait_until
from tests.server.helpers import auth, body

CLICK_MISSING = """name: test.click
version: 1.0.0
description: Click a selector on the session's page (a test tool with a short step timeout).
adapter: browser
operation: click
risk: low
side_effect: read
input:
  selector: {type: string, required: true}
steps:
  - {click: "{arguments.selector}"}
step_timeout: 500ms
locks:
  - {key: "browser:{workspace.id}:default"}
idempotency: none
"""


def _project(root: Path) -> Path:
    for name in ("tools.d", "rego", "policies", "examples"):
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(REPO / name, root / name, ignore=ignore)
    shutil.copy(REPO / "toolgate.yaml", root / "toolgate.yaml")
    (root / "tools.d" / "test.click.yaml").write_text(CLICK_MISSING)
    return root


def _settings(root: Path, allow_loopback: bool) -> Settings:
    base = load_settings(
        root / "toolgate.yaml", env={}, database_url=f"sqlite:///{root / 'var' / 'toolgate.db'}"
    )
    browser: dict[str, Any] = {"allow_networks": ["127.0.0.1/32"]} if allow_loopback else {}
    return base.model_copy(update={"adapters": {**base.adapters, "browser": browser}})


@pytest.fixture(scope="module")
def pages() -> Iterator[PageServer]:
    with PageServer() as server:
        yield server


@pytest.fixture(scope="module")
def project_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _project(tmp_path_factory.mktemp("browser_api"))


@pytest.fixture(scope="module")
@starts_processes
def client(project_dir: Path) -> Iterator[TestClient]:
    """One gateway (and so one Chromium) for the module."""
    require_chromium()
    app = create_app(_settings(project_dir, allow_loopback=True))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _run(client: TestClient, tool: str, arguments: dict[str, Any], **extra: Any) -> Any:
    response = client.post("/v1/executions", json=body(tool, arguments, **extra), headers=auth())
    assert response.status_code == 200, response.text
    return response.json()


def test_submit_form_end_to_end_with_artifact(client: TestClient, pages: PageServer) -> None:
    arguments = {"url": pages.url("/form"), "name": "Ada", "email": "ada@example.com"}
    arguments["plan"] = "pro"
    execution = _run(client, "web.submit_form", arguments, idempotency_key="order-1")
    result = execution["result"]
    assert result["outcome"] == "succeeded", result
    assert result["data"]["extracted"] == {"confirmation": "Thank you, Ada: pro plan ordered."}
    assert result["data"]["url"] == pages.url("/submit")
    assert result["side_effect"]["committed"] is True
    assert len(pages.orders) == 1
    assert pages.orders[0]["email"] == ["ada@example.com"]
    kinds = [e["kind"] for e in result["evidence"]]
    assert kinds[:3] == ["page", "screenshot", "extracted"]
    probe = next(e for e in result["evidence"] if e["kind"] == "probe")
    assert probe["passed"] is True
    events = client.get(execution["links"]["events"], headers=auth()).json()["items"]
    locked = next(e for e in events if e["type"] == "lock.acquired")
    assert "browser:demo:main" in str(locked)

    shot = next(e for e in result["evidence"] if e["kind"] == "screenshot")
    png = client.get(shot["ref"], headers=auth())
    assert png.status_code == 200
    assert png.headers["content-type"] == "image/png"
    assert hashlib.sha256(png.content).hexdigest() == shot["sha256"]
    assert png.headers["etag"] == f'"{shot["sha256"]}"'

    replay = _run(client, "web.submit_form", arguments, idempotency_key="order-1")
    assert replay["id"] == execution["id"]
    assert len(pages.orders) == 1  # the form was not submitted again


def test_artifacts_need_the_owner(client: TestClient, pages: PageServer) -> None:
    result = _run(client, "web.screenshot", {"url": pages.url("/table")})["result"]
    assert result["outcome"] == "succeeded", result
    href = result["data"]["screenshot"]["href"]
    assert client.get(href, headers=auth()).status_code == 200
    other = client.get(href, headers=auth(BOB))
    assert other.status_code == 404
    assert other.json()["code"] == "artifact_not_found"
    assert client.get(href).status_code == 401
    assert client.get("/v1/artifacts/art_nope", headers=auth()).status_code == 404
    traversal = client.get("/v1/artifacts/..%2F..%2Ftoolgate.yaml", headers=auth())
    assert traversal.status_code == 404


def test_extract_text_through_the_api(client: TestClient, pages: PageServer) -> None:
    arguments = {"url": pages.url("/table"), "selector": "td", "session": "reader"}
    result = _run(client, "web.extract_text", arguments)["result"]
    assert result["outcome"] == "succeeded", result
    assert result["data"]["extracted"]["text"] == ["basic", "5", "pro", "20"]
    assert result["data"]["title"] == "Prices"


def test_selector_not_found_is_a_clear_failed_result(client: TestClient, pages: PageServer) -> None:
    _run(client, "web.screenshot", {"url": pages.url("/form"), "session": "default"})
    result = _run(client, "test.click", {"selector": "#nowhere"})["result"]
    assert result["outcome"] == "failed"
    assert result["error"]["type"] == "selector_not_found"
    assert result["error"]["phase"] == "execute"
    assert result["error"]["message"] == (
        "step 1 (click): no element matched selector '#nowhere' within 0.5s"
    )


def test_metadata_address_is_refused_at_execute(client: TestClient) -> None:
    arguments = {"url": "http://169.254.169.254/latest/meta-data/"}
    result = _run(client, "web.extract_text", arguments)["result"]
    assert result["outcome"] == "failed"
    error = result["error"]
    assert (error["type"], error["phase"], error["retryable"]) == (
        "egress_refused",
        "execute",
        False,
    )
    assert "169.254.169.254" in error["message"]


def test_deadline_closes_the_page_and_the_next_call_works(
    client: TestClient, pages: PageServer
) -> None:
    deadline = int((time.time() + 1.5) * 1000)
    arguments = {"url": pages.url("/slow?s=3"), "session": "late"}
    result = _run(client, "web.extract_text", arguments, deadline=deadline)["result"]
    assert result["outcome"] == "failed"
    assert result["error"]["type"] == "timeout"
    again = _run(client, "web.extract_text", {"url": pages.url("/table"), "session": "late"})
    assert again["result"]["outcome"] == "succeeded", again["result"]


def test_cancel_a_running_browser_call(client: TestClient, pages: PageServer) -> None:
    arguments = {"url": pages.url("/slow?s=4"), "session": "stop"}
    asked = len(pages.seen)
    started = client.post(
        "/v1/executions",
        json=body("web.extract_text", arguments),
        headers={**auth(), "Prefer": "respond-async"},
    ).json()
    wait_until(lambda: len(pages.seen) > asked, "the browser to ask for the slow page")
    client.post(started["links"]["self"] + "/cancel", headers=auth())
    done = client.get(started["links"]["self"] + "?wait=10", headers=auth()).json()
    assert done["result"]["outcome"] == "cancelled", done["result"]
    again = _run(client, "web.extract_text", {"url": pages.url("/table"), "session": "stop"})
    assert again["result"]["outcome"] == "succeeded", again["result"]


def test_loopback_is_refused_without_an_allowance(tmp_path: Path, pages: PageServer) -> None:
    require_chromium()
    app = create_app(_settings(_project(tmp_path), allow_loopback=False))
    with TestClient(app, raise_server_exceptions=False) as strict:
        result = _run(strict, "web.extract_text", {"url": pages.url("/table")})["result"]
    assert result["outcome"] == "failed"
    assert result["error"]["type"] == "egress_refused"
    assert "127.0.0.1" in result["error"]["message"]
