"""A study-B walk carried to another folder (a replaced machine) resumes as if never stopped."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from analyses.studies.study_b import measure as study_b_measure
from analyses.studies.study_b import protocol as study_b
from analyses.studies.study_b import records as study_b_records
from analyses.studies.study_b import tables as study_b_tables
from analyses.studies.study_b.settings import settings_with
from analyses.studies.study_b.state import export_state, restore_state
from interp.config import to_dict
from interp.errors import ConfigError, Note
from interp.store import checkpoint_dir, list_checkpoints
from interp.store.checkpoint import load_checkpoint
from interp.sweep.specs import seed_folder
from tests.unit.analyses.studies.test_study_b_measure import TINY

SCRIPT = Path(__file__).parents[4] / "scripts" / "long_runs" / "study_b_state.py"

# A walk of 9 steps in chunks of 3, checkpointed every 3 steps, that no cosine target stops.
CHUNKED = settings_with(
    {"wlmd": {"target_cosine": -1.0, "max_steps": 9, "report_every": 3, "checkpoint_every": 3}}, TINY
)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _measured(tmp_path_factory, name, settings):
    """Seed 0 measured without a stop into a new folder `name` (a reference), on one thread."""
    out, before = tmp_path_factory.mktemp(name), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        study_b_measure.measure(out, seeds=(0,), settings=settings)
    finally:
        torch.set_num_threads(before)
    return out


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """Seed 0 measured without a stop (the reference)."""
    return _measured(tmp_path_factory, "straight", CHUNKED)


def _walk_state(out):
    """The walk's records and its final sampler state (every tensor of the last checkpoint)."""
    folder = seed_folder(out, 0) / "wlmd"
    ckpt = load_checkpoint(folder / "entropy")
    return study_b.walk_records(folder), ckpt.step, ckpt.train_state["wlmd"]


# The same with the adopted shorter road: two walkers, walker 1 from its own AdamW model.
CHUNKED_OWN = settings_with({"walker_starts": "own", "wlmd": {"walkers": 2}}, CHUNKED)


@pytest.fixture(scope="module")
def straight_own(tmp_path_factory):
    """Seed 0 measured without a stop, with own starts (the reference)."""
    return _measured(tmp_path_factory, "straight-own", CHUNKED_OWN)


def test_a_walk_stopped_exported_and_restored_elsewhere_resumes_to_the_same_state(
    straight, tmp_path, monkeypatch
):
    _stop_carry_resume(straight, CHUNKED, tmp_path, monkeypatch)


def test_a_walk_from_own_starts_is_carried_with_them_and_resumes_to_the_same_state(
    straight_own, tmp_path, monkeypatch
):
    carried = _stop_carry_resume(straight_own, CHUNKED_OWN, tmp_path, monkeypatch)
    assert len(list_checkpoints(carried / "adamw-start-1")) == 1  # walker 1's start, not retrained


def _stop_carry_resume(straight, settings, tmp_path, monkeypatch):
    """Stop seed 0's walk at the worst moment, export its state, restore it into another folder,
    resume there: every record and every tensor of the final state equal `straight`'s. Returns
    the exported seed folder.
    """
    # Stopped after the step-6 checkpoint, before its record (the worst moment to copy it).
    first, write = tmp_path / "first-machine", study_b.atomic_write_json

    def killed_at_step_6(path, records):
        if records[-1]["step"] == 6:
            raise KeyboardInterrupt
        write(path, records)

    monkeypatch.setattr(study_b, "atomic_write_json", killed_at_step_6)
    with pytest.raises(KeyboardInterrupt):
        study_b_measure.measure(first, seeds=(0,), settings=settings)
    monkeypatch.setattr(study_b, "atomic_write_json", write)
    assert list_checkpoints(seed_folder(first, 0) / "wlmd" / "entropy") == [0, 3, 6]

    state = tmp_path / "results" / "state"
    sizes = export_state(first, state)
    carried = seed_folder(state, 0)
    assert set(sizes) == {0} and sizes[0] > 0
    assert list_checkpoints(carried / "wlmd" / "entropy") == [6]  # the newest checkpoint only
    assert len(list_checkpoints(carried / "adamw")) == 1
    assert not (carried / "wlmd" / "samples").exists() and not list(carried.glob("inject-*"))

    second = tmp_path / "second-machine"  # another path: the walk's config must not name the first
    assert restore_state(state, second) == [0]
    study_b_measure.measure(second, seeds=(0,), settings=settings)

    _assert_same_measurement(second, straight, resumed_at=6)
    return carried


def _assert_same_measurement(out, reference, resumed_at):
    """`out`'s walk of seed 0 (resumed from its step `resumed_at`) has every record and every
    tensor of its final state as `reference`'s uninterrupted walk, and the same injections.
    """
    records, step, sampler = _walk_state(out)
    expected_records, expected_step, expected = _walk_state(reference)
    assert [r["step"] for r in records] == [r["step"] for r in expected_records]
    assert step == expected_step > resumed_at
    # Every record as the uninterrupted walk wrote it (S, which only the last record keeps once
    # exported, compared where both kept it: from the first record written after the resume).
    assert study_b_records.compact_walk(records) == study_b_records.compact_walk(expected_records)
    after = [i for i, r in enumerate(records) if r["step"] > resumed_at]
    assert [records[i]["S"] for i in after] == [expected_records[i]["S"] for i in after]
    for name, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(sampler[name], value), name
        else:
            assert sampler[name] == value, name
    # ... and the injections that follow start from the same WLMD sample.
    assert (
        study_b_tables.table(out)
        .drop(columns="source")
        .equals(study_b_tables.table(reference).drop(columns="source"))
    )


# Protocol 4's move at toy scale: the same walk with a larger budget (15 steps, not 9).
LONGER = settings_with({"wlmd": {"max_steps": 15}}, CHUNKED)


def test_a_walk_ended_at_its_budget_continues_under_a_larger_one_as_if_given_from_the_start(
    straight, tmp_path_factory, tmp_path
):
    reference = _measured(tmp_path_factory, "straight-longer", LONGER)
    state = tmp_path / "state"
    export_state(straight, state)  # the walk ended at its budget: step 9, sampled and injected
    longer = tmp_path / "longer"
    assert restore_state(state, longer, LONGER, seeds=[0]) == [0]
    with pytest.raises(ConfigError, match="max_steps: 15, now 9"):
        study_b_measure.measure(longer, seeds=(0,), settings=CHUNKED)  # measured with the new budget now
    study_b_measure.measure(longer, seeds=(0,), settings=LONGER)
    assert [r["step"] for r in study_b.walk_records(seed_folder(longer, 0) / "wlmd")][-3:] == [9, 12, 15]
    _assert_same_measurement(longer, reference, resumed_at=9)


def test_a_restored_walk_sampled_for_longer_repeats_a_production_that_found_its_samples(straight, tmp_path):
    """Protocol 5 only lengthens production, which stops at its max_samples-th sample: a walk
    whose short production found them all gets the same samples and the same rows.
    """
    state = tmp_path / "state"
    export_state(straight, state)
    longer = settings_with({"wlmd": {"production_steps": 40}}, CHUNKED)
    assert restore_state(state, tmp_path / "out", longer) == [0]
    study_b_measure.measure(tmp_path / "out", seeds=(0,), settings=longer)
    found = list_checkpoints(seed_folder(straight, 0) / "wlmd" / "samples")
    assert len(found) == CHUNKED.wlmd.max_samples  # the short production found them all
    _assert_same_samples_and_rows(tmp_path / "out", straight)


def test_a_production_stopped_before_its_end_is_sampled_again_to_the_same_samples(straight, tmp_path):
    """A production an older interp stopped before its end (no resume point) is sampled again
    from the walk's final checkpoint: measuring a seed whose production was killed after its
    first sample saves the same samples as never stopping.
    """
    out = tmp_path / "out"
    shutil.copytree(straight, out)
    folder = seed_folder(out, 0)
    for run in folder.glob("inject-*"):
        shutil.rmtree(run)
    samples = folder / "wlmd" / "samples"
    kept = list_checkpoints(samples)[0]
    (samples / "DONE").unlink()  # killed before its end, one sample saved
    for step in list_checkpoints(samples)[1:]:
        shutil.rmtree(checkpoint_dir(samples, step))
    (samples / "metrics.jsonl").write_text(
        (samples / "metrics.jsonl").read_text().splitlines(keepends=True)[0]
    )
    assert list_checkpoints(samples) == [kept]
    with pytest.warns(Note, match="production stopped before its end; sampling again"):
        study_b_measure.measure(out, seeds=(0,), settings=CHUNKED)
    _assert_same_samples_and_rows(out, straight)


# A production that outlasts a session: a look every 3rd step, a resume point every 2nd.
SPARSE = settings_with(
    {"wlmd": {"production_steps": 8, "every": 3, "max_samples": 4, "checkpoint_every": 2}}, CHUNKED
)


def _assert_same_samples_and_rows(out, reference):
    """Seed 0's production samples in `out` are `reference`'s, weight for weight, and so are
    its table rows.
    """
    samples, expected = (seed_folder(o, 0) / "wlmd" / "samples" for o in (out, reference))
    assert list_checkpoints(samples) == list_checkpoints(expected)
    for step in list_checkpoints(expected):
        weights = [
            load_checkpoint(checkpoint_dir(f, step), load_train_state=False).state_dict
            for f in (samples, expected)
        ]
        assert weights[0].keys() == weights[1].keys()
        assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[1])
    pd.testing.assert_frame_equal(
        study_b_tables.table(out).drop(columns="source"),
        study_b_tables.table(reference).drop(columns="source"),
    )


def _killed_in_production(out, monkeypatch):
    """Seed 0 measured into `out` under SPARSE until a kill at production step 5 (sampler step
    14; resume points at steps 2 and 4); returns its production folder.
    """
    from interp.wlmd.sampler import Sampler

    advance = Sampler.advance

    def killed(self):
        advance(self)
        if self.frozen and self.step == 14:
            raise KeyboardInterrupt

    monkeypatch.setattr(Sampler, "advance", killed)
    with pytest.raises(KeyboardInterrupt):
        study_b_measure.measure(out, seeds=(0,), settings=SPARSE)
    monkeypatch.undo()
    return seed_folder(out, 0) / "wlmd" / "samples"


def test_a_production_stopped_exported_and_restored_elsewhere_resumes_to_the_same_samples(
    tmp_path_factory, tmp_path, monkeypatch
):
    """Production killed at its step 5 (sampler step 14; resume point at step 4): the export
    carries the samples and the resume point, and measuring the restored folder resumes the
    production there (not from the walk's end), to the samples and rows of one never stopped.
    """
    from interp.wlmd.runs import PROGRESS_DIR
    from interp.wlmd.sampler import Sampler

    reference = _measured(tmp_path_factory, "straight-sparse", SPARSE)
    first = tmp_path / "first-machine"
    samples = _killed_in_production(first, monkeypatch)
    assert list_checkpoints(samples / PROGRESS_DIR) == [2, 4] and list_checkpoints(samples)

    state = tmp_path / "state"
    export_state(first, state)
    carried = seed_folder(state, 0) / "wlmd" / "samples"
    assert list_checkpoints(carried / PROGRESS_DIR) == [4]  # the newest only
    assert list_checkpoints(carried) == list_checkpoints(samples)
    second = tmp_path / "second-machine"
    assert restore_state(state, second) == [0]
    load, resumed_at = Sampler.load_state_dict, []

    def spied(self, state):
        resumed_at.append(state["step"])
        load(self, state)

    monkeypatch.setattr(Sampler, "load_state_dict", spied)
    study_b_measure.measure(second, seeds=(0,), settings=SPARSE)
    assert resumed_at == [13]  # the sampler's step at the resume point: 9 walk steps + 4
    _assert_same_samples_and_rows(second, reference)
    # Restored under other settings (a longer production), the production is not carried: it
    # would resume with its old length, or from the walk's old end.
    other = settings_with({"wlmd": {"production_steps": 10}}, SPARSE)
    assert restore_state(state, tmp_path / "third", other) == [0]
    assert not (seed_folder(tmp_path / "third", 0) / "wlmd" / "samples").exists()


def test_a_production_that_ends_while_it_is_exported_is_carried_without_done(tmp_path, monkeypatch):
    """DONE written while the samples are copied (the last ones after the listing) must not be
    carried: the restored production would be read back with samples missing. Without it, the
    resume point finishes the production.
    """
    from interp.store.run_folder import is_done
    from interp.wlmd.runs import PROGRESS_DIR

    first = tmp_path / "first"
    samples = _killed_in_production(first, monkeypatch)
    copytree = shutil.copytree

    def finishing(src, dst, *args, **kwargs):
        if Path(src).parent == samples / "checkpoints":  # the production ends meanwhile
            (samples / "DONE").write_text('{"samples": 4}')
        return copytree(src, dst, *args, **kwargs)

    monkeypatch.setattr(shutil, "copytree", finishing)
    export_state(first, tmp_path / "state")
    monkeypatch.undo()
    carried = seed_folder(tmp_path / "state", 0) / "wlmd" / "samples"
    assert is_done(samples) and list_checkpoints(carried / PROGRESS_DIR)
    assert not is_done(carried) and list_checkpoints(carried)


def test_only_a_larger_budget_continues_an_exported_walk(straight, tmp_path, capsys):
    state = tmp_path / "state"
    export_state(straight, state)
    for settings, message in [
        (
            settings_with({"wlmd": {"dt": 2e-3}}, LONGER),
            r"ran with wlmd\.dt = 0\.001, not 0\.002: only a larger",
        ),
        (settings_with({"max_steps": 4}, LONGER), "ran with max_steps = 3, not 4"),  # the injection cap
        (
            settings_with({"wlmd": {"max_steps": 6}}, CHUNKED),
            "may have walked 9 steps, more than the new budget of 6",
        ),
    ]:
        with pytest.raises(ConfigError, match=message):
            restore_state(state, tmp_path / "out", settings)
    with pytest.raises(ConfigError, match="no walk state of seed 1, 2 .*choose from 0"):
        restore_state(state, tmp_path / "out", seeds=[0, 1, 2])
    assert not (tmp_path / "out").exists()  # nothing written by a refused restore
    assert restore_state(state, tmp_path / "out", CHUNKED) == [0]  # the same budget: a plain restore
    with pytest.raises(ConfigError, match=r"max_steps = 9, not the 15 .*\(restore with the settings"):
        restore_state(state, tmp_path / "out", LONGER)  # then not under another budget

    # Only the seeds asked for (a second exported seed, as a copy of the first).
    shutil.copytree(state / "seed_0", state / "seed_1")
    assert restore_state(state, tmp_path / "one", LONGER, seeds=[1]) == [1]
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["seed_1", "settings.json"]
    # A budget that ended inside a chunk (9 steps in chunks of 4): walked on, its chunks and target
    # checks would fall on other steps than those of a walk given the larger budget from the start.
    unaligned = tmp_path / "unaligned"
    shutil.copytree(state, unaligned)
    (unaligned / "settings.json").write_text(
        json.dumps(to_dict(settings_with({"wlmd": {"report_every": 4}}, CHUNKED)))
    )
    with pytest.raises(ConfigError, match="ended at step 9, inside a 4-step chunk"):
        restore_state(unaligned, tmp_path / "out-2", settings_with({"wlmd": {"report_every": 4}}, LONGER))
    (unaligned / "settings.json").unlink()  # an older export: nothing says what its walks ran with
    with pytest.raises(ConfigError, match="no settings.json: nothing says which settings"):
        restore_state(unaligned, tmp_path / "out-2", LONGER)
    assert not (tmp_path / "out-2").exists()
    script = _script()
    for argv, message in [
        (
            ["--preset", "protocol-4"],
            "ran with p = 7, not 67: only a larger wlmd.max_steps or another wlmd.production_steps",
        ),
        (["--seeds", "0-x"], "--seeds '0-x' is not a seed list"),
        (["--preset", "protocol-9"], "invalid choice: 'protocol-9'"),
    ]:
        with pytest.raises(SystemExit) as info:
            script.main(["restore", str(state), str(tmp_path / "by-script"), *argv])
        assert info.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        script.main(["export", str(straight), str(state), "--seeds", "0"])
    assert (
        info.value.code == 2
        and "--preset, --seeds and --adamw-only are for restore" in capsys.readouterr().err
    )


def test_a_second_export_replaces_the_first_and_restore_keeps_a_local_walk(straight, tmp_path, capsys):
    out = straight
    state = tmp_path / "state"
    export_state(out, state)
    assert _script().main(["export", str(out), str(state)]) == 0  # the script, exporting again
    assert "seed 0: " in capsys.readouterr().out
    assert sorted(p.name for p in state.iterdir()) == ["seed_0", "settings.json"]  # no leftovers
    (state / "seed_0").rename(state / ".seed_0.old")  # an export killed between its two renames
    assert restore_state(state, tmp_path / "fresh") == [0]  # the previous state is found again
    assert sorted(p.name for p in state.iterdir()) == ["seed_0", "settings.json"]
    assert list_checkpoints(seed_folder(state, 0) / "wlmd" / "entropy") == [9]
    assert restore_state(state, out) == []  # the local walk may be newer: left alone
    other = tmp_path / "other"
    other.mkdir()
    (other / "settings.json").write_text("{}")
    with pytest.raises(ConfigError, match="other was measured with p = None, not the 7 it is restored with"):
        restore_state(state, other)


def test_a_walk_started_anew_under_other_dynamics_keeps_the_adamw_models_and_their_rows(
    straight, tmp_path, capsys
):
    """Protocol 6 changes the force at the wall: `--adamw-only` carries each seed's AdamW run
    (not retrained: the same checkpoint, one training session), the walk starts at step 0 under
    the new setting, and the AdamW rows equal the exported protocol's.
    """
    state = tmp_path / "state"
    export_state(straight, state)
    fresh = settings_with({"wlmd": {"wall_force": "fresh"}}, CHUNKED)
    script = _script()
    for argv, message in [
        (["restore", str(state), str(tmp_path / "x"), "--adamw-only"], "--adamw-only needs --preset"),
        (["export", str(straight), str(tmp_path / "y"), "--adamw-only"], "are for restore"),
    ]:
        with pytest.raises(SystemExit) as info:
            script.main(argv)
        assert info.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(ConfigError, match="needs the settings of the new walks"):
        restore_state(state, tmp_path / "out", walks=False)

    out = tmp_path / "out"
    assert restore_state(state, out, fresh, walks=False) == [0]
    assert sorted(p.name for p in seed_folder(out, 0).iterdir()) == ["adamw"]  # no walk carried
    study_b_measure.measure(out, seeds=(0,), settings=fresh)
    adamw = [seed_folder(folder, 0) / "adamw" for folder in (straight, out)]
    assert [len((a / "sessions.jsonl").read_text().splitlines()) for a in adamw] == [1, 1]  # not retrained
    walk = seed_folder(out, 0) / "wlmd"
    assert [r["step"] for r in study_b.walk_records(walk)][0] == 0
    assert load_checkpoint(walk / "entropy").config["wlmd"]["wall_force"] == "fresh"
    rows = [study_b_tables.table(folder) for folder in (straight, out)]
    adamw_rows = [r[r["source"] == "adamw"].drop(columns="source").reset_index(drop=True) for r in rows]
    pd.testing.assert_frame_equal(*adamw_rows)


def test_errors_name_the_folder_and_what_would_do(tmp_path, capsys):
    with pytest.raises(ConfigError, match="no seed_N folders"):
        export_state(tmp_path, tmp_path / "state")
    with pytest.raises(ConfigError, match="no exported walk state"):
        restore_state(tmp_path, tmp_path / "out")
    script = _script()
    for argv, message in [
        (["export", str(tmp_path), str(tmp_path / "state")], "no seed_N folders (give the OUT of"),
        (["restore", str(tmp_path / "missing"), str(tmp_path / "out")], "missing is not a folder"),
    ]:
        with pytest.raises(SystemExit) as info:
            script.main(argv)
        assert info.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert message in error[-1] and "Traceback" not in "".join(error)


def _script():
    spec = importlib.util.spec_from_file_location("study_b_state_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_walk_that_named_its_start_by_absolute_path_still_resumes(straight, tmp_path):
    """Walk folders written before the start was named relative to the walk resume when the
    absolute path is the same checkpoint; one naming another checkpoint is another run.
    """
    import dataclasses

    old = tmp_path / "old"
    shutil.copytree(straight, old)
    walk, adamw = seed_folder(old, 0) / "wlmd", seed_folder(old, 0) / "adamw"
    path = walk / "entropy" / "config.json"  # as the older code wrote it
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "source": str((path.parent / config["source"]).resolve())}))
    shutil.rmtree(walk / "samples")  # production is sampled again from the resumed walk
    settings = dataclasses.replace(CHUNKED.wlmd, seed=0)
    _, samples = study_b.wlmd_sample(walk, adamw, settings)
    expected = sorted((seed_folder(straight, 0) / "wlmd" / "samples" / "checkpoints").glob("step_*"))
    assert [p.name for p in samples] == [p.name for p in expected] and samples
    assert study_b.walk_records(walk) == study_b.walk_records(seed_folder(straight, 0) / "wlmd")
    shutil.rmtree(walk / "samples")
    path.write_text(json.dumps({**config, "source": "/elsewhere/checkpoints/step_000030"}))
    with pytest.raises(ConfigError, match="source"):
        study_b.wlmd_sample(walk, adamw, settings)
