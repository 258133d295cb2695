"""Strict conversion between frozen dataclass configs and JSON-ready dicts.

Configs are small frozen dataclasses, one per concern. `from_dict` is strict: an unknown key
is an error (a typo in a config file must never be silently ignored), and so is a missing
required field. Nested dataclass fields and tuples are rebuilt from their JSON forms.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from interp.errors import ConfigError, did_you_mean

T = TypeVar("T")


def to_dict(config: Any) -> dict[str, Any]:
    """Return a JSON-ready dict of a (possibly nested) dataclass config."""
    return _jsonable(dataclasses.asdict(config))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def from_dict(cls: type[T], data: Mapping[str, Any], *, where: str | None = None) -> T:
    """Build the dataclass `cls` from `data`, rejecting unknown and missing keys.

    Args:
        cls: A dataclass type.
        data: Its fields, as produced by `to_dict` (lists stand for tuples).
        where: Where the data came from, for error messages (e.g. a file path).

    Returns:
        An instance of `cls` (its `__post_init__` validation runs as usual).

    Raises:
        ConfigError: On an unknown key, a missing required key, or a non-mapping input.
    """
    origin = f" in {where}" if where else ""
    if not isinstance(data, Mapping):
        raise ConfigError(f"expected a mapping for {cls.__name__}{origin}, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r} for {cls.__name__}{origin}",
            did_you_mean(unknown[0], fields),
        )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, field in fields.items():
        if name in data:
            kwargs[name] = _coerce(hints[name], data[name], where)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing key {name!r} for {cls.__name__}{origin}")
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, where: str | None) -> Any:
    """Rebuild nested dataclasses and tuples from their JSON forms."""
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return from_dict(hint, value, where=where)
    origin = typing.get_origin(hint)
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        for arg in typing.get_args(hint):
            if dataclasses.is_dataclass(arg) and isinstance(value, Mapping):
                return from_dict(arg, value, where=where)
            if typing.get_origin(arg) is tuple and isinstance(value, list):
                return tuple(value)
    return value


def parse_choices(value: str | Sequence[str], valid: Iterable[str], what: str) -> tuple[str, ...]:
    """Turn ``"a,b"`` (or a list) into a tuple of distinct valid choices, in the given order.

    Args:
        value: Comma-separated names, or a sequence of names.
        valid: The accepted names.
        what: What a name is, for error messages (e.g. ``"patching site"``).

    Raises:
        ConfigError: On an unknown name (with a did-you-mean hint), or no name at all.
    """
    valid = list(valid)
    names = [n.strip() for n in (value.split(",") if isinstance(value, str) else value)]
    names = [n for n in names if n]
    for name in names:
        if name not in valid:
            raise ConfigError(f"unknown {what} {name!r}", did_you_mean(name, valid))
    if not names:
        raise ConfigError(f"no {what} given", f"valid: {', '.join(valid)}")
    return tuple(dict.fromkeys(names))
