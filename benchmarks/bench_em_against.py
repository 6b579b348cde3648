"""The EM network's training step and reading on the CPU: the working tree's package against a given commit's.

    python benchmarks/bench_em_against.py [--baseline REV] [--rounds 3] [--march haswell]

The package as it was at --baseline (default: a commit whose kernel passes do not hold W's tile in registers) is
taken out with `git archive` into a temporary folder beside the working tree's; each measurement runs in a fresh
process whose PYTHONPATH is one tree and whose $CAPSNET_CACHE_DIR is that tree's own, so each builds its own
`em_kernel.c` for this CPU. The two trees take turns, round by round, so that a drift in the machine's speed
reaches both alike. Measured, on the same inputs:
- training: the trainer's step (forward, spread + reconstruction loss, backward, Adam; bf16 autocast and a fused Adam
  where the CPU computes bf16, and freed memory kept where the tree's trainer keeps it, as `choose_acceleration`
  decides) of the EM network `paper-decoder` (the shipped
  model's) at r = 2, batch --batch-size;
- reading: a forward pass without gradients (evaluation's, predict's) at batch 500, r = 2.
`--march ARCH` builds both kernels with -march=ARCH instead of -march=native (haswell: the instructions of an AVX2
machine, AVX-512 left out), to see the code an AVX2 CPU would run on this one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = "a236050"  # a commit whose kernel passes reload W for every entry of a vote

WORKER = r"""
import functools, os, sys, time
import torch
from capsnet.nn import em_native
march = os.environ.get("BENCH_MARCH")
if march:  # both trees built for another CPU's instructions
    em_native.FLAG_SETS = (("-O3", f"-march={march}", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math"),)
if em_native.kernel() is None:
    raise SystemExit("no C compiler works here: the kernel cannot be measured")
from capsnet.nn.registry import network
from capsnet.training.acceleration import choose_acceleration, lay_out, make_adam
from capsnet.training.step import training_step
kind, batch, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.manual_seed(0)
net = network("em")
config = net.preset("paper-decoder", routing_iterations=2)
if kind == "training":
    accel = choose_acceleration(torch.device("cpu"), amp=None, fused_adam=None, compile=None)
    if getattr(accel, "keep_memory", False):  # the trainer's way where the tree's trainer has it
        from capsnet.memory import keep_freed_memory
        keep_freed_memory()
    model = lay_out(net.build(config).train(), accel)
    optimizer = make_adam(model.parameters(), 1e-3, accel.fused_adam)
    images, labels = torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    run = functools.partial(training_step, model, optimizer, images, labels, images, config, accel.amp, 0.5)
    run()
else:
    model = net.build(config).eval()
    images = torch.rand(batch, 1, 28, 28)
    def run():
        with torch.no_grad():
            model(images)
    with torch.no_grad():
        model(images[:8])
start, runs = time.perf_counter(), 0
while runs < 2 or time.perf_counter() - start < seconds:
    run()
    runs += 1
print(batch * runs / (time.perf_counter() - start))
"""


def make_trees(root: Path, baseline: str) -> dict[str, Path]:
    """{"before": the package at `baseline`, "now": the working tree's}, each a folder holding `capsnet`."""
    before = root / "before"
    before.mkdir()
    archive = subprocess.run(["git", "archive", baseline, "capsnet"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
    return {"before": before, "now": REPO}


def measure(tree: Path, cache: Path, kind: str, batch: int, seconds: float, march: str | None) -> float:
    """Images/s of one `kind` ("training" or "reading") in a fresh process on `tree`."""
    env = dict(os.environ, PYTHONPATH=str(tree), CAPSNET_CACHE_DIR=str(cache))
    env.pop("CAPSNET_NATIVE", None)
    if march:
        env["BENCH_MARCH"] = march
    out = subprocess.run(
        [sys.executable, "-c", WORKER, kind, str(batch), str(seconds)],
        cwd=tree, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(out.stdout.split()[-1])


def machine() -> str:
    """The CPU's model name and its vector instructions, from /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown CPU"
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    wanted = [f for f in flags if f.startswith(("avx2", "avx512f", "avx512_bf16", "amx"))]
    return f"{name}, {os.cpu_count()} CPUs, {' '.join(sorted(set(wanted)))}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=BASELINE, help=f"the commit 'before' is taken from (default {BASELINE})")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="the training step's batch")
    parser.add_argument("--seconds", type=float, default=8.0, help="each measurement's length")
    parser.add_argument("--march", default=None, help="build both kernels for this -march (haswell: AVX2) instead")
    args = parser.parse_args(argv)
    print(f"{machine()}; baseline {args.baseline}; kernels built with -march={args.march or 'native'}")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        trees = make_trees(root, args.baseline)
        rates: dict[tuple[str, str], list[float]] = {}
        for round_ in range(args.rounds):
            for kind, batch in (("training", args.batch_size), ("reading", 500)):
                for name, tree in trees.items():
                    rate = measure(tree, root / f"cache-{name}", kind, batch, args.seconds, args.march)
                    rates.setdefault((kind, name), []).append(rate)
                    print(f"round {round_}: {kind}, {name}: {rate:.1f} images/s", flush=True)
        for kind in ("training", "reading"):
            before, now = rates[kind, "before"], rates[kind, "now"]
            ratios = [b / a for a, b in zip(before, now)]
            print(f"{kind}: before {min(before):.1f}-{max(before):.1f} images/s, now {min(now):.1f}-{max(now):.1f}; "
                  f"now / before {min(ratios):.2f}-{max(ratios):.2f}x (median {statistics.median(ratios):.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
