"""JUnit XML test reports → pass/fail counts and the names of failed tests.

Parsed with ``defusedxml`` (no entity expansion, no external references) and a size cap,
since the report is written by code the agent controls. Accepts a ``<testsuites>`` root or a
single ``<testsuite>``; counts come from the ``<testcase>`` elements themselves, not from
the suite attributes, which producers fill in inconsistently.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from gateway.adapters.shared import fileio
from gateway.errors import CallError
from gateway.types import JSON

MAX_REPORT_BYTES = 16 * 1024 * 1024
MAX_FAILED_NAMES = 100


class JUnitError(ValueError):
    """The report is missing, too large or not JUnit XML; the message says which."""


@dataclass(frozen=True, slots=True)
class FailedTest:
    name: str
    kind: str
    """``failure`` (an assertion) or ``error`` (the test could not run to its end)."""
    message: str


@dataclass(frozen=True, slots=True)
class JUnitReport:
    tests: int
    failures: int
    errors: int
    skipped: int
    failed: tuple[FailedTest, ...]
    """At most MAX_FAILED_NAMES of the failed and errored tests, in report order."""

    @property
    def passed(self) -> int:
        return self.tests - self.failures - self.errors - self.skipped

    def to_json(self) -> dict[str, JSON]:
        bad = self.failures + self.errors
        return {
            "tests": self.tests,
            "passed": self.passed,
            "failures": self.failures,
            "errors": self.errors,
            "skipped": self.skipped,
            "failed_tests": [
                {"name": t.name, "kind": t.kind, "message": t.message} for t in self.failed
            ],
            "failed_tests_truncated": bad > len(self.failed),
        }

    def summary(self) -> str:
        text = f"{self.passed} passed, {self.failures} failed, {self.errors} errors"
        return text + (f", {self.skipped} skipped" if self.skipped else "")


def read_report(path: Path) -> JUnitReport:
    """Parse the report at ``path``; raises JUnitError. The command the tool ran may have
    put anything at that path: only a regular file is opened (a FIFO there would block the
    read forever), and at most ``MAX_REPORT_BYTES`` are read."""
    try:
        fd = fileio.open_regular(path, os.O_RDONLY, "the report")
    except CallError as exc:
        raise JUnitError(exc.message) from exc
    except FileNotFoundError as exc:
        raise JUnitError("the report was not written") from exc
    except OSError as exc:
        raise JUnitError(f"the report cannot be read ({exc.strerror})") from exc
    try:
        size = os.fstat(fd).st_size
        if size > MAX_REPORT_BYTES:
            raise JUnitError(f"the report is {size} bytes, over the {MAX_REPORT_BYTES} limit")
        data = b""
        while chunk := os.read(fd, MAX_REPORT_BYTES + 1 - len(data)):
            data += chunk
            if len(data) > MAX_REPORT_BYTES:
                break
        if len(data) > MAX_REPORT_BYTES:  # it grew after fstat
            raise JUnitError(f"the report is over the {MAX_REPORT_BYTES} bytes limit")
    except OSError as exc:
        raise JUnitError(f"the report cannot be read ({exc.strerror})") from exc
    finally:
        os.close(fd)
    return parse_report(data)


def parse_report(data: bytes) -> JUnitReport:
    """Parse JUnit XML bytes; raises JUnitError."""
    try:
        root = fromstring(data)
    except (ParseError, DefusedXmlException) as exc:
        raise JUnitError(f"the report is not well-formed XML ({type(exc).__name__})") from exc
    if root.tag not in ("testsuites", "testsuite"):
        raise JUnitError(f"the report's root element is <{root.tag}>, not <testsuites>")
    counts = {"tests": 0, "failure": 0, "error": 0, "skipped": 0}
    failed: list[FailedTest] = []
    for case in root.iter("testcase"):
        counts["tests"] += 1
        kind = _verdict(case)
        if kind is None:
            continue
        counts[kind] += 1
        if kind != "skipped" and len(failed) < MAX_FAILED_NAMES:
            failed.append(FailedTest(_name(case), kind, _message(case, kind)))
    return JUnitReport(
        counts["tests"], counts["failure"], counts["error"], counts["skipped"], tuple(failed)
    )


def _verdict(case: Element) -> str | None:
    """failure, error, skipped or None (passed); an error outranks a failure."""
    tags = {child.tag for child in case}
    for kind in ("error", "failure", "skipped"):
        if kind in tags:
            return kind
    return None


def _name(case: Element) -> str:
    name, classname = case.get("name", "?"), case.get("classname", "")
    return f"{classname}::{name}" if classname else name


def _message(case: Element, kind: str) -> str:
    node = case.find(kind)
    text = (node.get("message") or node.text or "") if node is not None else ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:300]
