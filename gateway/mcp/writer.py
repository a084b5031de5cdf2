"""A plain call's JSON-RPC response, written as the SDK writes it (gateway/mcp/stateless.py).

The SDK's kernel runs a ``tools/call`` result through its result sieve for the version
(``CallToolResult`` of 2026-07-28, dumped by alias without None), stamps ``serverInfo``,
wraps it in the JSON-RPC envelope and writes it with ``json.dumps``. ``Writer`` does the
same without the models for the shapes ``gateway.mcp.results`` builds (``sieved``), member
by member, with the stamp encoded once and the ``structuredContent`` a text block repeats
encoded once; anything else goes through the SDK's own sieve. tests/mcp/test_stateless.py
holds the two equal.
"""

from __future__ import annotations

import re
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, SERVER_INFO_META_KEY
from mcp_types import methods as _methods
from pydantic import ValidationError

from gateway import jsontext
from gateway.mcp import calls

_SURROGATE_IN_TEXT = re.compile(r"\\ud[89a-f]")
"""A UTF-16 surrogate in what ``json`` writes with ``ensure_ascii`` (its escape, in lower
case); a pair (a character beyond the BMP) matches too."""
RESULT_KEYS = frozenset({"_meta", "content", "isError", "resultType", "structuredContent"})


class Writer:
    """Writes a plain call's JSON-RPC response as the SDK writes it (made once per server:
    its ``serverInfo`` stamp is encoded once)."""

    def __init__(self, stamp: dict[str, Any]) -> None:
        self.stamp = stamp
        self._stamped = f'"{SERVER_INFO_META_KEY}":{jsontext.strict(stamp)}'
        """The stamp as the last member of ``_meta`` (``ServerRunner._stamp_server_info``)."""

    def encoded(
        self, request_id: str | int, out: dict[str, Any], version: str, text: str | None = None
    ) -> str:
        """The JSON-RPC response to ``request_id`` with the result ``out``, as the SDK
        writes it: ``out`` through its result sieve (``sieved``, or the SDK's own for what
        that does not know), the ``serverInfo`` stamp, the envelope, ``json.dumps``.
        ``text``: the JSON text of ``out``'s ``structuredContent`` (``jsontext.response``)
        when a text block of ``out`` is that very string (``calls.Answer``), written once."""
        shaped = sieved(out)
        if shaped is not None:
            try:
                data = self._written(request_id, shaped, text)
            except (TypeError, ValueError, RecursionError):  # not JSON as it is: the SDK's
                pass
            else:
                if data is not None:
                    return data
        return jsontext.compact(self.envelope(request_id, self.sdk_sieved(out, version)))

    def _written(
        self, request_id: str | int, shaped: dict[str, Any], text: str | None
    ) -> str | None:
        """``jsontext.strict(self.envelope(request_id, shaped))`` written member by member
        (``shaped``'s, in ``sieved``'s order), with the stamp encoded once and ``text``
        standing for the ``structuredContent`` it is the JSON of when it is ASCII without
        DEL: it is then that JSON exactly (``jsontext.response`` writes other characters,
        and DEL, as they are), and its text block is escaped with two searches; None if a
        UTF-16 surrogate shows (the SDK's sieve refuses some)."""
        plain = text is not None and text.isascii() and "\x7f" not in text
        meta_ = shaped.get("_meta")
        stamped = self._stamped
        written = f"{{{stamped}}}" if not meta_ else f"{_strict(meta_)[:-1]},{stamped}}}"
        risky = [written]  # what may hold a surrogate's escape (``text`` is ASCII or below)
        members = [f'"_meta":{written}'] if meta_ is not None else []
        blocks = []
        for block in shaped["content"]:
            if plain and block["text"] is text:
                escaped = _printable_escaped(text)
            else:
                risky.append(escaped := encode_basestring_ascii(block["text"]))
            blocks.append(f'{{"text":{escaped},"type":"text"}}')
        members.append(f'"content":[{",".join(blocks)}]')
        is_error = shaped.get("isError")
        if is_error is not None:
            members.append('"isError":true' if is_error else '"isError":false')
        members.append('"resultType":"complete"')
        structured = shaped.get("structuredContent")
        if structured is not None:
            if plain:
                members.append(f'"structuredContent":{text}')
            else:
                risky.append(written_structured := _strict(structured))
                members.append(f'"structuredContent":{written_structured}')
        if meta_ is None:
            members.append(f'"_meta":{written}')
        if type(request_id) is int:
            identifier = str(request_id)
        else:
            risky.append(identifier := _strict(request_id))
        if any(_SURROGATE_IN_TEXT.search(piece) is not None for piece in risky):
            return None
        return f'{{"jsonrpc":"2.0","id":{identifier},"result":{{{",".join(members)}}}}}'

    def envelope(self, request_id: str | int, result: dict[str, Any]) -> dict[str, Any]:
        """``JSONRPCResponse(...).model_dump(mode="json", exclude_none=True)`` of a result
        that is JSON already (its fields are ``id`` and the result: no None to drop), with
        the stamp ``ServerRunner._stamp_server_info`` adds."""
        stamp = result.get("_meta")
        if stamp is None:
            result["_meta"] = {SERVER_INFO_META_KEY: self.stamp}
        elif isinstance(stamp, dict) and stamp.get(SERVER_INFO_META_KEY) is None:
            result["_meta"] = {**stamp, SERVER_INFO_META_KEY: self.stamp}
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    @staticmethod
    def sdk_sieved(out: dict[str, Any], version: str) -> dict[str, Any]:
        """``out`` through the SDK's sieve (``ServerRunner._serialize`` for a core result
        of a spec method with no cache hint: ``serves_plain_calls``)."""
        try:
            dumped = _methods.serialize_server_result("tools/call", version, dict(out))
        except ValidationError:
            calls.log.exception("tools/call answered an invalid result")
            invalid = "Handler returned an invalid result"
            raise MCPError(code=INTERNAL_ERROR, message=invalid) from None
        if dumped.get("resultType") is None:
            dumped["resultType"] = "complete"
        return dumped


def _printable_escaped(text: str) -> str:
    """``encode_basestring_ascii(text)`` of a text of printable ASCII characters (JSON
    text in ASCII without DEL: it holds no control character, the encoder escapes them),
    which escapes only the backslash and the quote among them: two searches instead of a
    pass over each character (a result's JSON, a kilobyte or more, is written so)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _strict(value: Any) -> str:
    """``jsontext.strict``, which makes an encoder per call (``JSONEncoder.encode``)."""
    return jsontext.strict(value)


if c_make_encoder is not None:
    _encoder = c_make_encoder(
        None, _refuse, encode_basestring_ascii, None, ":", ",", False, False, False
    )
    """``jsontext.strict``'s C encoder, made once; it does not look for circular
    references, which results made of JSON cannot hold (a RecursionError otherwise)."""

    def _strict(value: Any) -> str:
        return "".join(_encoder(value, 0))


def sieved(out: dict[str, Any]) -> dict[str, Any] | None:
    """What the SDK's result sieve for ``tools/call`` (``CallToolResult`` of 2026-07-28,
    dumped by alias without None) makes of a result of the shapes ``results`` builds (text
    blocks, a ``_meta`` object, a complete result), without validating what the gateway
    built itself: its fields in the model's order, each block's too, None dropped from the
    top of ``_meta`` and from the fields. None for any other shape (the SDK's sieve then
    decides); ``encoded`` leaves to it too what is not JSON as it stands.
    tests/mcp/test_stateless.py holds the two equal."""
    content = out.get("content")
    meta_ = out.get("_meta")
    is_error = out.get("isError")
    if (
        not out.keys() <= RESULT_KEYS
        or out.get("resultType") != "complete"
        or type(content) is not list
        or not (meta_ is None or (type(meta_) is dict and SERVER_INFO_META_KEY not in meta_))
        or not (is_error is None or type(is_error) is bool)
    ):
        return None
    blocks = []
    for block in content:
        if type(block) is not dict or block.keys() != _TEXT_KEYS or block["type"] != "text":
            return None
        text = block["text"]
        if type(text) is not str:
            return None
        blocks.append({"text": text, "type": "text"})
    shaped: dict[str, Any] = {}
    if meta_ is not None:
        shaped["_meta"] = {key: value for key, value in meta_.items() if value is not None}
    shaped["content"] = blocks
    if is_error is not None:
        shaped["isError"] = is_error
    shaped["resultType"] = "complete"
    structured = out.get("structuredContent")
    if structured is not None:
        shaped["structuredContent"] = structured
    return shaped


_TEXT_KEYS = {"type", "text"}
