"""The gateway's log lines (docs/operations.md#logs): ``log_format: text`` (the default, for
people) or ``json`` (one JSON object per line, for a collector).

Each line written while a call runs names it: the pipeline binds the call's ``execution_id``,
``run_id``, ``call_id``, ``tool``, ``principal`` and ``trace_id`` (``bind_call``) in a context
variable, and the JSON formatter adds them. Secrets are kept out by construction (no adapter
logs a credential, nor does the server's HTTP client, aiohttp), and every secret an adapter
reads is also registered with ``scrub`` so that any line that would hold one is masked,
whatever logged it: both formats are a ``MaskingFormatter``, the one place a line is masked.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

MASK = "[REDACTED]"
_CALL: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "toolgate_log_call", default=None
)
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


class _Secrets:
    """The secrets adapters have read (the newest ``limit``), to mask in every line."""

    def __init__(self, limit: int = 512) -> None:
        self._values: dict[str, None] = {}
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, value: str) -> None:
        if len(value) < 6:  # too short to mask without mangling ordinary text
            return
        with self._lock:
            self._values.pop(value, None)
            self._values[value] = None
            while len(self._values) > self._limit:
                self._values.pop(next(iter(self._values)))

    def mask(self, text: str) -> str:
        with self._lock:
            values = list(self._values)
        for value in values:
            if value in text:
                text = text.replace(value, MASK)
        return text


SECRETS = _Secrets()


def scrub(secret: str) -> None:
    """Register ``secret`` (a credential an adapter just read): no log line will hold it."""
    SECRETS.add(secret)


@contextmanager
def bind_call(fields: Mapping[str, str]) -> Iterator[None]:
    """Name the running call in every line logged inside (this task and what it starts)."""
    token = _CALL.set(fields)
    try:
        yield
    finally:
        _CALL.reset(token)


class MaskingFormatter(logging.Formatter):
    """A formatter whose whole line (message, fields, traceback) has every registered secret
    masked: each format renders a record (``render``), this masks it."""

    def format(self, record: logging.LogRecord) -> str:
        return SECRETS.mask(self.render(record))

    def render(self, record: logging.LogRecord) -> str:
        raise NotImplementedError


class TextFormatter(MaskingFormatter):
    """For people: ``time LEVEL logger: message``, the bound call's fields in brackets, the
    traceback on the lines below."""

    def render(self, record: logging.LogRecord) -> str:
        line = f"{_rfc3339(record.created)} {record.levelname:<8} {record.name}: "
        line += record.getMessage()
        if (bound := _CALL.get()) is not None:
            line += " [" + " ".join(f"{k}={v}" for k, v in bound.items() if v) + "]"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:
            line += "\n" + record.exc_text
        return line


class JsonFormatter(MaskingFormatter):
    """One JSON object per record: ``time`` (RFC 3339, UTC), ``level``, ``logger``,
    ``message``, the bound call's fields, the record's ``extra`` fields, ``exception``."""

    def render(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if (bound := _CALL.get()) is not None:
            out.update(bound)
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, default=str, ensure_ascii=False)


FORMATTERS: dict[str, type[MaskingFormatter]] = {"text": TextFormatter, "json": JsonFormatter}
"""``log_format`` → its formatter."""


def configure(log_format: str = "text", level: str = "info", stream: TextIO | None = None) -> None:
    """Send every logger's lines (the gateway's, uvicorn's, the libraries') through one
    masking handler on the root logger, in ``log_format``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(FORMATTERS[log_format]())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True


def _rfc3339(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"
