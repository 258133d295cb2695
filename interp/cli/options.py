"""Click options generated from config dataclasses: one source of truth for names, types,
defaults and help.

Every config whose fields are made with `interp.config.param` (training, fine-tuning, tasks,
WLMD settings, analysis `Params`) gives its command-line options here, so `--help`, the docs
(`docs/cli.md` is generated from the click group) and the library cannot drift apart. A field
``weight_decay: float = param(0.1, "...")`` becomes ``--weight-decay FLOAT`` with that help;
``int | None`` takes an integer, a two-number tuple takes two values, a bool is a
``--flag/--no-flag`` pair. Nested dataclasses and mappings are not options (JSON settings
carry them).

With ``defaults=False`` every option defaults to None and only what the user gives is passed
on (`given`), so the callee's own layered defaults (e.g. a preset's study settings) apply.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

import click

from interp.errors import ConfigError, did_you_mean

F = Callable[..., Any]


def flag_of(name: str) -> str:
    """The option flag of a field (``weight_decay`` -> ``--weight-decay``, ``kT`` -> ``--kt``)."""
    return "--" + name.replace("_", "-").lower()


def field_option(
    field: dataclasses.Field, hint: Any, *, defaults: bool = True, prefix: str = ""
) -> tuple[list[str], dict[str, Any]] | None:
    """The click option of one dataclass field, as ``(declarations, attributes)`` for
    `click.option` / `click.Option`; None if the field cannot be an option.

    Args:
        field: The dataclass field (its ``metadata["help"]`` is the help text).
        hint: Its resolved type hint.
        defaults: Show and use the field's default; else default to None (only given values pass).
        prefix: Put in front of the help text (e.g. the task families that have the field).
    """
    kind = _click_type(hint)
    if kind is None or field.metadata.get("cli") is False:
        return None
    help_text = prefix + field.metadata.get("help", "")
    default = field.default if defaults and field.default is not dataclasses.MISSING else None
    if defaults and field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return None  # mutable defaults (mappings) are JSON settings, not options
    flag = flag_of(field.name)
    if kind is bool:
        return [f"{flag}/--no-{flag[2:]}", field.name], {
            "default": default,
            "show_default": defaults,
            "help": help_text,
        }
    return [flag, field.name], {
        "type": kind,
        "default": default,
        "show_default": defaults and default is not None,
        "help": help_text,
    }


def _click_type(hint: Any) -> Any:
    """The click type of a field's hint: int, float, str, bool, a tuple of those; None if other."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return _click_type(options[0]) if len(options) == 1 else None
    if typing.get_origin(hint) is tuple and args and Ellipsis not in args:
        inner = [_click_type(a) for a in args]
        return tuple(inner) if all(t in (int, float, str) for t in inner) else None
    return hint if hint in (int, float, str, bool) else None


def config_options(
    *classes: type,
    exclude: Iterable[str] = (),
    defaults: bool = True,
    label: Callable[[type], str] | None = None,
) -> Callable[[F], F]:
    """A decorator adding one option per field of `classes` (a field shared by several, once).

    Args:
        classes: Config dataclasses.
        exclude: Field names to leave out (the command has options of its own for them).
        defaults: See `field_option`.
        label: Names a class in the help of its fields (e.g. the task family), if given.
    """
    exclude = set(exclude)
    owners: dict[str, list[type]] = {}
    fields: dict[str, tuple[dataclasses.Field, Any]] = {}
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            if field.init and field.name not in exclude:
                owners.setdefault(field.name, []).append(cls)
                fields.setdefault(field.name, (field, hints[field.name]))
    options = []
    for name, (field, hint) in fields.items():
        prefix = f"[{', '.join(label(c) for c in owners[name])}] " if label else ""
        option = field_option(field, hint, defaults=defaults, prefix=prefix)
        if option is not None:
            options.append(option)

    def decorate(func: F) -> F:
        for decls, attrs in reversed(options):
            func = click.option(*decls, **attrs)(func)
        return func

    decorate.names = [decls[-1] for decls, _ in options]  # type: ignore[attr-defined]
    return decorate


def config_params(cls: type, *, exclude: Iterable[str] = ()) -> list[click.Option]:
    """The options of `cls`'s fields as `click.Option` objects (for commands built at run time)."""
    hints = typing.get_type_hints(cls)
    made = [
        field_option(f, hints[f.name])
        for f in dataclasses.fields(cls)
        if f.init and f.name not in set(exclude)
    ]
    return [click.Option(decls, **attrs) for decls, attrs in filter(None, made)]


def given(values: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The `names` among `values` that the user gave (those not None)."""
    return {name: values[name] for name in names if values.get(name) is not None}


def parse_seeds(text: str) -> list[int]:
    """Parse ``"0-7"``, ``"0,3,5"`` or ``"0-3,8"`` into a list of seeds.

    Raises:
        ConfigError: If the text is not a list of distinct non-negative integers.
    """
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    except ValueError:
        raise ConfigError(f"--seeds {text!r} is not a seed list", "use e.g. 0-7 or 0,3,5") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r} is empty or repeats a seed", "use e.g. 0-7 or 0,3,5")
    return seeds


def json_object(text: str, option: str) -> dict[str, Any]:
    """`text` parsed as a JSON object, or one line naming `option` and what it should look like."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ConfigError(
            f"{option} {text!r} is not JSON ({err})", "give e.g. '{\"epochs\": 2000}'"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"{option} {text!r} is not a JSON object", "give e.g. '{\"epochs\": 2000}'")
    return value


def params_from_strings(analysis: Any, items: tuple[str, ...] | list[str]) -> Any:
    """Build `analysis.params` from ``NAME=VALUE`` strings (``interp evolve --param``).

    Values are converted to the field's type (``true``/``false`` for flags); unknown names and
    values that do not convert are `ConfigError`s naming them.
    """
    fields = {f.name: f for f in dataclasses.fields(analysis.params)}
    values: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in fields:
            raise ConfigError(
                f"--param {item!r} is not NAME=VALUE with a parameter of {analysis.name}",
                did_you_mean(name, fields),
            )
        kind = type(fields[name].default)
        try:
            values[name] = _BOOLS[text.strip().lower()] if kind is bool else kind(text)
        except (KeyError, ValueError):
            raise ConfigError(f"--param {item!r}: {text!r} is not a {kind.__name__}") from None
    return analysis.params(**values)


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
