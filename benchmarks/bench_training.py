"""Training-step throughput on whatever device is present: precision and optimizer, routing paths, a ceiling.

    python benchmarks/bench_training.py                    # CUDA if present, else the CPU (batch 128)
    python benchmarks/bench_training.py --batches 128 1024 --compile
    python benchmarks/bench_training.py --time-to-accuracy --seeds 0 1 2   # the fast recipe, wall time to accuracy
    python benchmarks/bench_training.py --one-at-a-time    # each precision row alone, as a training run takes its steps

The first table, on a CPU, compares the trainer's old default (float32, foreach Adam) with the
new one chosen for this CPU (`capsnet.training.acceleration`), and each choice alone: bf16 autocast and
the fused Adam. On a CPU without native bf16 the bf16 rows are emulated by oneDNN and very
slow, so they take one timed step after one warm-up.

One training step is forward, margin + reconstruction loss, backward and Adam, on synthetic batches
(the input pipeline is measured by bench_model.py). Rows, each at every batch size:
- capsnet, hand-written backward: `dynamic_routing(backward="manual")`, the CPU's default;
- capsnet, autograd backward: plain ops, the default off the CPU (what `torch.compile` can fuse);
- the same, compiled (`--compile`), and with CUDA graphs (`mode="reduce-overhead"`, CUDA only);
- the seeds' formulation: u_hat by einsum and Procedure 1 in einsum (written here, as the baseline);
- routing removed: the same network with uniform couplings and one pass (the ceiling routing cannot beat).
Each row is the median of `--repeats` timed steps after `--warmup` steps, synchronised on CUDA; in the first table
the rows take their steps in turn, one each per round, so that a drift in the machine's speed reaches every row alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from capsnet.device import describe_device
from capsnet.memory import keep_freed_memory
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.squash import squash
from capsnet.training.acceleration import choose_acceleration, cpu_features, lay_out, make_adam
from capsnet.training.step import training_step


def seeds_einsum_routing(u: torch.Tensor, weight: torch.Tensor, iterations: int) -> torch.Tensor:
    """The seeds' formulation: u_hat = einsum(W, u), then Procedure 1 in einsum. u (B, N, P), W (N, K, D, P)."""
    u_hat = torch.einsum("nkdp,bnp->bnkd", weight, u)  # (B, N, K, D)
    logits = u_hat.new_zeros(u_hat.shape[:3])  # (B, N, K)
    for t in range(iterations):
        coupling = torch.softmax(logits, dim=2)  # over the parents
        v = squash(torch.einsum("bnk,bnkd->bkd", coupling, u_hat))  # (B, K, D)
        if t < iterations - 1:
            logits = logits + torch.einsum("bnkd,bkd->bnk", u_hat, v)
    return v


def no_routing(u: torch.Tensor, weight: torch.Tensor, iterations: int) -> torch.Tensor:
    """Uniform couplings, one pass: the network's cost without routing (the ceiling)."""
    return squash(torch.einsum("nkdp,bnp->bkd", weight, u) / weight.shape[1])


class Variant(CapsNet):
    """The paper's network with another routing in place of DigitCaps' forward (same weights, same decoder)."""

    def __init__(self, config: CapsNetConfig, routing: Callable[..., torch.Tensor] | str) -> None:
        super().__init__(config)
        self.routing = routing

    def encode(self, images, routing_iterations=None, trace=False):  # type: ignore[override]
        primary = self.primary(F.relu(self.conv1(images)))  # (B, N, P)
        if isinstance(self.routing, str):  # the package's own routing, with the backward named
            from capsnet.nn.dynamic_routing import dynamic_routing

            u_hat = self.digits.predictions(primary)
            poses, _ = dynamic_routing(u_hat, self.config.routing_iterations, backward=self.routing)
        else:
            poses = self.routing(primary, self.digits.weight, self.config.routing_iterations)
        return primary, poses, None


def make_step(
    model: torch.nn.Module, batch: int, device: torch.device, amp: bool | None = None, fused: bool = False
) -> Callable[[], None]:
    """One training step at `batch` on synthetic data, synchronised on CUDA (amp None: as the trainer chooses on
    CUDA, off elsewhere)."""
    images = torch.rand(batch, 1, 28, 28, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    optimizer = make_adam(model.parameters(), 1e-3, fused)
    config = model.config if hasattr(model, "config") else model._orig_mod.config  # type: ignore[attr-defined]
    amp = device.type == "cuda" if amp is None else amp

    def step() -> None:
        training_step(model, optimizer, images, labels, images, config, amp)  # the trainer's own step
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return step


def step_time(
    model: torch.nn.Module,
    batch: int,
    device: torch.device,
    warmup: int,
    repeats: int,
    amp: bool | None = None,
    fused: bool = False,
) -> float:
    """Median seconds of one training step at `batch` (amp None: as the trainer chooses on CUDA, off elsewhere)."""
    step = make_step(model, batch, device, amp, fused)
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved(steps: dict[str, Callable[[], None]], warmup: int, repeats: int) -> dict[str, float]:
    """Median seconds of each step, timed in turn, one step of each per round: on a machine whose speed drifts by a
    third within minutes, each variant sees the same drift and their ratios hold."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def precision_table(device: torch.device, batches: list[int], warmup: int, repeats: int, in_turn: bool = True) -> None:
    """Old CPU default, new default, each choice alone, and the routing-free ceiling under the new default.

    The rows other than the ceiling are the package's CapsNet as the trainer runs it (routing in float32 under autocast).
    """
    config = CapsNetConfig.preset("paper")
    new = choose_acceleration(device)
    if new.keep_memory:  # as the trainer does: every row alike
        keep_freed_memory()
    native = device.type != "cpu" or cpu_features().native_bf16
    rows = [
        ("old default: float32, foreach Adam", False, False, None, False),
        ("bf16 autocast alone", True, False, None, False),
        ("fused Adam alone (float32)", False, True, None, False),
        ("bf16 autocast + fused Adam", True, True, None, False),
        (f"new default: {new.describe().split(' (')[0]}", new.amp, new.fused_adam, None, new.channels_last),
        ("new default, routing removed (ceiling)", new.amp, new.fused_adam, no_routing, new.channels_last),
    ]  # fmt: skip
    print(f"\nPrecision and optimizer on {describe_device(device)}: {new.reason}")
    print(f"new default chosen here: {new.describe()}")
    print(f"\n| variant | {' | '.join(f'batch {b}' for b in batches)} | vs old |")
    print(f"|---|{'---|' * len(batches)}---|")
    rates: dict[tuple[str, int], float] = {}
    for batch in batches:
        steps, emulated_steps = {}, {}
        for name, amp, fused, routing, channels_last in rows:
            torch.manual_seed(0)
            model = (CapsNet(config) if routing is None else Variant(config, routing)).to(device).train()
            if channels_last:  # the convolutions' weights laid out as the trainer lays them (`lay_out`)
                lay_out(model, new)
            (emulated_steps if amp and not native else steps)[name] = make_step(model, batch, device, amp, fused)
        if in_turn:
            seconds = interleaved(steps, warmup, repeats)
        else:  # each row alone, its steps one after another, as a training run takes them
            seconds = {name: interleaved({name: step}, warmup, repeats)[name] for name, step in steps.items()}
        seconds |= interleaved(emulated_steps, 1, 1)  # emulated bf16: very slow
        rates.update({(name, batch): batch / s for name, s in seconds.items()})
    old = rows[0][0]
    for name, amp, *_ in rows:
        cells = [f"{rates[name, b]:,.1f} images/s" for b in batches]
        ratios = [f"{rates[name, b] / rates[old, b]:.2f}x" for b in batches]
        label = name + (" (bf16 emulated: no native bf16 here)" if amp and not native else "")
        print(f"| {label} | {' | '.join(cells)} | {' / '.join(ratios)} |", flush=True)


def time_to_accuracy(seeds: list[int], extra: list[str], targets: list[float]) -> None:
    """The real CLI with --recipe fast, once per seed: each epoch's test accuracy and the wall time from the start."""
    import json
    import subprocess
    import tempfile

    print(
        f"\nTime to accuracy, python -m capsnet train --recipe fast {' '.join(extra)} (wall time from the command's start)"
    )
    print("\n| seed | epoch | test accuracy | wall time |")
    print("|---|---|---|---|")
    reached: dict[float, list[float]] = {t: [] for t in targets}
    for seed in seeds:
        with tempfile.TemporaryDirectory() as out:
            argv = [sys.executable, "-m", "capsnet", "train", "--recipe", "fast", "--seed", str(seed), "--out", out,
                    "--no-progress", *extra]  # fmt: skip
            start = time.perf_counter()
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
            assert process.stdout is not None
            hit: dict[float, float] = {}
            for line in process.stdout:
                if not line.startswith("{"):
                    continue
                record, wall = json.loads(line), time.perf_counter() - start
                print(f"| {seed} | {record['epoch']} | {100 * record['test_accuracy']:.2f}% | {wall / 60:.1f} min |",
                      flush=True)  # fmt: skip
                for t in targets:
                    if record["test_accuracy"] >= t and t not in hit:
                        hit[t] = wall
            if process.wait() != 0:
                raise SystemExit(f"seed {seed}: the trainer failed (exit {process.returncode})")
            for t in targets:
                reached[t].append(hit.get(t, float("nan")))
    for t, walls in reached.items():
        done = [w for w in walls if w == w]
        shown = f"median {statistics.median(done) / 60:.1f} min" if len(done) == len(walls) else "not reached by all"
        print(f"{100 * t:.1f}%: {len(done)}/{len(walls)} seeds, {shown}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=None, help="batch sizes (default: 128 1024 on CUDA)")
    parser.add_argument("--compile", action="store_true", help="also the compiled rows (long on a CPU)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--routing", action="store_true", help="also the table of routing paths")
    parser.add_argument(
        "--one-at-a-time", action="store_true",
        help="time each precision row alone (its steps back to back, as a run takes them) instead of in turn",
    )  # fmt: skip
    parser.add_argument("--time-to-accuracy", action="store_true", help="only the fast recipe's time to accuracy")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--targets", type=float, nargs="+", default=[0.99, 0.995])
    parser.add_argument("--train-args", default="", help="more trainer options for --time-to-accuracy, one string")
    args = parser.parse_args(argv)
    if args.time_to_accuracy:
        time_to_accuracy(args.seeds, args.train_args.split(), args.targets)
        return 0
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batches = args.batches or ([128, 1024] if device.type == "cuda" else [128])
    features = cpu_features()
    print(f"CPU capability {features.capability}; {features.describe()}; oneDNN bf16 kernels: {features.onednn_bf16}")
    precision_table(device, batches, args.warmup, args.repeats, in_turn=not args.one_at_a_time)
    if not args.routing and not args.compile:
        return 0
    config = CapsNetConfig.preset("paper")
    rows: list[tuple[str, Callable[[], torch.nn.Module]]] = [
        ("capsnet, hand-written backward", lambda: Variant(config, "manual")),
        ("capsnet, autograd backward", lambda: Variant(config, "autograd")),
        ("seeds' einsum formulation", lambda: Variant(config, seeds_einsum_routing)),
        ("routing removed (ceiling)", lambda: Variant(config, no_routing)),
    ]
    if args.compile:
        rows.insert(2, ("capsnet, autograd backward, compiled", lambda: torch.compile(Variant(config, "autograd"))))
        rows.insert(4, ("seeds' einsum, compiled", lambda: torch.compile(Variant(config, seeds_einsum_routing))))
        if device.type == "cuda":
            graphs = dict(mode="reduce-overhead")
            rows.insert(
                3, ("capsnet, autograd, CUDA graphs", lambda: torch.compile(Variant(config, "autograd"), **graphs))
            )
            rows.insert(6, ("seeds' einsum, CUDA graphs", lambda: torch.compile(Variant(config, seeds_einsum_routing), **graphs)))  # fmt: skip
    print(f"\nRouting paths (forward, loss, backward, Adam) on {describe_device(device)}; median of {args.repeats}")
    print(f"\n| variant | {' | '.join(f'batch {b}' for b in batches)} |")
    print(f"|---|{'---|' * len(batches)}")
    for name, make in rows:
        cells = []
        for batch in batches:
            torch.manual_seed(0)
            seconds = step_time(make().to(device).train(), batch, device, args.warmup, args.repeats)
            cells.append(f"{batch / seconds:,.0f} images/s")
        print(f"| {name} | {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
