"""What every toolgate subcommand shares: settings, usage errors, requests to a gateway."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.errors import RequestError
from gateway.settings import Settings, load_settings

if TYPE_CHECKING:
    import httpx


MAX_WAIT_S = 60.0
"""The longest ``?wait=`` the gateway accepts; ``call --wait`` asks again after each."""


class UsageError(RequestError):
    """A command line that cannot work as given (a missing API key, a malformed --arg, an
    unreadable input file): not a fault of the configuration. Printed, never sent."""


def settings_of(args: argparse.Namespace) -> Settings:
    return load_settings(Path(args.config) if args.config else None)


def since_duration_ms(text: str) -> int:
    """``--since`` as a duration back from now (``24h``, ``30m``): the epoch milliseconds it
    names; a usage error when it is not one."""
    from gateway.units import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"--since {text!r}: {exc}") from exc
    return int((time.time() - seconds) * 1000)


def existing_store_url(settings: Settings, purpose: str = "") -> str:
    """The store's URL for a command that only reads it: a SQLite file that is not there is
    a usage error (``purpose`` ends its message), never a new empty store."""
    url = settings.resolved_database_url
    if url.startswith("sqlite:///") and ":memory:" not in url:
        path = Path(url.removeprefix("sqlite:///"))
        if not path.is_file():
            raise UsageError(f"no store at {path} (database_url){purpose}")
    return url


EXIT_FAULTS = 2
"""The exit status of a command that lists faults (``fail``): a configuration refused, say."""


def fail(problems: Sequence[str], what: str) -> int:
    print(f"toolgate: {what}:", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    return EXIT_FAULTS


def argument(text: str, option: str = "--arg") -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UsageError(f"{option} {text!r}: use NAME=VALUE")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def arguments_json(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--args-json is not JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise UsageError("--args-json must be one JSON object of arguments")
    return arguments


def client_target(args: argparse.Namespace, settings: Settings) -> tuple[str, str]:
    """(base URL, API key) for commands that talk to a running gateway."""
    key = args.key or os.environ.get("TOOLGATE_API_KEY")
    if not key:
        raise UsageError("give an API key with --key or TOOLGATE_API_KEY")
    return args.url or f"http://{settings.host}:{settings.port}", key


def unreachable(url: str, exc: Exception) -> int:
    """Say that no gateway answered at ``url``, and how to name another one; exit code 3."""
    print(
        f"toolgate: cannot reach the gateway at {url}: {exc} (is it running there? name its"
        " URL with --url, or the TOOLGATE_HOST and TOOLGATE_PORT it was started with)",
        file=sys.stderr,
    )
    return 3


def segment(value: str) -> str:
    """``value`` (an id) as one segment of a request's path, quoted as the kit quotes it
    (``gateway.client.client.segment``, imported when used, as httpx is)."""
    from gateway.client.client import segment as quoted

    return quoted(value)


def request(
    args: argparse.Namespace,
    method: str,
    path: str,
    body: Any = None,
    render: Callable[[Sequence[dict[str, Any]]], str] | None = None,
) -> int:
    """Send one request to the gateway, print the answer: its ``items`` as ``render`` makes
    them a table, unless ``--json`` (or an error: always the problem's JSON); exit code 1 on
    an error. An answer given a page at a time (``next``) is printed whole: every page's
    ``items`` in one."""
    import httpx

    settings = settings_of(args)
    url, key = client_target(args, settings)
    headers = {"Authorization": f"Bearer {key}"}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=args.timeout) as http:
            failed, answer = pages(http, http.request(method, path, json=body))
    except httpx.HTTPError as exc:
        return unreachable(url, exc)
    if render is not None and not failed and not getattr(args, "json", False):
        items = answer.get("items", [])
        print(render(items) if items else "(none)")
    else:
        print(json.dumps(answer, indent=2))
    return 1 if failed else 0


def pages(http: httpx.Client, response: httpx.Response) -> tuple[bool, Any]:
    """Whether the gateway refused, and its answer: a page's ``next`` followed to the end,
    the ``items`` of every page in one answer (``next`` null), or the first refusal."""
    answer = response.json()
    while response.status_code < 400 and isinstance(answer, dict) and answer.get("next"):
        response = http.get(answer["next"])
        page = response.json()
        answer = (
            page
            if response.status_code >= 400
            else {**page, "items": answer["items"] + page["items"]}
        )
    return response.status_code >= 400, answer


def client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", help="API key (default $TOOLGATE_API_KEY)")
    parser.add_argument("--url", help="gateway URL (default from the configuration)")
    parser.add_argument("--timeout", type=float, default=60.0)


def count(items: Sequence[object], noun: str) -> str:
    return f"{len(items)} {noun}" + ("" if len(items) == 1 else "s")


def warn(warnings: Sequence[str]) -> None:
    """Policy warnings (docs/policies.md#what-the-load-checks-catch), one line each."""
    for warning in warnings:
        print(f"toolgate: warning: {warning}", file=sys.stderr)
