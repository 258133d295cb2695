"""bf16 where the CPU has no bf16 arithmetic (`interp.training.precision`, issue 51): the
detection from its evidence, and every bf16 path (the engines, `interp train`) with the
detection mocked both ways.
"""

from __future__ import annotations

import pytest

from interp.cli import main
from interp.errors import ConfigError
from interp.store.run_folder import is_done, read_config
from interp.training import TrainConfig, precision, train, train_vectorized
from interp.training.finetuning import finetune
from models import build_model, preset_config
from tasks import MPSPTask

TINY = MPSPTask(vocab=10, n=4, n_train=64, n_val=16, n_adv=16)


def _support(native: bool) -> precision.Bf16Support:
    return precision.Bf16Support(native, "AVX512-BF16" if native else "none", native, "AVX2")


@pytest.fixture
def bf16_cpu(monkeypatch):
    """Set whether this CPU computes bf16 natively: ``bf16_cpu(True)`` or ``bf16_cpu(False)``."""

    def set_native(native: bool) -> None:
        monkeypatch.setattr(precision, "cpu_bf16", lambda: _support(native))

    return set_native


@pytest.fixture
def detect(monkeypatch):
    """`cpu_bf16` run afresh on the given cpuinfo flags and oneDNN answer (no `INTERP_BF16`)."""
    monkeypatch.delenv(precision.ENV, raising=False)

    def run(flags: str, onednn: bool | None, arm: bool = False) -> precision.Bf16Support:
        monkeypatch.setattr(precision, "_cpu_flags", lambda: (set(flags.split()), arm))
        monkeypatch.setattr(precision, "_onednn_bf16", lambda: onednn)
        precision.cpu_bf16.cache_clear()
        try:
            return precision.cpu_bf16()
        finally:
            precision.cpu_bf16.cache_clear()  # the next caller detects the real CPU

    return run


def test_bf16_is_native_with_bf16_hardware_that_onednn_uses(detect):
    amx = detect("fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile", True)
    assert (amx.native, amx.path) == (True, "AMX")
    zen4 = detect("fpu avx2 avx512f avx512_bf16", True)
    assert (zen4.native, zen4.path) == (True, "AVX512-BF16")
    assert detect("fp asimd sve bf16", None, arm=True).native  # torch does not say on Arm
    # Without the hardware (an AVX2 or a plain AVX-512 CPU), or with oneDNN held below it
    # (ONEDNN_MAX_CPU_ISA=AVX2), bf16 is emulated.
    assert not detect("fpu avx2 fma", True).native
    assert not detect("fpu avx2 avx512f avx512bw", True).native
    assert not detect("fpu avx2 avx512f avx512_bf16", False).native
    assert not detect("fp asimd sve", None, arm=True).native
    assert not detect("", None).native  # no /proc/cpuinfo: not proven native
    line = detect("fpu avx2 fma", True).describe()
    assert line.startswith("bf16 is not native on this CPU (bf16 hardware: none;") and "torch: " in line


def test_interp_bf16_overrides_the_detection_and_a_bad_value_is_refused(detect, monkeypatch):
    monkeypatch.setenv(precision.ENV, "1")
    precision.cpu_bf16.cache_clear()
    try:
        assert precision.cpu_bf16().native and precision.cpu_bf16().forced == "1"
        monkeypatch.setenv(precision.ENV, "0")
        precision.cpu_bf16.cache_clear()
        assert not precision.cpu_bf16().native
        assert precision.cpu_bf16().describe().startswith("INTERP_BF16=0 says bf16 is not native here (")
        monkeypatch.setenv(precision.ENV, "yes")
        precision.cpu_bf16.cache_clear()
        with pytest.raises(ConfigError, match="INTERP_BF16='yes' is not 0 or 1"):
            precision.cpu_bf16()
    finally:
        monkeypatch.delenv(precision.ENV)
        precision.cpu_bf16.cache_clear()


def test_the_detection_is_cached(monkeypatch):
    precision.cpu_bf16.cache_clear()
    first = precision.cpu_bf16()
    monkeypatch.setattr(precision, "_cpu_flags", lambda: pytest.fail("detected twice"))
    assert precision.cpu_bf16() is first
    precision.cpu_bf16.cache_clear()


def test_a_gpu_decides_for_itself(bf16_cpu):
    bf16_cpu(False)
    assert not precision.bf16_native("cpu") and precision.bf16_native("cuda:0")
    precision.check_bf16(True, "cuda")  # no refusal
    precision.check_bf16(False, "cpu")  # fp32: nothing to refuse


def _model():
    return build_model(preset_config("mpsp-1l1h", TINY), seed=0)


def _config(**fields):
    return TrainConfig(
        **{"epochs": 2, "eval_every": 1, "eval_log_points": 0, "checkpoint_log_points": 0, **fields}
    )


def test_the_engines_refuse_bf16_without_native_bf16_before_creating_a_folder(tmp_path, bf16_cpu):
    bf16_cpu(False)
    message = (
        r"TrainConfig.bf16: bf16 is not native on this CPU .* \(train in fp32 \(bf16 false\), or set INTERP"
    )
    with pytest.raises(ConfigError, match=message):
        train(tmp_path / "a", _model(), TINY, _config(bf16=True), progress=False)
    with pytest.raises(ConfigError, match=message):
        train_vectorized(
            [tmp_path / "v0", tmp_path / "v1"], [_model(), _model()], TINY, [_config(bf16=True)] * 2
        )
    with pytest.raises(ConfigError, match=message):
        finetune(tmp_path / "f", _model(), TINY, _config(bf16=True, target_acc=0.5))
    assert not list(tmp_path.iterdir())
    train(tmp_path / "fp32", _model(), TINY, _config(), progress=False)  # fp32 trains as ever
    assert is_done(tmp_path / "fp32")


def test_a_finished_bf16_run_is_read_on_any_cpu_and_a_native_cpu_trains_bf16(tmp_path, bf16_cpu):
    bf16_cpu(True)
    done = train(tmp_path / "a", _model(), TINY, _config(bf16=True), progress=False)
    assert read_config(tmp_path / "a")["train"]["bf16"] is True
    bf16_cpu(False)
    assert train(tmp_path / "a", _model(), TINY, _config(bf16=True), progress=False) == done


def _cli(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


CLI_TINY = ["--preset", "mpsp-1l1h", "--vocab", "10", "--n", "4", "--n-train", "64", "--n-val", "16"]
CLI_TINY += ["--n-adv", "16", "--epochs", "2", "--eval-every", "1", "--no-progress"]


def test_interp_train_bf16_refuses_in_one_line_naming_the_fp32_fallback(tmp_path, capsys, bf16_cpu):
    bf16_cpu(False)
    code, out, err = _cli(capsys, "train", *CLI_TINY, "--bf16", "--out", str(tmp_path / "a"))
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("error: --bf16: bf16 is not native on this CPU (bf16 hardware: none;")
    assert "drop --bf16, or add --bf16-fallback fp32 to train in fp32, or set INTERP_BF16=1" in err
    assert not (tmp_path / "a").exists()
    # --seeds: refused before the sweep file is written
    code, _, err = _cli(capsys, "train", *CLI_TINY, "--bf16", "--seeds", "0-1", "--out", str(tmp_path / "s"))
    assert code == 2 and "--bf16-fallback fp32" in err and not (tmp_path / "s").exists()


def test_interp_train_bf16_fallback_fp32_trains_in_fp32_and_records_it(tmp_path, capsys, bf16_cpu):
    bf16_cpu(False)
    args = ["train", *CLI_TINY, "--bf16", "--bf16-fallback", "fp32", "--out", str(tmp_path / "a")]
    code, _, err = _cli(capsys, *args)
    assert code == 0
    assert err.splitlines() == [
        "note: bf16 is not native on this CPU (bf16 hardware: none; oneDNN bf16: no; torch: AVX2): "
        "training in fp32 (--bf16-fallback fp32; recorded as bf16 false)"
    ]
    assert read_config(tmp_path / "a")["train"]["bf16"] is False and is_done(tmp_path / "a")
    # the run folder is an ordinary fp32 run: the same command, or --resume, finds it done
    assert _cli(capsys, *args)[0] == 0 and _cli(capsys, "train", "--resume", str(tmp_path / "a"))[0] == 0


def test_interp_train_bf16_on_a_native_cpu_trains_bf16_whatever_the_fallback(tmp_path, capsys, bf16_cpu):
    bf16_cpu(True)
    args = ["train", *CLI_TINY, "--bf16", "--bf16-fallback", "fp32"]
    code, _, err = _cli(capsys, *args, "--out", str(tmp_path / "a"))
    assert code == 0 and err == "" and read_config(tmp_path / "a")["train"]["bf16"] is True


def test_an_unfinished_bf16_run_resumes_only_where_bf16_is_native(tmp_path, capsys, bf16_cpu):
    bf16_cpu(True)
    run = tmp_path / "a"
    assert _cli(capsys, "train", *CLI_TINY, "--bf16", "--out", str(run))[0] == 0
    (run / "DONE").unlink()  # as if it had been stopped
    bf16_cpu(False)
    code, _, err = _cli(capsys, "train", "--resume", str(run), "--bf16-fallback", "fp32")
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"error: {run} trains in bf16: bf16 is not native on this CPU")
    assert "(resume it on a CPU with native bf16, or set INTERP_BF16=1 to run bf16 anyway)" in err
    bf16_cpu(True)
    assert _cli(capsys, "train", "--resume", str(run))[0] == 0 and is_done(run)
