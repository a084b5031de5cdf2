"""The approvals page in a real browser (Playwright on Debian's Chromium) against a real
gateway process: an approver signs in, opens a pending approval created through the API, sees
the diff, approves, and the execution completes; an agent-only principal cannot see the
inbox; forged and hostile forms change nothing."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from playwright.sync_api import expect

from gateway.testing import gateway, make_project
from gateway.ui import session as sessions
from tests.helpers import (
    ALICE,
    BOB,
    CAROL,
    IN_CI,
    REPO,
    REVIEWED_TOOL,
    starts_processes,
    unknown_call,
)

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HTMX_SHA256 = "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"  # htmx.org 2.0.11
SSE_SHA256 = (
    "98a46496de0c3605fbffdce9167ba427bdd9553184f83f149c261891a92c0136"  # htmx-ext-sse 2.2.4
)
SHOTS = os.environ.get("TOOLGATE_UI_SHOTS")
"""A directory to save the docs' screenshots into (docs/ when regenerating them)."""


def test_vendored_htmx_is_the_pinned_release() -> None:
    static = REPO / "gateway" / "ui" / "static"
    assert hashlib.sha256((static / "htmx.min.js").read_bytes()).hexdigest() == HTMX_SHA256
    assert hashlib.sha256((static / "htmx-ext-sse.min.js").read_bytes()).hexdigest() == SSE_SHA256


def test_a_forged_or_tampered_session_is_no_session() -> None:
    key = sessions.session_key(b"k" * 40)
    made, cookie = sessions.issue("bob", 60, key)
    assert sessions.read(cookie, key) == made
    payload, signature = cookie.split(".")
    assert sessions.read(payload + "." + signature[:-2] + "AA", key) is None
    assert sessions.read(cookie, sessions.session_key(b"j" * 40)) is None
    assert sessions.read(sessions.issue("bob", -1, key)[1], key) is None
    assert sessions.read("garbage", key) is None


@pytest.fixture(scope="module")
@starts_processes
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("ui")
    config = make_project(root, f"sqlite:///{root / 'toolgate.db'}")
    rules = root / "policies" / "rules.yaml"
    data = yaml.safe_load(rules.read_text())
    data.setdefault("tool_overrides", {})["fs.write_file"] = {"approval": True}
    rules.write_text(yaml.safe_dump(data))
    (root / "tools.d" / "fs.write_reviewed.yaml").write_text(REVIEWED_TOOL)
    settings = yaml.safe_load(config.read_text())
    settings["stream_poll_interval"] = 0.05
    config.write_text(yaml.safe_dump(settings))
    workspace = root / "var" / "workspaces" / "demo"
    workspace.mkdir(parents=True, exist_ok=True)
    with gateway(config) as url:
        yield url, workspace


def _write(
    url: str,
    path: str,
    content: str,
    call_id: str,
    tool: str = "fs.write_file",
    agent: str = "coder",
) -> dict[str, Any]:
    body = {
        "run_id": "ui-run",
        "call_id": call_id,
        "tool": {"name": tool},
        "arguments": {"path": path, "content": content},
        "actor": {"user_id": "alice", "agent_id": agent},
        "workspace": {"id": "demo"},
    }
    answer = httpx.post(
        url + "/v1/executions", json=body, headers={"Authorization": f"Bearer {ALICE}"}
    )
    assert answer.status_code == 202, answer.text
    return dict(answer.json())


@pytest.fixture(scope="module")
@starts_processes
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        reason = "Debian's chromium is not installed (make test installs it as root)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as play:
        launched = play.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


def _sign_in(browser: Any, url: str, key: str, viewport: dict[str, int] | None = None) -> Any:
    context = browser.new_context(viewport=viewport or {"width": 1100, "height": 900})
    page = context.new_page()
    page.goto(url + "/ui/")
    assert "/ui/signin" in page.url
    page.fill("#api_key", key)
    with page.expect_navigation(wait_until="load"):  # the page the form led to, parsed
        page.click("button[type=submit]")
    return page


def test_an_approver_approves_a_diff_and_the_call_completes(
    served: tuple[str, Path], browser: Any
) -> None:
    url, workspace = served
    (workspace / "notes.txt").write_text("one\ntwo\nthree\n")
    parked = _write(url, "notes.txt", "one\n2\nthree\n", "w1")
    page = _sign_in(browser, url, BOB)
    assert page.url.endswith("/ui/approvals")
    item = page.locator(".item", has_text="fs.write_file").first
    assert "alice" in item.inner_text() and "coder" in item.inner_text()
    assert re.search(r"\d+ (min|h|s) left", item.inner_text())
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / "ui-inbox.png"), full_page=True)
    item.locator("a.title").click()
    # The URL changes when the navigation commits, before the page is parsed: wait for it
    # to load, else the diff's lines may not be there yet (seen in CI: 0 == 1).
    page.wait_for_url("**/ui/approvals/" + parked["approval"]["id"], wait_until="load")
    expect(page.locator(".d-del", has_text="-two")).to_have_count(1)
    expect(page.locator(".d-add", has_text="+2")).to_have_count(1)
    assert "approval.requested" in page.locator("#timeline").inner_text()
    assert "sha256" in page.locator(".guards").inner_text()
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / "ui-approval.png"), full_page=True)
    page.fill("#comment", "looks right")
    with page.expect_navigation(wait_until="load"):  # the form posts back to this URL
        page.click("button[value=approve]")
    expect(page.locator(".decide")).to_contain_text("can no longer be decided")
    done = httpx.get(
        url + parked["links"]["self"] + "?wait=20", headers={"Authorization": f"Bearer {ALICE}"}
    ).json()
    assert done["status"] == "completed" and done["result"]["outcome"] == "succeeded", done
    assert (workspace / "notes.txt").read_text() == "one\n2\nthree\n"
    page.goto(url + "/ui/executions/" + parked["id"])
    page.locator("#timeline li", has_text="tool.completed").wait_for(timeout=10_000)
    assert '"succeeded"' in page.locator("#result").inner_text()
    page.goto(url + "/ui/executions?outcome=succeeded&tool=fs.write_file")
    assert page.locator(".item").count() >= 1
    page.goto(url + "/ui/executions?outcome=bogus")
    assert "outcome is one of" in page.content()
    page.context.close()


def test_no_agent_named_and_a_failed_preview_are_said_plainly(
    served: tuple[str, Path], browser: Any
) -> None:
    """Issue 29.5: an empty ``agent_id`` showed "alice for agent" and nothing more; an
    approval whose preview failed offered Approve with no warning."""
    url, workspace = served
    (workspace / "a-directory").mkdir()  # writing over a directory: no diff can be made
    parked = _write(url, "a-directory", "x\n", "np1", agent="")
    approval = parked["approval"]["id"]
    failed = _approval(url, approval)["preview"]
    assert set(failed) == {"error"}, failed  # what the page is about: a preview that failed
    seen = _write(url, "previewed.txt", "x\n", "np2")["approval"]["id"]  # one that did not
    page = _sign_in(browser, url, BOB)
    item = page.locator(".item", has=page.locator(f'a[href="/ui/approvals/{approval}"]'))
    expect(item.locator(".meta")).to_contain_text("by alice (no agent named)")
    expect(item.locator(".meta")).not_to_contain_text("for agent")
    page.goto(f"{url}/ui/approvals/{approval}")
    expect(page.locator(".facts")).to_contain_text("alice (no agent named)")
    expect(page.locator("#preview-failed")).to_contain_text(
        f"The preview failed: {failed['error']}"
    )
    warning = page.locator("form:has(button[value=approve]) #approve-warning")
    expect(warning).to_contain_text(f"No preview: {failed['error']}")
    page.goto(f"{url}/ui/approvals/{seen}")
    expect(page.locator(".facts")).to_contain_text("alice for agent coder")
    expect(page.locator("button[value=approve]")).to_have_count(1)
    expect(page.locator("#approve-warning")).to_have_count(0)
    page.context.close()
    for decided in (approval, seen):  # leave the inbox as it was for the other tests
        httpx.post(f"{url}/v1/approvals/{decided}/deny", headers={"Authorization": f"Bearer {BOB}"})


def test_the_live_timeline_shows_what_happens_after_the_page_opened(
    served: tuple[str, Path], browser: Any
) -> None:
    url, _ = served
    parked = _write(url, "live.txt", "hello\n", "w2")
    page = _sign_in(browser, url, BOB)
    # htmx's SSE extension says so when the page's stream has opened (htmx:sseOpen)
    page.add_init_script("addEventListener('htmx:sseOpen', () => { window.streaming = true })")
    page.goto(url + "/ui/executions/" + parked["id"])
    assert "tool.completed" not in page.locator("#timeline").inner_text()
    page.wait_for_function("window.streaming === true")  # the stream is connected
    decided = httpx.post(
        f"{url}/v1/approvals/{parked['approval']['id']}/approve",
        headers={"Authorization": f"Bearer {BOB}"},
    )
    assert decided.status_code == 202
    page.locator("#timeline li", has_text="tool.completed").wait_for(timeout=10_000)
    page.context.close()


def test_the_pages_show_a_resolved_outcome_without_a_reload(
    served: tuple[str, Path], browser: Any
) -> None:
    """An ``unknown`` outcome that a person resolves elsewhere (the API, the CLI) changes the
    execution's page and its approval's page as they stay open: the outcome in the header,
    the result and the timeline; before, their live timeline had ended at tool.completed and
    the pages said ``unknown`` until a reload."""
    url, workspace = served
    body = unknown_call(workspace, "ui-run", "hang-1", 4000)  # time to approve it first
    parked = httpx.post(
        url + "/v1/executions", json=body, headers={"Authorization": f"Bearer {ALICE}"}
    )
    assert parked.json()["status"] == "awaiting_approval", parked.text
    approval = parked.json()["approval"]["id"]
    approved = httpx.post(
        f"{url}/v1/approvals/{approval}/approve", headers={"Authorization": f"Bearer {BOB}"}
    )
    assert approved.status_code == 202, approved.text
    self_url = url + parked.json()["links"]["self"]
    ended = httpx.get(
        self_url + "?wait=30", headers={"Authorization": f"Bearer {ALICE}"}, timeout=40
    )
    assert ended.json()["result"]["outcome"] == "unknown", ended.text
    execution_page = _sign_in(browser, url, BOB)
    execution_page.goto(f"{url}/ui/executions/{parked.json()['id']}", wait_until="load")
    expect(execution_page.locator("#execution-outcome")).to_have_text("unknown")
    approval_page = execution_page.context.new_page()
    approval_page.goto(f"{url}/ui/approvals/{approval}", wait_until="load")
    expect(approval_page.locator("#approval-head")).to_contain_text("completed, unknown")
    for opened in (execution_page, approval_page):
        opened.evaluate("window.stayed = true")  # gone with a reload
    resolved = httpx.post(
        self_url + "/resolve",
        json={"outcome": "succeeded", "note": "hung.txt holds the write"},
        headers={"Authorization": f"Bearer {CAROL}"},
    )
    assert resolved.status_code == 200, resolved.text
    expect(execution_page.locator("#execution-outcome")).to_have_text("succeeded", timeout=15_000)
    expect(execution_page.locator("#result")).to_contain_text("resolved by carol as succeeded")
    expect(execution_page.locator("#timeline li", has_text="outcome.resolved")).to_have_count(1)
    expect(approval_page.locator("#approval-head")).to_contain_text(
        "completed, succeeded", timeout=15_000
    )
    for opened in (execution_page, approval_page):
        assert opened.evaluate("window.stayed") is True
    execution_page.context.close()


def test_an_agent_cannot_see_the_inbox(served: tuple[str, Path], browser: Any) -> None:
    url, _ = served
    page = _sign_in(browser, url, ALICE, viewport={"width": 390, "height": 800})
    assert "Only approvers" in page.content()
    response = page.goto(url + "/ui/approvals?status=all")
    assert response is not None and response.status == 403
    page.context.close()


def test_the_signin_refuses_a_wrong_key(served: tuple[str, Path], browser: Any) -> None:
    url, _ = served
    page = _sign_in(browser, url, "tg_not_a_key")
    assert "not valid" in page.locator(".alert").inner_text()
    page.context.close()


@contextmanager
def _session(url: str, key: str) -> Iterator[tuple[httpx.Client, str]]:
    """A signed-in client (no browser) and the CSRF token of its session."""
    with httpx.Client(base_url=url, follow_redirects=False) as client:
        yield client, _signed_in(client, key)


def _signed_in(client: httpx.Client, key: str) -> str:
    form = client.get("/ui/signin")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert token is not None
    signed = client.post("/ui/signin", data={"csrf": token.group(1), "api_key": key})
    assert signed.status_code == 303, signed.text
    inbox = client.get("/ui/approvals")
    csrf = re.search(r'name="csrf" value="([^"]+)"', inbox.text)
    assert csrf is not None
    return csrf.group(1)


def test_forged_and_hostile_forms_change_nothing(served: tuple[str, Path]) -> None:
    url, workspace = served
    parked = _write(url, "forged.txt", "x\n", "w3")
    approval = parked["approval"]["id"]
    with _session(url, BOB) as (client, csrf):
        decide = f"/ui/approvals/{approval}/decide"

        forged = client.post(decide, data={"decision": "approve"})
        assert forged.status_code == 403 and "security token" in forged.text
        wrong = client.post(decide, data={"decision": "approve", "csrf": "x" * 32})
        assert wrong.status_code == 403
        no_cookie = httpx.post(url + decide, data={"decision": "approve", "csrf": csrf})
        assert no_cookie.status_code == 401
        bad = client.post(decide, data={"decision": "maybe", "csrf": csrf})
        assert bad.status_code == 400 and "approve or deny" in bad.text
        long = client.post(decide, data={"decision": "deny", "csrf": csrf, "comment": "x" * 3000})
        assert long.status_code == 400
        twice = client.post(
            decide,
            content=f"decision=approve&decision=deny&csrf={csrf}",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert twice.status_code == 400
        as_json = client.post(decide, json={"decision": "approve", "csrf": csrf})
        assert as_json.status_code == 400
        huge = client.post(decide, data={"decision": "approve", "csrf": csrf, "c": "x" * 20000})
        assert huge.status_code == 413
        forged_signin = httpx.post(url + "/ui/signin", data={"api_key": BOB})
        assert forged_signin.status_code == 403
        still = httpx.get(
            f"{url}/v1/approvals/{approval}", headers={"Authorization": f"Bearer {BOB}"}
        ).json()
        assert still["status"] == "pending"
        assert not (workspace / "forged.txt").exists()

        denied = client.post(decide, data={"decision": "deny", "csrf": csrf, "comment": "no"})
        assert denied.status_code == 303
        again = client.post(decide, data={"decision": "approve", "csrf": csrf})
        assert again.status_code == 409 and "can no longer be decided" in again.text

        out = client.post("/ui/signout", data={"csrf": csrf})
        assert out.status_code == 303
        client.cookies.clear()
        assert client.get("/ui/approvals").status_code == 303


def test_nobody_approves_their_own_request(served: tuple[str, Path]) -> None:
    url, workspace = served
    body = {
        "run_id": "ui-run",
        "call_id": "own",
        "tool": {"name": "fs.write_file"},
        "arguments": {"path": "own.txt", "content": "mine\n"},
        "actor": {"user_id": "carol", "agent_id": "x"},
        "workspace": {"id": "demo"},
    }
    parked = httpx.post(
        url + "/v1/executions", json=body, headers={"Authorization": "Bearer tg_dev_carol"}
    ).json()
    approval = parked["approval"]["id"]
    with _session(url, "tg_dev_carol") as (client, csrf):
        inbox = client.get("/ui/approvals")
        assert inbox.status_code == 200 and approval not in inbox.text  # not hers to decide
        shown = client.get(f"/ui/approvals/{approval}")
        assert "nobody approves their own request" in shown.text
        assert 'value="approve"' not in shown.text
        tried = client.post(
            f"/ui/approvals/{approval}/decide", data={"decision": "approve", "csrf": csrf}
        )
    assert tried.status_code == 403 and "nobody approves their own request" in tried.text
    assert not (workspace / "own.txt").exists()


def test_a_cookie_is_httponly_strict_and_expires(served: tuple[str, Path]) -> None:
    url, _ = served
    with httpx.Client(base_url=url) as client:
        form = client.get("/ui/signin")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None
        signed = client.post(
            "/ui/signin", data={"csrf": token.group(1), "api_key": BOB}, follow_redirects=False
        )
    cookie = next(
        v for k, v in signed.headers.multi_items() if k == "set-cookie" and "tg_session" in v
    )
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Max-Age=" in cookie
    assert "Secure" not in cookie  # plain HTTP here; Secure when the request is HTTPS


def test_signing_out_deletes_the_cookie_it_set(served: tuple[str, Path]) -> None:
    """A browser drops a cookie only when the deletion names the path and flags it was set
    with: sign-out's deletion carries the same ones as sign-in's setting."""
    url, _ = served
    with _session(url, BOB) as (client, csrf):
        out = client.post("/ui/signout", data={"csrf": csrf})
    assert out.status_code == 303
    deleted = next(
        v for k, v in out.headers.multi_items() if k == "set-cookie" and "tg_session" in v
    )
    attributes = {part.strip() for part in deleted.split(";")[1:]}
    assert "Max-Age=0" in attributes
    assert {"Path=/ui/", "HttpOnly", "SameSite=strict"} <= attributes


def _approval(url: str, approval_id: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{url}/v1/approvals/{approval_id}", headers={"Authorization": f"Bearer {BOB}"}
    )
    return dict(answer.json())


def test_an_approver_edits_the_call_before_approving(
    served: tuple[str, Path], browser: Any
) -> None:
    url, workspace = served
    parked = _write(url, "draft.txt", "draft\n", "e1", tool="fs.write_reviewed")
    approval = parked["approval"]["id"]
    page = _sign_in(browser, url, BOB)
    page.goto(f"{url}/ui/approvals/{approval}")
    assert page.input_value("#edit-path") == "draft.txt"
    assert page.input_value("#edit-content") == "draft\n"
    assert page.locator("#edit-create_dirs").count() == 0  # not editable
    # A refused edit decides nothing, and the form keeps what was typed.
    page.fill("#edit-path", ".git/hooks/pre-commit")
    with page.expect_navigation(wait_until="load"):
        page.click("button[value=edit]")
    expect(page.locator(".alert")).to_contain_text("protected path")
    assert page.input_value("#edit-path") == ".git/hooks/pre-commit"
    assert _approval(url, approval)["status"] == "pending"
    page.fill("#edit-path", "reviewed/final.txt")
    page.fill("#edit-content", "line one\nline two\n")
    page.fill("#edit-comment", "moved and reworded")
    with page.expect_navigation(wait_until="load"):  # the edited call's diff, nothing decided
        page.click("button[value=preview]")
    expect(page.locator("#preview")).to_contain_text("Preview of the edited call")
    expect(page.locator("#preview .d-add", has_text="+line one")).to_have_count(1)
    assert "reviewed/final.txt" in page.locator("#edited-arguments").inner_text()
    assert page.input_value("#edit-comment") == "moved and reworded"
    assert _approval(url, approval)["status"] == "pending"
    with page.expect_navigation(wait_until="load"):
        page.click("button[value=edit]")
    assert page.url.endswith("/ui/approvals/" + approval)
    done = httpx.get(
        url + parked["links"]["self"] + "?wait=20", headers={"Authorization": f"Bearer {ALICE}"}
    ).json()
    assert done["result"]["outcome"] == "succeeded", done
    # The browser sent CRLF line breaks: the file has the LF text the approver saw.
    assert (workspace / "reviewed" / "final.txt").read_bytes() == b"line one\nline two\n"
    assert not (workspace / "draft.txt").exists()
    page.reload()
    assert "reviewed/final.txt" in page.locator("pre.code").first.inner_text()
    assert page.locator("#timeline li", has_text="approval.edited").count() == 1
    assert page.locator("#edit-form").count() == 0  # decided: no form any more
    page.context.close()


def test_forged_and_bad_edit_forms_change_nothing(served: tuple[str, Path]) -> None:
    url, workspace = served
    parked = _write(url, "forged-edit.txt", "x\n", "e2", tool="fs.write_reviewed")
    approval = parked["approval"]["id"]
    decide = f"/ui/approvals/{approval}/decide"
    with _session(url, BOB) as (client, csrf):
        shown = client.get(f"/ui/approvals/{approval}")
        assert 'name="edit.content"' in shown.text and 'name="edit.create_dirs"' not in shown.text
        forged = client.post(decide, data={"decision": "edit", "edit.content": "evil"})
        assert forged.status_code == 403 and "security token" in forged.text
        fixed = client.post(
            decide, data={"decision": "edit", "csrf": csrf, "edit.create_dirs": "false"}
        )
        assert fixed.status_code == 400 and "cannot be edited here: create_dirs" in fixed.text
        escape = client.post(
            decide, data={"decision": "edit", "csrf": csrf, "edit.path": "../escape.txt"}
        )
        assert escape.status_code == 422 and "would not run" in escape.text
        assert "../escape.txt" in escape.text  # the form shows what was sent
    assert _approval(url, approval)["status"] == "pending"
    assert not (workspace / "forged-edit.txt").exists()


def test_the_approval_page_follows_a_decision_made_elsewhere(
    served: tuple[str, Path], browser: Any
) -> None:
    """Issue 30.5: the page said `pending`, the time left and offered Approve/Deny while its
    own timeline showed the call decided and ended elsewhere; it now changes without a
    reload."""
    url, workspace = served
    (workspace / "elsewhere.txt").write_text("before\n")
    parked = _write(url, "elsewhere.txt", "after\n", "elsewhere-1")
    approval = parked["approval"]["id"]
    page = _sign_in(browser, url, BOB)
    page.goto(f"{url}/ui/approvals/{approval}", wait_until="load")
    expect(page.locator("#approval-status")).to_have_text("pending")
    expect(page.locator("button[value=approve]")).to_have_count(1)
    expect(page.locator("#approval-head")).to_contain_text("left")
    # carol decides over the API while bob's page stays open
    denied = httpx.post(
        f"{url}/v1/approvals/{approval}/deny",
        json={"comment": "not today"},
        headers={"Authorization": f"Bearer {CAROL}"},
    )
    assert denied.status_code == 200, denied.text
    expect(page.locator("#approval-status")).to_have_text("denied", timeout=15_000)
    expect(page.locator("button[value=approve]")).to_have_count(0)
    expect(page.locator("#approval-decision")).to_contain_text("can no longer be decided")
    expect(page.locator("#approval-head")).not_to_contain_text("left")
    expect(page.locator("#approval-head")).to_contain_text("carol")
    assert (workspace / "elsewhere.txt").read_text() == "before\n"
    page.context.close()
