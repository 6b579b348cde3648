"""How a training run computes on the hardware it finds: bf16 autocast, the fused Adam, compilation.

Chosen at run time from what torch and oneDNN report about the machine, never hard-coded:
- a CPU that computes bf16 natively (AVX512-BF16 or AMX, and oneDNN's bf16 kernels available)
  trains under bf16 autocast, with squash and routing kept in float32 (`capsnet.nn.layers`), and
  its convolutions' weights laid out channels-last (`lay_out`), where oneDNN's bf16 convolutions run
  1.7x faster than in the default layout (float32 runs the same in either; `benchmarks/README.md`);
  a CPU without them (AVX2 only) stays in float32, where oneDNN emulates bf16 and a training
  step is about 13x slower (`benchmarks/README.md`);
- on a CPU, Adam's per-parameter updates run as one fused kernel (`Adam(fused=True)`);
- on a CPU, `torch.compile` where the caller says it pays (`cpu_compile`): the EM network's
  routing on the PyTorch path is many small passes over its votes that the compiler fuses,
  1.0-2.6x faster steps after half a minute of compiling, so a run long enough compiles
  (`TrainOptions.acceleration`) where a C++ compiler is found to build the compiled code and the
  EM routing kernel, 2-3x faster again, is not (`Network.cpu_compile_needed`);
  the dynamic-routing CapsNet trains slower compiled on a CPU and stays eager;
- on a CPU with glibc, the process keeps the memory a step frees for the next (`capsnet.memory.keep_freed_memory`):
  glibc otherwise gives each large tensor a fresh mapping whose every page faults when first written, 10,000-30,000
  faults a training step, up to a third of its time on a virtual machine (`benchmarks/README.md`);
- CUDA keeps its path: bf16 autocast, `torch.compile`, and the default (foreach) Adam, which the
  compiler handles.
Every choice can be forced (`--amp`, `--fused-adam`, `--compile` and their `--no-` forms); the
run's log and its args.json say what was chosen and why.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import sys
from dataclasses import asdict, dataclass

import torch
from torch import nn

from capsnet.nn import em_native


@dataclass(frozen=True)
class CpuFeatures:
    """What this CPU offers a training step, as torch and oneDNN report it."""

    capability: str  # torch.backends.cpu.get_cpu_capability(): "AVX512", "AVX2", "DEFAULT", ...
    avx512_bf16: bool  # the AVX512-BF16 dot products
    amx: bool  # Intel AMX tiles (bf16 matrix products)
    onednn_bf16: bool  # oneDNN's bf16 kernels can run here (natively or emulated)
    compiler: bool = True  # a C++ compiler for the code torch.compile writes for a CPU (inductor builds it)
    glibc: bool = False  # the process's malloc is glibc's, whose freed memory can be kept (`Acceleration`)

    @property
    def native_bf16(self) -> bool:
        """bf16 computed in hardware: the case where autocast pays on a CPU."""
        return (self.avx512_bf16 or self.amx) and self.onednn_bf16

    def describe(self) -> str:
        """'AVX2, no native bf16' or 'AVX512 with AVX512-BF16 and AMX'."""
        native = [name for name, has in (("AVX512-BF16", self.avx512_bf16), ("AMX", self.amx)) if has]
        if native:
            return f"{self.capability} with {' and '.join(native)}"
        return f"{self.capability}, no native bf16"


def _probe(name: str) -> bool:
    """A torch.cpu feature probe (`_is_avx512_bf16_supported`, ...); False where this torch lacks it."""
    probe = getattr(torch.cpu, name, None)
    try:
        return bool(probe()) if probe is not None else False
    except RuntimeError:
        return False


@functools.lru_cache(maxsize=1)
def cpu_features() -> CpuFeatures:
    """This machine's CPU features (read once)."""
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = "unknown"
    try:
        onednn_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        onednn_bf16 = False
    return CpuFeatures(
        capability=capability,
        avx512_bf16=_probe("_is_avx512_bf16_supported"),
        amx=_probe("_is_amx_tile_supported"),
        onednn_bf16=onednn_bf16,
        compiler=any(shutil.which(name) for name in (os.environ.get("CXX"), "c++", "g++", "clang++") if name),
        glibc=sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc",
    )


@dataclass(frozen=True)
class Acceleration:
    """The run-time choices of a training run, and why they were made."""

    amp: bool  # bf16 autocast
    fused_adam: bool  # Adam(fused=True)
    compile: bool  # torch.compile
    reason: str  # one sentence: the hardware and what followed from it
    channels_last: bool = False  # the convolutions' weights laid out channels-last (NHWC): `lay_out`
    keep_memory: bool = False  # the memory a step frees kept for the next: `capsnet.memory.keep_freed_memory`
    em_routing: str = ""  # a CPU's EM routing: "kernel" (`capsnet.nn.em_native`) or "pytorch"; "" for the others

    @property
    def precision(self) -> str:
        return "bf16 autocast" if self.amp else "float32"

    def summary(self) -> str:
        """'bf16 autocast, compiled' or 'float32': what sets a run's speed, in a few words."""
        return self.precision + (", compiled" if self.compile else "")

    def describe(self) -> str:
        """'float32, fused Adam (AVX2, no native bf16)'."""
        parts = [self.precision, "fused Adam" if self.fused_adam else "foreach Adam"]
        if self.channels_last:
            parts.append("channels-last convolutions")
        if self.compile:
            parts.append("torch.compile")
        if self.keep_memory:
            parts.append("freed memory kept")
        return f"{', '.join(parts)} ({self.reason})"

    def to_dict(self) -> dict[str, bool | str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Acceleration:
        """A recorded choice (args.json's "acceleration"); ValueError for one that is not."""
        try:
            return cls(**data)  # type: ignore[arg-type]  # the fields as recorded: a wrong set is the TypeError below
        except TypeError as error:
            raise ValueError(f"not a recorded acceleration: {error}") from None


def choose_acceleration(
    device: torch.device,
    amp: bool | None = None,
    fused_adam: bool | None = None,
    compile: bool | None = None,
    features: CpuFeatures | None = None,
    cpu_compile: bool = False,
) -> Acceleration:
    """The choices for `device`: each None is decided from the hardware, a bool is kept as asked.

    `cpu_compile`: compiling pays on a CPU for this run (its network and length: the caller knows them).
    """
    if device.type == "cuda":
        reason = "CUDA"
        auto_amp, auto_fused, auto_compile = True, False, True
    elif device.type == "cpu":
        features = features or cpu_features()
        reason = features.describe()
        auto_amp, auto_fused, auto_compile = features.native_bf16, True, cpu_compile and features.compiler
        if cpu_compile and compile is None:
            reason += (
                "; compiled: this network and run length pay for it"
                if features.compiler
                else "; not compiled: no C++ compiler for torch.compile here (c++, g++, clang++ or $CXX)"
            )
    else:  # Apple MPS and others: as before, plain float32
        reason = device.type.upper()
        auto_amp, auto_fused, auto_compile = False, False, False
    forced = [n for n, v in (("amp", amp), ("fused Adam", fused_adam), ("compile", compile)) if v is not None]
    amp = auto_amp if amp is None else amp
    return Acceleration(
        amp=amp,
        fused_adam=auto_fused if fused_adam is None else fused_adam,
        compile=auto_compile if compile is None else compile,
        reason=f"{reason}; {', '.join(forced)} as asked" if forced else reason,
        channels_last=amp and device.type == "cpu",  # bf16 convolutions on a CPU: faster in NHWC
        keep_memory=device.type == "cpu" and features is not None and features.glibc,
        em_routing=em_native.routing_path() if device.type == "cpu" else "",  # the kernel is a CPU's
    )


def lay_out(model: nn.Module, acceleration: Acceleration) -> nn.Module:
    """`model` with its convolutions' weights laid out channels-last where `acceleration` chose it (in place); a
    convolution's output then keeps that layout, so the next one reads it too. The values are the same."""
    if acceleration.channels_last:
        for module in model.modules():
            if isinstance(module, nn.Conv2d):
                module.to(memory_format=torch.channels_last)
    return model


def make_adam(parameters, lr: float, fused: bool) -> torch.optim.Adam:
    """Adam, fused into one kernel per step when `fused` (the parameters' device must support it)."""
    return torch.optim.Adam(parameters, lr=lr, fused=True) if fused else torch.optim.Adam(parameters, lr=lr)
