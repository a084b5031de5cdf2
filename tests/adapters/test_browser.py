"""The browser adapter against Debian's Chromium and pages served on 127.0.0.1.

Off CI a missing /usr/bin/chromium skips these tests with the reason; in CI (CI=true) it
fails them. ``PageServer`` is also used by tests/server/test_artifacts.py.
"""

from __future__ import annotations

import hashlib
import html
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import cerberus
import pytest

from gateway.adapters.base import AdapterCall
from gateway.adapters.browser.adapter import BrowserAdapter
from gateway.adapters.browser.sessions import DEFAULT_EXECUTABLE, BrowserConfig
from gateway.adapters.browser.spec import StepDecl
from gateway.adapters.browser.steps import fit_budget, translate_error
from gateway.adapters.shared.artifacts import ArtifactStore
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ConfigError, ExecutionError
from gateway.testing import load_catalogue, load_declaration
from gateway.types import Outcome
from gateway.workspace import Workspace
from tests.helpers import IN_CI, REPO, starts_processes, until

pytestmark = pytest.mark.anyio
CATALOGUE = load_catalogue(REPO / "tools.d")
LOOPBACK = "127.0.0.1/32"


def require_chromium() -> None:
    """Skip (off CI) or fail (CI) when Debian's chromium is not installed."""
    if DEFAULT_EXECUTABLE.is_file():
        return
    reason = f"chromium not found at {DEFAULT_EXECUTABLE}: apt-get install -y chromium"
    if IN_CI:
        pytest.fail(f"{reason}; CI requires it", pytrace=False)
    pytest.skip(reason)


# --- pages served on loopback -------------------------------------------------------------

FORM = """<!doctype html><title>Order</title>
<form method=post action=/submit>
  <input id=name name=name> <input id=email name=email>
  <select id=plan name=plan><option value=basic>Basic</option><option value=pro>Pro</option>
  </select> <button type=submit>Order</button>
</form>"""
TABLE = """<!doctype html><title>Prices</title>
<table id=prices><tr><th>plan</th><th>price</th></tr>
<tr><td>basic</td><td>5</td></tr><tr><td>pro</td><td>20</td></tr></table>
<a id=docs href="/docs/intro">Docs</a><ul><li class=i>one</li><li class=i>two</li></ul>"""
BUTTON = """<!doctype html><title>Button</title>
<p id=status>waiting</p>
<button id=go onclick="document.getElementById('status').textContent='clicked'">Go</button>
<script>setTimeout(() => document.body.insertAdjacentHTML('beforeend',
  '<p id=late>late</p>'), 300)</script>"""


def _pages(port: int) -> dict[str, str]:
    return {
        "/form": FORM,
        "/table": TABLE,
        "/button": BUTTON,
        "/private-img": f'<title>img</title><img src="http://127.0.0.2:{port}/table">',
        "/ws": f"""<title>ws</title><p id=ws>open</p><script>
const ws = new WebSocket("ws://127.0.0.2:{port}/");
ws.onclose = e => {{ const p = document.getElementById("ws");
  p.textContent = "closed " + e.code; p.className = "done"; }};</script>""",
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _send(self, body: str, status: int = 200, headers: dict[str, str] | None = None) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        self.server.seen.append(dict(self.headers))
        self.server.requested.append(self.path)
        if parts.path == "/slow":
            time.sleep(min(float(query.get("s", ["3"])[0]), 5.0))
            self._send("<title>slow</title><p id=done>done</p>")
        elif parts.path == "/redirect":
            self._send("", 302, {"Location": query["to"][0]})
        elif parts.path == "/headers":
            shown = html.escape(json.dumps(dict(self.headers)))
            self._send(f"<title>headers</title><pre id=h>{shown}</pre>")
        elif parts.path in self.server.pages:
            self._send(self.server.pages[parts.path])
        else:
            self._send("<title>missing</title>", 404)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode("utf-8"))
        name = html.escape(form.get("name", [""])[0])
        plan = html.escape(form.get("plan", [""])[0])
        self.server.orders.append(form)
        self._send(f"<title>Done</title><p id=result>Thank you, {name}: {plan} plan ordered.</p>")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    pages: dict[str, str]
    seen: list[dict[str, str]]
    requested: list[str]
    """The paths (with their query) asked for by GET, in order."""
    orders: list[dict[str, list[str]]]


class PageServer:
    """Test pages on 127.0.0.1 (and the same on 127.0.0.2, for egress tests)."""

    def __init__(self) -> None:
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []
        self.port = 0

    def __enter__(self) -> PageServer:
        for host in ("127.0.0.1", "127.0.0.2"):
            server = _Server((host, self.port), _Handler)
            self.port = server.server_address[1]
            server.seen, server.requested, server.orders = [], [], []
            self._servers.append(server)
        for server in self._servers:
            server.pages = _pages(self.port)
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(5)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    @property
    def orders(self) -> list[dict[str, list[str]]]:
        return self._servers[0].orders

    @property
    def seen(self) -> list[dict[str, str]]:
        return self._servers[0].seen

    async def requested(self, path: str) -> None:
        """Returns once 127.0.0.1 has been asked for ``path``: a call is then in flight."""
        await until(lambda: path in self._servers[0].requested, f"a request for {path}")


@pytest.fixture(scope="module")
def pages() -> Iterator[PageServer]:
    with PageServer() as server:
        yield server


# --- the adapter under test ---------------------------------------------------------------


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("var")


@pytest.fixture(scope="module")
@starts_processes
async def adapter(var_dir: Path) -> AsyncIterator[BrowserAdapter]:
    """One adapter (one Chromium) for the module; loopback 127.0.0.1 only is allowed."""
    require_chromium()
    config = BrowserConfig.model_validate({"allow_networks": [LOOPBACK]})
    browser = BrowserAdapter(config, ArtifactStore(var_dir / "artifacts"))
    try:
        yield browser
    finally:
        await browser.aclose()


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace("demo", tmp_path.resolve())


def declare(tmp_path: Path, body: str, name: str = "t.browser") -> ToolDeclaration:
    """A browser tool from YAML (common keys filled in), loaded by the real loader."""
    text = (
        f"name: {name}\nversion: 1.0.0\ndescription: test\nadapter: browser\n"
        "risk: low\nreversible: true\nidempotency: none\n"
        "input:\n  url: {type: string, required: true}\n"
        "  selector: {type: string, required: true}\n"
        "  session: {type: string, required: true}\n"
        "  value: {type: string, required: true}\n" + body
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return load_declaration(path)[0]


def make_call(
    tool: ToolDeclaration,
    ws: Workspace,
    seconds: float = 20.0,
    user: str = "alice",
    traceparent: str | None = None,
    **arguments: Any,
) -> AdapterCall:
    """A call with the tool's defaults filled in, as the normalise stage would."""
    arguments = cerberus.Validator(tool.input).normalized(arguments) or arguments
    return AdapterCall(
        execution_id="ex_test",
        tool=tool,
        arguments=arguments,
        workspace=ws,
        paths={},
        deadline=time.time() + seconds,
        cancelled=anyio.Event(),
        fencing_tokens={},
        output_budget=tool.output_budget,
        context={
            "arguments": arguments,
            "workspace": ws.to_json(),
            "actor": {"user_id": user, "agent_id": "coder"},
        },
        traceparent=traceparent,
    )


def _png_on_disk(var_dir: Path, data: dict[str, Any]) -> bytes:
    shot = data["screenshot"]
    png = (var_dir / "artifacts" / f"{shot['artifact_id']}.bin").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert hashlib.sha256(png).hexdigest() == shot["sha256"]
    return png


# --- each operation -----------------------------------------------------------------------


async def test_extract_text_returns_evidence_and_a_stored_screenshot(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace, var_dir: Path
) -> None:
    tool = CATALOGUE.resolve("web.extract_text")
    out = await adapter.execute(
        make_call(tool, ws, url=pages.url("/table"), selector="li.i", session="main")
    )
    assert out.outcome is Outcome.SUCCEEDED, out.error
    assert out.data["extracted"] == {"text": ["one", "two"]}
    assert out.data["url"] == pages.url("/table")
    assert out.data["title"] == "Prices"
    assert out.data["status"] == 200
    _png_on_disk(var_dir, out.data)
    kinds = [e.kind for e in out.evidence]
    assert kinds == ["page", "screenshot", "extracted"]
    shot = out.evidence[1]
    assert shot.sha256 == out.data["screenshot"]["sha256"]
    assert shot.ref == f"/v1/artifacts/{out.data['screenshot']['artifact_id']}"
    meta = json.loads((var_dir / "artifacts" / f"{shot.data['artifact_id']}.json").read_text())
    assert meta["owner"] == "alice"
    assert out.side_effect.attempted is False


async def test_click_then_wait_for_then_extract(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace, tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        "operation: steps\nside_effect: read\nsteps:\n"
        '  - {open: "{arguments.url}"}\n'
        "  - {click: '#go'}\n"
        "  - {wait_for: '#late'}\n"
        "  - {extract: '#status', name: status}\n",
    )
    out = await adapter.execute(make_call(tool, ws, url=pages.url("/button")))
    assert out.outcome is Outcome.SUCCEEDED, out.error
    assert out.data["extracted"] == {"status": "clicked"}
    assert [s["action"] for s in out.data["steps"]] == ["open", "click", "wait_for", "extract"]
    assert out.side_effect.attempted and out.side_effect.committed


async def test_fill_select_and_read_values(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace, tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        "operation: steps\nside_effect: read\nsession: forms\nsteps:\n"
        '  - {open: "{arguments.url}"}\n'
        '  - {fill: "#name", value: "{arguments.value}"}\n'
        "  - {select: '#plan', value: Pro}\n"
        "  - {extract: '#name', as: value, name: name}\n"
        "  - {extract: '#plan', as: value, name: plan}\n",
    )
    out = await adapter.execute(make_call(tool, ws, url=pages.url("/form"), value="Ada"))
    assert out.outcome is Outcome.SUCCEEDED, out.error
    assert out.data["extracted"] == {"name": "Ada", "plan": "pro"}
    assert out.data["session"] == "forms"


async def test_extract_table_rows_and_attributes(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace, tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        "operation: steps\nside_effect: read\nsteps:\n"
        '  - {open: "{arguments.url}"}\n'
        "  - {extract: '#prices', as: table, name: prices}\n"
        "  - {extract: '#docs', as: attribute, attribute: href, name: link}\n",
    )
    out = await adapter.execute(make_call(tool, ws, url=pages.url("/table")))
    assert out.outcome is Outcome.SUCCEEDED, out.error
    assert out.data["extracted"]["prices"] == [
        {"plan": "basic", "price": "5"},
        {"plan": "pro", "price": "20"},
    ]
    assert out.data["extracted"]["link"] == "/docs/intro"


async def test_screenshot_of_an_element_and_of_the_page(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace, var_dir: Path, tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        "operation: steps\nside_effect: read\nsteps:\n"
        '  - {open: "{arguments.url}"}\n'
        "  - {screenshot: '#prices', name: table}\n",
    )
    out = await adapter.execute(make_call(tool, ws, url=pages.url("/table")))
    assert out.outcome is Outcome.SUCCEEDED, out.error
    table = out.data["screenshots"]["table"]
    assert table["artifact_id"] != out.data["screenshot"]["artifact_id"]
    assert [e.kind for e in out.evidence] == ["page", "screenshot", "screenshot"]
    _png_on_disk(var_dir, out.data)
    page_tool = CATALOGUE.resolve("web.screenshot")
    full = await adapter.execute(make_call(page_tool, ws, url=pages.url("/form"), session="s2"))
    assert full.outcome is Outcome.SUCCEEDED, full.error
    # the declared full-page screenshot doubles as the evidence screenshot
    assert full.data["screenshot"] == full.data["screenshots"]["page"]


async def test_session_is_reused_across_calls(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace, tmp_path: Path
) -> None:
    opener = declare(
        tmp_path,
        "operation: steps\nside_effect: read\nsession: '{arguments.session}'\nsteps:\n"
        '  - {open: "{arguments.url}"}\n'
        "  - {click: '#go'}\n",
        name="t.open",
    )
    reader = declare(
        tmp_path,
        "operation: extract\nside_effect: read\nsession: '{arguments.session}'\n"
        "step_timeout: 500ms\nsteps:\n"
        "  - {extract: '#status', name: status}\n",
        name="t.read",
    )
    await adapter.execute(make_call(opener, ws, url=pages.url("/button"), session="keep"))
    context = adapter.pool.sessions[("demo", "keep")].context
    out = await adapter.execute(make_call(reader, ws, session="keep"))
    assert out.data["extracted"] == {"status": "clicked"}
    assert adapter.pool.sessions[("demo", "keep")].context is context
    other = await adapter.execute(make_call(reader, Workspace("ops", ws.root), session="keep"))
    assert other.outcome is Outcome.FAILED  # another workspace's session has a blank page
    assert other.error is not None and other.error.code == "selector_not_found"


async def test_one_action_at_a_time_per_session(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace
) -> None:
    tool = CATALOGUE.resolve("web.extract_text")
    outcomes = []

    async def one() -> None:
        call = make_call(tool, ws, url=pages.url("/slow?s=0.6"), selector="#done", session="par")
        outcomes.append(await adapter.execute(call))

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        tg.start_soon(one)
    assert time.monotonic() - started >= 1.2  # the second waited for the first
    assert [o.outcome for o in outcomes] == [Outcome.SUCCEEDED, Outcome.SUCCEEDED]
    browser = adapter.pool.browser
    assert browser is not None
    assert len(browser.contexts) == len(adapter.pool.sessions)  # no context made twice


async def test_traceparent_is_sent_with_page_requests(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace
) -> None:
    tool = CATALOGUE.resolve("web.extract_text")
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    out = await adapter.execute(
        make_call(tool, ws, traceparent=parent, url=pages.url("/headers"), selector="#h")
    )
    assert out.outcome is Outcome.SUCCEEDED, out.error
    assert json.loads(out.data["extracted"]["text"][0])["traceparent"] == parent


# --- bad input: clear errors, nothing broken ----------------------------------------------


async def test_selector_not_found_is_a_clear_failure(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace, tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        "operation: steps\nside_effect: read\nsession: nf\nsteps:\n"
        '  - {open: "{arguments.url}"}\n'
        "  - {click: '#missing', timeout: 300ms}\n",
    )
    out = await adapter.execute(make_call(tool, ws, url=pages.url("/form")))
    assert out.outcome is Outcome.FAILED
    assert out.error is not None
    assert out.error.code == "selector_not_found"
    assert out.error.message == "step 2 (click): no element matched selector '#missing' within 0.3s"
    assert "Call log" not in out.error.message
    assert [e.kind for e in out.evidence][:2] == ["page", "screenshot"]
    assert adapter.pool.sessions[("demo", "nf")].page is not None  # the page stays open


@pytest.mark.parametrize(
    ("step", "code", "text"),
    [
        ("{click: 'button, input'}", "selector_ambiguous", "matches 3 elements"),
        ("{click: 'div[[['}", "bad_selector", "'div[[[' is not a valid selector"),
        ("{fill: 'button', value: x}", "wrong_element", "cannot be used for fill"),
        ("{select: '#plan', value: gold}", "option_not_found", "no option with value or label"),
    ],
)
async def test_bad_steps_are_translated(
    adapter: BrowserAdapter,
    pages: PageServer,
    ws: Workspace,
    tmp_path: Path,
    step: str,
    code: str,
    text: str,
) -> None:
    tool = declare(
        tmp_path,
        f'operation: steps\nside_effect: read\nsteps:\n  - {{open: "{{arguments.url}}"}}\n'
        f"  - {step}\n",
    )
    out = await adapter.execute(make_call(tool, ws, url=pages.url("/form")))
    assert out.outcome is Outcome.FAILED
    assert out.error is not None and out.error.code == code, out.error
    assert text in out.error.message


async def test_deadline_closes_the_page_but_not_the_browser(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace
) -> None:
    tool = CATALOGUE.resolve("web.extract_text")
    await adapter.execute(make_call(tool, ws, url=pages.url("/table"), session="slow"))
    browser, launches = adapter.pool.browser, adapter.pool.launches
    with pytest.raises(ExecutionError) as caught:
        await adapter.execute(make_call(tool, ws, seconds=1.0, url=pages.url("/slow?s=3")))
    assert caught.value.code == "timeout"
    assert caught.value.retryable is True
    assert "deadline" in caught.value.message
    session = adapter.pool.sessions[("demo", "main")]
    assert session.page is None
    out = await adapter.execute(make_call(tool, ws, url=pages.url("/table"), selector="h1, td"))
    assert out.outcome is Outcome.SUCCEEDED, out.error
    assert adapter.pool.browser is browser and browser is not None and browser.is_connected()
    assert adapter.pool.launches == launches


async def test_anyio_cancellation_closes_the_page(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace
) -> None:
    """The execute stage wraps the adapter in anyio.fail_after; that cancels mid-step."""
    tool = CATALOGUE.resolve("web.extract_text")
    slow = "/slow?s=2&for=cx"
    with anyio.CancelScope() as scope:  # cancelled once the page is asked for: mid-step
        async with anyio.create_task_group() as tg:
            tg.start_soon(_then, pages.requested(slow), scope.cancel)
            await adapter.execute(make_call(tool, ws, url=pages.url(slow), session="cx"))
    assert scope.cancelled_caught
    assert adapter.pool.sessions[("demo", "cx")].page is None
    out = await adapter.execute(make_call(tool, ws, url=pages.url("/table"), session="cx"))
    assert out.outcome is Outcome.SUCCEEDED, out.error


async def test_cancel_event_ends_the_call_as_cancelled(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace
) -> None:
    tool = CATALOGUE.resolve("web.extract_text")
    slow = "/slow?s=2&for=cancel"
    call = make_call(tool, ws, url=pages.url(slow), session="cancel")
    async with anyio.create_task_group() as tg:
        tg.start_soon(_then, pages.requested(slow), call.cancelled.set)
        out = await adapter.execute(call)
    assert out.outcome is Outcome.CANCELLED
    assert out.error is not None and out.error.code == "cancelled"
    assert adapter.pool.sessions[("demo", "cancel")].page is None


async def _then(happened: Awaitable[None], do: Callable[[], object]) -> None:
    await happened
    do()


async def test_metadata_address_is_refused_before_any_request(
    adapter: BrowserAdapter, ws: Workspace
) -> None:
    tool = CATALOGUE.resolve("web.extract_text")
    with pytest.raises(ExecutionError) as caught:
        await adapter.execute(make_call(tool, ws, url="http://169.254.169.254/latest/meta-data/"))
    assert caught.value.code == "egress_refused"
    assert caught.value.retryable is False
    assert "169.254.169.254" in caught.value.message


async def test_redirect_to_a_refused_address_fails(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace
) -> None:
    tool = CATALOGUE.resolve("web.extract_text")
    target = pages.url("/table", host="127.0.0.2")
    out = await adapter.execute(
        make_call(tool, ws, url=pages.url(f"/redirect?to={target}"), session="redir")
    )
    assert out.outcome is Outcome.FAILED
    assert out.error is not None and out.error.code == "egress_refused"
    assert "127.0.0.2" in out.error.message
    assert out.data["extracted"] == {}


async def test_subresource_to_a_refused_address_is_blocked(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace
) -> None:
    tool = CATALOGUE.resolve("web.screenshot")
    out = await adapter.execute(make_call(tool, ws, url=pages.url("/private-img"), session="img"))
    assert out.outcome is Outcome.SUCCEEDED, out.error
    assert any("127.0.0.2" in r for r in out.data["refused_requests"])


async def test_websocket_to_a_refused_address_is_closed(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace, tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        "operation: steps\nside_effect: read\nsession: sockets\nsteps:\n"
        '  - {open: "{arguments.url}"}\n'
        "  - {wait_for: '#ws.done', timeout: 5s}\n"
        "  - {extract: '#ws', name: ws}\n",
    )
    out = await adapter.execute(make_call(tool, ws, url=pages.url("/ws")))
    assert out.outcome is Outcome.SUCCEEDED, out.error
    assert out.data["extracted"]["ws"].startswith("closed")
    assert any("127.0.0.2" in r for r in out.data["refused_requests"])


async def test_declared_allow_hosts_restrict_every_page_request(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace, tmp_path: Path
) -> None:
    """Without allow_hosts any public host is fine; with it, only those hosts (and the
    gateway's allowed loopback network does not widen a tool's host list)."""
    tool = declare(
        tmp_path,
        "operation: steps\nside_effect: read\negress: {allow_hosts: [example.com]}\n"
        'steps:\n  - {open: "{arguments.url}"}\n',
    )
    with pytest.raises(ExecutionError) as caught:
        await adapter.execute(make_call(tool, ws, url=pages.url("/table")))
    assert caught.value.code == "egress_refused"
    assert "allowed hosts" in caught.value.message
    for url in ("file:///etc/passwd", "http://[::ffff:169.254.169.254]/", "http://10.0.0.1/"):
        tool = CATALOGUE.resolve("web.screenshot")
        with pytest.raises(ExecutionError) as refused:
            await adapter.execute(make_call(tool, ws, url=url))
        assert refused.value.code == "egress_refused", url


async def test_missing_executable_is_named(ws: Workspace, var_dir: Path) -> None:
    config = BrowserConfig.model_validate(
        {"executable": "/nowhere/chromium", "allow_networks": [LOOPBACK]}
    )
    broken = BrowserAdapter(config, ArtifactStore(var_dir / "artifacts"))
    tool = CATALOGUE.resolve("web.screenshot")
    with pytest.raises(ExecutionError) as caught:
        await broken.execute(make_call(tool, ws, url="http://127.0.0.1:9/"))
    await broken.aclose()
    assert caught.value.message.startswith(
        "chromium not found at /nowhere/chromium: install Debian's chromium"
    )
    assert caught.value.code == "browser_unavailable"


@pytest.mark.slow  # starts a process itself
async def test_a_binary_that_is_not_chromium_fails_clearly(ws: Workspace, var_dir: Path) -> None:
    config = BrowserConfig.model_validate(
        {"executable": "/bin/false", "launch_timeout": "5s", "allow_networks": [LOOPBACK]}
    )
    broken = BrowserAdapter(config, ArtifactStore(var_dir / "artifacts"))
    tool = CATALOGUE.resolve("web.screenshot")
    with pytest.raises(ExecutionError) as caught:
        await broken.execute(make_call(tool, ws, url="http://127.0.0.1:9/"))
    await broken.aclose()
    assert caught.value.message.startswith("chromium at /bin/false did not start")
    assert "Traceback" not in caught.value.message


@pytest.mark.slow  # starts a process itself
async def test_idle_sessions_are_closed(pages: PageServer, ws: Workspace, var_dir: Path) -> None:
    require_chromium()
    config = BrowserConfig.model_validate({"allow_networks": [LOOPBACK], "idle_timeout": 0.3})
    short = BrowserAdapter(config, ArtifactStore(var_dir / "artifacts"))
    try:
        tool = CATALOGUE.resolve("web.extract_text")
        await short.execute(make_call(tool, ws, url=pages.url("/table")))
        assert ("demo", "main") in short.pool.sessions
        await until(lambda: short.pool.sessions == {}, "the idle session to be closed")
        browser = short.pool.browser
        assert browser is not None and browser.is_connected()
        await browser.close()  # as if Chromium had crashed: the next call relaunches it
        out = await short.execute(make_call(tool, ws, url=pages.url("/table")))
        assert out.outcome is Outcome.SUCCEEDED, out.error
        assert short.pool.launches == 2
    finally:
        await short.aclose()
    assert short.pool.browser is None


async def test_operation_must_match_the_steps(
    adapter: BrowserAdapter, ws: Workspace, tmp_path: Path
) -> None:
    tool = declare(tmp_path, "operation: click\nside_effect: read\nsteps:\n  - {extract: p}\n")
    with pytest.raises(ExecutionError, match="declares operation click"):
        await adapter.execute(make_call(tool, ws))


async def test_text_probe_reads_the_session_page(
    adapter: BrowserAdapter, pages: PageServer, ws: Workspace
) -> None:
    tool = CATALOGUE.resolve("web.extract_text")
    call = make_call(tool, ws, url=pages.url("/button"), session="probe")
    await adapter.execute(call)
    assert await adapter.probe("text", {"session": "probe", "selector": "#status"}, call) == (
        "waiting"
    )
    assert await adapter.probe("url", {"session": "probe"}, call) == pages.url("/button")


# --- declarations and budgets -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fault"),
    [
        ("steps:\n  - {click: a, extract: b}\n", "exactly one action key"),
        ("steps:\n  - {fill: '#a'}\n", "a fill step needs 'value'"),
        ("steps:\n  - {click: a, as: text}\n", "key 'as' does not apply to a click step"),
        ("steps:\n  - {extract: a, as: attribute}\n", "needs 'attribute'"),
        ("steps:\n  - {open: '{arguments.nope}'}\n", "which input does not declare"),
        ("steps: []\n", "at least 1 item"),
        ("steps:\n  - {open: x}\negress: {allow_networks: [nonsense]}\n", "allow_networks"),
    ],
)
def test_declaration_faults_name_the_file_and_line(tmp_path: Path, body: str, fault: str) -> None:
    with pytest.raises(ConfigError) as caught:
        declare(tmp_path, "operation: steps\nside_effect: read\n" + body)
    message = str(caught.value)
    assert fault in message
    assert "t.browser.yaml:" in message


async def test_unreachable_page_is_a_clear_retryable_failure(
    adapter: BrowserAdapter, ws: Workspace
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tool = CATALOGUE.resolve("web.extract_text")
    out = await adapter.execute(make_call(tool, ws, url=f"http://127.0.0.1:{port}/", session="u"))
    assert out.outcome is Outcome.FAILED
    assert out.error is not None
    assert (out.error.code, out.error.retryable) == ("navigation_failed", True)
    assert out.error.message == f"step 1 (open): connection refused by http://127.0.0.1:{port}/"


@pytest.mark.parametrize(
    ("message", "code", "retryable"),
    [
        (
            "Page.goto: net::ERR_NAME_NOT_RESOLVED at http://x.invalid/\nCall log:",
            "navigation_failed",
            False,
        ),
        ("Page.goto: net::ERR_SOMETHING_NEW at http://x/", "navigation_failed", False),
        ("Locator.click: Target page, context or browser has been closed", "page_closed", True),
        (
            "Locator.click: Error: something unheard of\nCall log:\n  - secret",
            "browser_error",
            True,
        ),
    ],
)
def test_playwright_messages_are_translated_without_their_text(
    message: str, code: str, retryable: bool
) -> None:
    step = StepDecl.model_validate({"open": "http://x/"})
    error = translate_error(message, 0, step, "http://x/")
    assert (error.code, error.retryable) == (code, retryable)
    assert "Call log" not in error.message and "secret" not in error.message


def test_fit_budget_cuts_long_values() -> None:
    values, truncated = fit_budget({"a": "x" * 100, "b": ["y" * 10] * 50}, 60)
    assert truncated
    assert len(json.dumps(values)) < 200
    assert fit_budget({"a": "ok"}, 60) == ({"a": "ok"}, False)


def test_the_documented_declaration_loads(tmp_path: Path) -> None:
    text = (REPO / "docs" / "adapters" / "browser.md").read_text(encoding="utf-8")
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "doc.yaml").write_text(block)
    tool, _ = load_declaration(tmp_path / "doc.yaml")
    assert tool.options is not None
    assert [step.action for step in tool.options.steps][:5] == [
        "open",
        "fill",
        "fill",
        "select",
        "click",
    ]
