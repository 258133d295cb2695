"""Exceptions raised by `interp`, one class per kind of user mistake.

Every error a user can cause by what they pass (a bad value, a damaged file, a mismatched
run) derives from `InterpError`. The CLI turns an `InterpError` into a one-line message and
exit code 2; anything else is a bug or a runtime failure (exit code 1). Each class names the
docs page that explains it (`docs/errors.md#<anchor>`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InterpError(Exception):
    """Base class for errors caused by the user's input, not by a bug.

    Args:
        message: What is wrong, naming the offending value.
        hint: What would be valid or what to do next; appended to the message.
    """

    anchor = "interperror"

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message} ({hint})")


class ConfigError(InterpError, ValueError):
    """A configuration value is out of range, of the wrong type, or unknown."""

    anchor = "configerror"


class CheckpointError(InterpError):
    """A run or checkpoint folder is missing, damaged, or does not match its config."""

    anchor = "checkpointerror"


class RunBusyError(CheckpointError):
    """Another live process holds the run folder's lock (it is training that run now).

    A sweep skips such a run and picks it up once the lock is free (`interp.sweep.run_sweep`).
    """

    anchor = "runbusyerror"


class FormatVersionError(CheckpointError):
    """A file was written by a newer `interp` than the one reading it."""

    anchor = "formatversionerror"


class HookError(InterpError):
    """A hook names no hook point of the model, or was registered but never fired.

    Raised by `interp.dissect.hooks.checked_hooks` so that a patch or ablation that did not
    happen can never be reported as "no effect".
    """

    anchor = "hookerror"


class PluginError(ConfigError):
    """A plugin (a package's ``interp.tasks``, ``interp.presets`` or ``interp.analyses`` entry
    point, or a name given to `register_task` / `register_analysis`) cannot be used: it fails to
    import, it is not what its group holds, its name clashes with a built-in, or a run needs a
    plugin that is not installed (the message names the package to install).
    """

    anchor = "pluginerror"


class TrainingInterrupted(Exception):
    """Training stopped on a signal after saving a checkpoint; run the same command to resume.

    Not an `InterpError`: nothing was wrong with the input. The CLI exits with 128 + signum
    (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
    """

    resume = "run the same command (or interp train --resume) to continue"

    def __init__(
        self, signum: int, step: int, run_dir: object, unit: str = "epoch", resume: str | None = None
    ) -> None:
        import signal

        self.signum, self.step, self.run_dir = signum, step, run_dir
        if resume is not None:  # how to continue, when it is not `interp train`'s way
            self.resume = resume
        super().__init__(
            f"stopped by {signal.Signals(signum).name} at {unit} {step}; checkpoint saved in {run_dir}"
        )


class RunsInterrupted(TrainingInterrupted):
    """Several runs (a sweep's, or `interp train --seeds`) stopped on a signal: each run in
    training saved a checkpoint at its next epoch boundary, and every worker process exited.

    The CLI exits with 128 + signum, as for one run; the same command resumes them.
    """

    resume = "run the same command to continue"

    def __init__(self, signum: int, stopped: int, not_started: int) -> None:
        import signal

        self.signum, self.step, self.run_dir = signum, None, None
        self.stopped, self.not_started = stopped, not_started
        Exception.__init__(
            self,
            f"stopped by {signal.Signals(signum).name}: {stopped} running "
            f"{'run' if stopped == 1 else 'runs'} saved a checkpoint and stopped, "
            f"{not_started} not started",
        )


class RunsFailed(Exception):
    """Runs of a sweep failed (a run raised, or its worker process died), one line each.

    Not an `InterpError`: the input was valid. The CLI prints ``error: LINE`` per line and
    exits 1. The other runs went on; the same command resumes each failed run from its last
    checkpoint.
    """


class TrainingDiverged(Exception):
    """Runs diverged (a weight or loss became NaN or inf); each stopped at that evaluation.

    Not an `InterpError`: the input was valid. The CLI prints one line per run and exits 1; the
    runs are finished (their `DONE` records ``diverged``), LATEST keeps the last finite state.
    """


def divergence_line(run_dir: object, diverged: dict) -> str:
    """One line saying where a run diverged (from its summary's ``diverged`` entry)."""
    ckpt = diverged.get("checkpoint")
    kept = f"LATEST is its last finite checkpoint, step {ckpt}" if ckpt is not None else "no checkpoint kept"
    return (
        f"{run_dir} diverged at epoch {diverged['step']}: {diverged['tensor']} is {diverged['value']} "
        f"(not saved; {kept})"
    )


class Note(UserWarning):
    """Something the user should know that is not an error (a skipped torn log line, a thread
    count that differs from the run's). Library code never prints: it warns with this category,
    and the CLI prints each as one ``note:`` line.
    """


def note(message: str) -> None:
    """Tell the user `message` (a `Note` warning; the CLI prints ``note: message``)."""
    import warnings

    warnings.warn(message, Note, stacklevel=2)


def did_you_mean(value: str, valid: Iterable[str]) -> str:
    """Format the valid choices for an error message, with a close match first if any.

    Args:
        value: The value the user gave.
        valid: The accepted values.

    Returns:
        A string such as ``"did you mean 'adv'? valid: adv, train, val"``.
    """
    valid = sorted(valid)
    close = difflib.get_close_matches(value, valid, n=1)
    listing = "valid: " + ", ".join(valid)
    return f"did you mean {close[0]!r}? {listing}" if close else listing
