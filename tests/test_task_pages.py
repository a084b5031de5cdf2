"""Run every docs/tasks/*.md page against a real gateway, so that a task page cannot rot.

The convention the pages are written to:

- Every fenced block whose info string is ``sh`` is run, in order, each on its own with
  ``bash -euo pipefail`` (shell variables do not reach the next block: keep what a later block
  needs in a file). Any other block (``console``, ``text``, ``rego``, ``yaml``, ``json``) is
  not run.
- The working directory is the root of a fresh copy of the project (``tools.d``, ``rego``,
  ``policies``, ``examples``, ``toolgate.yaml``; never the real ``var/``), one copy per page.
- ``toolgate`` is on ``PATH`` (this tree's ``gateway.cli`` with the test's Python), ``$TG`` is
  the URL of a gateway started from that copy (its ``toolgate.yaml`` names the same port, so
  ``toolgate`` commands find it without ``--url``), ``TOOLGATE_API_KEY=tg_dev_alice``.
- A block whose first line is ``# restart the gateway`` restarts the gateway first (so that it
  reads ``tools.d``, ``rego`` and ``policies`` again), with the variables of ``gateway.env``
  (``NAME=value`` lines, if the page wrote one) added to its environment: what a reader puts
  in the environment of ``toolgate serve`` (a secret the configuration names, say).
- Files the reader creates are written inside ``sh`` blocks (``cat > path <<'EOF'``), and each
  block checks what it expects itself (``| grep -q succeeded``, ``jq -e ...``): a block that
  exits non-zero, or runs longer than ``BLOCK_TIMEOUT_S``, fails the page with its number, its
  text and its output. Under ``pipefail`` prefer ``| grep PATTERN >/dev/null`` or ``jq -e`` to
  ``| grep -q``: ``grep -q`` stops reading at the first match, and a writer with more to say
  then dies of a broken pipe, which fails the block now and then.
- A page ends with a clean-up that leaves the project as it found it (every file but ``var/``:
  the tools, rules, data and ``toolgate.yaml`` it changed put back, the files it wrote
  removed): a reader goes from one page to the next in one checkout, and a rule or an endpoint
  left behind changes what the next page, or the next ``make run``, meets.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.http.server import EXIT_CANNOT_LISTEN
from gateway.testing import free_port, stop, wait_healthy
from tests.helpers import ALICE, REPO

TASKS = REPO / "docs" / "tasks"
PAGES = sorted(TASKS.glob("*.md"))
BLOCK_TIMEOUT_S = float(os.environ.get("TOOLGATE_TASK_BLOCK_TIMEOUT", "120"))
RESTART = "# restart the gateway"
COPIED = ("tools.d", "rego", "policies", "examples")


@dataclass(frozen=True)
class Block:
    """One ``sh`` block of a page: its number among the page's sh blocks, where it starts."""

    number: int
    line: int
    text: str

    @property
    def restarts(self) -> bool:
        return self.text.lstrip("\n").startswith(RESTART)


def sh_blocks(text: str) -> list[Block]:
    """The page's ``sh`` blocks, in order (fences of three or more backticks or tildes)."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^(`{3,}|~{3,})\s*([^`\s]*)", lines[i])
        if not opening:
            i += 1
            continue
        fence, info = opening.group(1), opening.group(2)
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)),
            len(lines),
        )
        if info == "sh":
            body = "\n".join(lines[i + 1 : end]) + "\n"
            blocks.append(Block(len(blocks) + 1, i + 1, body))
        i = end + 1
    return blocks


def copy_project(root: Path) -> Path:
    """A copy of what ``toolgate serve`` reads, under ``root``; its ``toolgate.yaml``."""
    root.mkdir(parents=True)
    for name in COPIED:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "toolgate.yaml", root / "toolgate.yaml")
    return root / "toolgate.yaml"


def toolgate_wrapper(bin_dir: Path) -> None:
    """``toolgate`` on PATH: this tree's command line, run by the test's interpreter."""
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "toolgate"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gateway.cli "$@"\n')
    wrapper.chmod(0o755)


def base_env(bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["RUST_LIB_BACKTRACE"] = "0"
    env["TOOLGATE_API_KEY"] = ALICE
    return env


GATEWAY_ENV = "gateway.env"


def gateway_env(path: Path) -> dict[str, str]:
    """The ``NAME=value`` lines of a page's ``gateway.env`` (none when it wrote no such file)."""
    if not path.exists():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text(encoding="utf-8").splitlines())
    return {name.strip(): value.strip() for name, value in pairs if name.strip()}


class Gateway:
    """``toolgate serve`` on the copy, on the port its toolgate.yaml names."""

    def __init__(self, config: Path, env: dict[str, str], logs: Path) -> None:
        self.config, self.env, self.logs = config, env, logs
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.env = {**self.env, **gateway_env(self.config.parent / GATEWAY_ENV)}
        for _ in range(3):
            if not self.port:
                self._set_port(free_port())
            self.starts += 1
            log = self.logs / f"gateway-{self.starts}.log"
            with log.open("wb") as out:
                self.proc = subprocess.Popen(
                    ["toolgate", "serve", "--log-level", "warning"],
                    cwd=self.config.parent,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            try:
                wait_healthy(self.url, self.proc)
                return
            except RuntimeError:
                returncode = self.proc.returncode if self.proc is not None else None
                self.stop()
                if returncode != EXIT_CANNOT_LISTEN:
                    raise RuntimeError(f"the gateway did not start:\n{self.log_tail()}") from None
                self.port = 0  # someone took the port: another one
        raise RuntimeError(f"the gateway found no free port:\n{self.log_tail()}")

    def _set_port(self, port: int) -> None:
        text = self.config.read_text(encoding="utf-8")
        text, n = re.subn(r"(?m)^port:.*$", f"port: {port}", text)
        self.config.write_text(text if n else text + f"\nport: {port}\n", encoding="utf-8")
        self.port = port

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
            self.proc = None

    def log_tail(self, lines: int = 40) -> str:
        log = self.logs / f"gateway-{self.starts}.log"
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@contextmanager
def running_gateway(config: Path, env: dict[str, str], logs: Path) -> Iterator[Gateway]:
    gateway = Gateway(config, env, logs)
    gateway.start()
    try:
        yield gateway
    finally:
        gateway.stop()


def run_block(block: Block, cwd: Path, env: dict[str, str]) -> tuple[int | None, str]:
    """Run one block; (exit status or None on a timeout, its output)."""
    script = cwd.parent / f"block-{block.number}.sh"
    script.write_text(block.text, encoding="utf-8")
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", str(script)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: a timeout stops all it started
    )
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
        return proc.returncode, out.decode("utf-8", errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out.decode("utf-8", errors="replace")


def run_page(page: Path, work: Path) -> int:
    """Run the page's sh blocks in a fresh copy of the project under ``work``; fail the test
    at the first block that fails. Returns how many blocks ran."""
    blocks = sh_blocks(page.read_text(encoding="utf-8"))
    if not blocks:
        pytest.fail(f"{page.name} has no ```sh block to run", pytrace=False)
    config = copy_project(work / "project")
    toolgate_wrapper(work / "bin")
    env = base_env(work / "bin")
    with running_gateway(config, env, work) as gateway:
        before = project_files(config.parent)
        for block in blocks:
            if block.restarts:
                gateway.stop()
                gateway.start()
            status, output = run_block(block, config.parent, {**env, "TG": gateway.url})
            if status != 0:
                what = (
                    f"timed out after {BLOCK_TIMEOUT_S:g} s"
                    if status is None
                    else (f"exited {status}")
                )
                pytest.fail(
                    f"{page.name}: block {block.number} (line {block.line}) {what}\n"
                    f"--- the block ---\n{block.text}--- its output ---\n{output}\n"
                    f"--- the gateway's log (last lines) ---\n{gateway.log_tail()}",
                    pytrace=False,
                )
        changed = sorted(set(before.items()) ^ set(project_files(config.parent).items()))
        if changed:
            pytest.fail(
                f"{page.name}: its clean-up leaves the project otherwise than it found it"
                f" (the next page, or `make run`, meets it): {sorted({p for p, _ in changed})}",
                pytrace=False,
            )
    return len(blocks)


def project_files(root: Path) -> dict[str, bytes]:
    """Every file of the project's copy but ``var/`` (the store, the workspaces), by path."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file() and path.relative_to(root).parts[0] != "var"
    }


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_task_page_runs(page: Path, tmp_path: Path) -> None:
    assert run_page(page, tmp_path) >= 1


def test_there_are_task_pages() -> None:
    assert TASKS / "agent-loop.md" in PAGES, "docs/tasks/agent-loop.md is missing"


# --- the harness itself -----------------------------------------------------------------------

SAMPLE = """# A page

```sh
echo one > one.txt
test -f toolgate.yaml && test -d tools.d
```

```console
$ exit 7
```

```text
false
```

````sh
# restart the gateway
curl -sf "$TG/readyz" | grep -q ready
test "$TOOLGATE_API_KEY" = tg_dev_alice
toolgate tools | grep fs.write_file >/dev/null
````

```sh
cat one.txt
echo "the marker"; false
echo never
```
"""


def test_sh_blocks_are_the_sh_fences_only() -> None:
    blocks = sh_blocks(SAMPLE)
    assert [b.number for b in blocks] == [1, 2, 3]
    assert [b.line for b in blocks] == [3, 16, 23]
    assert [b.restarts for b in blocks] == [False, True, False]
    assert blocks[2].text == 'cat one.txt\necho "the marker"; false\necho never\n'


@pytest.mark.slow
def test_the_harness_reports_a_failing_block(tmp_path: Path) -> None:
    """A page whose third block fails: the harness fails the test and says where and why,
    after running (and restarting for) the blocks before it."""
    page = tmp_path / "broken.md"
    page.write_text(SAMPLE, encoding="utf-8")
    with pytest.raises(pytest.fail.Exception) as failed:
        run_page(page, tmp_path / "work")
    message = str(failed.value)
    assert "broken.md: block 3 (line 23) exited 1" in message
    assert "one\nthe marker" in message  # its output, after block 1's file
    assert 'echo "the marker"; false' in message  # its text
    assert "never" not in message.split("--- its output ---")[1].split("---")[0]
    logs = sorted(p.name for p in (tmp_path / "work").glob("gateway-*.log"))
    assert logs == ["gateway-1.log", "gateway-2.log"]  # block 2 restarted it


@pytest.mark.slow
def test_the_harness_stops_a_block_that_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "BLOCK_TIMEOUT_S", 1.0)
    page = tmp_path / "hangs.md"
    page.write_text("```sh\necho started\nsleep 600\n```\n", encoding="utf-8")
    with pytest.raises(pytest.fail.Exception) as failed:
        run_page(page, tmp_path / "work")
    assert "block 1 (line 1) timed out after 1 s" in str(failed.value)
    assert "started" in str(failed.value)
