"""The kit for agent builders: a typed client of the REST API (docs/client.md) and, as
optional extras, the catalogue as framework tools (``gateway.client.agents`` for the OpenAI
Agents SDK, ``gateway.client.langchain`` for LangChain)."""

from gateway.client.client import AsyncClient, CallOptions, Client, Execution, request_body
from gateway.client.errors import (
    ApiError,
    Conflict,
    EditRefused,
    Forbidden,
    IdempotencyMismatch,
    MalformedRequest,
    NotFound,
    PayloadTooLarge,
    ServerError,
    ServiceUnavailable,
    ToolgateClientError,
    TransportError,
    Unauthenticated,
    UnsupportedMediaType,
)

__all__ = [
    "ApiError",
    "AsyncClient",
    "CallOptions",
    "Client",
    "Conflict",
    "EditRefused",
    "Execution",
    "Forbidden",
    "IdempotencyMismatch",
    "MalformedRequest",
    "NotFound",
    "PayloadTooLarge",
    "ServerError",
    "ServiceUnavailable",
    "ToolgateClientError",
    "TransportError",
    "Unauthenticated",
    "UnsupportedMediaType",
    "request_body",
]
