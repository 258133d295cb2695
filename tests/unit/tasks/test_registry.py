"""The task registry: strict round trips through dicts, and the import direction."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import tasks
from interp.errors import ConfigError
from interp.splits import Task
from tasks import TASKS, ModAddTask, MPSPTask, NoiseInjectionTask, task_from_dict

EXAMPLES = [
    MPSPTask(),
    MPSPTask(label="sum-mod3", shortcut="first", r=0.15, n=6, vocab=32, n_train=100, n_val=10, n_adv=20),
    ModAddTask(),
    ModAddTask(p=67, train_frac=0.3, xi=0.25),
    NoiseInjectionTask(),
    NoiseInjectionTask(p=97, k=40, noise="sum", new_classes=True),
]


def test_registry_lists_every_task_by_name() -> None:
    assert TASKS == {"mpsp": MPSPTask, "modadd": ModAddTask, "noise": NoiseInjectionTask}


@pytest.mark.parametrize("task", EXAMPLES, ids=repr)
def test_round_trip_through_json(task: Task) -> None:
    data = task.to_dict()
    assert data["name"] == task.name
    assert task_from_dict(json.loads(json.dumps(data))) == task
    assert isinstance(task, Task)


@pytest.mark.parametrize("task", EXAMPLES, ids=repr)
def test_unknown_key_is_rejected(task: Task) -> None:
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        task_from_dict({**task.to_dict(), "bogus": 1})


def test_typo_in_key_suggests_the_field() -> None:
    with pytest.raises(ConfigError, match="did you mean 'vocab'"):
        task_from_dict({"name": "mpsp", "vocabb": 32})


def test_unknown_or_missing_name() -> None:
    with pytest.raises(ConfigError, match="unknown task 'mpsq'.*did you mean 'mpsp'"):
        task_from_dict({"name": "mpsq"})
    with pytest.raises(ConfigError, match="'name'"):
        task_from_dict({"p": 97})


def test_invalid_values_are_rejected_through_the_registry() -> None:
    with pytest.raises(ConfigError, match="1.5"):
        task_from_dict({"name": "mpsp", "r": 1.5})


def test_tasks_import_only_interp() -> None:
    """`tasks` may import `interp`, never its siblings `models` or `analyses`."""
    root = Path(tasks.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in {"models", "analyses"}, f"{path.name} imports {name}"


@pytest.mark.parametrize(
    "task",
    [
        MPSPTask(n=4, vocab=10, n_train=64, n_val=16, n_adv=16),
        ModAddTask(p=11),
        NoiseInjectionTask(p=11, k=5),
    ],
    ids=repr,
)
def test_split_names_are_the_splits_built(task: Task) -> None:
    # The CLI refuses a --split from split_names before building anything (interp.cli.preflight).
    assert tuple(task.splits(0)) == task.split_names
