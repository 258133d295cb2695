"""Find, load, register and record plugins (see `interp.plugins`).

Entry points are listed from the installed packages' metadata without importing anything; a
plugin is imported the first time its name is resolved, once per process. What a plugin must
be (a task class, a `Preset`, an `Analysis`) is checked by the package that resolves it
(`tasks`, `models`, `analyses`), which passes its built-in names and a `check`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from interp.errors import PluginError, note

GROUPS = {"interp.tasks": "task", "interp.presets": "model preset", "interp.analyses": "analysis"}
"""Entry-point group -> what each of its entries names."""

REGISTER = {
    "interp.tasks": "register_task",
    "interp.presets": "register_preset",
    "interp.analyses": "register_analysis",
}
"""Entry-point group -> the function that registers one in a notebook."""

DISABLE = "INTERP_NO_PLUGINS"
"""Set to 1 (or true/yes) to turn every entry-point plugin off (the test suite's default)."""


@dataclass(frozen=True)
class Plugin:
    """Where a name of a group comes from: an installed package's entry point, or this process.

    Attributes:
        group: The entry-point group (a key of `GROUPS`).
        name: The name it registers (``interp train --task NAME``, ``interp NAME``, ...).
        target: ``module:attribute`` of the entry point, or the registered object's qualified name.
        package: The distribution that declares it; None if registered in this process.
        version: That distribution's version.
    """

    group: str
    name: str
    target: str
    package: str | None = None
    version: str | None = None

    @property
    def in_process(self) -> bool:
        """Registered in this process (`register`): worker processes do not see it."""
        return self.package is None

    def record(self) -> dict[str, str | None]:
        """What a run's config.json keeps of it (`missing_plugin` reads it back)."""
        if self.in_process:
            return {"registered": self.target}
        return {"package": self.package, "version": self.version, "entry_point": self.target}

    def describe(self) -> str:
        """``package 1.2`` or ``registered in this process``, for messages and `--help`."""
        return f"{self.package} {self.version}" if self.package else "registered in this process"


def enabled() -> bool:
    """Whether entry-point plugins are on (`DISABLE` unset or false)."""
    return os.environ.get(DISABLE, "").strip().lower() not in {"1", "true", "yes", "on"}


# name -> (object, plugin), per group: what `register` added, and entry points loaded once.
_REGISTERED: dict[str, dict[str, tuple[Any, Plugin]]] = {group: {} for group in GROUPS}
_LOADED: dict[tuple[str, str, str], Any] = {}


def declared(group: str) -> dict[str, Plugin]:
    """The entry points of `group` in the installed packages, by name, none imported.

    Empty when plugins are off. Two packages declaring one name: the first (in `sys.path`
    order) is kept and a note names both.
    """
    _check_group(group)
    if not enabled():
        return {}
    return dict(_scan(group, tuple(sys.path)))


@functools.lru_cache(maxsize=16)
def _scan(group: str, path: tuple[str, ...]) -> tuple[tuple[str, Plugin], ...]:
    found: dict[str, Plugin] = {}
    for entry in importlib.metadata.entry_points(group=group):
        dist = entry.dist
        plugin = Plugin(
            group,
            entry.name,
            entry.value,
            dist.metadata["Name"] if dist else "an unknown package",
            dist.version if dist else None,
        )
        if entry.name in found and found[entry.name].package != plugin.package:
            note(
                f"{GROUPS[group]} {entry.name!r} is declared by both {found[entry.name].describe()} and "
                f"{plugin.describe()}; using the first"
            )
            continue
        found.setdefault(entry.name, plugin)
    return tuple(found.items())


def available(group: str, builtins: Collection[str] = ()) -> dict[str, Plugin]:
    """Every plugin name of `group`: registered in this process, then entry points (none imported).

    An entry point that takes a built-in name is left out, with a note naming its package.
    """
    names = {name: plugin for name, (_, plugin) in _REGISTERED[group].items()}
    for name, plugin in declared(group).items():
        if name in builtins:
            note(f"{plugin.describe()} declares the {GROUPS[group]} {name!r}, a built-in name: ignored")
        else:
            names.setdefault(name, plugin)
    return names


def find(
    group: str, name: str, builtins: Collection[str] = (), check: Callable[[Any], str | None] | None = None
) -> tuple[Any, Plugin] | None:
    """The object plugin `name` of `group` gives, and where it came from; None if there is none.

    Args:
        group: A key of `GROUPS`.
        name: The name to resolve (not a built-in: the caller looks those up first).
        builtins: The built-in names (an entry point taking one is ignored).
        check: Returns what is wrong with the loaded object (None if nothing).

    Raises:
        PluginError: If the entry point fails to import, or `check` refuses what it holds,
            naming the entry point and its package.
    """
    if name in _REGISTERED[group]:
        return _REGISTERED[group][name]
    plugin = available(group, builtins).get(name)
    if plugin is None:
        return None
    key = (group, name, plugin.target)
    if key not in _LOADED:
        _LOADED[key] = _load(plugin, check)
    return _LOADED[key], plugin


def _load(plugin: Plugin, check: Callable[[Any], str | None] | None) -> Any:
    where = f"{plugin.group} entry point {plugin.name} = {plugin.target!r} of {plugin.describe()}"
    module, _, attribute = plugin.target.partition(":")
    try:
        obj = importlib.import_module(module.strip())
        for part in filter(None, attribute.strip().split(".")):
            obj = getattr(obj, part)
    except Exception as err:  # noqa: BLE001 - a broken plugin is the user's to fix: name it, one line
        first = (str(err).strip().splitlines() or [""])[0]
        raise PluginError(
            f"the {where} failed to import: {type(err).__name__}: {first}",
            f"fix or reinstall {plugin.package}, or set {DISABLE}=1 to run without plugins",
        ) from None
    problem = check(obj) if check is not None else None
    if problem:
        raise PluginError(f"the {where} {problem}")
    return obj


def register(group: str, name: str, obj: Any, builtins: Collection[str] = ()) -> Plugin:
    """Make `obj` resolvable as `name` in this process (a notebook's plugin; workers do not see it).

    Registering a name again replaces it (a notebook cell run twice).

    Raises:
        PluginError: If `name` is a built-in name, or an installed package's entry point.
    """
    _check_group(group)
    if name in builtins:
        raise PluginError(
            f"the {GROUPS[group]} name {name!r} is a built-in's",
            f"choose another name than: {', '.join(builtins)}",
        )
    other = declared(group).get(name)
    if other is not None:
        raise PluginError(
            f"the {GROUPS[group]} name {name!r} is already {other.describe()}'s", "choose another"
        )
    plugin = Plugin(group, name, f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', name)}")
    _REGISTERED[group][name] = (obj, plugin)
    return plugin


def provenance(group: str, name: str) -> dict[str, str | None] | None:
    """The record (`Plugin.record`) of the plugin that `name` of `group` resolved to in this
    process; None if `name` did not come from a plugin (a built-in, or never resolved).
    """
    if name in _REGISTERED[group]:
        return _REGISTERED[group][name][1].record()
    for (loaded_group, loaded_name, target), _ in _LOADED.items():
        plugin = declared(group).get(name) if (loaded_group, loaded_name) == (group, name) else None
        if plugin is not None and plugin.target == target:
            return plugin.record()
    return None


def refuse_registered(what: str, names: Mapping[str, str | None], hint: str) -> None:
    """Refuse `what`, work sent to other processes, if a name it needs was registered in this
    process only (`register`): a worker process would not know it. Call it before any starts.

    Args:
        what: The work, for the message (``"evolve with jobs > 1"``).
        names: Group (a key of `GROUPS`) -> the name the work resolves there (None: none).
        hint: What to do instead (e.g. run it in this process).

    Raises:
        PluginError: Naming the first such name and where it was registered.
    """
    for group, name in names.items():
        entry = _REGISTERED[group].get(name) if name else None
        if entry is not None:
            raise PluginError(
                f"{what} needs worker processes, which do not see the {GROUPS[group]} {name!r} "
                f"registered in this process ({entry[1].target})",
                f"{hint}, or declare it as an {group} entry point of an installed package",
            )


def unregister(group: str, name: str) -> None:
    """Forget `name` registered in this process (a no-op if it is not)."""
    _REGISTERED[group].pop(name, None)


def missing_plugin(group: str, name: str, record: Mapping[str, Any] | None) -> PluginError | None:
    """The error to raise for a name a run recorded (`Plugin.record`) that is not resolvable now.

    Returns:
        The error that says what to install (or register); None if the run recorded no plugin.
    """
    if not isinstance(record, Mapping):
        return None
    kind = GROUPS[group]
    if record.get("package"):
        package, version = record["package"], record.get("version")
        if not enabled():
            return PluginError(
                f"the {kind} {name!r} comes from the plugin {package}, and plugins are off ({DISABLE} is set)",
                f"unset {DISABLE}",
            )
        pin = f"=={version}" if version else ""
        return PluginError(
            f"the {kind} {name!r} comes from the plugin package {package} {version or ''}, which is not installed",
            f"pip install '{package}{pin}'",
        )
    if record.get("registered"):
        return PluginError(
            f"the {kind} {name!r} was registered in the process that made this run ({record['registered']})",
            f"call {REGISTER[group]} in this process before opening the run",
        )
    return None


def _check_group(group: str) -> None:
    if group not in GROUPS:
        raise PluginError(f"unknown plugin group {group!r}", f"valid: {', '.join(GROUPS)}")
