from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.errors import ValidationError
from gateway.workspace import Workspace, confine, protected_entry


@pytest.fixture(params=["plain", "declared"])
def ws(request: pytest.FixtureRequest, tmp_path: Path) -> Workspace:
    """A workspace checked in full, and one declared (checked below its root only)."""
    root = tmp_path / "root"
    root.mkdir()
    if request.param == "declared":
        return Workspace.declare("w", root)
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
        assert resolved.absolute == ws.root / relative  # ws.root / "." is ws.root


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
    (ws.root / "deep" / "er").mkdir(parents=True)
    os.symlink(outside, ws.root / "deep" / "er" / "out")
    with pytest.raises(ValidationError, match="symlink"):
        confine(ws, "deep/er/out")
    (ws.root / "real").mkdir()
    os.symlink(ws.root / "real", ws.root / "alias")
    assert confine(ws, "alias/f.txt").relative == "real/f.txt"


@pytest.fixture
def declared(tmp_path: Path) -> Workspace:
    (tmp_path / "a" / "b" / "root").mkdir(parents=True)
    return Workspace.declare("w", tmp_path / "a" / "b" / "root")


def test_declared_workspace_remembers_its_directory(declared: Workspace) -> None:
    st = declared.root.stat()
    assert declared.identity == (st.st_dev, st.st_ino)
    assert confine(declared, "x/y.txt").absolute == declared.root / "x" / "y.txt"


def test_a_root_replaced_by_a_symlink_out_is_refused(declared: Workspace, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    declared.root.rename(tmp_path / "moved")
    os.symlink(elsewhere, declared.root)
    with pytest.raises(ValidationError, match="symlink"):
        confine(declared, "file.txt")


def test_an_ancestor_replaced_by_a_symlink_out_is_refused(
    declared: Workspace, tmp_path: Path
) -> None:
    # Another directory now sits at the root's path, reached through a symlinked ancestor:
    # it is not the declared directory, so every prefix is checked again.
    (tmp_path / "other" / "b" / "root").mkdir(parents=True)
    (tmp_path / "a").rename(tmp_path / "old-a")
    os.symlink(tmp_path / "other", tmp_path / "a")
    with pytest.raises(ValidationError, match="symlink"):
        confine(declared, "file.txt")


def test_a_root_replaced_by_another_directory_is_checked_in_full(
    declared: Workspace, tmp_path: Path
) -> None:
    declared.root.rename(tmp_path / "moved")
    declared.root.mkdir()
    assert confine(declared, "f.txt").relative == "f.txt"  # a plain directory: still inside


def test_protected_entries_match_whole_components_anywhere() -> None:
    """The rule docs/policies.md states for ``protected_paths`` (and rego/toolgate.rego)."""
    protected = (".git/", "docs/private")
    for path in (".git", ".git/config", "vendor/lib/.git/HEAD", "a/docs/private/x"):
        assert protected_entry(path, protected) is not None, path
    for path in ("my.git/x", ".gitignore", "docs/privateer", "docs"):
        assert protected_entry(path, protected) is None, path
