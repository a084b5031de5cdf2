"""What a page quotes as output is what running it prints: counts and transcripts cannot drift.

The convention the pages are written to (docs/*.md, README.md):

- A line ``<!-- checked -->`` right before a fenced block marks it as checked.
- A checked ``text`` block whose first line starts with ``$`` is a transcript. Each ``$ ``
  line is a command, run with bash in a fresh copy of the project (``tools.d``, ``rego``,
  ``policies``, ``examples``, ``toolgate.yaml``; ``.venv/bin/toolgate`` is this tree's
  command line), one copy per page, commands in page order, with no gateway running. The lines
  after a command, up to the next, are what it prints (standard output, then standard error).
- A checked ``python`` block runs (this interpreter, in the page's copy) against a real gateway
  started from that copy: ``URL`` (that gateway) and ``KEY`` (``tg_dev_alice``) are defined, and
  ``http://127.0.0.1:8080`` in the block means that gateway. It must exit 0. A checked ``text``
  block right after it that is not a transcript is what it prints.
- In expected output, a line ``...`` stands for any number of lines (none too), ``...`` within
  a line for any text; spaces at the ends of lines do not count.

``test_checks_can_fail`` shows the comparison catching a drifted count.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.testing import gateway
from tests.helpers import ALICE, REPO
from tests.test_task_pages import base_env, copy_project, toolgate_wrapper

MARK = "<!-- checked -->"
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
TIMEOUT_S = 180
DEMO_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class Checked:
    """A checked block: its language, first line in the page, and text."""

    info: str
    line: int
    text: str

    @property
    def transcript(self) -> bool:
        return self.info == "text" and self.text.startswith("$")


def blocks(text: str) -> Iterator[tuple[str, int, str, bool]]:
    """(info string, line of the opening fence, body, marked checked) of every fenced block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^(`{3,}|~{3,})\s*([^`\s]*)", lines[i])
        if not opening:
            i += 1
            continue
        fence = opening.group(1)
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)),
            len(lines),
        )
        marked = i > 0 and lines[i - 1].strip() == MARK
        yield opening.group(2), i + 1, "\n".join(lines[i + 1 : end]) + "\n", marked
        i = end + 1


def checked_blocks(text: str) -> list[Checked]:
    return [Checked(info, line, body) for info, line, body, marked in blocks(text) if marked]


def commands(transcript: str) -> list[tuple[str, str]]:
    """(command, expected output) of each ``$`` line of a transcript."""
    found: list[tuple[str, list[str]]] = []
    for line in transcript.splitlines():
        if line.startswith("$ "):
            found.append((line[2:], []))
        else:
            found[-1][1].append(line)
    return [(command, "\n".join(expected)) for command, expected in found]


def matches(expected: str, actual: str) -> bool:
    """``actual`` is ``expected`` with its ``...`` filled in (see the module)."""
    parts = []
    for line in expected.strip("\n").splitlines():
        line = line.rstrip()
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.split("...")) + r"[ \t]*\n")
    got = "".join(line.rstrip() + "\n" for line in actual.strip("\n").splitlines())
    return re.fullmatch("".join(parts), got, re.S) is not None if parts else not got


def run_command(command: str, cwd: Path, env: dict[str, str]) -> str:
    command = command.replace(".venv/bin/toolgate", "toolgate")
    done = subprocess.run(
        ["bash", "-uo", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    return done.stdout + done.stderr


def run_python(source: str, url: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    prelude = f"URL = {url!r}\nKEY = {ALICE!r}\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + source.replace(DEMO_URL, url)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    return done.returncode, done.stdout + done.stderr


def check_page(page: Path, work: Path) -> int:
    """Run the page's checked blocks; fail with the first difference. How many ran."""
    checked = checked_blocks(page.read_text(encoding="utf-8"))
    config = copy_project(work / "project")
    toolgate_wrapper(work / "bin")
    env = base_env(work / "bin")
    faults = []
    needs_gateway = any(block.info == "python" for block in checked)
    with _gateway_if(needs_gateway, config) as url:
        printed: str | None = None
        for block in checked:
            where = f"{page.relative_to(REPO)}:{block.line}"
            if block.transcript:
                for command, expected in commands(block.text):
                    actual = run_command(command, config.parent, env)
                    if not matches(expected, actual):
                        faults.append(f"{where}: $ {command}\n{_diff(expected, actual)}")
            elif block.info == "python":
                status, printed = run_python(block.text, url, config.parent, env)
                if status != 0:
                    faults.append(f"{where}: the example exited {status}:\n{printed}")
            elif block.info == "text" and printed is not None:
                if not matches(block.text, printed):
                    faults.append(
                        f"{where}: the example above prints\n{_diff(block.text, printed)}"
                    )
                printed = None
            else:
                faults.append(
                    f"{where}: a checked {block.info!r} block is not a transcript, a python"
                    " example or the output of one"
                )
    assert not faults, "quoted output differs from what running it prints:\n\n" + "\n\n".join(
        faults
    )
    return len(checked)


@contextmanager
def _gateway_if(needed: bool, config: Path) -> Iterator[str]:
    """A gateway from the page's copy when a block needs one (its URL), else ``""``."""
    if not needed:
        yield ""
        return
    (config.parent / "var" / "workspaces" / "demo").mkdir(parents=True, exist_ok=True)
    with gateway(config) as url:
        yield url


def _diff(expected: str, actual: str) -> str:
    return f"--- quoted ---\n{expected.rstrip()}\n--- printed ---\n{actual.rstrip()}"


CHECKED_PAGES = [page for page in PAGES if MARK in page.read_text(encoding="utf-8")]


@pytest.mark.slow
@pytest.mark.parametrize(
    "page", CHECKED_PAGES, ids=[str(p.relative_to(REPO)) for p in CHECKED_PAGES]
)
def test_quoted_output_is_what_running_it_prints(page: Path, tmp_path: Path) -> None:
    assert check_page(page, tmp_path) >= 1


def test_the_pages_that_quote_runs_are_checked() -> None:
    """Issue 29.6: quickstart.md quoted 37 tests and policies.md 47 where ``toolgate policy
    test`` ran 65; client.md's examples reached the wrong tool and skipped event 0. Every
    block that quotes the whole policy suite's count is checked, and so is client.md."""
    unchecked = []
    for page in PAGES:
        for _info, line, body, marked in blocks(page.read_text(encoding="utf-8")):
            quotes_suite = re.search(r"(?m)^\$ \S*toolgate policy test\s*$", body)
            if quotes_suite and not marked:
                unchecked.append(f"{page.relative_to(REPO)}:{line}")
    assert not unchecked, f"mark these blocks {MARK} (tests/test_doc_outputs.py): {unchecked}"
    client = checked_blocks((REPO / "docs" / "client.md").read_text(encoding="utf-8"))
    assert sum(block.info == "python" for block in client) >= 2, "check client.md's examples"


def test_checks_can_fail() -> None:
    page = f"x\n{MARK}\n```text\n$ toolgate policy test\n37 passed, 0 failed\n```\n```sh\nls\n```\n"
    (block,) = checked_blocks(page)
    assert block.transcript and block.line == 3
    assert commands(block.text) == [("toolgate policy test", "37 passed, 0 failed")]
    assert not matches("37 passed, 0 failed", "65 passed, 0 failed\n")
    assert matches("65 passed, 0 failed", "65 passed, 0 failed  \n")
    listing = "TOOL  VERSION\n...\nfs.read_file  1.0.0\n..."
    assert matches(listing, "TOOL  VERSION\na\nb\nfs.read_file  1.0.0\n")
    assert not matches(listing, "TOOL  VERSION\nfs.read_file  2.0.0\n")
    assert matches("ap_...  pending", "ap_123  pending\n")
    assert not matches("0 tool.requested\n1 ...", "1 policy.evaluated\n")
