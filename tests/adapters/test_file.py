"""The file adapter against real files."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.adapters.base import AdapterCall
from gateway.adapters.file.adapter import FileAdapter
from gateway.adapters.shared.fileio import atomic_write, file_sha256, sha256_bytes
from gateway.errors import ExecutionError, ValidationError
from gateway.testing import load_catalogue
from gateway.types import Outcome
from gateway.workspace import Workspace, confine
from tests.helpers import REPO

pytestmark = pytest.mark.anyio
CATALOGUE = load_catalogue(REPO / "tools.d")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace("demo", root.resolve())


def call(ws: Workspace, tool: str, budget: int | None = None, **arguments: Any) -> AdapterCall:
    decl = CATALOGUE.resolve(tool)
    paths = {"path": confine(ws, arguments.get("path", "."))}
    return AdapterCall(
        execution_id="ex_test",
        tool=decl,
        arguments=arguments,
        workspace=ws,
        paths=paths,
        deadline=time.time() + 10,
        cancelled=anyio.Event(),
        fencing_tokens={},
        output_budget=budget or decl.output_budget,
        context={"arguments": arguments, "workspace": ws.to_json()},
    )


async def test_write_is_atomic_and_keeps_mode(ws: Workspace) -> None:
    target = ws.root / "a.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    out = await FileAdapter().execute(call(ws, "fs.write_file", path="a.txt", content="new"))
    assert out.outcome is Outcome.SUCCEEDED
    assert target.read_text() == "new"
    assert oct(target.stat().st_mode & 0o777) == "0o640"
    assert out.evidence[0].sha256 == sha256_bytes(b"new")
    assert out.evidence[0].data["before_sha256"] == sha256_bytes(b"old")
    assert [p.name for p in ws.root.iterdir()] == ["a.txt"]  # no temp file left


async def test_write_creates_directories(ws: Workspace) -> None:
    await FileAdapter().execute(call(ws, "fs.write_file", path="x/y/z.txt", content="1"))
    assert (ws.root / "x/y/z.txt").read_text() == "1"


async def test_failed_atomic_write_leaves_old_file(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ws.root / "a.txt"
    target.write_text("old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write(target, b"new")
    assert target.read_text() == "old"
    assert [p.name for p in ws.root.iterdir()] == ["a.txt"]


async def test_read_budget_truncates(ws: Workspace) -> None:
    (ws.root / "big.txt").write_text("x" * 100)
    out = await FileAdapter().execute(call(ws, "fs.read_file", budget=10, path="big.txt"))
    assert out.truncated is True
    assert out.data["content"] == "x" * 10 and out.data["size"] == 100


async def test_read_missing_and_binary(ws: Workspace) -> None:
    with pytest.raises(ExecutionError) as info:
        await FileAdapter().execute(call(ws, "fs.read_file", path="nope.txt"))
    assert info.value.code == "file_not_found"
    (ws.root / "b.bin").write_bytes(b"\xff\x00")
    out = await FileAdapter().execute(call(ws, "fs.read_file", path="b.bin"))
    assert out.data["encoding"] == "hex" and out.data["content"] == "ff00"


async def test_delete_and_probes(ws: Workspace) -> None:
    (ws.root / "d.txt").write_text("bye")
    adapter = FileAdapter()
    c = call(ws, "fs.delete_file", path="d.txt")
    assert await adapter.probe("file_exists", {"path": "d.txt"}, c) is True
    assert await adapter.probe("file_sha256", {"path": "d.txt"}, c) == sha256_bytes(b"bye")
    out = await adapter.execute(c)
    assert out.side_effect.committed and not (ws.root / "d.txt").exists()
    assert await adapter.probe("file_exists", {"path": "d.txt"}, c) is False
    assert await adapter.probe("file_sha256", {"path": "d.txt"}, c) is None
    with pytest.raises(ExecutionError):
        await adapter.execute(c)


async def test_symlink_swapped_in_after_validation_is_caught(ws: Workspace, tmp_path: Path) -> None:
    c = call(ws, "fs.write_file", path="s.txt", content="x")
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    os.symlink(outside, ws.root / "s.txt")
    with pytest.raises(ValidationError):
        await FileAdapter().execute(c)
    assert outside.read_text() == "secret"


async def test_probe_path_is_confined(ws: Workspace) -> None:
    c = call(ws, "fs.read_file", path="a")
    with pytest.raises(ValidationError):
        await FileAdapter().probe("file_sha256", {"path": "../../etc/passwd"}, c)


def test_file_sha256_of_directory_is_an_error(ws: Workspace) -> None:
    with pytest.raises(ValidationError):
        file_sha256(ws.root)


async def test_small_reads_and_probes_on_the_loop_large_ones_on_a_thread(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.adapters.file import adapter as file_adapter

    hops: list[object] = []
    real_run_sync = anyio.to_thread.run_sync

    async def counting_run_sync(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(fn)
        return await real_run_sync(fn, *args, **kwargs)

    monkeypatch.setattr(file_adapter.anyio.to_thread, "run_sync", counting_run_sync)
    small = b"s" * file_adapter.INLINE_MAX_BYTES
    large = b"L" * (file_adapter.INLINE_MAX_BYTES + 1)
    (ws.root / "small.txt").write_bytes(small)
    (ws.root / "large.txt").write_bytes(large)
    adapter = FileAdapter()
    for name, data in (("small.txt", small), ("large.txt", large)):
        c = call(ws, "fs.read_file", path=name)
        out = await adapter.execute(c)
        assert out.data["sha256"] == sha256_bytes(data) and out.data["size"] == len(data)
        probed = await adapter.probe("file_sha256", {"path": name}, c)
        assert probed == sha256_bytes(data)
    assert len(hops) == 2  # the large file's read and its probe


async def test_a_fifo_is_never_read_on_the_loop(ws: Workspace) -> None:
    from gateway.adapters.file.adapter import small_file_bytes

    os.mkfifo(ws.root / "pipe")
    assert small_file_bytes(ws.root / "pipe") is None  # returns at once: opened non-blocking
    assert small_file_bytes(ws.root) is None
    assert small_file_bytes(ws.root / "missing") is None


async def test_execute_now_reads_small_files_only_and_confines_again(
    ws: Workspace, tmp_path: Path
) -> None:
    from gateway.adapters.file import adapter as file_adapter

    adapter = FileAdapter()
    (ws.root / "small.txt").write_bytes(b"s" * 10)
    (ws.root / "large.txt").write_bytes(b"L" * (file_adapter.INLINE_MAX_BYTES + 1))
    done = adapter.execute_now(call(ws, "fs.read_file", path="small.txt"))
    assert done is not None and done.data["content"] == "s" * 10
    assert adapter.execute_now(call(ws, "fs.read_file", path="large.txt")) is None
    assert adapter.execute_now(call(ws, "fs.write_file", path="new.txt", content="x")) is None
    assert not (ws.root / "new.txt").exists()
    swapped = call(ws, "fs.read_file", path="small.txt")
    (tmp_path / "secret.txt").write_text("secret")
    (ws.root / "small.txt").unlink()
    (ws.root / "small.txt").symlink_to(tmp_path / "secret.txt")  # after validation
    with pytest.raises(ValidationError) as caught:
        adapter.execute_now(swapped)
    assert caught.value.code == "path_escape"
    assert done.data["path"] == "small.txt"
