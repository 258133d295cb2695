"""References that cannot rot: every dotted name the docs and docstrings give is defined where
they say, and every `interp ...` command line in the docs parses with the real command line.

A name like `interp.training.loop.TrainConfig` imports (the loop module imports the class) but
the class is defined in `interp.training.config`: a reader who opens the named module does not
find it, and a refactor of the importer breaks the reference silently. So a name must be
*defined* in the module it names: a class or function whose ``__module__`` is that module, a
module-level assignment or definition in that module's source, a submodule, or (for a
package) a name in the package's ``__all__``, its deliberate public surface.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import shlex
import warnings
from functools import cache
from pathlib import Path
from types import ModuleType

import click
import pytest

from interp.cli import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PACKAGES = ("interp", "models", "tasks", "analyses")
GENERATED = ("_build", "_autosummary", "jupyter_execute", "analyses")  # git-ignored build output
# A backticked span that starts with a dotted name rooted at one of our packages.
DOTTED = re.compile(r"`+((?:interp|models|tasks|analyses)(?:\.[A-Za-z_]\w*)+)")


def _markdown_files() -> list[Path]:
    files = [p for p in DOCS.rglob("*.md") if not set(p.relative_to(DOCS).parts[:-1]) & set(GENERATED)]
    return sorted(p for p in files if p.name != "cli.md") + [ROOT / "README.md"]


def _docstrings(path: Path) -> list[tuple[int, str]]:
    """Every string statement of a source file (module, class, function and attribute docstrings)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (node.lineno, node.value.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]


def _references() -> list[tuple[str, str]]:
    """(where, dotted name) for every backticked dotted name in the docs and the docstrings."""
    found = []
    for path in _markdown_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found += [(f"{path.relative_to(ROOT)}:{number}", name) for name in DOTTED.findall(line)]
    for package in (*PACKAGES, "benchmarks", "scripts"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for lineno, text in _docstrings(path):
                found += [(f"{path.relative_to(ROOT)}:{lineno}", name) for name in DOTTED.findall(text)]
    return found


@cache
def _top_level_names(module: ModuleType) -> frozenset[str]:
    """Names a module's own source binds at top level (definitions and assignments, not imports)."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return frozenset()
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            names |= {
                e.id
                for t in node.targets
                if isinstance(t, ast.Tuple)
                for e in t.elts
                if isinstance(e, ast.Name)
            }
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


def _defined_in(module: ModuleType, name: str) -> bool:
    value = getattr(module, name)
    if inspect.ismodule(value):
        return value.__name__ == f"{module.__name__}.{name}"
    if inspect.isclass(value) or inspect.isfunction(value):
        if value.__module__ == module.__name__:
            return True
    elif name in _top_level_names(module):
        return True
    return hasattr(module, "__path__") and name in getattr(module, "__all__", ())


def _has_member(owner: object, name: str) -> bool:
    if hasattr(owner, name):
        return True
    if inspect.isclass(owner):  # dataclass fields without a default, annotated attributes
        fields = {f.name for f in dataclasses.fields(owner)} if dataclasses.is_dataclass(owner) else set()
        annotated = {n for cls in owner.__mro__ for n in getattr(cls, "__annotations__", {})}
        return name in fields | annotated
    return False


def resolve(dotted: str) -> str | None:
    """Why `dotted` is not a defined name (None if it is)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable module prefix
        try:
            module = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    else:
        return "no such module"
    rest = parts[cut:]
    if not rest:
        return None
    if not hasattr(module, rest[0]):
        return f"{module.__name__} has no {rest[0]!r}"
    if not _defined_in(module, rest[0]):
        value = getattr(module, rest[0])
        home = getattr(value, "__module__", None) or "elsewhere"
        return f"{rest[0]} is only imported into {module.__name__} (defined in {home})"
    owner = getattr(module, rest[0])
    for name in rest[1:]:
        if not _has_member(owner, name):
            return f"{'.'.join(parts[: parts.index(name)])} has no {name!r}"
        owner = getattr(owner, name, None)
    return None


# Entry-point groups a plugin package declares (`interp.plugins`): dotted like a module, not one.
ENTRY_POINT_GROUPS = {"interp.tasks", "interp.presets", "interp.analyses"}
REFERENCES = [(where, name) for where, name in _references() if name not in ENTRY_POINT_GROUPS]


def test_the_scan_finds_references_in_docs_and_docstrings():
    sources = {where.split(":")[0].split("/")[0] for where, _ in REFERENCES}
    assert {"docs", "interp", "analyses", "models", "tasks"} <= sources, sources
    assert len(REFERENCES) > 200


def test_the_resolver_tells_defined_from_merely_imported():
    assert resolve("interp.training.config.TrainConfig") is None
    assert "only imported into interp.training.loop" in resolve("interp.training.loop.TrainConfig")
    assert resolve("interp.training.TrainConfig") is None  # a package's public surface (`__all__`)
    assert resolve("analyses.registry.REGISTRY") is None  # a module-level assignment
    assert resolve("interp.training.finetuning.inject") == "interp.training.finetuning has no 'inject'"
    assert resolve("interp.store.RunSession.resume") is None
    assert resolve("interp.nonexistent_module") == "interp has no 'nonexistent_module'"


def test_every_dotted_name_is_defined_in_the_module_it_names():
    rotten = {}
    for where, name in REFERENCES:
        why = resolve(name)
        if why is not None:
            rotten.setdefault(f"{name}: {why}", []).append(where)
    assert not rotten, "\n".join(f"{k}  ({', '.join(v)})" for k, v in sorted(rotten.items()))


# `interp ...` command lines in the docs' shell code blocks (after a prompt or a venv path).
FENCE = re.compile(r"^(```|~~~)")
SHELL = {"bash", "sh", "shell", "console"}
COMMAND = re.compile(r"^\s*(?:\$\s*)?(?:[\w.]*/)?(?:bin/)?interp\s+(?=[a-z-])")


def _command_lines() -> list[tuple[str, str]]:
    """(where, the command after `interp`) for every `interp` line in a shell code block."""
    found = []
    for path in _markdown_files():
        lines, fence = path.read_text().splitlines(), None  # the info string of the open block
        i = 0
        while i < len(lines):
            line = lines[i]
            if FENCE.match(line.strip()):
                fence = None if fence is not None else line.strip()[3:].strip()
            elif fence in SHELL and COMMAND.match(line):  # diagrams and Python are not command lines
                start = i
                text = line
                while text.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    text = text.rstrip()[:-1] + " " + lines[i]
                found.append((f"{path.relative_to(ROOT)}:{start + 1}", COMMAND.sub("", text, count=1)))
            i += 1
    return found


def _parse(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse `args` as `interp` would, down to the last subcommand, running nothing.

    Only the command line is checked, not the machine: the folders a line names need not exist
    here (`click.Path(exists=True)` is relaxed), and the group's own `resolve_command`, which
    also opens an analysis's run folder, is bypassed for click's plain resolution.
    """
    command, ctx, name = cli, None, "interp"
    while True:
        for param in command.params:
            if isinstance(param.type, click.Path):
                monkeypatch.setattr(param.type, "exists", False)
        ctx = command.make_context(name, list(args), parent=ctx)
        if not isinstance(command, click.Group):
            return
        with warnings.catch_warnings():  # click 8.2 deprecates protected_args (9.0 keeps them in args)
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*ctx.protected_args, *ctx.args]
        name, command, args = click.Group.resolve_command(command, ctx, rest)


def _words(command: str) -> list[str]:
    words = []
    for word in shlex.split(command, comments=True):
        if word in {"|", "&&", ";", ">", "2>&1"} or word.startswith((">", "|")):
            break
        words.append(word)
    return words


COMMAND_LINES = _command_lines()


def test_the_docs_hold_command_lines():
    assert len(COMMAND_LINES) > 20
    assert any(cmd.startswith("study-a ") for _, cmd in COMMAND_LINES)


@pytest.mark.parametrize("where, command", COMMAND_LINES, ids=[w for w, _ in COMMAND_LINES])
def test_every_command_line_in_the_docs_parses_with_the_real_cli(where, command, monkeypatch):
    try:
        _parse(_words(command), monkeypatch)
    except click.exceptions.Exit:  # --help, --version: parsed, and asked to stop
        pass
    except click.ClickException as err:
        pytest.fail(f"{where}: interp {command!r}: {err.format_message()}")


def test_a_moved_or_misspelled_command_line_fails_to_parse(monkeypatch):
    _parse(["study-a", "evolution", "--run", "runs/x"], monkeypatch)
    for bad in (
        ["study-a", "evolve", "--run", "x"],
        ["patch", "--ckpt", "x", "--splt", "adv"],
        ["train", "--epochs", "N"],
    ):
        with pytest.raises(click.ClickException):
            _parse(bad, monkeypatch)
