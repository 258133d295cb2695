"""Lazy public surfaces: a package's names that import their module on first use (PEP 562).

`interp`, its subpackages and `analyses` expose their everyday names at the package root
(``from interp.store import open_run``) without importing torch when the package is imported,
so `interp --help` and the CLI's input checks stay fast. A name resolves, the first time it is
read, to the attribute of the same name in its module; tab completion (`dir`) lists them all.
The name -> module table stays readable as ``package.__getattr__.targets``, so the rules on who
may import whom (`tests/unit/test_architecture.py`) apply to these imports too.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_surface(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return the ``__getattr__`` and ``__dir__`` of `package` for the lazy `names`.

    Args:
        package: The package's ``__name__``.
        names: Public name -> the module that defines it (e.g. ``{"open_run": "interp.store.session"}``).

    Usage, in a package's ``__init__.py``::

        _NAMES = {"open_run": "interp.store.session"}
        __all__ = sorted(_NAMES)
        __getattr__, __dir__ = lazy_surface(__name__, _NAMES)
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name]), name)
        setattr(sys.modules[package], name, value)  # later reads skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    # The modules this surface imports, for the import-direction test (tests/unit/test_architecture.py):
    # an import scan of the source sees only strings here, so the table is kept where it can be read.
    __getattr__.targets = dict(names)  # type: ignore[attr-defined]
    return __getattr__, __dir__
