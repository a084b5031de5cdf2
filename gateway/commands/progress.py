"""Progress of the command line's long operations, on a terminal only.

``toolgate call --wait`` (waiting on an execution), ``policy test`` (each test as it runs) and
``policy replay`` (each execution read, each decision replayed) show a progress line with rich
on standard error while they run, when standard error is a terminal and ``--json`` is not
given. On a pipe, a file, in CI or with ``--json`` nothing is shown and rich is not imported.
The line is transient (gone when the operation ends), and standard output is the same either
way.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TextIO


class Progress(Protocol):
    """What a long operation reports as it goes."""

    def step(self, done: int, total: int) -> None:
        """``done`` of ``total`` steps are done (a ``gateway.types.OnStep``)."""
        ...

    def status(self, text: str) -> None:
        """What is happening now (replaces the description)."""
        ...

    def restart(self) -> None:
        """A new phase begins: nothing of it is done yet, its total unknown."""
        ...


class _Silent:
    """No terminal: nothing is shown."""

    def step(self, done: int, total: int) -> None:
        return None

    def status(self, text: str) -> None:
        return None

    def restart(self) -> None:
        return None


class _Shown:
    """A rich progress task."""

    def __init__(self, bar: Any, task: Any) -> None:
        self._bar, self._task = bar, task

    def step(self, done: int, total: int) -> None:
        self._bar.update(self._task, completed=done, total=total)

    def status(self, text: str) -> None:
        self._bar.update(self._task, description=text)

    def restart(self) -> None:
        self._bar.reset(self._task, total=None)


def shown(args: argparse.Namespace, stream: TextIO | None = None) -> bool:
    """Whether progress is shown: ``stream`` (standard error) is a terminal, not ``--json``."""
    stream = stream or sys.stderr
    if getattr(args, "json", False) or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def progress(
    args: argparse.Namespace,
    description: str,
    total: int | None = None,
    *,
    console: Any = None,
) -> Iterator[Progress]:
    """A progress line for the operation inside, shown only where ``shown`` says (or on the
    given rich ``console``); ``total`` steps (``None``: a spinner with the time elapsed)."""
    if console is None and not shown(args):
        yield _Silent()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as Bar

    bar = Bar(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console or Console(file=sys.stderr),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    with bar:
        yield _Shown(bar, bar.add_task(description, total=total))
