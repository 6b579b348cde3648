"""The EM kernel as the working tree builds it (torch.utils.cpp_extension) against the one a given commit builds
(by default BASELINE, the last with the hand-built C kernel bound by ctypes): each tree's first build in a fresh
cache, what each gives where no compiler is found, and the speed of the two in turns in one process, their ratio.

    python benchmarks/bench_em_kernel.py [--baseline REV] [--rounds 9] [--batch-size 64] [--reading 200]

The speed: one process holds both kernels, the baseline's `em_native` and `em_native_training` loaded from the
commit's files beside the working tree's, and the EM network `paper-decoder` (r = 2) routes through one or the
other (`matrix_capsules` reads them as module globals), round by round, so that the machine's drift (a shared one's)
reaches both alike: a training step (forward, spread + reconstruction loss, backward, Adam, as `choose_acceleration`
decides for this CPU) at --batch-size and a reading without gradients at --reading images.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
BASELINE = "4f10fb4"  # its em_native compiles em_kernel.c with the system's C compiler and binds it with ctypes
FIRST_BUILD = r"""
import time
start = time.perf_counter()
from capsnet.nn import em_native
built = em_native.kernel() is not None
print(f"{time.perf_counter() - start:.1f} s, kernel {built}")
"""


def first_build(tree: Path, cache: Path, compiler: str | None = None) -> str:
    """Seconds to the kernel in a fresh process with an empty cache, and what it said on stderr; `compiler`: $CC and
    $CXX (a missing one: what a machine without a compiler gets)."""
    env = dict(os.environ, PYTHONPATH=str(tree), CAPSNET_CACHE_DIR=str(cache))
    env.pop("CAPSNET_NATIVE", None)
    if compiler is not None:
        env["CC"] = env["CXX"] = compiler
    out = subprocess.run([sys.executable, "-c", FIRST_BUILD], cwd=tree, env=env, capture_output=True, text=True)
    said = " / ".join(line for line in out.stderr.splitlines() if line.startswith("capsnet"))
    return f"{out.stdout.strip()}; said: {said or 'nothing'}"


def baseline_tree(root: Path, baseline: str) -> Path:
    """The package at `baseline` in `root`/before."""
    before = root / "before"
    before.mkdir()
    archive = subprocess.run(["git", "archive", baseline, "capsnet"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
    return before


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def baseline_modules(tree: Path) -> tuple[ModuleType, ModuleType]:
    """The baseline's em_native (building its kernel from its own source) and em_native_training bound to it."""
    import capsnet.nn as package

    folder = tree / "capsnet" / "nn"
    native = _module("em_native_before", folder / "em_native.py")
    own = package.em_native
    package.em_native = native  # what the baseline's `from capsnet.nn import em_native` finds
    try:
        training = _module("em_native_training_before", folder / "em_native_training.py")
    finally:
        package.em_native = own
    return native, training


def speed(tree: Path, rounds: int, batch: int, reading: int) -> None:
    """Both kernels in turns in this process: each round a training step and a reading with each."""
    import torch

    import capsnet.nn.matrix_capsules as layers
    from capsnet.memory import keep_freed_memory
    from capsnet.nn import em_native, em_native_training
    from capsnet.nn.registry import network
    from capsnet.training.acceleration import choose_acceleration, lay_out, make_adam
    from capsnet.training.step import training_step

    kernels = {"before": baseline_modules(tree), "now": (em_native, em_native_training)}
    for name, (native, _) in kernels.items():
        if native.kernel() is None:
            raise SystemExit(f"{name}: no kernel builds here")
    torch.manual_seed(0)
    net = network("em")
    config = net.preset("paper-decoder", routing_iterations=2)
    accel = choose_acceleration(torch.device("cpu"))
    if accel.keep_memory:
        keep_freed_memory()
    model = lay_out(net.build(config).train(), accel)
    optimizer = make_adam(model.parameters(), 1e-3, accel.fused_adam)
    images, labels = torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    reader = net.build(config).eval()
    pictures = torch.rand(reading, 1, 28, 28)

    def train() -> None:
        training_step(model, optimizer, images, labels, images, config, accel.amp, 0.5)

    def read() -> None:
        with torch.no_grad():
            reader(pictures)

    times: dict[tuple[str, str], list[float]] = {}
    for round_ in range(rounds + 1):  # round 0 warms both up, uncounted
        for kind, run, count in (("training", train, batch), ("reading", read, reading)):
            for name, (native, training) in kernels.items():
                layers.em_native, layers.em_native_training = native, training
                start = time.perf_counter()
                run()
                rate = count / (time.perf_counter() - start)
                if round_:
                    times.setdefault((kind, name), []).append(rate)
                    print(f"round {round_}: {kind}, {name}: {rate:.1f} images/s", flush=True)
    layers.em_native, layers.em_native_training = em_native, em_native_training
    for kind in ("training", "reading"):
        before, now = times[kind, "before"], times[kind, "now"]
        ratios = [b / a for a, b in zip(before, now)]
        print(
            f"{kind}: before median {statistics.median(before):.1f} images/s, now {statistics.median(now):.1f}; "
            f"now / before {min(ratios):.2f}-{max(ratios):.2f}x (median {statistics.median(ratios):.2f}x)"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=BASELINE, help=f"the commit 'before' is taken from (default {BASELINE})")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--batch-size", type=int, default=64, help="the training step's batch")
    parser.add_argument("--reading", type=int, default=200, help="the reading's batch")
    args = parser.parse_args(argv)
    from bench_em_against import machine

    print(f"{machine()}; torch threads {os.cpu_count()}; baseline {args.baseline}")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        trees = {"before": baseline_tree(root, args.baseline), "now": REPO}
        for name, tree in trees.items():
            print(f"{name}: first build {first_build(tree, root / f'cache-{name}')}", flush=True)
            print(f"{name}: without a compiler {first_build(tree, root / 'none', '/no/compiler')}", flush=True)
        speed(trees["before"], args.rounds, args.batch_size, args.reading)


if __name__ == "__main__":
    main()
