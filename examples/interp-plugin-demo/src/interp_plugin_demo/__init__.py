"""A worked `interp` plugin: the `demo-max` task, the `demo-1l` preset, the `demo-norms` analysis.

Each is declared as an entry point in ``pyproject.toml``; `interp` imports a module here only
when its name is used (the task module imports no torch, as `interp train` reads task configs
before the heavy imports).
"""

__version__ = "0.1.0"
