"""The file adapter on files that could hang it or exhaust its memory: FIFOs, device nodes,
huge sparse files; and the deadline and cancel signal honoured inside its worker thread.

A call that hangs in a worker thread cannot be cancelled by anyio, so each call that could
hang runs under ``bounded``: on an event loop of its own in a daemon thread, failing the test
after a few seconds instead of hanging the suite. The ``ws`` fixture opens every FIFO left
in the workspace afterwards, which releases a thread blocked on it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from gateway.adapters.base import AdapterCall
from gateway.adapters.file.adapter import FileAdapter
from gateway.errors import ToolgateError
from gateway.testing import load_catalogue
from gateway.types import Outcome
from gateway.workspace import Workspace, confine
from tests.helpers import REPO, require_in_ci

CATALOGUE = load_catalogue(REPO / "tools.d")
HANG_SECONDS = 5.0
T = TypeVar("T")


def bounded(fn: Callable[[], Awaitable[T]], seconds: float = HANG_SECONDS) -> T:
    """``fn()`` run to its end on a loop of its own; the test fails if it hangs."""
    box: dict[str, Any] = {}

    def runner() -> None:
        try:
            box["value"] = anyio.run(fn)
        except BaseException as exc:  # handed back to the test below
            box["error"] = exc

    thread = threading.Thread(target=runner, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the call did not return within {seconds:g} s: it hangs", pytrace=False)
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def _release_fifos(root: Path) -> None:
    for path in root.rglob("*"):
        if stat.S_ISFIFO(path.lstat().st_mode):
            os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workspace]:
    root = tmp_path / "ws"
    root.mkdir()
    yield Workspace("demo", root.resolve())
    _release_fifos(root)


def call(
    ws: Workspace,
    tool: str,
    budget: int | None = None,
    seconds: float = 10,
    **arguments: Any,
) -> AdapterCall:
    decl = CATALOGUE.resolve(tool)
    if "files" in arguments:
        paths = {
            f"files.{i}.path": confine(ws, f["path"]) for i, f in enumerate(arguments["files"])
        }
    else:
        paths = {"path": confine(ws, arguments.get("path", "."))}
    return AdapterCall(
        execution_id="ex_test",
        tool=decl,
        arguments=arguments,
        workspace=ws,
        paths=paths,
        deadline=time.time() + seconds,
        cancelled=anyio.Event(),
        fencing_tokens={},
        output_budget=budget or decl.output_budget,
        context={"arguments": arguments, "workspace": ws.to_json()},
    )


def execute(c: AdapterCall) -> Any:
    return bounded(lambda: FileAdapter().execute(c))


def error_of(fn: Callable[..., Any], *args: Any) -> ToolgateError:
    with pytest.raises(ToolgateError) as info:
        fn(*args)
    return info.value


PATCH = "--- a/p\n+++ b/p\n@@ -0,0 +1 @@\n+x\n"
WRITES = [
    ("fs.write_file", {"content": "x"}),
    ("fs.append_file", {"content": "x"}),
    ("fs.apply_patch", {"patch": PATCH}),
    ("fs.delete_file", {}),
]


def test_reading_a_fifo_is_refused_at_once(ws: Workspace) -> None:
    os.mkfifo(ws.root / "p")
    error = error_of(lambda: execute(call(ws, "fs.read_file", path="p")))
    assert error.code == "not_a_regular_file" and "FIFO" in error.message


@pytest.mark.parametrize("tool, arguments", WRITES, ids=[w[0] for w in WRITES])
def test_writing_onto_a_fifo_is_refused_and_leaves_it(
    ws: Workspace, tool: str, arguments: dict[str, Any]
) -> None:
    os.mkfifo(ws.root / "p")
    error = error_of(lambda: execute(call(ws, tool, path="p", **arguments)))
    assert error.code == "not_a_regular_file"
    assert stat.S_ISFIFO((ws.root / "p").lstat().st_mode)
    assert sorted(p.name for p in ws.root.iterdir()) == ["p"]  # no temp file left


def test_write_files_refuses_a_fifo_and_writes_the_rest(ws: Workspace) -> None:
    os.mkfifo(ws.root / "p")
    files = [{"path": "p", "content": "x"}, {"path": "ok.txt", "content": "y"}]
    out = execute(call(ws, "fs.write_files", files=files))
    assert out.outcome is Outcome.PARTIAL
    assert [f["path"] for f in out.data["failed"]] == ["p"]
    assert "FIFO" in out.data["failed"][0]["error"]
    assert stat.S_ISFIFO((ws.root / "p").lstat().st_mode)
    assert (ws.root / "ok.txt").read_text() == "y"


def test_probing_a_fifo_answers_at_once(ws: Workspace) -> None:
    os.mkfifo(ws.root / "p")
    c = call(ws, "fs.write_file", path="p", content="x")
    assert bounded(lambda: FileAdapter().probe("file_exists", {"path": "p"}, c)) is True
    error = error_of(bounded, lambda: FileAdapter().probe("file_sha256", {"path": "p"}, c))
    assert error.code == "not_a_regular_file" and error.phase is not None
    assert error.phase.value == "validate"  # a state guard reports it before anything runs


def test_previewing_a_write_onto_a_fifo_says_why_not(ws: Workspace) -> None:
    os.mkfifo(ws.root / "p")
    c = call(ws, "fs.write_file", path="p", content="x")
    error = error_of(lambda: bounded(lambda: FileAdapter().preview(c)))
    assert error.code == "not_a_regular_file"


def test_a_character_device_is_refused(ws: Workspace) -> None:
    """A device node inside the workspace (confine lets it through: it is inside) must not be
    read: /dev/zero never ends, and reading it whole grew the gateway by 600 MB in 0.3 s."""
    if os.geteuid() != 0:
        require_in_ci("making a device node (os.mknod of S_IFCHR) needs root")
    rdev = os.stat("/dev/zero").st_rdev
    try:
        os.mknod(ws.root / "zero", stat.S_IFCHR | 0o666, rdev)
    except PermissionError as exc:
        require_in_ci(f"this container may not make device nodes: {exc}")
    for tool, arguments in [("fs.read_file", {}), *WRITES]:
        error = error_of(execute, call(ws, tool, path="zero", **arguments))
        assert error.code == "not_a_regular_file", tool
        assert "character device" in error.message
    assert stat.S_ISCHR((ws.root / "zero").lstat().st_mode)


def _zeros_sha256(size: int) -> str:
    digest, block = hashlib.sha256(), bytes(1 << 20)
    for _ in range(size >> 20):
        digest.update(block)
    return digest.hexdigest()


def _peak_bytes(fn: Callable[[], T]) -> tuple[T, int]:
    tracemalloc.start()
    try:
        value = fn()
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


SPARSE = 256 << 20
MEMORY_CAP = 8 << 20
"""What reading a huge file may allocate: the budget plus a hashing chunk, not the file."""


def test_reading_a_huge_sparse_file_keeps_only_the_budget(ws: Workspace) -> None:
    os.truncate(_touch(ws.root / "sparse"), SPARSE)
    c = call(ws, "fs.read_file", budget=1000, path="sparse")
    out, peak = _peak_bytes(lambda: execute(c))
    assert peak < MEMORY_CAP, f"reading held {peak} bytes at its peak"
    assert out.truncated is True and out.data["content"] == "\0" * 1000
    assert out.data["size"] == SPARSE
    assert out.data["sha256"] == out.evidence[0].sha256 == _zeros_sha256(SPARSE)


@pytest.mark.parametrize("probe", ["sha256", "preview"])
def test_hashing_a_huge_sparse_file_is_streamed(ws: Workspace, probe: str) -> None:
    os.truncate(_touch(ws.root / "sparse"), SPARSE)
    c = call(ws, "fs.delete_file", path="sparse")
    if probe == "sha256":
        answer, peak = _peak_bytes(
            lambda: bounded(lambda: FileAdapter().probe("file_sha256", {"path": "sparse"}, c))
        )
        assert answer == _zeros_sha256(SPARSE)
    else:
        answer, peak = _peak_bytes(lambda: bounded(lambda: FileAdapter().preview(c)))
        assert answer["size"] == SPARSE and answer["sha256"] == _zeros_sha256(SPARSE)
    assert peak < MEMORY_CAP, f"hashing held {peak} bytes at its peak"


def test_patching_a_file_too_large_to_hold_is_refused(ws: Workspace) -> None:
    os.truncate(_touch(ws.root / "sparse"), SPARSE)
    c = call(ws, "fs.apply_patch", path="sparse", patch=PATCH)
    error, peak = _peak_bytes(lambda: error_of(lambda: execute(c)))
    assert error.code == "file_too_large"
    assert peak < MEMORY_CAP
    assert (ws.root / "sparse").stat().st_size == SPARSE


def test_the_deadline_stops_hashing_a_4_gib_file(ws: Workspace) -> None:
    """4 GiB of zeros takes seconds to hash: the call's deadline ends it between chunks,
    as a timeout, instead of after the last byte."""
    os.truncate(_touch(ws.root / "sparse"), 4 << 30)
    c = call(ws, "fs.read_file", path="sparse", seconds=0.2)
    with pytest.raises(TimeoutError):
        execute(c)


def test_a_cancelled_scope_stops_hashing_a_4_gib_file(ws: Workspace) -> None:
    """The pipeline runs the adapter in a cancel scope (deadline, cut-off after a cancel):
    the worker thread sees that scope cancelled and stops."""
    os.truncate(_touch(ws.root / "sparse"), 4 << 30)
    c = call(ws, "fs.read_file", path="sparse")

    async def under_scope() -> tuple[bool, Any]:
        got = None
        with anyio.move_on_after(0.2) as scope:
            got = await FileAdapter().execute(c)
        return scope.cancelled_caught, got

    caught, got = bounded(under_scope)
    assert caught and got is None


@pytest.mark.parametrize("tool, arguments", WRITES[:3], ids=[w[0] for w in WRITES[:3]])
def test_a_cancel_signal_before_the_write_changes_nothing(
    ws: Workspace, tool: str, arguments: dict[str, Any]
) -> None:
    (ws.root / "p").write_text("old\n")
    c = call(
        ws, tool, path="p", **{**arguments, "patch": "--- a/p\n+++ b/p\n@@ -1 +1 @@\n-old\n+new\n"}
    )
    c.cancelled.set()
    out = execute(c)
    assert out.outcome is Outcome.CANCELLED and out.error.code == "cancelled"
    assert out.side_effect.attempted is False
    assert (ws.root / "p").read_text() == "old\n"


def test_a_cut_in_the_middle_of_a_character_stays_text(ws: Workspace) -> None:
    (ws.root / "t.txt").write_text("é" * 100)  # two bytes each
    out = execute(call(ws, "fs.read_file", budget=7, path="t.txt"))
    assert out.truncated is True
    assert out.data["encoding"] == "utf-8" and out.data["content"] == "ééé"


def test_listing_says_what_is_not_a_file(ws: Workspace) -> None:
    os.mkfifo(ws.root / "p")
    (ws.root / "f").write_text("x")
    os.symlink("f", ws.root / "l")
    out = execute(call(ws, "fs.list_dir", path="."))
    assert {e["path"]: e["type"] for e in out.data["entries"]} == {
        "f": "file",
        "l": "symlink",
        "p": "other",
    }


def test_recursive_listing_keeps_the_sorted_order(ws: Workspace) -> None:
    for name in ("a/b/c", "a-c/x", "a/z", "b", "a.d/e"):
        (ws.root / name).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / name).write_text("1")
    out = execute(call(ws, "fs.list_dir", path=".", recursive=True))
    expected = sorted(ws.root.rglob("*"))
    assert [e["path"] for e in out.data["entries"]] == [
        p.relative_to(ws.root).as_posix() for p in expected
    ]


def _touch(path: Path) -> Path:
    path.touch()
    return path
