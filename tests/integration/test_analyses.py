"""Every registered analysis, end to end on a tiny trained run: the CLI and the Python API
give identical saved results, results round-trip through save/load, and bad input exits 2.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import safetensors.torch
import torch
from torch import nn

from analyses import REGISTRY, get_analysis, load_subject
from interp.cli import main
from interp.errors import HookError
from interp.training import TrainConfig, train
from models import build_model, preset_config
from tasks import ModAddTask, MPSPTask
from tests.builders import size_args, sized_params

# Tiny trained runs: (task, preset, training options). The first two are each model kind's
# default run; an analysis that names the task families it applies to also runs on every run of
# those families (e.g. the modular-addition transformer).
RUNS = {
    "transformer": (MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32, r=0.75), "mpsp-2l2h", {}),
    "quadratic_mlp": (ModAddTask(p=11, train_frac=0.6, xi=0.2), "quadratic-mlp", {"loss": "mse", "lr": 1e-2}),
    "modadd_transformer": (ModAddTask(p=11, train_frac=0.6), "modadd-1l", {}),
}
DEFAULT_RUNS = ("transformer", "quadratic_mlp")


def _kind(run: str) -> str:
    task, preset, _ = RUNS[run]
    return preset_config(preset, task).kind


def _applies(name: str, run: str) -> bool:
    analysis = get_analysis(name)
    if _kind(run) not in analysis.models:
        return False
    if analysis.tasks is None:
        return run in DEFAULT_RUNS
    return RUNS[run][0].name in analysis.tasks


CASES = [(name, run) for name in REGISTRY for run in RUNS if _applies(name, run)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folders = {}
    for kind, (task, preset, options) in RUNS.items():
        model = build_model(preset_config(preset, task), seed=0)
        out = tmp_path_factory.mktemp("analyses") / kind
        train(out, model, task, TrainConfig(epochs=20, eval_every=10, seed=0, **options), progress=False)
        folders[kind] = out
    return folders


@pytest.fixture(scope="module")
def run_dir(runs):
    return runs["transformer"]


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def _saved(folder):
    data = json.loads((folder / "result.json").read_text())
    tensors = safetensors.torch.load((folder / "tensors.safetensors").read_bytes())
    return data, tensors


@pytest.mark.parametrize("name", list(REGISTRY))
def test_registry_entry_matches_its_module(name):
    analysis = get_analysis(name)
    assert (analysis.name, analysis.summary) == (name, REGISTRY[name][1])
    assert analysis.result.analysis == name
    kinds = {_kind(r) for r in RUNS}
    assert analysis.models and set(analysis.models) <= kinds, "declare the model kinds it applies to"
    assert any(_applies(name, run) for run in RUNS), "no integration run exercises it"
    assert dataclasses.is_dataclass(analysis.params) and analysis.params.__dataclass_params__.frozen
    assert all(f.metadata.get("help") for f in dataclasses.fields(analysis.params)), (
        "every param needs a help text"
    )


@pytest.mark.parametrize("name, run", CASES)
def test_cli_and_python_api_give_identical_results(name, run, runs, tmp_path, capsys):
    run_dir = runs[run]
    analysis = get_analysis(name)
    result = analysis.compute(load_subject(run_dir), sized_params(name))
    result.save(tmp_path / "api")
    code, out, err = _cli(
        capsys, name, "--ckpt", str(run_dir), *size_args(name), "--out", str(tmp_path / "cli")
    )
    assert code == 0, err
    assert "saved to" in out
    (api_json, api_tensors), (cli_json, cli_tensors) = _saved(tmp_path / "api"), _saved(tmp_path / "cli")
    assert api_json == cli_json
    assert api_tensors.keys() == cli_tensors.keys()
    for key in api_tensors:
        torch.testing.assert_close(
            api_tensors[key], cli_tensors[key], rtol=0, atol=0, equal_nan=True, msg=key
        )
    assert (tmp_path / "cli" / "figure.html").stat().st_size > 0
    loaded = analysis.result.load(tmp_path / "api")
    assert loaded.to_frame().equals(result.to_frame())


@pytest.mark.parametrize("name", list(REGISTRY))
def test_bad_checkpoint_exits_2(name, tmp_path, capsys):
    code, _, err = _cli(capsys, name, "--ckpt", str(tmp_path / "nope"))
    assert code == 2 and "nope" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in REGISTRY
        if "split" in {f.name for f in dataclasses.fields(get_analysis(n).params)}
        and "transformer" in get_analysis(n).models
    ],
)
def test_bad_split_exits_2_with_did_you_mean(name, run_dir, capsys):
    code, _, err = _cli(capsys, name, "--ckpt", str(run_dir), "--split", "adb")
    assert code == 2 and "did you mean 'adv'" in err


@pytest.mark.parametrize("name", [n for n in REGISTRY if not _applies(n, "transformer")])
def test_analysis_on_a_model_or_task_it_does_not_apply_to_exits_2(name, run_dir, capsys):
    code, _, err = _cli(capsys, name, "--ckpt", str(run_dir))
    assert code == 2 and "Traceback" not in err


def test_default_result_folder_is_inside_the_run(run_dir, capsys):
    name = next(iter(REGISTRY))
    code, out, err = _cli(capsys, name, "--ckpt", str(run_dir))
    assert code == 0, err
    assert (run_dir / "analyses" / name / "step_000020" / "result.json").exists()


@pytest.mark.parametrize("name, run", CASES)
def test_no_analysis_lets_a_hook_fail_silently(name, run, runs, tmp_path):
    # Take every hook point off the forward path (as replacing modules after the model was built
    # does). An analysis that registers a hook must then raise HookError naming it; one that
    # registers none (weights only, or forward passes without hooks) must give the same result.
    analysis = get_analysis(name)
    analysis.compute(load_subject(runs[run]), sized_params(name)).save(tmp_path / "intact", figure=False)
    subject = load_subject(runs[run])
    for hook in list(subject.model.hook_dict):
        parent, _, attr = hook.rpartition(".")
        setattr(subject.model.get_submodule(parent) if parent else subject.model, attr, nn.Identity())
    try:
        result = analysis.compute(subject, sized_params(name))
    except HookError as err:
        assert "never fired" in str(err)
        return
    result.save(tmp_path / "broken", figure=False)
    intact_json, intact_tensors = _saved(tmp_path / "intact")
    broken_json, broken_tensors = _saved(tmp_path / "broken")
    assert intact_json == broken_json
    for key in intact_tensors:
        torch.testing.assert_close(
            intact_tensors[key], broken_tensors[key], rtol=0, atol=0, equal_nan=True, msg=key
        )


@pytest.mark.parametrize(
    "name, run, params",
    [
        ("progress", "modadd_transformer", ["--param", "frequencies=1,2"]),
        ("fourier", "quadratic_mlp", []),
        ("dla", "transformer", ["--param", "splits=adv"]),
        ("probe", "transformer", ["--param", "target=shortcut", "--param", "sites=z_pos"]),
    ],
)
def test_evolve_runs_an_analysis_over_every_checkpoint_with_its_params(
    name, run, params, runs, tmp_path, capsys
):
    import pandas as pd

    from interp.store import list_checkpoints

    code, out, err = _cli(
        capsys,
        "evolve",
        "--run",
        str(runs[run]),
        "--analysis",
        name,
        *params,
        "--out",
        str(tmp_path),
        "--no-progress",
    )
    assert code == 0, err
    frame = pd.read_csv(tmp_path / f"{name}.csv")
    assert sorted(frame["step"].unique()) == list_checkpoints(runs[run])
    if name == "progress":
        assert (frame["key_frequencies"].astype(str) == "1,2").all()
    if name == "dla":
        assert set(frame["split"]) == {"adv"}
    if name == "probe":
        site_rows = frame[frame["probe"] == "z_pos"]
        assert set(site_rows["target"]) == {"shortcut"} and len(site_rows) > 0
        assert {"W_E", "W_E shuffled", "W_E initial"} <= set(frame["probe"])


def test_evolve_over_chosen_checkpoints_computes_only_those(runs, tmp_path, capsys):
    import pandas as pd

    from interp.store import list_checkpoints

    run = runs["transformer"]
    steps = list_checkpoints(run)
    chosen = f"{steps[0]},{steps[-2]}-{steps[-1]}"
    code, _, err = _cli(
        capsys, "evolve", "--run", str(run), "--analysis", "drift", "--checkpoints", chosen,
        "--out", str(tmp_path), "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    assert sorted(pd.read_csv(tmp_path / "drift.csv")["step"].unique()) == [steps[0], *steps[-2:]]
    assert sorted(p.name for p in (tmp_path / "cache" / "drift").iterdir()) == [
        f"step_{s:06d}" for s in (steps[0], *steps[-2:])
    ]  # nothing computed at the other checkpoints
    missing = steps[-1] + 1
    code, _, err = _cli(
        capsys, "evolve", "--run", str(run), "--analysis", "drift", "--checkpoints", str(missing)
    )
    assert code == 2 and f"no checkpoint of step {missing}" in err and "nearest checkpoints" in err


def test_evolve_rejects_unknown_params_with_exit_2(runs, capsys):
    code, _, err = _cli(
        capsys, "evolve", "--run", str(runs["transformer"]), "--analysis", "dla", "--param", "neuron=1"
    )
    assert code == 2 and "did you mean 'neurons'" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "name, run",
    # circuit on the transformer (~35 s) in `make test-slow`: the others keep every analysis kind here.
    [
        pytest.param(
            n, r, id=f"{n}-{r}", marks=[pytest.mark.slow] if (n, r) == ("circuit", "transformer") else []
        )
        for n, r in CASES
    ],
)
def test_evolve_series_equals_each_checkpoint_loaded_alone(name, run, runs, tmp_path):
    """`evolve` reuses one model and the splits across checkpoints (`subject_series`); every
    result, including those computed before later weights were loaded, must equal the result of
    loading that checkpoint on its own.
    """
    import shutil

    import pandas as pd

    from analyses import evolve
    from interp.store import checkpoint_dir

    folder = shutil.copytree(runs[run], tmp_path / "run")  # no cached results from other tests
    analysis = get_analysis(name)
    params = sized_params(name)
    evolution = evolve(folder, analysis, params, progress=False)
    for step, result in list(zip(evolution.steps, evolution.results))[:: max(1, len(evolution.steps) // 3)]:
        alone = analysis.compute(load_subject(checkpoint_dir(folder, step)), params)
        pd.testing.assert_frame_equal(result.to_frame(), alone.to_frame(), rtol=1e-6)


# --- circuit: the edge graph, exact patching vs EAP vs EAP-IG, faithfulness (issue 26) ---------
CIRCUIT_FAST = ("--max-examples", "12", "--steps", "3")  # seconds, not minutes, on a loaded machine
AGREEMENT_COLUMNS = {"eap_spearman", "eap_top_k_overlap", "eap_ig_spearman", "eap_ig_top_k_overlap"}


def test_circuit_cli_writes_a_result_that_loads_back_with_its_figure(run_dir, tmp_path, capsys):
    from analyses.circuit import CircuitResult

    code, out, err = _cli(
        capsys, "circuit", "--ckpt", str(run_dir), "--split", "adv", *CIRCUIT_FAST, "--out", str(tmp_path)
    )
    assert code == 0, err
    assert "spearman" in out and "smallest circuit" in out
    result = CircuitResult.load(tmp_path)
    assert result.flips == ["label", "shortcut"] and set(result.n_pairs.values()) == {12}
    n_edges = len(result.edge_upstream)
    assert result.exact.shape == result.eap.shape == result.eap_ig.shape == (2, n_edges)
    agreement = result.agreement_frame()
    assert {"spearman", "top_k_overlap", "k", "n_active"} <= set(agreement.columns)
    assert set(zip(agreement["flip"], agreement["method"])) == {
        (f, m) for f in ("label", "shortcut") for m in ("eap", "eap_ig")
    }
    assert AGREEMENT_COLUMNS <= set(result.to_frame().columns)
    curve = result.faithfulness_frame()
    assert set(curve["size"]) >= {0, n_edges}
    fig = result.figure()
    assert len(fig.data) > 4 and "kept" in " ".join(str(t.name) for t in fig.data)
    assert (tmp_path / "figure.html").stat().st_size > 0


@pytest.mark.parametrize(
    "args, named",
    [
        (("--flips", "label,labels"), "labels"),
        (("--method", "eapig"), "eapig"),
        (("--top-k", "0"), "top_k"),
        (("--top-k", "100000"), "100000"),
        (("--steps", "0"), "steps"),
        (("--faithfulness", "1.5"), "1.5"),
        (("--max-examples", "-1"), "max_examples"),
        (("--split", "adb"), "adb"),
    ],
)
def test_circuit_bad_input_is_one_line_and_exit_2(args, named, run_dir, tmp_path, capsys):
    code, _, err = _cli(capsys, "circuit", "--ckpt", str(run_dir), *args, "--out", str(tmp_path))
    assert code == 2, err
    assert named in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_circuit_refuses_a_missing_checkpoint_and_a_task_without_counterfactuals(runs, tmp_path, capsys):
    code, _, err = _cli(capsys, "circuit", "--ckpt", str(tmp_path / "no_such_run"))
    assert code == 2 and "no_such_run" in err and "Traceback" not in err
    # modular addition has no counterfactual partners: refused before any edge is scored
    code, _, err = _cli(capsys, "circuit", "--ckpt", str(runs["modadd_transformer"]), "--out", str(tmp_path))
    assert code == 2 and "mpsp" in err.lower() and "Traceback" not in err


def test_circuit_on_a_one_layer_model(tmp_path, capsys):
    # One layer is a valid subject: its graph has no head-to-head edges, only embeddings -> head
    # inputs, head -> MLP, and everything -> logits.
    from analyses.circuit import CircuitResult

    task = MPSPTask(vocab=12, n=4, n_train=64, n_val=16, n_adv=16)
    run = tmp_path / "run"
    train(
        run,
        build_model(preset_config("mpsp-1l1h", task), seed=0),
        task,
        TrainConfig(epochs=2),
        progress=False,
    )
    code, _, err = _cli(capsys, "circuit", "--ckpt", str(run), *CIRCUIT_FAST, "--out", str(tmp_path / "out"))
    assert code == 0, err
    result = CircuitResult.load(tmp_path / "out")
    assert result.n_layers == 1 and not any(r.startswith("L1") for r in result.edge_receiver)
    assert set(result.edge_upstream) == {"embed", "pos_embed", "L0H0", "MLP0"}


def test_evolve_circuit_writes_the_per_step_table_and_the_circuit_over_training_figure(
    runs, tmp_path, capsys
):
    import pandas as pd

    from analyses import evolve
    from analyses.circuit_figure import circuit_over_training
    from interp.store import list_checkpoints

    run = runs["transformer"]
    fast = ["--param", "max_examples=8", "--param", "steps=2", "--param", "flips=label"]
    code, out, err = _cli(
        capsys,
        "evolve",
        "--run",
        str(run),
        "--analysis",
        "circuit",
        *fast,
        "--out",
        str(tmp_path),
        "--no-progress",
    )
    assert code == 0, err
    frame = pd.read_csv(tmp_path / "circuit.csv")
    steps = list_checkpoints(run)
    assert len(steps) >= 2 and sorted(frame["step"].unique()) == steps
    assert AGREEMENT_COLUMNS <= set(frame.columns) and {"exact", "eap", "eap_ig", "kept"} <= set(
        frame.columns
    )
    assert set(frame["flip"]) == {"label"}
    # The Python API reads the CLI's cache (same params) and draws which edges enter and leave.
    evolution = evolve(
        run, "circuit", max_examples=8, steps=2, flips="label", progress=False, cache=tmp_path / "cache"
    )
    assert evolution.steps == steps
    fig = circuit_over_training(evolution, "label", phase_step=steps[1])
    heat = fig.data[0]
    assert list(heat.customdata[0]) == steps and list(heat.x) == list(range(len(steps))) and len(heat.y) > 0
    kept_any = frame.groupby(["edge"])["kept"].any()
    assert set(heat.y) == set(kept_any[kept_any].index)


def test_evolve_circuit_bad_param_exits_2(runs, capsys):
    run = str(runs["transformer"])
    code, _, err = _cli(capsys, "evolve", "--run", run, "--analysis", "circuit", "--param", "flip=label")
    assert code == 2 and "did you mean 'flips'" in err and "Traceback" not in err
    code, _, err = _cli(capsys, "evolve", "--run", run, "--analysis", "circuit", "--param", "top_k=0")
    assert code == 2 and "top_k" in err and "Traceback" not in err


def test_evolve_several_analyses_in_one_pass_equals_one_command_each(runs, tmp_path, capsys):
    """Repeated --analysis: each series as its own command computes it (grads in two worker
    processes, --jobs 2); an unprefixed --param sets every analysis, ANALYSIS.NAME only that
    one; the config is read once for all.
    """
    import pandas as pd

    run = str(runs["transformer"])
    common = ("--run", run, "--no-progress")
    code, out, err = _cli(
        capsys, "evolve", *common, "--analysis", "grads", "--analysis", "fingerprint",
        "--param", "split=train", "--param", "fingerprint.split=val", "--out", str(tmp_path / "both"),
    )  # fmt: skip
    assert code == 0, err
    assert "grads over" in out and "fingerprint over" in out
    for name, params in (
        ("grads", ["--param", "split=train", "--jobs", "2"]),
        ("fingerprint", ["--param", "split=val"]),
    ):
        code, _, err = _cli(
            capsys, "evolve", *common, "--analysis", name, *params, "--out", str(tmp_path / name)
        )
        assert code == 0, err
        pd.testing.assert_frame_equal(
            pd.read_csv(tmp_path / "both" / f"{name}.csv"), pd.read_csv(tmp_path / name / f"{name}.csv")
        )
    # fingerprint's empirical measures depend on the split: the prefixed split=val won over split=train
    code, _, err = _cli(capsys, "evolve", *common, "--analysis", "fingerprint", "--param", "split=train",
                        "--out", str(tmp_path / "train"))  # fmt: skip
    assert code == 0, err
    on_train = pd.read_csv(tmp_path / "train" / "fingerprint.csv")["qk_rho_empirical"]
    assert not on_train.equals(pd.read_csv(tmp_path / "both" / "fingerprint.csv")["qk_rho_empirical"])


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--analysis", "drift", "--param", "dla.splits=adv"],
            "is for 'dla', which is not an --analysis given",
        ),
        (["--analysis", "drift", "--analysis", "drift"], "--analysis drift is given twice"),
        (["--analysis", "drift", "--analysis", "dla", "--param", "neurons=1"], "drift.NAME=VALUE only drift"),
        (["--analysis", "dla", "--analysis", "drift", "--param", "dla.splits=nope"], "'nope' is not a split"),
    ],
    ids=["prefix-not-given", "twice", "not-in-every-analysis", "bad-split-of-one"],
)
def test_evolve_several_analyses_refuses_bad_params_at_once(runs, tmp_path, capsys, args, message):
    code, _, err = _cli(
        capsys, "evolve", "--run", str(runs["transformer"]), *args, "--out", str(tmp_path / "o")
    )
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_evolve_caches_without_fsyncs_and_recomputes_a_step_whose_tensors_are_not_its_own(
    runs, tmp_path, monkeypatch
):
    """Series caches skip the fsyncs (4 a result, the most of a 100-checkpoint series' writes on
    a slow disk), so a power cut may lose a file: a cached result whose tensors are not the ones
    its result.json was written with must be refused and recomputed, never read.
    """
    import os
    import shutil

    from analyses import evolve
    from interp.errors import CheckpointError

    folder = shutil.copytree(runs["transformer"], tmp_path / "run")
    syncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (syncs.append(fd), real_fsync(fd)))
    first = evolve(folder, "fingerprint", progress=False)
    assert syncs == []
    cache = sorted((folder / "analyses" / "fingerprint").glob("**/result.json"))
    assert len(cache) == len(first.steps) > 1
    damaged, other = cache[0].parent, cache[-1].parent
    # An older tensors file beside a newer result.json (a lost write): valid safetensors, wrong data.
    shutil.copyfile(other / "tensors.safetensors", damaged / "tensors.safetensors")
    with pytest.raises(CheckpointError, match="not the file result.json was written with"):
        type(first.results[0]).load(damaged)
    (other / "tensors.safetensors").write_bytes(b"")  # and one left empty
    with pytest.raises(CheckpointError, match="no readable analysis result"):
        type(first.results[0]).load(other)
    again = evolve(folder, "fingerprint", progress=False)
    for before, after in zip(first.results, again.results):
        assert before.to_frame().equals(after.to_frame())
    result_type = type(first.results[0])
    assert (
        result_type.load(damaged).step == first.steps[0] and result_type.load(other).step == first.steps[-1]
    )
    syncs.clear()
    first.results[0].save(tmp_path / "saved")  # a result saved on its own is durable
    assert len(syncs) == 4  # the tensors, the JSON, and their folder after each rename
