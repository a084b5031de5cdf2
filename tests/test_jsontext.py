from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import jsontext

VALUE = {"b": [1, 2.5, None, True], "a": 'é ✓ "q"', "c": {"z": 1, "y": []}}


def test_each_text_is_what_json_dumps_writes_with_the_same_options() -> None:
    assert jsontext.compact(VALUE) == json.dumps(VALUE, separators=(",", ":"))
    assert jsontext.canonical(VALUE) == json.dumps(
        VALUE, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    dated = {**VALUE, "when": dt.date(2026, 11, 30)}
    assert jsontext.stored(dated) == json.dumps(dated, separators=(",", ":"), default=str)
    assert '"when":"2026-11-30"' in jsontext.stored(dated)
    with pytest.raises(TypeError):
        jsontext.compact(dated)  # not JSON: refused, not written as text


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


class Odd:
    def __str__(self) -> str:
        return "odd"


@given(_json)
def test_the_prebuilt_encoders_write_what_json_dumps_writes(value: object) -> None:
    """Each encoder's C encoder is made once (``jsontext.prebuilt``): the texts stay
    ``json.dumps``'s with the same options, to the byte."""
    assert jsontext.compact(value) == json.dumps(value, separators=(",", ":"))
    assert jsontext.stored(value) == json.dumps(value, separators=(",", ":"), default=str)
    assert jsontext.canonical(value) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert jsontext.strict(value) == json.dumps(value, separators=(",", ":"), allow_nan=False)
    assert jsontext.response(value) == json.dumps(
        value, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    assert jsontext.spaced(value) == json.dumps(value)


def test_the_prebuilt_encoders_keep_their_options() -> None:
    assert jsontext.stored({"at": Odd()}) == '{"at":"odd"}'
    for refusing in (jsontext.strict, jsontext.response):
        with pytest.raises(ValueError):
            refusing({"n": float("nan")})
    assert jsontext.compact(float("inf")) == "Infinity"
    assert jsontext.canonical({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
