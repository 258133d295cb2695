"""A run opened for reading: its config read once, its checkpoints, its analysis results.

Every reader of a run (`analyses.subject.load_subject`, `analyses.subject.subject_series`,
`analyses.evolution.evolve`, the CLI's analysis commands, `models.build.load_model`) opens the
run folder or checkpoint folder it is given once, as a `RunHandle`, and asks it what it needs::

    run = RunHandle.open("runs/mpsp")          # or runs/mpsp/checkpoints/step_000100
    run.config                                 # config.json, read on first use, then kept
    run.steps                                  # [0, 1, 2, 5, ..., 15000]
    run.select_steps("100-300")                # the checkpoints from step 100 to 300
    run.checkpoint_path(100)                   # runs/mpsp/checkpoints/step_000100
    run.checkpoint_path()                      # the opened checkpoint, or the run's LATEST
    run.load_checkpoint(100)                   # a verified `Checkpoint` (imports torch)
    run.result_folder("patch", 100)            # runs/mpsp/analyses/patch/step_000100
    run.writable                               # False for a read-only run

Opening reads no file; nothing here imports torch until a checkpoint's tensors are loaded, so
the CLI opens the run while it checks its arguments and hands the same handle on (its
config is then read once per command, whatever the number of checkpoints).

The split digests a checkpoint stores (under `DIGESTS_KEY`) are checked against the data
rebuilt now by one function, `check_digests`, which both resuming a run
(`interp.store.session.RunSession.resume`) and loading an analysis subject use.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.errors import CheckpointError, ConfigError, note
from interp.store.layout import (
    CONFIG_FILE,
    checkpoint_dir,
    checkpoint_name,
    is_checkpoint_folder,
    list_checkpoints,
    resolve_checkpoint,
    run_of,
)
from interp.store.run_folder import ANALYSES_DIR, read_config, read_metrics

if TYPE_CHECKING:
    from interp.store.checkpoint import Checkpoint

DIGESTS_KEY = "fingerprints"
"""The checkpoint meta key of the split digests (``{split name: digest}``; on-disk format, so
the name stays although "fingerprint" is also an analysis's name)."""


class RunHandle:
    """A run folder opened for reading (see the module docstring).

    Attributes:
        run_dir: The run folder.
        opened: The checkpoint folder that was opened, or None when a run folder was (then
            `checkpoint_path()` means the run's LATEST).
    """

    def __init__(self, run_dir: Path, opened: Path | None = None) -> None:
        self.run_dir = run_dir
        self.opened = opened
        self._config: dict[str, Any] | None = None

    @classmethod
    def open(cls, path: str | os.PathLike[str] | RunHandle) -> RunHandle:
        """Open a run folder, or a checkpoint folder (of the run around it); a handle is returned as is.

        Raises:
            CheckpointError: If `path` does not exist or is neither kind of folder.
        """
        if isinstance(path, RunHandle):
            return path
        path = Path(path)
        if is_checkpoint_folder(path):
            return cls(run_of(path), path)
        return cls(path)

    def __repr__(self) -> str:
        return f"RunHandle({str(self.opened or self.run_dir)!r})"

    @property
    def config(self) -> dict[str, Any]:
        """The run's config.json (with format_version, versions and git_sha), read once.

        Raises:
            CheckpointError: If it is missing or damaged.
            FormatVersionError: If a newer `interp` wrote it.
        """
        if self._config is None:
            self._config = read_config(self.run_dir)
        return self._config

    @property
    def config_path(self) -> Path:
        """Where the config was read from (for messages about its values)."""
        return self.run_dir / CONFIG_FILE

    @property
    def steps(self) -> list[int]:
        """The steps of the run's complete checkpoints, ascending."""
        return list_checkpoints(self.run_dir)

    def select_steps(self, which: str | Iterable[int] | None = None) -> list[int]:
        """The checkpoint steps `which` names, ascending; None: every checkpoint.

        Args:
            which: Steps, each of which must have a checkpoint; or text as ``interp evolve
                --checkpoints`` takes it: ``"100-300"`` (every checkpoint in that range,
                ends included), ``"100,250,300"`` (those exact steps) or both, e.g.
                ``"0,100-300,1500"``.

        Raises:
            CheckpointError: If an exact step has no checkpoint (naming the run's steps), or a
                range holds none.
            ConfigError: If the text is not a list of steps and ranges.
        """
        steps = self.steps
        if which is None:
            return steps
        exact, ranges = _parse_steps(which) if isinstance(which, str) else ([int(s) for s in which], [])
        missing = next((step for step in exact if step not in steps), None)
        if missing is not None:
            raise _no_checkpoint(self.run_dir, missing, steps)
        chosen = set(exact)
        for lo, hi in ranges:
            inside = [step for step in steps if lo <= step <= hi]
            if not inside:
                raise CheckpointError(
                    f"{self.run_dir} has no checkpoint in steps {lo}-{hi}",
                    f"its checkpoints run from step {steps[0]} to {steps[-1]}"
                    if steps
                    else "it has none yet",
                )
            chosen.update(inside)
        return sorted(chosen)

    @property
    def writable(self) -> bool:
        """Whether this process can write into the run folder (a read-only run is only read)."""
        return writable(self.run_dir)

    def checkpoint_path(self, step: int | None = None) -> Path:
        """The checkpoint folder of `step`; None: the opened checkpoint, else the run's LATEST.

        Raises:
            CheckpointError: If `step` has no checkpoint folder (naming the run's steps), or
                the run's LATEST is missing or damaged.
        """
        if step is None:
            return self.opened if self.opened is not None else resolve_checkpoint(self.run_dir)
        path = checkpoint_dir(self.run_dir, step)
        if not path.is_dir():  # an incomplete one is refused by its manifest's check, with a hint
            raise _no_checkpoint(self.run_dir, step, self.steps)
        return path

    @property
    def latest(self) -> Path:
        """The checkpoint folder the run's LATEST file names.

        Raises:
            CheckpointError: If the run has no LATEST or it is damaged.
        """
        return resolve_checkpoint(self.run_dir)

    def load_checkpoint(
        self, step: int | None = None, *, load_train_state: bool = False, allow_nonfinite: bool = False
    ) -> Checkpoint:
        """Load and verify the checkpoint of `step` (None: see `checkpoint_path`), with this run's config.

        See `interp.store.checkpoint.load_checkpoint` for the checks and the errors.
        """
        from interp.store.checkpoint import read_checkpoint

        return read_checkpoint(
            self.checkpoint_path(step),
            self.run_dir,
            self.config,
            load_train_state=load_train_state,
            allow_nonfinite=allow_nonfinite,
        )

    def result_folder(
        self, analysis: str, step: int, cache: str | os.PathLike[str] | None = None, settings: str = ""
    ) -> Path:
        """Where the result of `analysis` at `step` lives: ``RUN/analyses/NAME/step_N``, or
        ``RUN/analyses/NAME/SETTINGS/step_N`` for other settings than the analysis's defaults.

        Args:
            analysis: The analysis name.
            step: The checkpoint's step.
            cache: A folder that replaces ``RUN/analyses`` (a cache outside a read-only run).
            settings: The folder of the settings (`analyses.evolution.settings_folder`); empty:
                the defaults'.
        """
        root = Path(cache) if cache is not None else self.run_dir / ANALYSES_DIR
        folder = root / analysis / settings if settings else root / analysis
        return folder / checkpoint_name(step)

    def metrics(self) -> list[dict[str, Any]]:
        """Every complete record of the run's metrics.jsonl, in order."""
        return read_metrics(self.run_dir)


def _parse_steps(text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """``"0,100-300"`` -> exact steps ``[0]`` and ranges ``[(100, 300)]``.

    Raises:
        ConfigError: If a part is neither a step nor a range of steps.
    """
    exact: list[int] = []
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            if dash:
                ranges.append((int(lo), int(hi)))
            else:
                exact.append(int(lo))
        except ValueError:
            raise ConfigError(
                f"checkpoints {text!r} is not a list of steps and ranges", "use e.g. 100-300 or 0,100,1500"
            ) from None
    return exact, ranges


def _no_checkpoint(run_dir: Path, step: int, steps: list[int]) -> CheckpointError:
    """The error for a step without a checkpoint, naming the checkpoints around it."""
    if not steps:
        hint = "the run has no checkpoint yet"
    else:
        below = [s for s in steps if s < step][-1:]
        above = [s for s in steps if s > step][:1]
        near = " and ".join(str(s) for s in below + above)
        hint = f"the nearest checkpoints are at steps {near}, of {len(steps)} from step {steps[0]} to {steps[-1]}"
    return CheckpointError(f"{run_dir} has no checkpoint of step {step}", hint)


def read_run(path: str | os.PathLike[str] | RunHandle) -> RunHandle:
    """`RunHandle.open`: a run or checkpoint folder opened for reading (a handle is passed through)."""
    return RunHandle.open(path)


def writable(folder: str | os.PathLike[str]) -> bool:
    """Whether `folder`, or if it does not exist yet its nearest existing parent, can be written."""
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return os.access(folder, os.W_OK)


def check_digests(
    stored: Mapping[str, str],
    rebuilt: Mapping[str, str],
    where: str | os.PathLike[str],
    *,
    force: bool = False,
    hint: str = "analyse the run's own data, or pass force_data=True (CLI: --force-data)",
) -> None:
    """Refuse data whose split digests differ from those checkpoint `where` stored.

    Args:
        stored: ``{split name: digest}`` the checkpoint stored (`DIGESTS_KEY` of its meta).
        rebuilt: The same for the data built now (`interp.splits.split_digests`).
        where: The checkpoint, named in the message.
        force: Only note the difference (`interp.errors.note`) instead of refusing.
        hint: What to do instead, for the error.

    Raises:
        CheckpointError: Naming the split and both digests (or both sets of split names), unless `force`.
    """
    if set(stored) != set(rebuilt):
        message = f"{where} was trained on splits {sorted(stored)}, but the task now builds {sorted(rebuilt)}"
        _refuse(message, hint, force)
    for name in sorted(set(stored) & set(rebuilt)):
        check_digest(name, rebuilt[name], stored[name], where, force=force, hint=hint)


def check_digest(
    name: str,
    found: str,
    stored: str,
    where: str | os.PathLike[str] | None,
    *,
    force: bool = False,
    hint: str = "analyse the run's own data, or pass force_data=True (CLI: --force-data)",
) -> None:
    """Refuse (or with `force`, note) split `name` whose digest `found` differs from the `stored` one.

    Raises:
        CheckpointError: Naming the split, both digests and the checkpoint, unless `force`.
    """
    if found == stored:
        return
    message = (
        f"split {name!r} has digest {found}, but {where or 'the checkpoint'} was trained on split {name!r} "
        f"with digest {stored}: the data differ (the task code, data seed or config changed)"
    )
    _refuse(message, hint, force)


def _refuse(message: str, hint: str, force: bool) -> None:
    if not force:
        raise CheckpointError(message, hint)
    note(message + "; analysed anyway (forced)")
