"""Apply one file's unified diff to text, strictly; and make such a diff for evidence.

Pure functions, no I/O. The policy, for the file adapter's ``apply_patch``:

* **No fuzz.** Every context and removed line must match exactly, line ending included.
* **Position.** A hunk is tried first where its header puts it. If its lines are not there,
  the rest of the file (after the previous hunk) is searched: one exact match is used (the
  file moved since the diff was made); none, or several, rejects the patch.
* **Counts.** The ``-a,b +c,d`` counts must agree with the hunk body. The new-side start
  ``c`` is not checked: it only restates the earlier hunks' growth.
* **Line endings.** ``\\ No newline at end of file`` is honoured both ways. A CRLF file
  patched with an LF diff (or an LF file with a CRLF diff) gets the diff's line endings
  converted, so the file keeps its own; otherwise a CR is ordinary content.
* **Headers.** ``diff``, ``index``, mode lines and ``---``/``+++`` are accepted and ignored,
  except ``--- /dev/null`` (the text must be empty) and ``+++ /dev/null`` (the result must
  be empty). A diff of several files is rejected. An empty line inside a hunk is an empty
  context line (editors strip the lone space).

Errors are ``ValidationError`` with code ``patch_malformed`` or ``patch_does_not_apply``,
naming the hunk and the line, with ``hunk``/``line``/``expected``/``found`` in ``details``.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable
from typing import Any

from gateway.errors import ValidationError

NO_NEWLINE = "\\ No newline at end of file"
_HUNK_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GIT_HEADERS = ("index ", "old mode ", "new mode ", "new file mode ", "deleted file mode ")
_SHOWN = 80


def apply_unified_diff(original: str, patch: str) -> str:
    """Return ``original`` with the single-file unified diff ``patch`` applied.

    Raises ``ValidationError`` (``patch_malformed`` or ``patch_does_not_apply``).
    """
    parsed = _Parser(patch).parse()
    if parsed.creates and original:
        raise _does_not_apply("the patch creates the file (--- /dev/null), but it has content")
    hunks = _match_line_endings(parsed.hunks, original)
    result = "".join(_apply(hunks, _split(original)))
    if parsed.deletes and result:
        raise _does_not_apply("the patch deletes the file (+++ /dev/null), but lines remain")
    return result


def unified_diff(before: str, after: str, path: str) -> str:
    """A unified diff (``a/``/``b/`` prefixes, 3 lines of context) that turns before into after.

    Lines without a final newline get the ``\\ No newline at end of file`` marker, so the
    result round-trips through :func:`apply_unified_diff`. Equal texts give ``""``.
    """
    lines = difflib.unified_diff(_split(before), _split(after), f"a/{path}", f"b/{path}")
    return "".join(line if line.endswith("\n") else f"{line}\n{NO_NEWLINE}\n" for line in lines)


@dataclasses.dataclass(frozen=True)
class _Hunk:
    number: int
    header: str
    old_start: int
    old: tuple[str, ...]  # context and removed lines, each with its line ending
    new: tuple[str, ...]  # context and added lines

    @property
    def first(self) -> int:
        """0-based index of the hunk's first old line (or of the insertion point)."""
        return self.old_start - 1 if self.old else self.old_start


@dataclasses.dataclass(frozen=True)
class _Patch:
    hunks: list[_Hunk]
    creates: bool
    deletes: bool


class _Parser:
    """Reads one file's unified diff; hunk bodies are read by their header counts."""

    def __init__(self, patch: str) -> None:
        self.lines = patch.split("\n")
        if self.lines[-1] == "":
            self.lines.pop()  # the patch's own final newline
        self.i = 0
        self.hunks: list[_Hunk] = []
        self.seen: set[str] = set()  # what the current file section has had: diff/pair/hunk
        self.files: list[str] = []
        self.creates = self.deletes = False

    def parse(self) -> _Patch:
        while self.i < len(self.lines):
            self._line(self.lines[self.i].removesuffix("\r"))
        if not self.hunks:
            raise _malformed("it has no hunks (lines starting with @@ -a,b +c,d @@)")
        return _Patch(self.hunks, self.creates, self.deletes)

    def _line(self, line: str) -> None:
        if line.startswith("@@"):
            self._section("hunk", "")
            self.hunks.append(self._hunk(line))
        elif line.startswith("diff "):
            self._section("diff", _path_name(line.split()[-1]))
            self.i += 1
        elif line.startswith("--- ") and self._peek().startswith("+++ "):
            self._file_pair(line, self._peek().removesuffix("\r"))
        elif (line.startswith(_GIT_HEADERS) and "hunk" not in self.seen) or not line.strip():
            self.i += 1
        elif line.startswith(("Binary files ", "GIT binary patch")):
            raise _malformed("binary patches are not supported")
        elif self.hunks and line[:1] in (" ", "-", "+", "\\"):
            last = self.hunks[-1]
            raise _malformed(
                f"hunk {last.number} ({last.header}) has more lines than its "
                f"header counts: {_quote(line)}",
                hunk=last.number,
            )
        else:
            raise _malformed(
                f"line {self.i + 1} of the patch is {_quote(line)}; expected a "
                "diff header or a hunk (@@ -a,b +c,d @@)"
            )

    def _peek(self) -> str:
        return self.lines[self.i + 1] if self.i + 1 < len(self.lines) else ""

    def _file_pair(self, old: str, new: str) -> None:
        old_path, new_path = old[4:].split("\t")[0], new[4:].split("\t")[0]
        self._section("pair", _path_name(old_path if new_path == "/dev/null" else new_path))
        self.creates = self.creates or old_path == "/dev/null"
        self.deletes = self.deletes or new_path == "/dev/null"
        self.i += 2

    def _section(self, kind: str, name: str) -> None:
        """Track file sections: a second one means the patch targets several files."""
        new_section = kind == "diff" or (kind == "pair" and bool(self.seen - {"diff"}))
        if new_section and self.seen:
            if name and self.files and name != self.files[0]:
                files = f" ({self.files[0]} and {name})"
            else:
                files = ""
            raise _malformed(f"it changes several files{files}; send one file's diff per call")
        if new_section:
            self.seen = set()
        if name and not self.files:
            self.files.append(name)
        self.seen.add(kind)

    def _hunk(self, line: str) -> _Hunk:
        match = _HUNK_HEADER.match(line)
        if not match:
            raise _malformed(
                f"line {self.i + 1} of the patch is not a hunk header: "
                f"{_quote(line)}; expected @@ -a,b +c,d @@"
            )
        old_start, old_count, _, new_count = (
            int(g) if g is not None else 1 for g in match.groups()
        )
        number, header = len(self.hunks) + 1, match.group(0)
        self.i += 1
        old, new = self._body(old_count, new_count)
        if (len(old), len(new)) != (old_count, new_count):
            stop = self.lines[self.i] if self.i < len(self.lines) else None
            raise _malformed(
                f"hunk {number} ({header}) counts {old_count} old and {new_count} new lines, but "
                f"its body has {len(old)} and {len(new)}"
                + (f" before {_quote(stop)}" if stop is not None else ""),
                hunk=number,
            )
        self._check_markers(number, header, old, new)
        hunk = _Hunk(number, header, old_start, tuple(old), tuple(new))
        self._check_order(hunk, old_count)
        return hunk

    def _body(self, old_count: int, new_count: int) -> tuple[list[str], list[str]]:
        old: list[str] = []
        new: list[str] = []
        last = ""
        while self.i < len(self.lines):
            raw = self.lines[self.i]
            tag, text = (raw[:1], raw[1:]) if raw else (" ", "")
            if tag == "\\":
                self._mark_no_newline(last, old, new)
            elif not _fits(tag, len(old) < old_count, len(new) < new_count):
                break
            else:
                old.extend([text + "\n"] if tag != "+" else [])
                new.extend([text + "\n"] if tag != "-" else [])
                last = tag
            self.i += 1
        return old, new

    def _mark_no_newline(self, last: str, old: list[str], new: list[str]) -> None:
        if not last:
            raise _malformed(f"line {self.i + 1} of the patch: '{NO_NEWLINE}' follows no line")
        if last != "+":
            old[-1] = old[-1].removesuffix("\n")
        if last != "-":
            new[-1] = new[-1].removesuffix("\n")

    def _check_markers(self, number: int, header: str, old: list[str], new: list[str]) -> None:
        if any(not line.endswith("\n") for line in old[:-1] + new[:-1]):
            raise _malformed(
                f"hunk {number} ({header}) has '{NO_NEWLINE}' after a line that is not its last",
                hunk=number,
            )

    def _check_order(self, hunk: _Hunk, old_count: int) -> None:
        if old_count and hunk.old_start == 0:
            raise _malformed(
                f"hunk {hunk.number} ({hunk.header}) starts at line 0", hunk=hunk.number
            )
        if self.hunks:
            previous = self.hunks[-1]
            if hunk.first < previous.first + len(previous.old):
                raise _malformed(
                    f"hunk {hunk.number} ({hunk.header}) overlaps or comes "
                    f"before hunk {previous.number} ({previous.header})",
                    hunk=hunk.number,
                )


def _fits(tag: str, old_room: bool, new_room: bool) -> bool:
    """Whether a body line tagged ``tag`` still belongs to the hunk, by its counts."""
    return (
        (tag == " " and old_room and new_room)
        or (tag == "-" and old_room)
        or (tag == "+" and new_room)
    )


def _split(text: str) -> list[str]:
    """Lines with their endings; only ``\\n`` ends a line (a CR stays in the line)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _match_line_endings(hunks: list[_Hunk], original: str) -> list[_Hunk]:
    """Convert an LF diff for a CRLF file (or the reverse) to the file's line endings."""
    if "\n" not in original:
        return hunks
    old = [line for h in hunks for line in h.old if line.endswith("\n")]
    every = old + [line for h in hunks for line in h.new if line.endswith("\n")]
    convert: Callable[[str], str]
    if _is_crlf(original) and not any(line.endswith("\r\n") for line in every):
        convert = _to_crlf
    elif "\r" not in original and old and all(line.endswith("\r\n") for line in old):
        convert = _to_lf
    else:
        return hunks
    return [
        dataclasses.replace(h, old=tuple(map(convert, h.old)), new=tuple(map(convert, h.new)))
        for h in hunks
    ]


def _is_crlf(text: str) -> bool:
    return text.count("\n") == text.count("\r\n") > 0


def _to_crlf(line: str) -> str:
    return line[:-1] + "\r\n" if line.endswith("\n") and not line.endswith("\r\n") else line


def _to_lf(line: str) -> str:
    return line[:-2] + "\n" if line.endswith("\r\n") else line


def _apply(hunks: list[_Hunk], lines: list[str]) -> list[str]:
    out: list[str] = []
    cursor = 0
    for hunk in hunks:
        at = _locate(hunk, lines, cursor)
        out.extend(lines[cursor:at])
        if hunk.new and out and not out[-1].endswith("\n"):
            raise _does_not_apply(
                f"hunk {hunk.number} ({hunk.header}) adds lines after the "
                "last line, which has no newline at end of file",
                hunk=hunk.number,
            )
        out.extend(hunk.new)
        cursor = at + len(hunk.old)
        if hunk.new and not hunk.new[-1].endswith("\n") and cursor < len(lines):
            raise _does_not_apply(
                f"hunk {hunk.number} ({hunk.header}) ends the file without "
                "a newline, but the file goes on after it",
                hunk=hunk.number,
            )
    out.extend(lines[cursor:])
    return out


def _locate(hunk: _Hunk, lines: list[str], floor: int) -> int:
    """Where the hunk's old lines are: as stated, else their one exact match further on."""
    stated = hunk.first
    if not hunk.old:
        if floor <= stated <= len(lines):
            return stated
        raise _does_not_apply(
            f"hunk {hunk.number} ({hunk.header}) inserts after line "
            f"{hunk.old_start}, but the file has {_count(lines)}",
            hunk=hunk.number,
        )
    if stated >= floor and _matches(lines, stated, hunk.old):
        return stated
    found = [
        at for at in range(floor, len(lines) - len(hunk.old) + 1) if _matches(lines, at, hunk.old)
    ]
    if len(found) == 1:
        return found[0]
    raise _mismatch(hunk, lines, stated, found)


def _matches(lines: list[str], at: int, old: tuple[str, ...]) -> bool:
    return 0 <= at < len(lines) and lines[at] == old[0] and tuple(lines[at : at + len(old)]) == old


def _mismatch(hunk: _Hunk, lines: list[str], stated: int, found: list[int]) -> ValidationError:
    where = f"hunk {hunk.number} ({hunk.header}) does not apply"
    k = next((k for k, want in enumerate(hunk.old) if _line_at(lines, stated + k) != want), None)
    if k is None:  # its lines are where it says, but the previous hunk moved past them
        return _does_not_apply(
            f"{where}: its lines at line {stated + 1} overlap what hunk {hunk.number - 1} changed",
            hunk=hunk.number,
            line=stated + 1,
        )
    line, expected, got = stated + k + 1, hunk.old[k], _line_at(lines, stated + k)
    return _does_not_apply(
        f"{where}: at line {line} it expects {_show(expected)}, found {_show(got)}"
        f"{_endings_note(expected, got)}; {_elsewhere(hunk, found)}",
        hunk=hunk.number,
        line=line,
        expected=_clip(expected),
        found=_clip(got),
        candidates=[at + 1 for at in found],
    )


def _endings_note(expected: str, got: str | None) -> str:
    same_text = got is not None and expected.rstrip("\r\n") == got.rstrip("\r\n")
    return " (the line endings differ)" if same_text else ""


def _elsewhere(hunk: _Hunk, found: list[int]) -> str:
    if not found:
        return "its lines are nowhere else " + (
            f"after hunk {hunk.number - 1}" if hunk.number > 1 else "in the file"
        )
    places = ", ".join(str(at + 1) for at in found[:5]) + ("..." if len(found) > 5 else "")
    return f"its lines occur at lines {places}, so where it belongs is ambiguous"


def _count(lines: list[str]) -> str:
    return f"{len(lines)} line" + ("" if len(lines) == 1 else "s")


def _line_at(lines: list[str], at: int) -> str | None:
    return lines[at] if 0 <= at < len(lines) else None


def _clip(line: str | None) -> str | None:
    if line is None:
        return None
    return line if len(line) <= _SHOWN else line[: _SHOWN - 3] + "..."


def _show(line: str | None) -> str:
    """A file line for a message: quoted, clipped to ~80 characters, its ending spelled out."""
    if line is None:
        return "end of file"
    if line.endswith("\n"):
        return _quote(line[:-1])
    return f"{_quote(line)} (no newline at end of file)"


def _quote(text: str) -> str:
    return repr(_clip(text))


def _path_name(path: str) -> str:
    return path[2:] if path.startswith(("a/", "b/")) else path


def _malformed(message: str, **details: Any) -> ValidationError:
    return ValidationError(f"malformed patch: {message}", code="patch_malformed", details=details)


def _does_not_apply(message: str, **details: Any) -> ValidationError:
    return ValidationError(message, code="patch_does_not_apply", details=details)
