"""The test suite (tiers: see tests/README.md).

`typechecker` is what pytest's jaxtyping hook (``--jaxtyping-packages=...,tests.typechecker`` in
pyproject.toml) decorates every function and dataclass of `interp`, `models`, `tasks` and
`analyses` with at import, so tensor shapes written as jaxtyping annotations are checked in
every test, not only read. PEP 484's numeric tower is on: an `int` is a valid `float`.

Config dataclasses (those whose fields are made with `interp.config.param`) are left to their
own `__post_init__` checks: those name the field and the valid range, which is what users see,
and what the tests of bad input check.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import Any

from beartype import BeartypeConf, beartype

_beartype = beartype(conf=BeartypeConf(is_pep484_tower=True))


def typechecker(fn: Any) -> Any:
    """beartype, except on the `__init__` of a config dataclass (see the module docstring).

    The hook decorates a class before its name is bound in its module, so whether an `__init__`
    belongs to a config is decided at its first call.
    """
    owner_name, _, method = getattr(fn, "__qualname__", "").rpartition(".")
    checked = _beartype(fn)
    if method != "__init__":
        return checked

    @functools.wraps(fn)
    def check_unless_config(*args: Any, **kwargs: Any) -> Any:
        owner = getattr(sys.modules.get(fn.__module__), owner_name, None)
        return (fn if _is_config(owner) else checked)(*args, **kwargs)

    return check_unless_config


def _is_config(cls: Any) -> bool:
    return dataclasses.is_dataclass(cls) and any("help" in f.metadata for f in dataclasses.fields(cls))
