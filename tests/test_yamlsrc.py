"""Hostile YAML in the files the gateway loads (tools.d, policies, toolgate.yaml): refused
with the file named, in bounded time."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.errors import ConfigError
from gateway.testing import load_catalogue

LAUGHS = """\
name: t.bomb
version: 1.0.0
a: &a [x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""
"""A billion laughs: 9^9 values once its aliases are expanded, in 600 bytes."""


@pytest.mark.timeout(30)
def test_an_alias_bomb_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(LAUGHS)
    with pytest.raises(ConfigError) as info:
        load_catalogue(tmp_path)
    assert "bomb.yaml:1: YAML error: more than 1,000,000 values" in info.value.problems[0]
