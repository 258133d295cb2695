"""Plugins by entry point, in process: the worked plugin's sources on a temporary path with a
``*.dist-info/entry_points.txt`` beside them (what ``pip install`` writes), so every place that
resolves a name finds them; `register_task` / `register_analysis` for a notebook; the one-line
refusals. The real offline install is `tests/integration/test_plugin_demo.py`.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from interp.cli import main
from interp.errors import PluginError
from interp.plugins import discovery

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "interp-plugin-demo"
ENTRY_POINTS = """\
[interp.tasks]
demo-max = interp_plugin_demo.task:DemoMaxTask

[interp.presets]
demo-1l = interp_plugin_demo.preset:PRESET

[interp.analyses]
demo-norms = interp_plugin_demo.analysis:ANALYSIS
"""


def _dist(root: Path, name: str, version: str, entry_points: str) -> None:
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def plugins_on(monkeypatch):
    """Plugins turned on for this test, with a clean registry and no plugin module left imported."""
    monkeypatch.delenv("INTERP_NO_PLUGINS", raising=False)
    monkeypatch.setattr(discovery, "_REGISTERED", {group: {} for group in discovery.GROUPS})
    monkeypatch.setattr(discovery, "_LOADED", {})
    before = set(sys.modules)
    yield monkeypatch
    for name in set(sys.modules) - before:
        if name.startswith(("interp_plugin_demo", "broken_plugin", "notebook_")):
            del sys.modules[name]


@pytest.fixture
def demo(plugins_on, tmp_path):
    """The worked plugin's package and its entry points on sys.path (as if pip-installed)."""
    site = tmp_path / "site"
    shutil.copytree(DEMO / "src" / "interp_plugin_demo", site / "interp_plugin_demo")
    _dist(site, "interp-plugin-demo", "0.1.0", ENTRY_POINTS)
    plugins_on.syspath_prepend(str(site))
    return site


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_help_lists_a_plugin_analysis_without_importing_it(demo, capsys):
    code, out, _ = _cli(capsys, "--help")
    assert code == 0
    assert "demo-norms" in out and "interp-plugin-demo 0.1.0" in out
    assert not any(name.startswith("interp_plugin_demo") for name in sys.modules)


def test_plugins_off_hide_every_entry_point(demo, monkeypatch, capsys):
    monkeypatch.setenv("INTERP_NO_PLUGINS", "1")
    code, out, _ = _cli(capsys, "--help")
    assert code == 0 and "demo-norms" not in out
    from tasks import task_from_dict

    with pytest.raises(Exception, match="unknown task 'demo-max'"):
        task_from_dict({"name": "demo-max"})


def test_train_on_a_plugin_task_records_its_package_and_loads_only_with_it(
    demo, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    code, _, err = _cli(
        capsys, "train", "--preset", "demo-1l", "--epochs", "20", "--eval-every", "10", "--n-train", "64",
        "--no-progress", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["task"]["name"] == "demo-max" and config["task"]["n_train"] == 64
    assert config["model"]["n_layers"] == 1 and config["train"]["lr"] == 3e-3  # the preset's settings
    assert config["plugins"]["interp.tasks"]["demo-max"] == {
        "package": "interp-plugin-demo",
        "version": "0.1.0",
        "entry_point": "interp_plugin_demo.task:DemoMaxTask",
    }
    from analyses import load_subject

    subject = load_subject(out)  # rebuilt from the run folder: the plugin's task and splits
    assert subject.task.name == "demo-max" and set(subject.splits) == {"train", "val"}

    code, printed, err = _cli(capsys, "demo-norms", "--ckpt", str(out), "--out", str(tmp_path / "norms"))
    assert code == 0, err
    assert "blocks.0.attn.W_Q" in printed and (tmp_path / "norms" / "figure.html").is_file()

    monkeypatch.setattr(discovery, "_LOADED", {})
    monkeypatch.setenv("INTERP_NO_PLUGINS", "1")  # as if the plugin were not installed
    code, _, err = _cli(capsys, "fingerprint", "--ckpt", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "comes from the plugin interp-plugin-demo" in err and "unset INTERP_NO_PLUGINS" in err
    monkeypatch.delenv("INTERP_NO_PLUGINS")
    monkeypatch.syspath_prepend(str(tmp_path / "elsewhere"))
    sys.path.remove(str(demo))
    code, _, err = _cli(capsys, "fingerprint", "--ckpt", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "pip install 'interp-plugin-demo==0.1.0'" in err


def test_a_plugin_that_fails_to_import_is_named_in_one_line(plugins_on, tmp_path, capsys):
    site = tmp_path / "site"
    (site / "broken_plugin").mkdir(parents=True)
    (site / "broken_plugin" / "__init__.py").write_text("import not_a_module_anywhere\n")
    _dist(site, "broken-plugin", "2.0", "[interp.tasks]\nbroken = broken_plugin:Task\n")
    plugins_on.syspath_prepend(str(site))
    code, _, err = _cli(capsys, "train", "--task", "broken", "--epochs", "1", "--out", str(tmp_path / "r"))
    lines = err.strip().splitlines()  # the error, after a note if this process built `train` just now
    assert code == 2 and all(line.startswith("note: ") for line in lines[:-1]) and len(lines) <= 2
    error = lines[-1]
    assert (
        "interp.tasks entry point broken = 'broken_plugin:Task' of broken-plugin 2.0 failed to import"
        in error
    )
    assert "ModuleNotFoundError" in error and "INTERP_NO_PLUGINS=1" in error
    assert not (tmp_path / "r").exists()


def test_an_entry_point_with_a_built_in_name_is_ignored_with_a_note(plugins_on, tmp_path):
    site = tmp_path / "site"
    _dist(site, "clashing", "1.0", "[interp.tasks]\nmpsp = clashing:Task\n[interp.analyses]\npatch = c:A\n")
    plugins_on.syspath_prepend(str(site))
    from analyses import analysis_names
    from tasks import MPSPTask, task_families, task_family

    assert task_family("mpsp") is MPSPTask  # a built-in name resolves to the built-in, plugin unread
    with pytest.warns(UserWarning, match="clashing 1.0 declares the task 'mpsp', a built-in name: ignored"):
        assert task_families()["mpsp"] is MPSPTask
    with pytest.warns(UserWarning, match="declares the analysis 'patch'"):
        assert analysis_names().count("patch") == 1


def test_register_task_and_analysis_in_a_notebook(plugins_on, tmp_path):
    from analyses import evolve, get_analysis, register_analysis
    from interp.training import TrainConfig, train
    from models import build_model, preset_config
    from tasks import MPSPTask, register_task, task_from_dict

    sys.path.insert(0, str(DEMO / "src"))
    try:
        from interp_plugin_demo.analysis import ANALYSIS
        from interp_plugin_demo.task import DemoMaxTask
    finally:
        sys.path.remove(str(DEMO / "src"))

    with pytest.raises(PluginError, match="'mpsp' is a built-in's"):
        register_task(type("Clash", (MPSPTask,), {}))
    with pytest.raises(PluginError, match="not a task class"):
        register_task(object)
    assert register_task(DemoMaxTask) is DemoMaxTask
    register_analysis(ANALYSIS)
    task = task_from_dict({"name": "demo-max", "n_train": 32, "n_val": 16})
    assert get_analysis("demo-norms") is ANALYSIS

    model = build_model(preset_config("mpsp-1l1h", task, d_model=16, d_mlp=32), seed=0)
    run = tmp_path / "run"
    train(run, model, task, TrainConfig(epochs=4, eval_every=2, checkpoint_every=2), progress=False)
    record = json.loads((run / "config.json").read_text())["plugins"]["interp.tasks"]["demo-max"]
    assert record == {"registered": "interp_plugin_demo.task.DemoMaxTask"}
    series = evolve(run, "demo-norms", progress=False)
    n_steps = len(series.steps)
    assert series.steps[:: n_steps - 1] == [0, 4] and len(series.to_frame()) == n_steps * len(
        series.results[0].tensor
    )
    final = dict(zip(series.results[-1].tensor, series.results[-1].norm))  # the trained weights, step 4
    assert final["embed.W_E"] == pytest.approx(float(model.embed.W_E.detach().norm()))
    with pytest.raises(
        PluginError, match="needs worker processes, which do not see the analysis 'demo-norms'"
    ):
        evolve(run, "demo-norms", jobs=2, progress=False, cache=tmp_path / "cache")
    discovery.unregister("interp.tasks", "demo-max")
    with pytest.raises(PluginError, match="registered in the process that made this run"):
        from analyses import load_subject

        load_subject(run)


def test_a_sweep_grid_and_the_report_take_a_plugin_preset_and_its_tasks_milestones(demo, tmp_path, capsys):
    """A grid expands a plugin preset through the recipes (its task and training settings, then
    the grid's), and `interp report` reads the plugin task's milestones from the runs' metrics.
    The runs are synthetic (config.json and metrics.jsonl, as committed results hold them);
    training a plugin preset's run is the test above.
    """
    from analyses.grids import Grid, expand, grid_from_dict
    from analyses.report.records import load_results
    from interp.config import to_dict
    from interp.sweep.specs import write_sweep

    grid = grid_from_dict(
        {"presets": ["demo-1l"], "task": {"n_train": 48}, "train": {"epochs": 20}, "seeds": 2}
    )
    sweep = tmp_path / "sweep"
    specs = expand(grid, sweep)
    assert [s.out.relative_to(sweep).as_posix() for s in specs] == ["demo-1l/seed_0", "demo-1l/seed_1"]
    assert specs[0].task == {"name": "demo-max", "vocab": 8, "n": 3, "n_train": 48, "n_val": 128}
    assert specs[0].train["lr"] == 3e-3 and specs[0].train["epochs"] == 20  # the preset's, then the grid's
    assert specs[0].model["d_model"] == 32 and specs[0].model["d_vocab"] == 9
    write_sweep(sweep, specs, {"grid": to_dict(grid)})
    for spec, val in zip(specs, ([0.3, 0.96, 0.99], [0.3, 0.5, 0.6])):  # seed 0 reaches t_val at step 5
        spec.out.mkdir(parents=True)
        config = {"format_version": 1, "model": spec.model, "task": spec.task, "train": spec.train}
        (spec.out / "config.json").write_text(json.dumps(config))
        lines = [json.dumps({"step": 5 * i, "val/acc": v}) + "\n" for i, v in enumerate(val)]
        (spec.out / "metrics.jsonl").write_text("".join(lines))

    _, runs = load_results(sweep)  # both stopped before their end: milestones from their metrics
    assert [r.status for r in runs] == ["unfinished", "unfinished"]
    assert runs[0].milestones["t_val"]["step"] == 5 and runs[1].milestones["t_val"]["step"] is None
    code, out, err = _cli(capsys, "report", str(sweep), "--out", str(tmp_path / "report"), "--no-progress")
    assert code == 0, err
    assert "t_val" in (tmp_path / "report" / "runs.csv").read_text()

    with pytest.raises(Exception, match=r"unknown preset 'demo-2l' in the grid.*demo-1l"):
        Grid(presets=("demo-2l",))


def test_a_sweep_refuses_a_task_registered_in_this_process_before_any_worker_starts(plugins_on, tmp_path):
    from analyses.recipes import plan_runs
    from analyses.training import train_spec
    from interp.sweep import LocalExecutor, run_sweep
    from tasks import register_task

    sys.path.insert(0, str(DEMO / "src"))
    try:
        from interp_plugin_demo.task import DemoMaxTask
    finally:
        sys.path.remove(str(DEMO / "src"))
    register_task(DemoMaxTask)
    specs = plan_runs(
        "mpsp-1l1h", {"n_train": 32, "n_val": 16}, {"epochs": 2, "eval_every": 1}, [0, 1], tmp_path / "s",
        task_name="demo-max",
    )  # fmt: skip
    with pytest.raises(PluginError) as info:
        list(run_sweep(specs, train_spec, LocalExecutor(jobs=2), progress=False))
    message = str(info.value)
    assert (
        "a sweep needs worker processes, which do not see the task 'demo-max' registered in this process"
        in message
    )
    assert "\n" not in message and "(jobs=1)" in message
    assert not (tmp_path / "s").exists()  # refused before any run began
    outcomes = list(run_sweep(specs, train_spec, LocalExecutor(jobs=1), progress=False))  # this process
    assert [o.ok for o in outcomes] == [True, True] and all((s.out / "DONE").is_file() for s in specs)
