"""Durations and sizes in configuration (``gateway/units.py``): what each accepts, and the
settings where 0 means "never" or "none" accept it (docs/configuration.md)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from gateway.errors import ConfigError
from gateway.settings import load_settings
from gateway.testing import make_project
from gateway.units import parse_duration, parse_duration_or_zero


@pytest.mark.parametrize(
    ("text", "seconds"), [(10, 10.0), ("10s", 10.0), ("250ms", 0.25), ("5m", 300.0), (1.5, 1.5)]
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", [0, "0s", -1, "-5s", True, "soon", math.nan])
def test_a_duration_must_be_positive_and_a_duration(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_zero_where_it_means_never_but_never_below_it() -> None:
    assert parse_duration_or_zero(0) == 0.0 and parse_duration_or_zero("0s") == 0.0
    for bad in (-1, "-1s", math.nan, False):
        with pytest.raises(ValueError):
            parse_duration_or_zero(bad)


def _settings(tmp_path: Path, **extra: object) -> object:
    config = make_project(tmp_path, f"sqlite:///{tmp_path}/toolgate.db")
    data = yaml.safe_load(config.read_text())
    data.update(extra)
    config.write_text(yaml.safe_dump(data))
    return load_settings(config, env={})


def test_the_settings_documented_with_zero_take_it(tmp_path: Path) -> None:
    settings = _settings(tmp_path, audit={"checkpoint_interval": 0}, mcp={"task_wait": "0s"})
    assert settings.audit.checkpoint_interval == 0  # type: ignore[attr-defined]
    assert settings.mcp.task_wait == 0  # type: ignore[attr-defined]


def test_a_positive_only_duration_still_refuses_zero(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="positive"):
        _settings(tmp_path, lock_lease=0)


def test_json_limits_are_made_once_and_follow_a_copy_with_other_bounds(tmp_path: Path) -> None:
    """Asked on every call, the bounds object is made once for the same bounds; a copy of the
    settings with other bounds (tests make them) has its own, never the original's."""
    settings = load_settings(make_project(tmp_path, f"sqlite:///{tmp_path}/t.db"), env={})
    assert settings.json_limits is settings.json_limits
    assert settings.json_limits.max_depth == settings.max_json_depth
    shallow = settings.model_copy(update={"max_json_depth": 3})
    assert shallow.json_limits.max_depth == 3
    assert settings.json_limits.max_depth == settings.max_json_depth != 3


def test_a_duration_past_ten_years_is_refused_at_load(tmp_path: Path) -> None:
    """Unbounded, ``lock_lease: 99999999999999999999h`` passed ``toolgate check`` and then
    stopped ``serve`` with a traceback: the replica's lease did not fit an SQL integer."""
    with pytest.raises(ConfigError, match="lock_lease: a duration must be at most 3650d"):
        _settings(tmp_path, lock_lease="99999999999999999999h")
