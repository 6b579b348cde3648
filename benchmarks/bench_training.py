"""Training-step throughput on whatever device is present: the package's routing paths, a baseline, a ceiling.

    python benchmarks/bench_training.py                    # CUDA if present, else the CPU (smaller batches)
    python benchmarks/bench_training.py --batches 128 1024 --compile

One training step is forward, margin + reconstruction loss, backward and Adam, on synthetic batches
(the input pipeline is measured by bench_model.py). Rows, each at every batch size:
- capsnet, hand-written backward: `dynamic_routing(backward="manual")`, the CPU's default;
- capsnet, autograd backward: plain ops, the default off the CPU (what `torch.compile` can fuse);
- the same, compiled (`--compile`), and with CUDA graphs (`mode="reduce-overhead"`, CUDA only);
- the seeds' formulation: u_hat by einsum and Procedure 1 in einsum (written here, as the baseline);
- routing removed: the same network with uniform couplings and one pass (the ceiling routing cannot beat).
Each row is the median of `--repeats` timed steps after `--warmup` steps, synchronised on CUDA.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from capsnet.config import CapsNetConfig
from capsnet.device import describe_device
from capsnet.layers import squash
from capsnet.model import CapsNet
from capsnet.train import training_step


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
            from capsnet.layers import dynamic_routing

            u_hat = self.digits.predictions(primary)
            poses, _ = dynamic_routing(u_hat, self.config.routing_iterations, backward=self.routing)
        else:
            poses = self.routing(primary, self.digits.weight, self.config.routing_iterations)
        return primary, poses, None


def step_time(model: torch.nn.Module, batch: int, device: torch.device, warmup: int, repeats: int) -> float:
    """Median seconds of one training step at `batch`."""
    images = torch.rand(batch, 1, 28, 28, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    config = model.config if hasattr(model, "config") else model._orig_mod.config  # type: ignore[attr-defined]
    amp = device.type == "cuda"

    def step() -> None:
        training_step(model, optimizer, images, labels, images, config, amp)  # the trainer's own step

    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=None, help="batch sizes (default: 128 1024 on CUDA)")
    parser.add_argument("--compile", action="store_true", help="also the compiled rows (long on a CPU)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batches = args.batches or ([128, 1024] if device.type == "cuda" else [32])
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
    print(f"Training step (forward, loss, backward, Adam) on {describe_device(device)}; median of {args.repeats}")
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
