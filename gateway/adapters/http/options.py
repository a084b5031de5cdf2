"""The declaration keys of ``adapter: http`` tools and the ``adapters.http`` settings.

Everything here is checked when ``tools.d`` loads (STYLE 3): the method, the shape of the
URL (absolute, a path under ``base_url``/``service``, or one whole reference), header
names, where credentials come from (never inline), the JSON body skeleton, the egress
allowlist. ``docs/adapters/http.md`` documents every key with a full example.

URLs are parsed here as the adapter parses them (``shared.urls``, imported when a URL is
first checked): the declaration spec imports this module, and loading declarations needs no
HTTP client.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gateway.adapters.shared.egress import EgressDecl, Networks
from gateway.declarations.located import Faults
from gateway.declarations.model import Frozen, TemplateStr
from gateway.declarations.templates import Template, TemplateError, compile_template

Loc = tuple[str | int, ...]

SET_BY_GATEWAY = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer"}
    | {"keep-alive", "traceparent"}
)
"""Headers a declaration may not set: the gateway (or the HTTP library) owns them."""
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
"""Headers that carry secrets: only ``credentials`` may set them."""

_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_WHOLE = re.compile(r"^\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*\}$")
_JSON_PATH = re.compile(r"^\$?\.?([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)?$")
_NAME = r"^[A-Za-z0-9_.-]+$"


def whole_reference(template: Template) -> tuple[str, ...] | None:
    """The path of a template that is exactly one ``{reference}`` (no function), else None."""
    match = _WHOLE.match(template.source)
    return tuple(match.group(1).split(".")) if match else None


def parse_json_path(value: Any) -> tuple[str, ...]:
    """``order.id``, ``$.items.0.id`` or ``$`` (the whole body) as lookup keys."""
    match = _JSON_PATH.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{value!r} is not a dotted JSON path like order.id or items.0.id")
    return tuple(match.group(1).split(".")) if match.group(1) else ()


def _header_name(value: Any) -> str:
    if not isinstance(value, str) or not _HEADER_NAME.match(value):
        raise ValueError(f"{value!r} is not an HTTP header name")
    return value


def check_base_url(value: str) -> str:
    """A fixed ``http(s)://host[:port][/prefix]`` with no template, query or fragment."""
    if "{" in value or "}" in value:
        raise ValueError("a base URL is fixed: put templates in url")
    from gateway.adapters.shared.urls import parse_url

    try:
        url = parse_url(value)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a URL ({exc})") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"{value!r} is not an absolute http(s) URL")
    if url.raw_query_string or url.raw_fragment:
        raise ValueError(f"{value!r}: a base URL has no query or fragment")
    return value.rstrip("/")


HeaderName = Annotated[str, BeforeValidator(_header_name)]
JsonPath = Annotated[
    tuple[str, ...], BeforeValidator(parse_json_path), WithJsonSchema({"type": "string"})
]
SecretName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", max_length=128)]


class Credential(Frozen):
    """A header whose value is a secret, read per call from the environment or a file."""

    header: HeaderName
    prefix: str = ""
    """Put before the secret, e.g. ``"Bearer "``."""
    env: SecretName | None = None
    file: SecretName | None = None
    """A file name under the adapter's ``secrets_dir``."""
    optional: bool = False
    """Send nothing (instead of failing) when the secret is not set."""

    @model_validator(mode="after")
    def _one_source(self) -> Credential:
        if (self.env is None) == (self.file is None):
            raise ValueError("a credential names exactly one of env or file")
        if self.header.lower() in SET_BY_GATEWAY:
            raise ValueError(f"{self.header} is set by the gateway")
        return self

    @property
    def source(self) -> str:
        return f"environment variable {self.env}" if self.env else f"secrets file {self.file}"


class IdempotencyHeader(Frozen):
    """Where the request's idempotency key goes, and in what form."""

    name: HeaderName
    value: TemplateStr = compile_template("{request.idempotency_key}")


class ResponseId(Frozen):
    """Where the provider's id of this response (or of what it created) is."""

    header: HeaderName | None = None
    json_path: JsonPath | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ResponseId:
        if (self.header is None) == (self.json_path is None):
            raise ValueError("response_id names exactly one of header or json_path")
        return self


def _compile_tree(value: Any, where: str = "json") -> Any:
    """A JSON body skeleton with every string compiled to a Template."""
    if isinstance(value, Template) or value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        try:
            return compile_template(value)
        except TemplateError as exc:
            raise ValueError(f"{where}: {exc}") from exc
    if isinstance(value, dict):
        return {str(k): _compile_tree(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_compile_tree(v, f"{where}.{i}") for i, v in enumerate(value)]
    raise ValueError(f"{where}: {type(value).__name__} is not JSON (quote it)")


class Body(Frozen):
    """``json`` (any JSON skeleton of templates) or ``form`` (url-encoded fields)."""

    json_: Annotated[Any, BeforeValidator(_compile_tree), WithJsonSchema({})] = Field(
        None, alias="json"
    )
    form: dict[str, TemplateStr] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Body:
        if (self.json_ is None) == (self.form is None):
            raise ValueError("body has exactly one of json or form")
        return self

    def templates(self) -> Iterator[tuple[Loc, Template]]:
        yield from _tree_templates(self.json_, ("body", "json"))
        for key, template in (self.form or {}).items():
            yield ("body", "form", key), template


def _tree_templates(node: Any, loc: Loc) -> Iterator[tuple[Loc, Template]]:
    if isinstance(node, Template):
        yield loc, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _tree_templates(value, (*loc, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _tree_templates(value, (*loc, i))


class HttpOptions(Frozen):
    """The keys an ``adapter: http`` declaration adds (see docs/adapters/http.md)."""

    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    url: TemplateStr
    base_url: str | None = None
    service: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")
    query: dict[str, TemplateStr] = Field(default_factory=dict)
    headers: dict[HeaderName, TemplateStr] = Field(default_factory=dict)
    body: Body | None = None
    credentials: tuple[Credential, ...] = ()
    idempotency_header: IdempotencyHeader | None = None
    egress: EgressDecl = Field(default_factory=lambda: EgressDecl())
    redirects: int = Field(0, ge=0, le=10)
    success_status: tuple[Annotated[int, Field(ge=100, le=599)], ...] = ()
    response_headers: tuple[HeaderName, ...] = ("content-type",)
    response_id: ResponseId | None = None

    @field_validator("base_url")
    @classmethod
    def _base(cls, value: str | None) -> str | None:
        return None if value is None else check_base_url(value)

    @field_validator("idempotency_header", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("response_headers")
    @classmethod
    def _lower(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(name.lower() for name in value)

    @field_validator("url")
    @classmethod
    def _url_shape(cls, value: Template) -> Template:
        url_origin(value)  # raises ValueError naming what is wrong
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, Template]) -> dict[str, Template]:
        faults = Faults()  # every header at its own key
        for name in value:
            try:
                _check_declared_header(name)
            except ValueError as exc:
                faults.add((name,), str(exc), name)
        faults.raise_any("headers")
        return value

    @model_validator(mode="after")
    def _coherent(self) -> HttpOptions:
        faults = Faults()  # every fault at its own key (not the first, at the document)
        if self.base_url and self.service:
            faults.add(("service",), "declare base_url or service, not both", self.service)
        if self.body is not None and self.method in ("GET", "HEAD"):
            faults.add(("body",), f"a {self.method} request has no body")
        idem = self.idempotency_header
        for name in self.headers:
            if idem is not None and name.lower() == idem.name.lower():
                faults.add(("headers", name), f"{name} is the idempotency_header", name)
        kind, _ = url_origin(self.url)
        if kind == "relative" and not (self.base_url or self.service):
            message = f"url {self.url.source!r} is a path: declare base_url or service"
            faults.add(("url",), message, self.url.source)
        if kind == "templated" and not (self.egress.allow_hosts or self.base_url or self.service):
            message = (
                f"the host of url {self.url.source!r} comes from a template: "
                "declare egress.allow_hosts"
            )
            faults.add(("url",), message, self.url.source)
        faults.raise_any("HttpOptions")
        return self

    @cached_property
    def implied_hosts(self) -> tuple[str, ...]:
        """The hosts this declaration names itself (base_url, a literal url)."""
        hosts = [_host(self.base_url)] if self.base_url else []
        kind, host = url_origin(self.url)
        return (*hosts, host) if kind == "literal" and host else tuple(hosts)

    def fills_absent(self, loc: Loc, template: Template) -> bool:
        """A whole reference in ``query``, ``headers`` or ``body`` with no value leaves its
        key out (``null`` in a JSON list); any other hole without a value fails the call."""
        return loc[0] in ("query", "headers", "body") and whole_reference(template) is not None

    def templates(self) -> Iterator[tuple[Loc, Template]]:
        """Every template, for the loader's check of ``arguments.X`` references."""
        yield ("url",), self.url
        for key, template in self.query.items():
            yield ("query", key), template
        for key, template in self.headers.items():
            yield ("headers", key), template
        if self.idempotency_header is not None:
            yield ("idempotency_header", "value"), self.idempotency_header.value
        if self.body is not None:
            yield from self.body.templates()


def _check_declared_header(name: str) -> None:
    lowered = name.lower()
    if lowered in CREDENTIAL_HEADERS:
        raise ValueError(
            f"{name} carries credentials: declare it under credentials "
            "(from env or a secrets file), never inline"
        )
    if lowered in SET_BY_GATEWAY:
        raise ValueError(f"{name} is set by the gateway")


def url_origin(url: Template) -> tuple[str, str | None]:
    """("literal", host) | ("templated", None) | ("relative", None) for a url template."""
    source = url.source.strip()
    if _WHOLE.match(source):
        return "templated", None
    if source.startswith("/") and not source.startswith("//"):
        return "relative", None
    scheme, sep, rest = source.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ValueError(
            f"url {source!r} must be an absolute http(s) URL, a path starting with /, "
            "or one whole {reference}"
        )
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "{" in authority:
        return "templated", None
    return "literal", _host(f"{scheme}://{authority}")


def _host(url: str) -> str:
    from gateway.adapters.shared.urls import parse_url

    return parse_url(url).host or ""


class ServiceConfig(Frozen):
    """A named upstream that tools reach with ``service: NAME``."""

    base_url: str
    allow_networks: Networks = ()

    @field_validator("base_url")
    @classmethod
    def _base(cls, value: str) -> str:
        return check_base_url(value)


class HttpConfig(Frozen):
    """``adapters.http`` in toolgate.yaml."""

    services: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")], ServiceConfig] = Field(
        default_factory=dict
    )
    secrets_dir: Path | None = None
    ca_bundle: Path | None = None
    max_connections: int = Field(100, ge=1, le=10_000)
    user_agent: str = "toolgate"
