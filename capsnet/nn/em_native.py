"""EM routing on a CPU in compiled C: `em_kernel.c`, built once for this machine and kept in the cache.

Hinton, Sabour & Frosst (2018), "Matrix capsules with EM routing", ICLR. https://openreview.net/forum?id=HJWLfGWRb

The PyTorch path (`capsnet.nn.em_routing`) writes every vote and [V - c, (V - c)^2] to memory and reads them back in
each M-step and E-step; the kernel remakes a child's votes from its pose and W where a step needs them and does the
E-step of one iteration and the M-step of the next in one pass, so a reading of the paper's network runs several
times faster (`benchmarks/README.md`) in the same float32 arithmetic (the tests hold both to each other). This module
builds and loads the kernel and runs a reading (`route`); training takes its passes in `em_native_training`; a
trace (the dashboard's step-by-step views, which show every vote) keeps the PyTorch path.

The kernel is compiled with the system's C compiler (`$CC`, else cc, gcc or clang) for the CPU it runs on
(`-march=native`: AVX2, AVX-512, whatever this machine has, chosen here and never assumed; with OpenMP where the
compiler has it, `OPENMP`) into `$CAPSNET_CACHE_DIR/native/` (default ~/.cache/capsnet), under a name that hashes
the source, the flags, the compiler and the CPU, written atomically. Where no compiler works, or `CAPSNET_NATIVE=0` is set, `kernel()` is None
and every layer routes with PyTorch: slower, never different.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from capsnet.errors import CapsNetError
from capsnet.files import atomic_path, cache_dir

SOURCE = Path(__file__).with_name("em_kernel.c")
NATIVE_ENV = "CAPSNET_NATIVE"  # "0" routes every reading with PyTorch (as where no compiler is found)
COMPILER_ENV = "CC"
# the flags tried in turn: the machine's own instructions first, then plain optimised C; each with OPENMP first
FLAG_SETS = (
    ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math"),
    ("-O3", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math"),
)
# The passes split a batch's images over OpenMP's threads themselves, in one call: where torch runs on libgomp (its
# Linux wheels bundle it, loaded before the kernel), the kernel's library is bound to that one, so its passes run on
# the very threads torch's operations just ran on. Threads of the kernel's own would be started a call (a quarter of
# a millisecond) and would share the cores with torch's threads, which spin a few milliseconds after each operation
# (a training step 13-18% slower). Where the compiler has no OpenMP, the build without it takes a share a thread.
OPENMP = ("-fopenmp",)
COMPILE_SECONDS = 120
SCRATCH = ".build-"  # a build's scratch folder in the cache: .build-<pid>-<random>


def enabled() -> bool:
    """Whether readings may use the kernel: unless $CAPSNET_NATIVE is "0"."""
    return os.environ.get(NATIVE_ENV, "1").strip() != "0"


def _said(message: str) -> None:
    """One line on stderr where the kernel cannot be had: every reading then routes with PyTorch."""
    print(f"capsnet: {message}: EM routing runs with PyTorch", file=sys.stderr)


def _compiler() -> list[str] | None:
    """The C compiler to build with, as a command: $CC (which may carry words of its own, "ccache gcc"), else the
    first of cc, gcc and clang on the PATH."""
    try:
        named = shlex.split(os.environ.get(COMPILER_ENV, ""))
    except ValueError as error:  # an unbalanced quote
        _said(f"${COMPILER_ENV} is not a command ({error})")
        return None
    if named:
        found = shutil.which(named[0])
        return None if found is None else [found, *named[1:]]
    return next(([found] for name in ("cc", "gcc", "clang") if (found := shutil.which(name))), None)


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
        return subprocess.run([*compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


class _CompilerHangs(Exception):
    """The compiler ran past COMPILE_SECONDS: no other flags are tried (it would hang again)."""


def _digest_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _trusted(target: Path) -> bool:
    """Whether the cached library at `target` may be loaded: a regular file (not a link) and its folder this user's
    own, written by nobody else, and its bytes those its build recorded (a truncated or replaced file is built
    again: loading one killed the process with SIGBUS)."""
    try:
        folder, info = os.stat(target.parent), os.lstat(target)
        recorded = _digest_path(target).read_text().strip()
    except OSError:
        return False
    owner = os.getuid() if hasattr(os, "getuid") else info.st_uid
    for entry in (folder, info):
        if entry.st_uid != owner or entry.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
    return stat.S_ISREG(info.st_mode) and hashlib.sha256(target.read_bytes()).hexdigest() == recorded


def _build(compiler: list[str], flags: tuple[str, ...], target: Path) -> ctypes.CDLL | None:
    """Compile SOURCE and load it, kept at `target` (written atomically, with its SHA-256 beside it) where the cache
    can be written, else loaded from where it was built; None where the compiler fails or the library does not load.
    _CompilerHangs where the compiler runs past COMPILE_SECONDS."""
    # private (0700), in the cache's own folder and named after this process: removed however the build ends, and
    # what a killed build leaves is swept by the next (`_sweep`), never left in the shared temporary folder
    with _scratch(target.parent) as scratch:
        built = Path(scratch) / "em_kernel.so"
        command = [*compiler, *flags, "-fPIC", "-shared", "-o", str(built), str(SOURCE), "-lm"]
        try:
            done = subprocess.run(command, capture_output=True, timeout=COMPILE_SECONDS)
        except subprocess.TimeoutExpired:
            raise _CompilerHangs from None
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode != 0 or not built.is_file():
            return None
        try:
            with atomic_path(target) as tmp:
                shutil.copyfile(built, tmp)
            with atomic_path(_digest_path(target)) as tmp:
                tmp.write_text(hashlib.sha256(built.read_bytes()).hexdigest())
            return ctypes.CDLL(str(target))
        except (OSError, CapsNetError):  # a cache that cannot be written: this process loads its own build
            try:
                return ctypes.CDLL(str(built))  # loaded before the folder goes; the mapping outlives the file
            except OSError:
                return None


def _scratch(folder: Path) -> tempfile.TemporaryDirectory[str]:
    """A private scratch folder in `folder`, named after this process; in the temporary folder where `folder`
    cannot take one (its library is then loaded from the scratch)."""
    try:
        return tempfile.TemporaryDirectory(dir=folder, prefix=f"{SCRATCH}{os.getpid()}-")
    except OSError:
        return tempfile.TemporaryDirectory()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _sweep(folder: Path) -> None:
    """Remove the scratch folders of builds whose process is gone (killed mid-build)."""
    try:
        entries = list(folder.glob(f"{SCRATCH}*"))
    except OSError:
        return
    for entry in entries:
        pid = entry.name[len(SCRATCH) :].split("-")[0]
        if pid.isdigit() and not entry.is_symlink() and entry.is_dir() and not _alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _bind(library: ctypes.CDLL) -> ctypes.CDLL:
    i64, pointer, f32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
    library.em_block.restype = i64
    library.em_block.argtypes = []
    library.em_openmp.restype = ctypes.c_int
    library.em_openmp.argtypes = []
    # every entry that takes images first takes the threads to split them over (`in_parallel`)
    library.em_route.restype = ctypes.c_int
    library.em_route.argtypes = [i64] * 12 + [pointer] * 12 + [f32, f32, pointer, pointer]
    for name in ("em_moments", "em_estep", "em_vote_grad"):
        getattr(library, name).restype = ctypes.c_int
    library.em_moments.argtypes = [*[i64] * 7, *[pointer] * 6, i64, *[pointer] * 5]
    library.em_estep.argtypes = [*[i64] * 7, *[pointer] * 8, i64, f32, *[pointer] * 4]
    for name in ("em_back_mstep", "em_back_fit", "em_fit"):
        getattr(library, name).restype = ctypes.c_int
    library.em_fit.argtypes = [*[i64] * 6, *[pointer] * 5, f32, f32, *[pointer] * 6]
    library.em_back_fit.argtypes = [*[i64] * 6, *[pointer] * 7, f32, f32, *[pointer] * 9, i64]
    library.em_back_mstep.argtypes = [*[i64] * 7, *[pointer] * 7, i64, *[pointer] * 6]
    library.em_vote_grad.argtypes = [*[i64] * 7, pointer, i64, *[pointer] * 8, i64, pointer, pointer]
    return library


@functools.lru_cache(maxsize=1)
def _load() -> ctypes.CDLL | None:
    compiler = _compiler()
    if compiler is None:
        return None
    source = SOURCE.read_bytes()
    machine = _cpu() + _version(compiler)
    try:
        folder = cache_dir() / "native"
    except RuntimeError:  # no home folder to keep it in: a private folder of this process's (a shared, predictable
        folder = Path(tempfile.mkdtemp(prefix="capsnet-native-"))  # /tmp name let another user plant a library)
        atexit.register(shutil.rmtree, folder, ignore_errors=True)  # its library is mapped: the file can go
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        pass  # _build loads its own build where the cache cannot be written
    _sweep(folder)
    for flags in dict.fromkeys(flags for chosen in FLAG_SETS for flags in ((*chosen, *OPENMP), chosen)):
        words = [source, " ".join(flags).encode(), " ".join(compiler).encode(), machine.encode()]
        digest = hashlib.sha256(b"\0".join(words)).hexdigest()[:24]
        target = folder / f"em_kernel-{digest}.so"
        library = None
        if _trusted(target):
            try:
                library = _bind(ctypes.CDLL(str(target)))
            except (OSError, AttributeError):  # damaged, or without the kernel's entries: built again
                library = None
        if library is None:
            try:
                built = _build(compiler, flags, target)
            except _CompilerHangs:
                _said(f"the C compiler ran past {COMPILE_SECONDS} s")
                return None
            try:
                library = None if built is None else _bind(built)
            except AttributeError:  # a "compiler" that made a library without the kernel's entries
                library = None
        if library is not None:
            return library
    return None


def kernel() -> ctypes.CDLL | None:
    """The compiled kernel, built on first use; None where it is turned off ($CAPSNET_NATIVE=0) or cannot be built
    (then every layer routes with PyTorch)."""
    return _load() if enabled() else None


def address(x: Tensor | None) -> int | None:
    return None if x is None else x.data_ptr()


def padded_types(library: ctypes.CDLL, parents: int) -> int:
    """J rounded up to the kernel's block: every inner loop of the kernel is whole vectors."""
    block = int(library.em_block())
    return -(-parents // block) * block


def tiles_of(weights: Tensor, padded: int) -> Tensor:
    """W per slot (I, J, 4, 4) as the kernel reads it: W_ij[k][c] at [i][k][c][j], J padded with zeros: (I, 4, 4, Jp)."""
    return F.pad(weights.permute(0, 2, 3, 1), (0, padded - weights.shape[1])).contiguous()


# A training step's tensors of one number a vote (B, P, I, Jp: 59 MB a step's ConvCaps1 at batch 64) are bigger than
# glibc ever serves from its heap, so each is a fresh mapping whose every page faults and is zeroed when the kernel
# first writes it: half again a pass's time (13 ms of 25 for 30 MB on one core). `reusable` hands back one that no
# one holds any longer (the step before's), a few shapes a thread at most.
_REUSED = threading.local()
REUSED_SHAPES = 4  # the last shapes asked for that keep their tensors (two layers' and a smaller last batch's)


def reusable(*shape: int) -> Tensor:
    """An uninitialised float32 tensor of `shape`: one this thread made before and nothing refers to any more where
    there is one (held here only: the list and the loop's name), else a new one, kept for later."""
    kept: dict[tuple[int, ...], list[Tensor]] = _REUSED.__dict__.setdefault("kept", {})
    tensors = kept.pop(shape, [])
    kept[shape] = tensors  # the latest shape last: the oldest is dropped first
    while len(kept) > REUSED_SHAPES:
        del kept[next(iter(kept))]
    for tensor in tensors:
        if sys.getrefcount(tensor) <= 3:  # the list, `tensor` and getrefcount's own argument
            return tensor
    tensor = torch.empty(shape, dtype=torch.float32)
    tensors.append(tensor)
    return tensor


def _threads(batch: int) -> int:
    """The threads a batch's images are split over: torch's, at most one an image."""
    return max(1, min(torch.get_num_threads(), batch))


def _run(library: ctypes.CDLL, batch: int, work: Callable[[int, int, int, int], int]) -> None:
    """`work(threads, first, last, share)` over the batch's images: one call (share 0) with `threads` where the
    kernel splits them over OpenMP's threads itself (`OPENMP`), else a call a share (threads 1), each on a thread of
    its own (the kernel runs without the GIL: ctypes releases it); MemoryError where scratch memory could not be had."""
    threads = _threads(batch)
    if threads == 1 or library.em_openmp():
        codes = [work(threads, 0, batch, 0)]
    else:
        per = -(-batch // threads)
        shares = [(n, min(batch, n + per)) for n in range(0, batch, per)]
        with ThreadPoolExecutor(len(shares)) as pool:
            codes = list(pool.map(lambda n: work(1, *shares[n], n), range(len(shares))))
    if any(codes):
        raise MemoryError(f"EM routing's kernel could not run a batch of {batch} (code {max(codes)})")


def in_parallel(library: ctypes.CDLL, batch: int, images: Callable[[int, int, int], int]) -> None:
    """`images(threads, first, last)` over the batch on torch's threads, each a share of the images (`_run`)."""
    if batch > 0:
        _run(library, batch, lambda threads, first, last, share: images(threads, first, last))


def summed_in_parallel(
    library: ctypes.CDLL, batch: int, shape: tuple[int, ...], images: Callable[[int, int, int, Tensor], int]
) -> Tensor:
    """`images(threads, first, last, own)` over the batch as `in_parallel` runs it, each share adding into a float32
    tensor of `shape` of its own (zeros to begin with; the kernel finds a thread's at own + its share's index x
    `shape`'s size), so that no two threads add into the same numbers: their sum."""
    own = torch.zeros(_threads(batch), *shape, dtype=torch.float32)
    if batch > 0:
        _run(library, batch, lambda threads, first, last, share: images(threads, first, last, own[share]))
    return own.sum(dim=0)


def route(
    library: ctypes.CDLL,
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
    """EM routing of one layer for a batch, on torch's threads (each a share of the images).

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
    slots, even = slots.contiguous(), even.to(f32).contiguous()
    arguments = (
        address(grid), address(activations), address(tiles), address(offsets), address(centre),
        address(child_index), address(slots), address(start), address(even), address(beta_u), address(beta_a),
        address(temperatures), scale, log_floor, address(out_mean), address(out_a),
    )  # fmt: skip

    def images(threads: int, first: int, last: int) -> int:
        return int(library.em_route(
            threads, batch, first, last, positions, slot_count, parents, padded, grid.shape[2], slots.shape[1], rounds,
            int(every), *arguments,
        ))  # fmt: skip

    in_parallel(library, batch, images)
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
