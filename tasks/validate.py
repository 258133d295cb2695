"""Checks for task config fields, raising `ConfigError` that names the bad value.

Configs arrive from JSON files and command lines, so every field is checked for type as well
as range: a string where a number belongs must fail here, not deep inside tensor code.
"""

from __future__ import annotations

from collections.abc import Iterable
from numbers import Real
from typing import Any

from interp.errors import ConfigError, did_you_mean


def check_int(owner: str, name: str, value: Any, minimum: int) -> None:
    """Require an integer (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{owner}.{name} = {value!r} is invalid", f"use an integer >= {minimum}")


def check_real(
    owner: str, name: str, value: Any, low: float, high: float, *, high_open: bool = False,
    low_open: bool = False,
) -> None:
    """Require a real number (not a bool) in the interval from `low` to `high`."""
    interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    ok = isinstance(value, Real) and not isinstance(value, bool)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        raise ConfigError(f"{owner}.{name} = {value!r} is invalid", f"use a number in {interval}")


def check_choice(owner: str, name: str, value: Any, choices: Iterable[str]) -> None:
    """Require one of `choices`, suggesting the closest one otherwise."""
    choices = list(choices)
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{owner}.{name} = {value!r} is not valid", did_you_mean(str(value), choices))


def check_bool(owner: str, name: str, value: Any) -> None:
    """Require a bool (JSON true/false)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{owner}.{name} = {value!r} is invalid", "use true or false")
