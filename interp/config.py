"""Frozen dataclass configs: strict JSON conversion, field help, and field checks.

Configs are small frozen dataclasses, one per concern (tasks, models, training, WLMD,
analysis `Params`). This module, which imports no torch, is what they share:

* `to_dict` / `from_dict`: strict conversion to and from JSON-ready dicts. An unknown key is
  an error (a typo in a config file must never be silently ignored), and so is a missing
  required field. Nested dataclass fields and tuples are rebuilt from their JSON forms.
* `param(default, help)`: a field with a one-line help text, which becomes the field's
  ``--help`` in the CLI (`interp.cli.options`) and its line in the docs.
* `check_int`, `check_real`, `check_choice`, `check_bool`: the checks every `__post_init__`
  runs. Configs arrive from JSON files and command lines, so a field is checked for type as
  well as range: a string where a number belongs fails here, not deep inside tensor code.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping, Sequence
from numbers import Real
from typing import Any, TypeVar

from interp.errors import ConfigError, did_you_mean

T = TypeVar("T")


def param(default: Any, help: str, *, factory: Any = None, **kwargs: Any) -> Any:  # noqa: A002 - click's name
    """A dataclass field with a one-line help text (the CLI's `--help` and the docs show it).

    Args:
        default: The default value (immutable: configs are frozen); ignored with `factory`.
        help: One line saying what the field is, with its unit or valid range.
        factory: A zero-argument callable making the default, for mutable defaults (e.g. `dict`).
        **kwargs: More metadata (e.g. ``cli=False`` to keep a field off the command line;
            ``added=True`` for a field added after configs were first written: `to_dict`
            leaves it out at its default, so older configs stay as they were written;
            ``absent=VALUE`` for such a field whose default is not what the configs written
            before it did: a config without the key means `VALUE`, and `to_dict` leaves the
            field out while it holds `VALUE`, so those configs still resume as they ran).
    """
    metadata = {"help": help, **kwargs}
    if "absent" in metadata:
        metadata["added"] = True
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def param_help(cls: type) -> dict[str, str]:
    """``{field name: help text}`` of a dataclass whose fields were made with `param`."""
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}


def check_int(owner: str, name: str, value: Any, minimum: int) -> None:
    """Require an integer (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{owner}.{name} = {value!r} is invalid", f"use an integer >= {minimum}")


def check_real(
    owner: str,
    name: str,
    value: Any,
    low: float,
    high: float,
    *,
    high_open: bool = False,
    low_open: bool = False,
) -> None:
    """Require a real number (not a bool) in the interval from `low` to `high`."""
    interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    ok = isinstance(value, Real) and not isinstance(value, bool)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        raise ConfigError(f"{owner}.{name} = {value!r} is invalid", f"use a number in {interval}")


def check_choice(owner: str, name: str, value: Any, choices: Iterable[Any]) -> None:
    """Require one of `choices` (strings, or None where "none" is a choice), suggesting the closest."""
    choices = list(choices)
    if isinstance(value, (list, dict, set)) or value not in choices:
        raise ConfigError(
            f"{owner}.{name} = {value!r} is not valid", did_you_mean(str(value), map(str, choices))
        )


def check_bool(owner: str, name: str, value: Any) -> None:
    """Require a bool (JSON true/false)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{owner}.{name} = {value!r} is invalid", "use true or false")


def absent_value(field: dataclasses.Field) -> Any:
    """What a config without the key of an added field means (`param`'s ``absent``, else its
    default); `dataclasses.MISSING` for a field every config holds.
    """
    if "absent" in field.metadata:
        return field.metadata["absent"]
    return field.default if field.metadata.get("added") else dataclasses.MISSING


def to_dict(config: Any) -> dict[str, Any]:
    """Return a JSON-ready dict of a (possibly nested) dataclass config.

    A field made with ``param(..., added=True)`` is left out while it holds its default (with
    ``absent=VALUE``: while it holds `VALUE`): it was added after configs were first written,
    so a config that does not use it is written as before (a run folder started before the
    field existed compares equal and resumes).
    """
    return _jsonable(config)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if absent_value(f) is dataclasses.MISSING or getattr(value, f.name) != absent_value(f)
        }
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
        An instance of `cls` (its `__post_init__` validation runs as usual). A class with a
        static ``migrate(data) -> data`` first turns an older form of its dict into the current
        one (e.g. `interp.training.config.TrainConfig.migrate`).

    Raises:
        ConfigError: On an unknown key, a missing required key, or a non-mapping input.
    """
    origin = f" in {where}" if where else ""
    if not isinstance(data, Mapping):
        raise ConfigError(f"expected a mapping for {cls.__name__}{origin}, got {type(data).__name__}")
    migrate = getattr(cls, "migrate", None)
    if migrate is not None:  # an older form of the config, written before a change of its fields
        data = migrate(data)
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
        elif "absent" in field.metadata:  # written before the field: what those configs did
            kwargs[name] = field.metadata["absent"]
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
