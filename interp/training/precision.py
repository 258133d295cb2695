"""Whether this CPU computes bfloat16 natively, and what a bf16 run does where it does not.

`TrainConfig.bf16` runs the training forward under bfloat16 autocast. That pays only where the
CPU multiplies bf16 in hardware: AMX (Intel Sapphire Rapids and later) or AVX512-BF16 (Intel
Cooper Lake, AMD Zen 4 and later). Elsewhere the products are emulated: on an AVX2 machine a
bf16 matmul ran at 1.4-1.9 GFLOP/s on one thread against 29-32 GFLOP/s in fp32 (issue 51), so
a bf16 run trains about 20x slower than the fp32 run it was meant to beat. The engines
therefore refuse a bf16 run on such a CPU (`check_bf16`, before any run folder is created) and
`interp train --bf16-fallback fp32` trains it in fp32 instead.

The detection (`cpu_bf16`) needs both: the CPU's flags (``amx_bf16`` or ``avx512_bf16`` in
/proc/cpuinfo; ``bf16`` in an Arm CPU's features) and the answer of oneDNN, which runs torch's
bf16 matmuls on a CPU (``torch.ops.mkldnn._is_mkldnn_bf16_supported``). oneDNN says no where
it is held below AVX-512 (``ONEDNN_MAX_CPU_ISA=AVX2``: how to reproduce an AVX2 machine's bf16
on a newer one), and torch then multiplies bf16 with a slow kernel of its own.
``INTERP_BF16=1`` (or ``0``) overrides it: to run bf16 anyway, slowly (to reproduce a bf16 run
on a CPU without it), or to behave as on such a CPU. `torch.backends.cpu.get_cpu_capability`
is reported with the answer but does not decide it: it sets torch's own vectorised kernels
(``ATEN_CPU_CAPABILITY=avx2`` lowers it), not oneDNN's matmuls.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from interp.errors import ConfigError

ENV = "INTERP_BF16"
"""The environment variable that overrides `cpu_bf16`: ``1`` native, ``0`` not."""

BF16_FALLBACKS = ("refuse", "fp32")
"""What a bf16 run does on a CPU without native bf16 (``interp train --bf16-fallback``)."""


@dataclass(frozen=True)
class Bf16Support:
    """Whether this CPU computes bf16 natively, with the evidence.

    Attributes:
        native: bf16 matmuls run in hardware (the decision; `ENV` may have set it).
        path: ``"AMX"``, ``"AVX512-BF16"``, ``"Arm BF16"`` or ``"none"`` (from the CPU's flags).
        onednn: oneDNN's answer (None where torch does not say).
        capability: `torch.backends.cpu.get_cpu_capability()`, e.g. ``"AVX2"``, ``"AVX512"``.
        forced: The value of `ENV` when it decided, else None.
    """

    native: bool
    path: str
    onednn: bool | None
    capability: str
    forced: str | None = None

    def describe(self) -> str:
        """One clause saying whether bf16 is native here and why, for messages and benchmarks."""
        onednn = {True: "yes", False: "no", None: "n/a"}[self.onednn]
        evidence = f"bf16 hardware: {self.path}; oneDNN bf16: {onednn}; torch: {self.capability}"
        if self.forced is not None:
            return f"{ENV}={self.forced} says bf16 is {'' if self.native else 'not '}native here ({evidence})"
        return f"bf16 is {'' if self.native else 'not '}native on this CPU ({evidence})"


def _cpu_flags() -> tuple[set[str], bool]:
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read) and whether
    they are an Arm CPU's ``Features`` line.
    """
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set(), False
    match = re.search(r"^(flags|Features)\s*:(.*)$", text, re.MULTILINE)
    if match is None:
        return set(), False
    return set(match.group(2).split()), match.group(1) == "Features"


def _onednn_bf16() -> bool | None:
    import torch

    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return None if check is None else bool(check())
    except RuntimeError:  # a build without oneDNN
        return None


@functools.cache
def cpu_bf16() -> Bf16Support:
    """Whether this CPU computes bf16 natively (cached: the answer does not change in a process).

    Returns:
        The answer and its evidence (module docstring: what decides it).

    Raises:
        ConfigError: If `ENV` is set to something other than ``0`` or ``1``.
    """
    import torch

    flags, arm = _cpu_flags()
    if arm:
        path = "Arm BF16" if "bf16" in flags else "none"
    else:
        path = "AMX" if "amx_bf16" in flags else "AVX512-BF16" if "avx512_bf16" in flags else "none"
    onednn = _onednn_bf16()
    capability = torch.backends.cpu.get_cpu_capability()
    forced = os.environ.get(ENV)
    if forced is not None:
        if forced not in ("0", "1"):
            raise ConfigError(
                f"{ENV}={forced!r} is not 0 or 1", "unset it to detect the CPU's bf16, or use 0 or 1"
            )
        return Bf16Support(forced == "1", path, onednn, capability, forced)
    return Bf16Support(path != "none" and onednn is not False, path, onednn, capability)


def bf16_native(device: str = "cpu") -> bool:
    """Whether bf16 autocast pays on `device`: `cpu_bf16` on a CPU; always True elsewhere (a GPU's
    autocast is torch's to decide).
    """
    import torch

    return torch.device(device).type != "cpu" or cpu_bf16().native


def check_bf16(
    bf16: bool,
    device: str = "cpu",
    *,
    where: str = "TrainConfig.bf16",
    instead: str = "train in fp32 (bf16 false)",
) -> None:
    """Refuse a bf16 run on a CPU that has no native bf16 (far slower than fp32 there).

    Args:
        bf16: Whether the run asks for bf16 (`TrainConfig.bf16`).
        device: Where it trains.
        where: What asked for it, named first in the message (e.g. ``"--bf16"``, a run folder).
        instead: The way on in fp32 that the message offers.

    Raises:
        ConfigError: One line naming the evidence, `instead` and `ENV`.
    """
    if bf16 and not bf16_native(device):
        raise ConfigError(
            f"{where}: {cpu_bf16().describe()}; without it a bf16 run trains far slower than in "
            "fp32, about 20x on an AVX2 CPU",
            f"{instead}, or set {ENV}=1 to run bf16 anyway",
        )
