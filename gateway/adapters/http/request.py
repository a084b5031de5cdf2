"""Build one HTTP request from a declaration and the call context.

Two ways to fill a value (``docs/adapters/http.md``, "Templates"):

- a string that is exactly one reference, ``"{arguments.qty}"``, is the *value* itself,
  JSON type kept (a number stays a number, a list a list); when it is absent the key is
  left out (inside a JSON list it becomes null); in query, headers and form a null is
  left out too, and a list repeats the name;
- any other string is text: each hole is rendered as text; in ``url``, percent-encoded,
  so an argument cannot add a path segment, a query or a fragment.

Secrets are read per call and scrubbed by a ``Redactor`` from everything returned.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import anyio

from gateway.adapters.base import AdapterOutcome, Evidence
from gateway.adapters.http.options import Body, Credential, whole_reference
from gateway.adapters.shared.urls import URL, parse_url
from gateway.declarations.templates import Template, TemplateError, lookup
from gateway.errors import ExecutionError, ToolgateError
from gateway.observability.logs import scrub

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 8
ABSENT: Any = object()
"""What a whole reference to a missing value renders to: the key is left out."""


class Redactor:
    """Replaces every secret used in a call wherever it could show up."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = {form for s in secrets for form in (s, quote(s, safe=""))}
        self._text = sorted(forms, key=len, reverse=True)
        self._bytes = [s.encode("utf-8") for s in self._text]

    def __bool__(self) -> bool:
        return bool(self._text)

    def text(self, value: str) -> str:
        for secret in self._text:
            value = value.replace(secret, REDACTED)
        return value

    def raw(self, value: bytes) -> bytes:
        for secret in self._bytes:
            value = value.replace(secret, REDACTED.encode())
        return value

    def json(self, value: Any) -> Any:
        if not self:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.json(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.json(v) for v in value]
        return value

    def error(self, exc: ToolgateError) -> ToolgateError:
        if self:
            exc.message = self.text(exc.message)
            exc.args = (exc.message,)
            exc.details = self.json(exc.details)
        return exc

    def outcome(self, out: AdapterOutcome) -> AdapterOutcome:
        """The whole outcome by value, whatever field a secret reached: data, every piece of
        evidence (ref, hash, data), the side-effect summary and the error. Every outcome of
        the HTTP adapter leaves through here, so a new field cannot forget it."""
        if not self:
            return out
        return replace(
            out,
            data=self.json(out.data),
            side_effect=replace(out.side_effect, summary=self.text(out.side_effect.summary)),
            evidence=tuple(
                Evidence(
                    self.text(e.kind),
                    self.text(e.ref),
                    self.text(e.sha256) if e.sha256 is not None else None,
                    self.json(dict(e.data)),
                )
                for e in out.evidence
            ),
            error=self.error(out.error) if out.error is not None else None,
        )


def render_value(template: Template, context: Mapping[str, Any]) -> Any:
    """A whole reference keeps its JSON type (``ABSENT`` when missing); else text."""
    path = whole_reference(template)
    if path is None:
        return template.render(context)
    try:
        return lookup(context, path)
    except TemplateError:
        return ABSENT


def render_tree(node: Any, context: Mapping[str, Any]) -> Any:
    """Fill a JSON body skeleton: absent whole references drop out (null inside lists)."""
    if isinstance(node, Template):
        return render_value(node, context)
    if isinstance(node, dict):
        filled = {k: render_tree(v, context) for k, v in node.items()}
        return {k: v for k, v in filled.items() if v is not ABSENT}
    if isinstance(node, list):
        return [None if v is ABSENT else v for v in (render_tree(x, context) for x in node)]
    return node


def render_url(template: Template, context: Mapping[str, Any]) -> str:
    """A whole reference is the URL as given; other holes are percent-encoded text."""
    if whole_reference(template) is not None:
        return template.render(context)
    out = []
    for part in template.parts:
        if isinstance(part, str):
            out.append(part)
        else:
            out.append(quote(Template(template.source, (part,)).render(context), safe=""))
    return "".join(out)


def as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def render_pairs(
    fields: Mapping[str, Template], context: Mapping[str, Any]
) -> list[tuple[str, str]]:
    """Query, header or form fields: absent and null drop out, a list repeats the name."""
    pairs: list[tuple[str, str]] = []
    for name, template in fields.items():
        value = render_value(template, context)
        if value is ABSENT or value is None:
            continue
        for item in value if isinstance(value, list) else [value]:
            pairs.append((name, as_text(item)))
    return pairs


def join_url(base: str | None, rendered: str) -> URL:
    """``base`` + a path starting with ``/``, or an absolute http(s) URL on its own."""
    try:
        if rendered.startswith("/") and not rendered.startswith("//"):
            if base is None:
                raise ExecutionError(
                    f"url {rendered!r} is a path and the tool has no base URL", code="invalid_url"
                )
            return parse_url(base + rendered)
        url = parse_url(rendered)
    except ValueError as exc:
        raise ExecutionError(f"{rendered!r} is not a valid URL", code="invalid_url") from exc
    if not (url.scheme and url.host):
        raise ExecutionError(
            f"{rendered!r} is neither an absolute http(s) URL nor a path starting with /",
            code="invalid_url",
        )
    return url


def check_header_values(headers: Iterable[tuple[str, str]]) -> None:
    for name, value in headers:
        if any(ch in value for ch in "\r\n\0"):
            raise ExecutionError(
                f"header {name} would contain a line break; refusing to send it",
                code="invalid_request",
            )


async def read_secret(cred: Credential, secrets_dir: Path | None) -> str | None:
    if cred.env is not None:
        return os.environ.get(cred.env)
    if secrets_dir is None:
        raise ExecutionError(
            f"the credential for header {cred.header} is a secrets file, and "
            "adapters.http.secrets_dir is not configured",
            code="credential_missing",
        )
    try:
        text = await anyio.Path(secrets_dir / str(cred.file)).read_text("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ExecutionError(
            f"the {cred.source} cannot be read", code="credential_missing"
        ) from exc
    return text.rstrip("\r\n")


def render_body(body: Body | None, ctx: Mapping[str, Any]) -> tuple[bytes | None, str | None]:
    if body is None:
        return None, None
    if body.form is not None:
        return urlencode(render_pairs(body.form, ctx)).encode(
            "ascii"
        ), "application/x-www-form-urlencoded"
    value = render_tree(body.json_, ctx)
    if value is ABSENT:
        value = None
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8"), "application/json"


async def credential_headers(
    credentials: Iterable[Credential], secrets_dir: Path | None
) -> tuple[list[str], list[tuple[str, str]]]:
    """(the secrets, the headers carrying them) for one call; raises when one is unusable."""
    secrets: list[str] = []
    headers: list[tuple[str, str]] = []
    for cred in credentials:
        secret = await _usable_secret(cred, secrets_dir)
        if secret is not None:
            scrub(secret)  # never in a log line, whoever would write it
            secrets.append(secret)
            headers.append((cred.header, cred.prefix + secret))
    return secrets, headers


async def _usable_secret(cred: Credential, secrets_dir: Path | None) -> str | None:
    value = await read_secret(cred, secrets_dir)
    if not value:
        if cred.optional:
            return None
        raise ExecutionError(
            f"the credential for header {cred.header} is not set ({cred.source})",
            code="credential_missing",
        )
    if len(value) < MIN_SECRET_LENGTH or any(ch in value for ch in "\r\n\0"):
        raise ExecutionError(
            f"the credential in {cred.source} is not usable: it must be one line of at "
            f"least {MIN_SECRET_LENGTH} characters (shorter ones cannot be redacted safely)",
            code="credential_invalid",
        )
    return value
