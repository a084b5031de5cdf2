from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.errors import ValidationError
from gateway.workspace import Workspace, confine


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "root"
    root.mkdir()
    return Workspace("w", root.resolve())


@pytest.mark.parametrize(
    "raw, relative",
    [("a.txt", "a.txt"), ("./a/../b.txt", None), ("dir/./x", "dir/x"), (".", "."), ("", ".")],
)
def test_relative_paths(ws: Workspace, raw: str, relative: str | None) -> None:
    if relative is None:
        with pytest.raises(ValidationError):
            confine(ws, raw)
    else:
        resolved = confine(ws, raw)
        assert resolved.relative == relative
        assert resolved.absolute == ws.root / relative if relative != "." else ws.root


@pytest.mark.parametrize("raw", ["/etc/passwd", "../x", "a/../../x", "\\abs", "C:\\x", "a\x00b", 5])
def test_escapes_are_refused(ws: Workspace, raw: object) -> None:
    with pytest.raises(ValidationError) as info:
        confine(ws, raw)
    assert info.value.code in ("path_escape", "invalid_path")


def test_symlink_out_is_refused_and_in_is_followed(ws: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, ws.root / "out")
    with pytest.raises(ValidationError, match="symlink"):
        confine(ws, "out/file.txt")
    (ws.root / "real").mkdir()
    os.symlink(ws.root / "real", ws.root / "alias")
    assert confine(ws, "alias/f.txt").relative == "real/f.txt"
