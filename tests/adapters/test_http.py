"""The HTTP adapter against the real example orders service on 127.0.0.1 (uvicorn in a
thread), a raw socket that drops connections, and through the whole gateway API."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from examples.orders_service import create_app as orders_app
from examples.orders_service import serving
from gateway.adapters.http import adapter as http
from gateway.adapters.http.options import HttpConfig, HttpOptions
from gateway.adapters.http.results import parse_retry_after
from gateway.adapters.shared.egress import EgressRefused
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ConfigError, ExecutionError
from gateway.server.app import create_app
from gateway.settings import Settings, load_settings
from gateway.testing import adapter_call, catalogue_of, load_catalogue, load_declaration
from gateway.types import Outcome
from tests.adapters.helpers import HTTP_HEAD
from tests.helpers import REPO, until
from tests.server.helpers import auth, body

pytestmark = pytest.mark.anyio
CATALOGUE = load_catalogue(REPO / "tools.d")
TOKEN = "s3cr3t-orders-token-0042"
LOOPBACK = ["127.0.0.1/32"]
HEAD = HTTP_HEAD


class _Requested:
    """Records the path and query of each request as the service receives it: a test
    cancels a call once its request is in the service's hands."""

    def __init__(self, app: ASGIApp, requested: list[str]) -> None:
        self.app, self.requested = app, requested

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.requested.append(f"{scope['path']}?{scope['query_string'].decode()}")
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def service() -> Iterator[tuple[Starlette, str]]:
    """The example orders service, requiring TOKEN on /orders: (app, base URL);
    ``app.state.requested`` lists the requests it received (``_Requested``)."""
    app = orders_app(token=TOKEN)
    app.state.requested = []
    app.add_middleware(_Requested, requested=app.state.requested)
    with serving(app) as base:
        yield app, base


@pytest.fixture(autouse=True)
def orders_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORDERS_API_TOKEN", TOKEN)


def http_config(base: str, **extra: Any) -> HttpConfig:
    services = {"orders": {"base_url": base, "allow_networks": LOOPBACK}}
    return HttpConfig.model_validate({"services": services, **extra})


@pytest.fixture
async def adapter(service: tuple[Starlette, str]) -> AsyncIterator[http.HttpAdapter]:
    opened = http.HttpAdapter(http_config(service[1]))
    yield opened
    await opened.aclose()


def declare(tmp_path: Path, text: str, name: str = "t.yaml") -> ToolDeclaration:
    path = tmp_path / name
    path.write_text(text)
    return load_declaration(path)[0]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.contextmanager
def dropping_server() -> Iterator[int]:
    """A TCP server that reads the request and closes the connection without answering."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.05)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


# --- requests -------------------------------------------------------------------------


def test_sniffio_which_httpcore_imports_per_request_is_a_dependency() -> None:
    """Issue 33: httpcore runs ``import sniffio`` for each lock and shield it sets up, about
    ten per request (httpcore/_synchronization.py). anyio 4.16 no longer pulls sniffio in;
    without it each is a failed import that searches the whole import path (~76 us here:
    ten cost more than a whole ``fs.read_file`` call). The gateway depends on it itself."""
    import re
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    assert "sniffio" in names


async def test_a_call_leaves_no_log_line_of_the_http_client(
    adapter: http.HttpAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 33: httpx logged every request at INFO ("HTTP Request: GET ..."), a record
    built, masked and written on each HTTP tool call under the default log level, which no
    other adapter pays; the execution's events already record the request. The client is
    aiohttp's now, which must not start doing so either."""
    import logging

    caplog.set_level(logging.INFO)
    out = await adapter.execute(adapter_call(CATALOGUE.resolve("http.get_json"), {"path": "/"}))
    assert out.data["status"] == 404
    clients = ("httpx", "httpcore", "aiohttp")
    assert [r.getMessage() for r in caplog.records if r.name.startswith(clients)] == []


async def test_get_json_returns_status_body_headers_and_response_id(
    adapter: http.HttpAdapter,
) -> None:
    tool = CATALOGUE.resolve("http.get_json")
    out = await adapter.execute(adapter_call(tool, {"path": "/items/2"}))
    assert out.outcome is Outcome.SUCCEEDED
    assert out.data["status"] == 200
    assert out.data["body"] == {"id": 2, "name": "gadget", "price_cents": 1299, "stock": 12}
    assert out.data["body_encoding"] == "json"
    assert out.data["headers"] == {"content-type": "application/json"}
    kinds = {e.kind: e for e in out.evidence}
    assert kinds["http_response_id"].ref.startswith("req_")
    assert kinds["http_response"].sha256 is not None
    assert out.side_effect.attempted is False and out.truncated is False


async def test_json_body_keeps_types_and_drops_absent_values(
    adapter: http.HttpAdapter, tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        HEAD
        + """\
side_effect: external
input:
  n: {type: integer, required: true}
  flag: {type: boolean}
  tags: {type: list}
  opt: {type: string}
service: orders
method: POST
url: /echo
body:
  json:
    n: "{arguments.n}"
    flag: "{arguments.flag}"
    tags: "{arguments.tags}"
    label: "item-{arguments.n}"
    missing: "{arguments.opt}"
    nested: {list: ["{arguments.opt}", 1, "{arguments.n}"], fixed: true}
    who: "{actor.user_id}"
""",
    )
    out = await adapter.execute(adapter_call(tool, {"n": 7, "flag": False, "tags": ["a", "b"]}))
    echoed = out.data["body"]
    assert echoed["method"] == "POST"
    assert echoed["headers"]["content-type"] == "application/json"
    assert echoed["body"] == {
        "n": 7,
        "flag": False,
        "tags": ["a", "b"],
        "label": "item-7",
        "nested": {"list": [None, 1, 7], "fixed": True},
        "who": "alice",
    }
    assert out.side_effect.attempted and out.side_effect.committed


async def test_query_headers_form_and_traceparent(
    adapter: http.HttpAdapter, tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        HEAD
        + """\
side_effect: write
input:
  q: {type: string, required: true}
  ids: {type: list}
  note: {type: string}
service: orders
method: PUT
url: "/echo?q={arguments.q}"
query: {id: "{arguments.ids}", absent: "{arguments.note}", fixed: "1"}
headers: {X-Caller: "{actor.user_id}/{arguments.q}"}
body:
  form: {note: "{arguments.note}", q: "{arguments.q}"}
""",
    )
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    call = adapter_call(tool, {"q": "a&b=c#d", "ids": [1, 2]}, traceparent=parent)
    echoed = (await adapter.execute(call)).data["body"]
    assert echoed["query"] == [["q", "a&b=c#d"], ["id", "1"], ["id", "2"], ["fixed", "1"]]
    assert echoed["headers"]["x-caller"] == "alice/a&b=c#d"
    assert echoed["headers"]["traceparent"] == parent
    assert echoed["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert echoed["body"] == "q=a%26b%3Dc%23d"


async def test_url_holes_cannot_add_path_segments(adapter: http.HttpAdapter) -> None:
    tool = CATALOGUE.resolve("orders.get")
    out = await adapter.execute(adapter_call(tool, {"order_id": "../items/1"}))
    assert out.outcome is Outcome.FAILED
    assert out.data["url"].endswith("/orders/..%2Fitems%2F1")
    assert out.error is not None and out.error.code == "http_client_error"
    assert out.error.retryable is False and out.error.details["status"] == 404


async def test_post_with_idempotency_key_creates_one_order(
    adapter: http.HttpAdapter, service: tuple[Starlette, str]
) -> None:
    tool = CATALOGUE.resolve("orders.create")
    before = len(service[0].state.book.orders)
    args = {"item_id": 1, "quantity": 3}
    first = await adapter.execute(adapter_call(tool, args, key="once-1"))
    again = await adapter.execute(adapter_call(tool, args, key="once-1"))
    assert first.outcome is Outcome.SUCCEEDED and again.outcome is Outcome.SUCCEEDED
    assert first.data["body"]["id"] == again.data["body"]["id"]
    assert again.data["headers"]["idempotent-replayed"] == "true"
    assert first.data["body"]["idempotency_key"] == "demo:alice:once-1"
    assert len(service[0].state.book.orders) == before + 1
    ids = [e.ref for e in first.evidence if e.kind == "http_response_id"]
    assert ids == [first.data["body"]["id"]]


async def test_verify_and_reconcile_probe_reads_the_order_by_key(
    adapter: http.HttpAdapter,
) -> None:
    tool = CATALOGUE.resolve("orders.create")
    call = adapter_call(tool, {"item_id": 2, "quantity": 1}, key="probe-1")
    params = {"url": "/orders", "query.idempotency_key": "demo:alice:probe-1", "json_path": "id"}
    assert await adapter.probe("http_get", params, call) is None  # 404: not there
    created = await adapter.execute(call)
    assert await adapter.probe("http_get", params, call) == created.data["body"]["id"]
    status = {**params, "json_path": "$.status"}
    assert await adapter.probe("http_get", status, call) == "created"
    assert await adapter.probe("http_get", {"url": "/healthz"}, call) is True
    assert await adapter.probe("http_get", {"url": "/healthz", "header": "content-type"}, call)
    with pytest.raises(ExecutionError, match="answered 429"):
        await adapter.probe("http_get", {"url": "/flaky"}, call)
    with pytest.raises(ExecutionError, match="no parameters"):
        await adapter.probe("http_get", {"url": "/healthz", "jsonpath": "x"}, call)


# --- egress ---------------------------------------------------------------------------


def _direct(tmp_path: Path, url: str, *, networks: str = "", extra: str = "") -> ToolDeclaration:
    egress = f"egress: {{allow_hosts: ['*'], allow_networks: [{networks}]}}\n"
    return declare(
        tmp_path, HEAD + f"side_effect: read\nmethod: GET\nurl: {url}\n" + egress + extra
    )


async def test_loopback_is_refused_unless_allowed(
    adapter: http.HttpAdapter, service: tuple[Starlette, str], tmp_path: Path
) -> None:
    refused = _direct(tmp_path, f"{service[1]}/items/1")
    with pytest.raises(EgressRefused, match="loopback"):
        await adapter.execute(adapter_call(refused))
    by_name = _direct(tmp_path, f"http://localhost:{service[1].rsplit(':', 1)[1]}/items/1")
    with pytest.raises(EgressRefused, match="loopback"):
        await adapter.execute(adapter_call(by_name))
    allowed = _direct(tmp_path, f"{service[1]}/items/1", networks="127.0.0.1/32")
    assert (await adapter.execute(adapter_call(allowed))).data["status"] == 200


async def test_a_refused_post_changes_nothing(
    adapter: http.HttpAdapter, service: tuple[Starlette, str], tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        HEAD
        + f"""\
side_effect: external
method: POST
url: {service[1]}/orders
body: {{json: {{item_id: 1, quantity: 1}}}}
credentials: [{{header: Authorization, prefix: "Bearer ", env: ORDERS_API_TOKEN}}]
""",
    )
    before = dict(service[0].state.book.orders)
    with pytest.raises(EgressRefused):
        await adapter.execute(adapter_call(tool))
    assert service[0].state.book.orders == before


@pytest.mark.parametrize(
    ("address", "networks", "kind"),
    [
        ("169.254.169.254", "", "cloud metadata"),
        ("169.254.169.254", "169.254.0.0/16", "cloud metadata"),
        ("10.1.2.3", "", "private"),
        ("192.168.0.10", "10.0.0.0/8", "private"),
        ("[fd00:ec2::254]", "", "cloud metadata"),
    ],
)
async def test_private_and_metadata_addresses_are_refused(
    adapter: http.HttpAdapter, tmp_path: Path, address: str, networks: str, kind: str
) -> None:
    tool = _direct(tmp_path, f"http://{address}/latest/meta-data/", networks=networks)
    started = time.monotonic()
    with pytest.raises(EgressRefused, match=kind) as info:
        await adapter.execute(adapter_call(tool))
    assert info.value.retryable is False and info.value.phase is not None
    assert time.monotonic() - started < 1  # refused before connecting, not timed out


async def test_hosts_outside_the_allowlist_are_refused(
    adapter: http.HttpAdapter, tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        HEAD
        + """\
side_effect: read
input: {url: {type: string, required: true}}
method: GET
url: "{arguments.url}"
egress: {allow_hosts: [api.example.com]}
""",
    )
    for url in ("https://evil.example.com/x", "ftp://api.example.com/x", "//evil.example/x"):
        with pytest.raises(ExecutionError) as info:
            await adapter.execute(adapter_call(tool, {"url": url}))
        assert info.value.code in ("egress_refused", "invalid_url")


async def test_redirects_are_off_by_default_and_rechecked_per_hop(
    adapter: http.HttpAdapter, service: tuple[Starlette, str], tmp_path: Path
) -> None:
    base = service[1]
    off = _direct(tmp_path, f"{base}/redirect?to=/items/1", networks="127.0.0.1/32")
    out = await adapter.execute(adapter_call(off))
    assert out.outcome is Outcome.FAILED and out.data["status"] == 302
    assert out.error is not None and out.error.code == "http_redirect"
    follow = f"{base}/redirect?to=/items/1"
    on = _direct(tmp_path, follow, networks="127.0.0.1/32", extra="redirects: 2\n")
    out = await adapter.execute(adapter_call(on))
    assert out.outcome is Outcome.SUCCEEDED and out.data["body"]["id"] == 1
    assert out.data["redirected_from"] == [follow]
    for target, why in (
        ("http://169.254.169.254/latest/", "cloud metadata"),
        ("http://10.0.0.1/", "private"),
    ):
        hop = _direct(
            tmp_path,
            f"{base}/redirect?to={target}",
            networks="127.0.0.1/32",
            extra="redirects: 2\n",
        )
        with pytest.raises(EgressRefused, match=why):
            await adapter.execute(adapter_call(hop))
    narrow = declare(
        tmp_path,
        HEAD + f"side_effect: read\nmethod: GET\nurl: {base}/redirect?to=https://example.org/\n"
        "redirects: 2\negress: {allow_networks: [127.0.0.1/32]}\n",
    )
    with pytest.raises(EgressRefused, match=r"example\.org is not in this tool's allowed"):
        await adapter.execute(adapter_call(narrow))


@pytest.mark.parametrize("location", ["javascript:alert(1)", "data:text/html,hi", "JavaScript:x"])
async def test_a_redirect_to_another_scheme_is_refused_per_hop(
    adapter: http.HttpAdapter, service: tuple[Starlette, str], tmp_path: Path, location: str
) -> None:
    url = f"{service[1]}/redirect?to={location}"
    follow = _direct(tmp_path, url, networks="127.0.0.1/32", extra="redirects: 2\n")
    with pytest.raises(EgressRefused, match="only http and https"):
        await adapter.execute(adapter_call(follow))
    # Not followed, the 302 is the answer: the Location is reported as it came.
    off = _direct(tmp_path, url, networks="127.0.0.1/32")
    out = await adapter.execute(adapter_call(off))
    assert out.outcome is Outcome.FAILED and out.data["status"] == 302
    assert out.error is not None and out.error.code == "http_redirect"
    assert location in out.error.message


@pytest.mark.parametrize(
    "host", ["a.example.com/../", "a.example.com/..", "a.example.com/../../", "a..example.com"]
)
async def test_a_host_template_given_a_path_is_a_clear_egress_error(
    adapter: http.HttpAdapter, tmp_path: Path, host: str
) -> None:
    tool = declare(
        tmp_path,
        HEAD
        + """\
side_effect: read
input: {host: {type: string, required: true}}
method: GET
url: "https://{arguments.host}/x"
egress: {allow_hosts: ["*.example.com"]}
""",
    )
    with pytest.raises(EgressRefused) as info:
        await adapter.execute(adapter_call(tool, {"host": host}))
    assert info.value.code == "egress_refused" and info.value.retryable is False


# --- failures -------------------------------------------------------------------------


async def test_closed_port_is_a_clear_retryable_error(
    adapter: http.HttpAdapter, tmp_path: Path
) -> None:
    port = closed_port()
    tool = _direct(tmp_path, f"http://127.0.0.1:{port}/items/1", networks="127.0.0.1/32")
    with pytest.raises(ExecutionError) as info:
        await adapter.execute(adapter_call(tool))
    error = info.value
    assert error.code == "http_unreachable" and error.retryable is True
    assert f"127.0.0.1:{port}" in error.message and "refused" in error.message
    assert "nothing was sent" in error.message


async def test_slow_response_of_a_post_is_an_uncertain_timeout(
    adapter: http.HttpAdapter, service: tuple[Starlette, str], tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        HEAD
        + """\
side_effect: external
service: orders
method: POST
url: /orders?delay_ms=3000
body: {json: {item_id: 1, quantity: 1}}
idempotency_header: Idempotency-Key
credentials: [{header: Authorization, prefix: "Bearer ", env: ORDERS_API_TOKEN}]
""",
    )
    started = time.monotonic()
    with pytest.raises(ExecutionError) as info:
        await adapter.execute(adapter_call(tool, key="slow-1", seconds=0.5))
    assert time.monotonic() - started < 1.5
    assert info.value.code == "timeout"
    assert info.value.retryable is True  # the provider's idempotency key makes a retry safe
    assert "may have processed it" in info.value.message
    assert "slow-1" in service[0].state.book.by_key  # and it did


async def test_dropped_connection_after_send_is_uncertain(
    adapter: http.HttpAdapter, tmp_path: Path
) -> None:
    with dropping_server() as port:
        tool = declare(
            tmp_path,
            HEAD
            + f"""\
side_effect: external
method: POST
url: http://127.0.0.1:{port}/orders
body: {{json: {{a: 1}}}}
egress: {{allow_networks: [127.0.0.1/32]}}
""",
        )
        with pytest.raises(ExecutionError) as info:
            await adapter.execute(adapter_call(tool))
    assert info.value.code == "interrupted"
    assert info.value.details["reason"] == "response_lost"
    assert info.value.retryable is False  # a POST without a provider key may duplicate


@pytest.mark.parametrize(
    ("method", "status", "code", "retryable"),
    [
        ("GET", 429, "http_rate_limited", True),
        ("POST", 429, "http_rate_limited", True),
        ("GET", 503, "http_server_error", True),
        ("POST", 503, "http_server_error", False),
        ("GET", 400, "http_client_error", False),
        ("GET", 408, "http_request_timeout", True),
    ],
)
async def test_status_errors_carry_retryable_and_retry_after(
    adapter: http.HttpAdapter,
    tmp_path: Path,
    method: str,
    status: int,
    code: str,
    retryable: bool,
) -> None:
    tool = declare(
        tmp_path,
        HEAD
        + f"""\
side_effect: {"read" if method == "GET" else "external"}
service: orders
method: {method}
url: /flaky?status={status}&after=2
""",
    )
    out = await adapter.execute(adapter_call(tool))
    assert out.outcome is Outcome.FAILED
    assert out.error is not None
    assert (out.error.code, out.error.retryable) == (code, retryable)
    assert out.error.to_json()["retry_after_ms"] == 2000
    assert out.data["body"] == {"error": "try again later"}
    assert out.side_effect.committed is False


def test_retry_after_parses_seconds_and_dates() -> None:
    now = time.time()
    later = format_datetime(datetime.fromtimestamp(now, UTC) + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after("120") == 120_000
    assert 29_000 <= (parse_retry_after(later, now) or 0) <= 30_000
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


async def test_output_budget_truncates_the_body(adapter: http.HttpAdapter, tmp_path: Path) -> None:
    tool = declare(
        tmp_path, HEAD + "side_effect: read\nservice: orders\nmethod: GET\nurl: /big?bytes=100000\n"
    )
    out = await adapter.execute(adapter_call(tool, budget=1024))
    assert out.truncated is True
    assert out.data["body_encoding"] == "text"
    assert len(out.data["body"]) == 1024 and out.data["body"].startswith('{"data":"xxx')
    assert out.evidence[0].sha256 is None  # a partial body is not hashed as if whole


async def test_cancel_before_and_during_a_read(
    adapter: http.HttpAdapter, service: tuple[Starlette, str], tmp_path: Path
) -> None:
    slow = "/slow?seconds=5&for=read"
    tool = declare(
        tmp_path, HEAD + f"side_effect: read\nservice: orders\nmethod: GET\nurl: {slow}\n"
    )
    event = anyio.Event()
    event.set()
    out = await adapter.execute(adapter_call(tool, cancelled=event))
    assert out.outcome is Outcome.CANCELLED and out.side_effect.attempted is False
    event = anyio.Event()
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_once_requested, service[0], slow, event)
        out = await adapter.execute(adapter_call(tool, cancelled=event))
    assert out.outcome is Outcome.CANCELLED
    assert time.monotonic() - started < 2


async def test_cancel_during_a_post_is_uncertain(
    adapter: http.HttpAdapter, service: tuple[Starlette, str], tmp_path: Path
) -> None:
    slow = "/slow?seconds=5&for=post"
    tool = declare(
        tmp_path, HEAD + f"side_effect: external\nservice: orders\nmethod: POST\nurl: {slow}\n"
    )
    event = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_once_requested, service[0], slow, event)
        with pytest.raises(ExecutionError) as info:
            await adapter.execute(adapter_call(tool, cancelled=event))
    assert info.value.code == "cancelled"
    assert info.value.details["reason"] == "cancelled_in_flight"


async def _cancel_once_requested(app: Starlette, path: str, cancelled: anyio.Event) -> None:
    """Cancels once the service has received the request for ``path``: the call is in flight."""
    await until(lambda: path in app.state.requested, f"a request for {path}")
    cancelled.set()


# --- credentials ----------------------------------------------------------------------


async def test_secrets_are_sent_and_redacted_everywhere(
    service: tuple[Starlette, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "api_key").write_text("file-secret-value-99\n")
    monkeypatch.setenv("T_HTTP_TOKEN", "env-secret-value-42")
    tool = declare(
        tmp_path,
        HEAD
        + """\
side_effect: read
service: orders
method: GET
url: /echo
credentials:
  - {header: Authorization, prefix: "Bearer ", env: T_HTTP_TOKEN}
  - {header: X-Api-Key, file: api_key}
response_headers: [content-type]
""",
    )
    opened = http.HttpAdapter(http_config(service[1], secrets_dir=str(secrets)))
    try:
        out = await opened.execute(adapter_call(tool))
    finally:
        await opened.aclose()
    headers = out.data["body"]["headers"]
    assert headers["authorization"] == "Bearer [redacted]"
    assert headers["x-api-key"] == "[redacted]"
    text = json.dumps([out.data, [e.to_json() for e in out.evidence], out.side_effect.to_json()])
    assert "env-secret-value-42" not in text and "file-secret-value-99" not in text


async def test_the_preview_names_the_request_with_secrets_redacted(
    service: tuple[Starlette, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("T_HTTP_TOKEN", "env-secret-value-42")
    tool = declare(
        tmp_path,
        HEAD
        + """\
side_effect: write
service: orders
method: POST
url: /echo
credentials:
  - {header: Authorization, prefix: "Bearer ", env: T_HTTP_TOKEN}
""",
    )
    opened = http.HttpAdapter(http_config(service[1]))
    try:
        shown = await opened.preview(adapter_call(tool))
    finally:
        await opened.aclose()
    assert shown["method"] == "POST" and shown["url"] == service[1] + "/echo", shown
    assert ["Authorization", "[redacted]"] in shown["headers"]
    assert "env-secret-value-42" not in json.dumps(shown)


async def test_missing_and_unsafe_secrets_are_refused_before_sending(
    adapter: http.HttpAdapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = declare(
        tmp_path,
        HEAD + "side_effect: read\nservice: orders\nmethod: GET\nurl: /echo\n"
        "credentials: [{header: X-Key, env: T_HTTP_MISSING}]\n",
    )
    monkeypatch.delenv("T_HTTP_MISSING", raising=False)
    with pytest.raises(ExecutionError) as info:
        await adapter.execute(adapter_call(tool))
    assert info.value.code == "credential_missing" and "T_HTTP_MISSING" in info.value.message
    monkeypatch.setenv("T_HTTP_MISSING", "x7y9z")
    with pytest.raises(ExecutionError) as info:
        await adapter.execute(adapter_call(tool))
    assert info.value.code == "credential_invalid" and "x7y9z" not in info.value.message


# --- declarations and configuration ---------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "fault"),
    [
        ("method: GET\nurl: /x\nservice: orders\ncolour: red\n", "colour"),
        ("method: FETCH\nurl: /x\nservice: orders\n", "method"),
        ("method: GET\nurl: /items/{arguments.nope}\nservice: orders\n", "arguments.nope"),
        ("method: GET\nurl: /x\n", "declare base_url or service"),
        ("method: GET\nurl: x/y\nservice: orders\n", "must be an absolute"),
        ("method: GET\nurl: '{arguments.id}'\n", "egress.allow_hosts"),
        (
            "method: GET\nurl: /x\nservice: orders\nheaders: {Authorization: 'Bearer x'}\n",
            "never inline",
        ),
        ("method: GET\nurl: /x\nservice: orders\nheaders: {Host: evil}\n", "set by the gateway"),
        ("method: GET\nurl: /x\nservice: orders\nbody: {json: {a: 1}}\n", "has no body"),
        (
            "method: GET\nurl: /x\nservice: orders\ncredentials: [{header: A, env: X, file: y}]\n",
            "exactly one of env or file",
        ),
        (
            "method: GET\nurl: /x\nservice: orders\negress: {allow_networks: [10.1.2.3/8]}\n",
            "10.1.2.3/8",
        ),
        ("method: GET\nurl: /x\nbase_url: 'http://h/{arguments.id}'\n", "base URL is fixed"),
        ("method: POST\nurl: /x\nservice: orders\nbody: {json: {a: '{unclosed'}}\n", "unclosed"),
        ("method: GET\nurl: /x\nservice: orders\nresponse_id: {json_path: 'a..b'}\n", "JSON path"),
    ],
)
def test_bad_declarations_are_rejected_at_load(tmp_path: Path, extra: str, fault: str) -> None:
    text = HEAD + "side_effect: read\ninput: {id: {type: string}}\n" + extra
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_catalogue(tmp_path)
    message = "; ".join(info.value.problems)
    assert fault in message
    assert "bad.yaml:" in message


def test_unknown_service_and_bad_settings_fail_the_start(project: Path) -> None:
    settings = load_settings(project / "toolgate.yaml", env={})
    with pytest.raises(ConfigError) as info:
        http.create(settings, {"services": {}}, catalogue_of(settings))
    assert "orders.create.yaml" in str(info.value) and "service 'orders'" in str(info.value)
    with pytest.raises(ConfigError, match=r"adapters\.http\.max_conections"):
        http.create(settings, {"max_conections": 3}, catalogue_of(settings))
    with pytest.raises(ConfigError, match=r"adapters\.http\.services\.orders\.base_url"):
        http.create(
            settings, {"services": {"orders": {"base_url": "ftp://x"}}}, catalogue_of(settings)
        )


def test_options_publish_a_json_schema() -> None:
    schema = HttpOptions.model_json_schema()
    assert {"method", "url", "body", "egress", "credentials"} <= set(schema["properties"])


# --- through the whole gateway API ----------------------------------------------------

EXTRA_TOOLS = {
    "orders.create_slow": "url: /orders?delay_ms=3000\nreconcile:\n  - {probe: http_get, "
    "url: /orders, query.idempotency_key: '{request.idempotency_key}', json_path: id}\n",
    "orders.post_slow": "url: /slow?seconds=3\nreconcile:\n  - {probe: http_get, "
    "url: /orders, query.idempotency_key: '{request.idempotency_key}', json_path: id}\n",
    "orders.create_blind": "url: /orders?delay_ms=3000\n",
}


def _write_extra_tools(tools: Path) -> None:
    for name, keys in EXTRA_TOOLS.items():
        (tools / f"{name}.yaml").write_text(
            f"name: {name}\nversion: 1.0.0\ndescription: test\nadapter: http\n"
            "operation: request\nrisk: low\nside_effect: external\nidempotency: required\n"
            "input: {item_id: {type: integer}}\nservice: orders\nmethod: POST\n"
            "body: {json: {item_id: '{arguments.item_id}', quantity: 1}}\n"
            "idempotency_header: Idempotency-Key\n"
            "credentials: [{header: Authorization, prefix: 'Bearer ', env: ORDERS_API_TOKEN}]\n"
            + keys
        )
    port = closed_port()
    (tools / "http.nowhere.yaml").write_text(
        "name: http.nowhere\nversion: 1.0.0\ndescription: test\nadapter: http\n"
        "operation: request\nrisk: low\nside_effect: read\nmethod: GET\n"
        f"url: http://127.0.0.1:{port}/x\negress: {{allow_networks: [127.0.0.1/32]}}\n"
    )


@pytest.fixture(scope="module")
def client(
    tmp_path_factory: pytest.TempPathFactory, service: tuple[Starlette, str]
) -> Iterator[TestClient]:
    """One gateway for the API tests of this module (its start-up takes seconds)."""
    project = tmp_path_factory.mktemp("project")
    for name in ("tools.d", "rego", "policies", "examples"):
        shutil.copytree(REPO / name, project / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "toolgate.yaml", project / "toolgate.yaml")
    _write_extra_tools(project / "tools.d")
    loaded = load_settings(
        project / "toolgate.yaml", env={}, database_url=f"sqlite:///{project}/var/toolgate.db"
    )
    section = {"services": {"orders": {"base_url": service[1], "allow_networks": LOOPBACK}}}
    settings: Settings = loaded.model_copy(
        update={"adapters": {**loaded.adapters, "http": section}}
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


def _run(client: TestClient, tool: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    response = client.post("/v1/executions", json=body(tool, arguments, **extra), headers=auth())
    assert response.status_code == 200, response.text
    assert TOKEN not in response.text
    result: dict[str, Any] = response.json()
    return result


def _events(client: TestClient, execution: dict[str, Any]) -> str:
    response = client.get(execution["links"]["events"], headers=auth())
    assert response.status_code == 200
    return response.text


def test_api_get_json(client: TestClient) -> None:
    execution = _run(client, "http.get_json", {"path": "/items/1"})
    result = execution["result"]
    assert result["outcome"] == "succeeded", result
    assert result["data"]["body"]["name"] == "widget"
    assert [e["kind"] for e in result["evidence"]] == ["http_response", "http_response_id"]
    assert "tool.completed" in _events(client, execution)


def test_api_create_order_once_with_verify_and_no_secret_anywhere(
    client: TestClient, service: tuple[Starlette, str]
) -> None:
    before = len(service[0].state.book.orders)
    payload = body("orders.create", {"item_id": 3, "quantity": 2}, idempotency_key="api-1")
    first = client.post("/v1/executions", json=payload, headers=auth()).json()
    replay = client.post(
        "/v1/executions", json={**payload, "call_id": "again"}, headers=auth()
    ).json()
    result = first["result"]
    assert result["outcome"] == "succeeded", result
    assert replay["id"] == first["id"]
    verify = [e for e in result["evidence"] if e["kind"] == "probe"]
    assert verify and verify[0]["passed"] is True
    assert len(service[0].state.book.orders) == before + 1
    for text in (json.dumps(first), _events(client, first)):
        assert TOKEN not in text


def test_api_timeout_is_reconciled_by_the_probe(client: TestClient) -> None:
    deadline = int((time.time() + 0.8) * 1000)
    execution = _run(
        client, "orders.create_slow", {"item_id": 1}, idempotency_key="late-1", deadline=deadline
    )
    result = execution["result"]
    assert result["outcome"] == "succeeded", result
    assert result["side_effect"]["summary"] == "reconciled: the side effect is in place"
    assert any(e["kind"] == "probe" and e["passed"] for e in result["evidence"])


def test_api_timeout_without_the_effect_is_reconciled_failed(client: TestClient) -> None:
    deadline = int((time.time() + 0.8) * 1000)
    execution = _run(
        client, "orders.post_slow", {"item_id": 1}, idempotency_key="late-2", deadline=deadline
    )
    result = execution["result"]
    assert result["outcome"] == "failed", result
    assert result["error"]["type"] == "timeout" and result["error"]["phase"] == "execute"
    assert result["side_effect"]["summary"] == "reconciled: the side effect did not happen"


def test_api_timeout_without_reconcile_is_unknown(client: TestClient) -> None:
    deadline = int((time.time() + 0.8) * 1000)
    execution = _run(
        client, "orders.create_blind", {"item_id": 2}, idempotency_key="late-3", deadline=deadline
    )
    result = execution["result"]
    assert result["outcome"] == "unknown", result
    assert result["error"]["type"] == "timeout"
    assert "may have processed it" in result["error"]["message"]


def test_api_unreachable_host_is_a_clear_retryable_error(client: TestClient) -> None:
    result = _run(client, "http.nowhere", {})["result"]
    assert result["outcome"] == "failed"
    error = result["error"]
    assert (error["type"], error["phase"], error["retryable"]) == (
        "http_unreachable",
        "execute",
        True,
    )
    assert "Traceback" not in error["message"] and "nothing was sent" in error["message"]
    assert result["side_effect"]["committed"] is False


def test_probe_parameters_are_checked_at_start(project: Path) -> None:
    bad = project / "tools.d" / "t.probe.yaml"
    bad.write_text(
        HEAD.replace("t.http", "t.probe")
        + "side_effect: external\nservice: orders\nmethod: POST\nurl: /orders\n"
        "reconcile:\n  - {probe: http_get, url: /orders, jsonpath: id}\n"
        "  - {probe: http_get, url: /orders, status: '2x'}\n"
    )
    settings = load_settings(project / "toolgate.yaml", env={})
    with pytest.raises(ConfigError) as info:
        http.create(settings, settings.adapters["http"], catalogue_of(settings))
    problems = info.value.problems
    assert any(
        "t.probe.yaml:12: reconcile.0.jsonpath" in p and "no parameter" in p for p in problems
    )
    assert any("reconcile.1.status" in p and "'2x'" in p for p in problems)


def test_the_full_declaration_in_the_docs_loads(tmp_path: Path) -> None:
    text = (REPO / "docs" / "adapters" / "http.md").read_text(encoding="utf-8")
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    tool = declare(tmp_path, block)
    options = tool.options
    assert isinstance(options, HttpOptions)
    documented = {
        line.split("`")[1].split(".")[0].split("[")[0]
        for line in text.split("## Every key", 1)[1].split("## ", 1)[0].splitlines()
        if line.startswith("| `")
    }
    assert set(HttpOptions.model_fields) - {"base_url"} <= set(block.split()) | documented
    assert set(HttpOptions.model_fields) <= documented


# --- a credential the upstream echoes back ---------------------------------------------------

CANARY = "canary-Zx81-credential-7731"


def _echoing_app() -> Starlette:
    """An upstream that echoes the X-Api-Key it gets into every place a response has."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def key(request: Request) -> str:
        return request.headers.get("x-api-key", "")

    async def echo_id(request: Request) -> Response:
        k = key(request)
        return JSONResponse({"id": k, "note": f"hello {k}"}, headers={"X-Request-Id": k})

    async def fail(request: Request) -> Response:
        k = key(request)
        return JSONResponse({"id": k}, status_code=503, headers={"X-Request-Id": k})

    async def moved(request: Request) -> Response:
        return Response(status_code=302, headers={"Location": f"/elsewhere?token={key(request)}"})

    return Starlette(
        routes=[
            Route("/id", echo_id, methods=["GET", "POST"]),
            Route("/fail", fail, methods=["GET", "POST"]),
            Route("/moved", moved, methods=["GET", "POST"]),
        ]
    )


def _leaky_tool(name: str, path: str, base: str, extra: str = "") -> str:
    return (
        f"name: {name}\nversion: 1.0.0\ndescription: test\nadapter: http\noperation: request\n"
        f"risk: low\nside_effect: external\nmethod: POST\nurl: {base}{path}\n"
        "egress: {allow_networks: [127.0.0.1/32]}\n"
        "credentials: [{header: X-Api-Key, env: T_CANARY_KEY}]\n"
        "response_headers: [x-request-id, location]\n" + extra
    )


def test_a_secret_the_upstream_echoes_is_redacted_everywhere(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 21 §2: the response id evidence held the raw secret."""
    import logging

    monkeypatch.setenv("T_CANARY_KEY", CANARY)
    caplog.set_level(logging.DEBUG)
    with serving(_echoing_app()) as base:
        tools = project / "tools.d"
        probe = "{probe: http_get, url: " + base + "/id, header: X-Request-Id, equals: nope}"
        (tools / "t.leak_id.yaml").write_text(
            _leaky_tool(
                "t.leak_id",
                "/id",
                base,
                f"response_id: {{header: X-Request-Id}}\nverify: [{probe}]\n",
            )
        )
        (tools / "t.leak_json_id.yaml").write_text(
            _leaky_tool("t.leak_json_id", "/fail", base, "response_id: {json_path: id}\n")
        )
        (tools / "t.leak_redirect.yaml").write_text(_leaky_tool("t.leak_redirect", "/moved", base))
        (tools / "t.leak_reconcile.yaml").write_text(
            _leaky_tool("t.leak_reconcile", "/fail", base, f"reconcile: [{probe}]\n")
        )
        settings = load_settings(
            project / "toolgate.yaml", env={}, database_url=f"sqlite:///{tmp_path / 'gw.db'}"
        )
        texts: list[str] = []
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            for tool in ("t.leak_id", "t.leak_json_id", "t.leak_redirect", "t.leak_reconcile"):
                response = client.post("/v1/executions", json=body(tool, {}), headers=auth())
                assert response.status_code == 200, response.text
                execution = response.json()
                assert execution["status"] == "completed", execution
                texts.append(response.text)
                texts.append(client.get(f"/v1/executions/{execution['id']}", headers=auth()).text)
                texts.append(_events(client, execution))
            first = json.loads(texts[0])["result"]
    evidence = {e["kind"]: e for e in first["evidence"]}
    assert evidence["http_response_id"]["ref"] == "[redacted]"
    assert first["data"]["headers"]["x-request-id"] == "[redacted]"
    probes = [e for e in first["evidence"] if e["kind"] == "probe"]
    assert probes and probes[0]["observed"] == "[redacted]"
    for text in texts:
        assert CANARY not in text
    assert CANARY not in caplog.text
