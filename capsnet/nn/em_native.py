"""EM routing on a CPU in compiled code: `em_kernel.c`'s passes as typed PyTorch operators (`em_kernel.cpp`), built
once for this machine by `torch.utils.cpp_extension` and kept in the cache.

Hinton, Sabour & Frosst (2018), "Matrix capsules with EM routing", ICLR. https://openreview.net/forum?id=HJWLfGWRb

The PyTorch path (`capsnet.nn.em_routing`) writes every vote and [V - c, (V - c)^2] to memory and reads them back in
each M-step and E-step; the kernel remakes a child's votes from its pose and W where a step needs them and does the
E-step of one iteration and the M-step of the next in one pass, so a reading of the paper's network runs several
times faster (`benchmarks/README.md`) in the same float32 arithmetic (the tests hold both to each other). This module
builds and loads the kernel and runs a reading (`route`); training takes its passes in `em_native_training`; a
trace (the dashboard's step-by-step views, which show every vote) keeps the PyTorch path.

The build is `torch.utils.cpp_extension.load` (ninja, the C++ compiler `$CXX` or c++, torch's headers, and its lock
between processes, one a killed build releases) for the CPU it runs on (`-march=native`, else plain optimised code:
FLAG_SETS), in a process of its own that is stopped past BUILD_SECONDS, into `$CAPSNET_CACHE_DIR/native/<name>/`
(default ~/.cache/capsnet; a private folder of the process's where there is no cache), the name a hash of the
sources, the flags, the compiler, the CPU and torch. The operators check their arguments and split a batch's images
over torch's own threads (`at::parallel_for`). The first build says so: a line on stderr, and whatever
`show_builds_with` was given (the dashboard's spinner). Where no compiler works, or `CAPSNET_NATIVE=0` is
set, `kernel()` is None and every layer routes with PyTorch: slower, never different.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from capsnet.files import cache_dir

SOURCES = (Path(__file__).with_name("em_kernel.cpp"), Path(__file__).with_name("em_kernel.c"))
NATIVE_ENV = "CAPSNET_NATIVE"  # "0" routes every reading with PyTorch (as where no compiler is found)
COMPILER_ENV = "CXX"  # the C++ compiler cpp_extension builds with
# the flags tried in turn: the machine's own instructions first, then plain optimised code; each build with OPENMP
FLAG_SETS = (
    ("-O3", "-march=native", "-mprefer-vector-width=512", "-fno-math-errno", "-fno-trapping-math"),
    ("-O3", "-fno-math-errno", "-fno-trapping-math"),
)
# at::parallel_for is OpenMP in torch's headers: torch's Linux wheels run on the libgomp they bundle, which the
# kernel's library then binds to (its threads the ones torch's operations run on)
OPENMP = ("-fopenmp",)
BUILD_SECONDS = 300  # a build past this is stopped (a compiler that hangs): PyTorch routes
ABOUT_SECONDS = 20  # a first build's time on a 2-core machine, as the announcement says
BUILT = "built"  # written in a build's folder once its library loaded in the build's own process
BUILD = r"""
import json, sys
from torch.utils.cpp_extension import load
name, source, folder, flags, links = json.loads(sys.argv[1])
load(name, [source], extra_cflags=flags, extra_ldflags=links, build_directory=folder, is_python_module=False)
"""


def enabled() -> bool:
    """Whether readings may use the kernel: unless $CAPSNET_NATIVE is "0"."""
    return os.environ.get(NATIVE_ENV, "1").strip() != "0"


def _said(message: str) -> None:
    """One line on stderr where the kernel cannot be had: every reading then routes with PyTorch."""
    print(f"capsnet: {message}: EM routing runs with PyTorch", file=sys.stderr)


def note() -> str:
    """What a first build says while it runs."""
    return f"building the EM routing kernel (once per machine, about {ABOUT_SECONDS} s)..."


_SHOWN: list[Callable[[str], AbstractContextManager[Any]]] = []
_ANNOUNCED: list[bool] = []


def show_builds_with(show: Callable[[str], AbstractContextManager[Any]]) -> None:
    """Show a build with `show(note())` around it too (the dashboard's spinner), besides its line on stderr."""
    _SHOWN[:] = [show]


def _compiler() -> list[str] | None:
    """The C++ compiler to build with, as a command: $CXX (which may carry words of its own, "ccache g++"), else the
    first of c++, g++ and clang++ on the PATH; None (said) where there is none."""
    try:
        named = shlex.split(os.environ.get(COMPILER_ENV, ""))
    except ValueError as error:  # an unbalanced quote
        _said(f"${COMPILER_ENV} is not a command ({error})")
        return None
    if named:
        found = shutil.which(named[0])
        if found is None:
            _said(f"no C++ compiler ${COMPILER_ENV}={named[0]}")
        return None if found is None else [found, *named[1:]]
    found = next((found for name in ("c++", "g++", "clang++") if (found := shutil.which(name))), None)
    if found is None:
        _said("no C++ compiler (c++, g++, clang++ or $CXX)")
    return None if found is None else [found]


def _ninja() -> str | None:
    """The folder of the ninja cpp_extension builds with: the `ninja` package's, else the PATH's."""
    try:
        import ninja

        return str(ninja.BIN_DIR)
    except ImportError:
        found = shutil.which("ninja")
        return None if found is None else str(Path(found).parent)


def _cpu() -> str:
    """What the build depends on in this CPU: its model and instruction sets (/proc/cpuinfo where there is one)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.machine() + platform.processor()
    lines = [line for line in text.splitlines() if line.startswith(("model name", "flags", "Features"))]
    return platform.machine() + "\n".join(sorted(set(lines)))


def _version(compiler: list[str]) -> str:
    try:
        return subprocess.run(
            [*compiler, "--version"], capture_output=True, text=True, timeout=min(30, BUILD_SECONDS)
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


class Kernel:
    """The loaded kernel: its operators (`ops.route`, `ops.moments`, ...: em_kernel.cpp) and the block it pads the
    parent types to."""

    def __init__(self, name: str, library: Path):
        torch.ops.load_library(str(library))
        self.name, self.library = name, library
        self.ops = getattr(torch.ops, name)
        self.block = int(self.ops.block())


class _BuildHangs(Exception):
    """The build ran past BUILD_SECONDS: no other flags are tried (it would hang again)."""


def _build(compiler: list[str], flags: tuple[str, ...], name: str, folder: Path) -> bool:
    """Build the kernel into `folder` (cpp_extension's build folder for `name`) in a process of its own; whether it
    built and loaded there. _BuildHangs where it runs past BUILD_SECONDS."""
    env = dict(os.environ, CXX=shlex.join(compiler), PATH=os.pathsep.join([str(_ninja()), os.environ.get("PATH", "")]))
    arguments = json.dumps([name, str(SOURCES[0]), str(folder), [*flags, *OPENMP], list(OPENMP)])
    if not _ANNOUNCED:  # once a process, whatever flags it goes on to try
        print(f"capsnet: {note()}", file=sys.stderr, flush=True)
        _ANNOUNCED.append(True)
    with _SHOWN[0](note()) if _SHOWN else contextlib.nullcontext():
        child = subprocess.Popen(
            [sys.executable, "-c", BUILD, arguments],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its compiler and ninja go with it when it is stopped
        )
        try:
            return child.wait(timeout=BUILD_SECONDS) == 0
        except BaseException as stopped:  # past BUILD_SECONDS, or this process interrupted
            with contextlib.suppress(OSError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            if isinstance(stopped, subprocess.TimeoutExpired):
                raise _BuildHangs from None
            raise


def _name(compiler: list[str], flags: tuple[str, ...], machine: str) -> str:
    words = [*(source.read_bytes() for source in SOURCES), " ".join((*flags, *OPENMP)).encode(), BUILD.encode()]
    words.append(" ".join(compiler).encode())
    words += [machine.encode(), torch.__version__.encode(), sys.version.encode()]
    return "em_kernel_" + hashlib.sha256(b"\0".join(words)).hexdigest()[:20]


def _folder() -> Path:
    """The user's cache's native/ (made private), else a private folder of this process's, removed at exit."""
    try:
        folder = cache_dir() / "native"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return folder
    except (RuntimeError, OSError):  # no home folder, or a cache that cannot be written: never a shared /tmp name
        private = Path(tempfile.mkdtemp(prefix="capsnet-native-"))
        atexit.register(shutil.rmtree, private, ignore_errors=True)  # its library is mapped: the file can go
        return private


_LOADED: dict[str, Kernel] = {}  # by name: a second library of a name would register its operators twice (abort)


def _load_built(name: str, folder: Path) -> Kernel | None:
    if name in _LOADED:
        return _LOADED[name]
    if not (folder / BUILT).is_file():
        return None
    try:
        kernel = Kernel(name, folder / f"{name}.so")
    except (OSError, RuntimeError, AttributeError):  # damaged, or without the kernel's operators: built again
        return None
    _LOADED[name] = kernel
    return kernel


@functools.lru_cache(maxsize=1)
def _load() -> Kernel | None:
    compiler = _compiler()
    if compiler is None:
        return None
    if _ninja() is None:
        _said("ninja is not installed (pip install ninja)")
        return None
    machine = _cpu() + _version(compiler)
    root = _folder()
    for flags in FLAG_SETS:
        name = _name(compiler, flags, machine)
        folder = root / name
        kernel = _load_built(name, folder)
        if kernel is not None:
            return kernel
        try:
            folder.mkdir(exist_ok=True, mode=0o700)
            built = _build(compiler, flags, name, folder)
        except _BuildHangs:
            _said(f"the kernel's build ran past {BUILD_SECONDS} s")
            return None
        except OSError:
            built = False
        if built:
            with contextlib.suppress(OSError):
                (folder / BUILT).write_text(" ".join(flags))
            kernel = _load_built(name, folder)
            if kernel is not None:
                return kernel
    _said("the EM routing kernel did not build with " + " ".join(compiler))
    return None


_LOADING = threading.Lock()  # one build at a time in a process (the dashboard's sessions)
_ASKED: list[bool] = []  # whether a layer asked for the kernel in this process


def kernel() -> Kernel | None:
    """The compiled kernel, built on first use; None where it is turned off ($CAPSNET_NATIVE=0) or cannot be built
    (then every layer routes with PyTorch)."""
    _ASKED[:] = [True]
    if not enabled():
        return None
    with _LOADING:
        return _load()


def routing_path() -> str:
    """The EM routing this process runs on a CPU: "kernel" where it has the kernel, "pytorch" where the kernel was
    asked for and is turned off or cannot be had, "" where nothing asked (no EM network)."""
    if not _ASKED:
        return ""
    return "kernel" if enabled() and _load.cache_info().currsize > 0 and _load() is not None else "pytorch"


def padded_types(library: Kernel, parents: int) -> int:
    """J rounded up to the kernel's block: every inner loop of the kernel is whole vectors."""
    return -(-parents // library.block) * library.block


def tiles_of(weights: Tensor, padded: int) -> Tensor:
    """W per slot (I, J, 4, 4) as the kernel reads it: W_ij[k][c] at [i][k][c][j], J padded with zeros: (I, 4, 4, Jp)."""
    return F.pad(weights.permute(0, 2, 3, 1), (0, padded - weights.shape[1])).contiguous()


def route(
    library: Kernel,
    grid: Tensor,
    activations: Tensor,
    weights: Tensor,
    offsets: Tensor | None,
    centre: Tensor,
    child_index: Tensor,
    slots: Tensor,
    even: Tensor,
    beta_u: Tensor,
    beta_a: Tensor,
    lambdas: tuple[float, ...],
    scale: float,
    log_floor: float,
    every: bool = False,
    start: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """EM routing of one layer for a batch, on torch's threads (each a share of the images: `em_kernel.cpp`).

    Args:
        grid: each child's pose by rows, (B, 4, C, 4) (`child_rows`); activations: each slot's child's, (B, P, I).
        child_index: (P, I) the child in each slot, as `grid` numbers them (`cell_major`).
        weights: W per slot (I, J, 4, 4); offsets (I, 16) added to every vote of a slot, or None.
        centre: each parent's centre, the plain mean of its votes, (B, P, 16, Jp) (the layer's `_kernel_inputs`).
        slots: (C, S) long, each child's slots p * I + i, -1 past its last (`slot_table`).
        even: (P, I) each slot's share of a child spread evenly over its parents.
        beta_u, beta_a: (J,); lambdas: the inverse temperature of each iteration; scale: parents / slots.
        every: return the parents after each iteration (r, B, P, J, ...), else after the last (B, P, J, ...).
        start: the first R_ij (B, P, J, I), normalised over each child's parents, else the even spread.

    Returns:
        poses mu_j (B, P, J, 16) and activations a_j (B, P, J), or with `every` an r axis first.
    """
    batch, positions, slot_count = activations.shape
    parents = weights.shape[1]
    padded = padded_types(library, parents)
    pad = padded - parents
    f32 = torch.float32
    grid, activations, centre = (x.to(f32).contiguous() for x in (grid, activations, centre))
    tiles = tiles_of(weights.to(f32), padded)
    offsets = None if offsets is None else offsets.to(f32).contiguous()
    child_index = child_index.contiguous()
    if start is not None:  # (B, P, J, I) -> (B, P, I, Jp)
        start = F.pad(start.to(f32).transpose(2, 3), (0, pad)).contiguous()
    beta_u = F.pad(beta_u.detach().to(f32), (0, pad)).contiguous()
    beta_a = F.pad(beta_a.detach().to(f32), (0, pad)).contiguous()
    rounds = len(lambdas)
    kept = rounds if every else 1
    out_mean = torch.empty(kept, batch, positions, parents, 16, dtype=f32)
    out_a = torch.empty(kept, batch, positions, parents, dtype=f32)
    temperatures = torch.tensor(lambdas, dtype=f32)
    library.ops.route(
        grid, activations, tiles, offsets, centre, child_index, slots.contiguous(), start, even.to(f32).contiguous(),
        beta_u, beta_a, temperatures, scale, log_floor, out_mean, out_a,
    )  # fmt: skip
    if every:
        return out_mean, out_a
    return out_mean[0], out_a[0]


def child_rows(poses: Tensor) -> Tensor:
    """A child grid (B, T, 16, H, W) as the kernel reads it: each child's pose by rows, the children cell-major
    (`cell_major`), (B, 4, H*W*T, 4) with row r of child (cell, type) at [:, r, cell * T + type]. Viewed as (B*4, H, W,
    T*4) it is also a channels-last image whose convolution gives a convolutional layer's centres (`ConvCapsules`).
    Float32, whatever the poses were (bf16 under autocast): the kernel's arithmetic, in the same copy (first made
    float32 in place where they lie channels-last, as a convolution under autocast writes them)."""
    batch, types, _, height, width = poses.shape
    cells = poses.permute(0, 3, 4, 1, 2)  # (B, H, W, T, 16)
    if cells.is_contiguous() and cells.dtype != torch.float32:  # a channels-last convolution's bf16 output (training
        cells = cells.float()  # under autocast): made float32 as it lies first, 2.4x faster than in the copy below
    grid = cells.reshape(batch, height * width, types, 4, 4).permute(0, 3, 1, 2, 4)  # (B, 4 rows, H*W, T, 4)
    rows = torch.empty(grid.shape, dtype=torch.float32, device=grid.device)
    rows.copy_(grid)  # one copy (`to` keeps the permuted strides, so contiguous() would be a second)
    return rows.view(batch, 4, height * width * types, 4)


def cell_major(child_index: Tensor, types: int, cells: int) -> Tensor:
    """A layer's children (child = type * cells + cell) numbered as `child_rows` holds them: cell * types + type."""
    return (child_index % cells) * types + child_index // cells


def slot_table(child_index: Tensor, children: int, parents: int, order: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """A layer's children as the kernel visits them: each child's slots (C, S) long, p * I + i, -1 past its last,
    and each slot's even share of its child, 1 / (the slots the child fills x `parents`): (P, I) float.

    `order`: the children in the order to visit them (the kernel adds a child's votes into the parents at its
    positions, so children that share positions are best visited together); default 0 .. C - 1."""
    flat = child_index.flatten()  # (P*I,)
    counts = torch.bincount(flat, minlength=children)  # (C,) slots each child fills
    widest = max(1, int(counts.max()))
    ranked = torch.argsort(flat, stable=True)  # slots child by child
    first = torch.cumsum(counts, 0) - counts
    column = torch.arange(flat.numel()) - first[flat[ranked]]
    table = torch.full((children, widest), -1, dtype=torch.long)
    table[flat[ranked], column] = ranked
    if order is not None:
        table = table[order]
    even = 1.0 / (counts[child_index].clamp(min=1).double() * parents)  # (P, I)
    return table.contiguous(), even.float()
