"""OS errors of the file adapter, as the agent sees them through the HTTP door: a clear,
stable code in phase ``execute`` (never ``adapter_crashed``, ``internal_error`` or a 5xx),
and nothing changed in the workspace."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.helpers import BOB
from tests.server.helpers import auth, body

LONG = "n" * 300  # over NAME_MAX (255): ENAMETOOLONG, though the path is short enough
PATCH = "--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+a\n"
TOOLS = [
    ("fs.read_file", {}),
    ("fs.write_file", {"content": "x"}),
    ("fs.append_file", {"content": "x"}),
    ("fs.apply_patch", {"patch": PATCH}),
    ("fs.list_dir", {}),
    ("fs.write_files", None),
]


def _loop(root: Path) -> str:
    os.symlink("b", root / "a")
    os.symlink("a", root / "b")
    return "a"


def _long(root: Path) -> str:
    return LONG


CASES = {"symlink_loop": _loop, "name_too_long": _long}


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def _run(client: TestClient, tool: str, path: str, extra: dict[str, Any] | None) -> Any:
    if extra is None:  # fs.write_files: the error is reported per file
        arguments: dict[str, Any] = {"files": [{"path": path, "content": "x"}]}
    else:
        arguments = {"path": path, **extra}
    response = client.post("/v1/executions", json=body(tool, arguments), headers=auth())
    assert response.status_code == 200, response.text
    return response.json()["result"]


@pytest.mark.parametrize("code", sorted(CASES))
@pytest.mark.parametrize("tool, extra", TOOLS, ids=[t for t, _ in TOOLS])
def test_an_os_error_has_its_own_code(
    client: TestClient,
    workspace_root: Path,
    code: str,
    tool: str,
    extra: dict[str, Any] | None,
) -> None:
    path = CASES[code](workspace_root)
    before = _files(workspace_root)
    result = _run(client, tool, path, extra)
    assert result["outcome"] == "failed", result
    error = result["error"]
    if extra is None:
        assert error["type"] == "batch_incomplete"
        assert result["data"]["failed"][0]["path"] == path
        assert code.split("_")[-1] in result["data"]["failed"][0]["error"]  # loop / long
    else:
        assert (error["type"], error["phase"]) == (code, "execute"), error
        assert "Traceback" not in error["message"]
    assert _files(workspace_root) == before


@pytest.mark.parametrize("code", sorted(CASES))
def test_an_approved_delete_reports_the_os_error(
    client: TestClient, workspace_root: Path, code: str
) -> None:
    """The approver's preview, then the delete itself, meet the same OS error."""
    path = CASES[code](workspace_root)
    payload = body("fs.delete_file", {"path": path}, idempotency_key=f"del-{code}")
    parked = client.post("/v1/executions", json=payload, headers=auth())
    assert parked.status_code == 202, parked.text  # was 200 internal_error in stage policy
    approval_id = parked.json()["approval"]["id"]
    decided = client.post(f"/v1/approvals/{approval_id}/approve", json={}, headers=auth(BOB))
    assert decided.status_code == 202, decided.text
    done = client.get(parked.json()["links"]["self"] + "?wait=10", headers=auth()).json()
    result = done["result"]
    assert result["outcome"] == "failed", result
    assert (result["error"]["type"], result["error"]["phase"]) == (code, "execute")


@pytest.fixture
def fifo(client: TestClient, workspace_root: Path) -> Iterator[str]:
    """A FIFO in the workspace; opened afterwards, which frees a thread stuck on it."""
    os.mkfifo(workspace_root / "pipe")
    yield "pipe"
    os.close(os.open(workspace_root / "pipe", os.O_RDWR | os.O_NONBLOCK))


def _post_bounded(client: TestClient, payload: dict[str, Any], seconds: float = 10) -> Any:
    """The response, or a failure if none comes in ``seconds`` (the gateway hangs)."""
    box: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: box.update(r=client.post("/v1/executions", json=payload, headers=auth())),
        daemon=True,
    )
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"no answer within {seconds:g} s: the call hangs on the FIFO", pytrace=False)
    return box["r"]


@pytest.mark.parametrize("tool, extra", TOOLS[:4], ids=[t for t, _ in TOOLS[:4]])
def test_a_fifo_is_refused_with_its_own_code(
    client: TestClient, fifo: str, tool: str, extra: dict[str, Any]
) -> None:
    response = _post_bounded(
        client, body(tool, {"path": fifo, **extra}, deadline=int(time.time() * 1000) + 3000)
    )
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["outcome"] == "failed", result
    assert (result["error"]["type"], result["error"]["phase"]) == ("not_a_regular_file", "execute")


def test_a_state_guard_on_a_fifo_is_refused_before_anything_runs(
    client: TestClient, fifo: str
) -> None:
    payload = body(
        "fs.write_file", {"path": fifo, "content": "x"}, expected_state={"sha256": "0" * 64}
    )
    result = _post_bounded(client, payload).json()["result"]
    assert (result["error"]["type"], result["error"]["phase"]) == ("not_a_regular_file", "validate")


def test_a_cancel_stops_hashing_a_huge_file(client: TestClient, workspace_root: Path) -> None:
    """An async read of a 4 GiB sparse file (seconds of hashing) stops at the cancel, at
    the next chunk, instead of running on (or, before, reading 4 GiB into memory)."""
    os.truncate(_touch(workspace_root / "huge"), 4 << 30)
    started = client.post(
        "/v1/executions",
        json=body("fs.read_file", {"path": "huge"}),
        headers={**auth(), "Prefer": "respond-async"},
    )
    assert started.status_code == 202, started.text
    url = started.json()["links"]["self"]
    cancelled = client.post(url + "/cancel", headers=auth())
    assert cancelled.status_code in (200, 202), cancelled.text
    done = _wait(client, url)
    assert done["status"] == "completed", done
    result = done["result"]
    assert (result["outcome"], result["error"]["type"]) == ("cancelled", "cancelled"), result


def _wait(client: TestClient, url: str) -> Any:
    response = client.get(url + "?wait=10", headers=auth())
    assert response.status_code == 200, response.text
    return response.json()


def _touch(path: Path) -> Path:
    path.touch()
    return path
