from __future__ import annotations

import datetime as dt
import json

import pytest

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
