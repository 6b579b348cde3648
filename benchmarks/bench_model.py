"""Speed of the model, measured as ratios within one run, on whatever device is present.

    python benchmarks/bench_model.py [--device cpu] [--batch-size 128] [--repeats 7]

1. Routing layer (u_hat = W u, then Procedure 1 with r = 3) forward + backward at
   batch 128: the package's `RoutingCapsules` against a direct einsum formulation
   written here as the baseline, with a check that both give the same outputs and
   gradients.
2. Training throughput of the whole paper model (forward, backward, Adam step).
3. Single-image inference latency: forward with routing trace, primary capsules
   and reconstruction, as the dashboard calls it.
4. Training input pipeline, shifts of up to 2 px and flips: the package's batched
   `epoch_batches` on the device against the per-image torchvision pipeline it
   replaced (PIL image, v2.RandomCrop(28, padding=2), v2.RandomHorizontalFlip,
   through a DataLoader in the main process, as it ran on the CPU).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from capsnet.data.augment import epoch_batches
from capsnet.device import describe_device, pick_device
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.layers import RoutingCapsules
from capsnet.nn.losses import capsule_loss
from capsnet.nn.squash import squash


def einsum_routing(weight: torch.Tensor, u: torch.Tensor, iterations: int) -> torch.Tensor:
    """The baseline: Procedure 1 written directly with einsum, u_hat laid out (B, N, K, D)."""
    u_hat = torch.einsum("nkdp,bnp->bnkd", weight, u)  # (B, 1152, 10, 16)
    logits = torch.zeros(u_hat.shape[:3], device=u.device, dtype=u.dtype)  # (B, 1152, 10)
    for _ in range(iterations):
        coupling = torch.softmax(logits, dim=2)  # over the parents
        s = torch.einsum("bnk,bnkd->bkd", coupling, u_hat)  # (B, 10, 16)
        v = squash(s)
        logits = logits + torch.einsum("bnkd,bkd->bnk", u_hat, v)
    return v


def timed(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int = 2) -> float:
    """Median seconds of `fn` over `repeats` runs after `warmup` runs."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_routing(device: torch.device, batch: int, repeats: int) -> dict[str, float]:
    config = CapsNetConfig()
    layer = RoutingCapsules(config.num_primary, config.primary_dim, config.num_classes, config.digit_dim).to(device)
    u = squash(torch.randn(batch, config.num_primary, config.primary_dim, device=device)).requires_grad_()
    grad_out = torch.randn(batch, config.num_classes, config.digit_dim, device=device)

    def package() -> tuple[torch.Tensor, ...]:
        v, _ = layer(u, 3)
        return (v, *torch.autograd.grad(v, (layer.weight, u), grad_out))

    def baseline() -> tuple[torch.Tensor, ...]:
        v = einsum_routing(layer.weight, u, 3)
        return (v, *torch.autograd.grad(v, (layer.weight, u), grad_out))

    ours, theirs = package(), baseline()
    output_diff = (ours[0] - theirs[0]).abs().max().item()
    grad_diff = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(ours[1:], theirs[1:]))
    # interleave the two so that a change in machine load hits both alike
    t_pkg, t_base = [], []
    for _ in range(repeats):
        t_base.append(timed(baseline, device, 1, warmup=1 if not t_base else 0))
        t_pkg.append(timed(package, device, 1, warmup=1 if not t_pkg else 0))
    base, pkg = statistics.median(t_base), statistics.median(t_pkg)
    return {
        "baseline_s": base,
        "package_s": pkg,
        "speedup": base / pkg,
        "output_diff": output_diff,
        "grad_rel_diff": grad_diff,
    }


def bench_training(device: torch.device, batch: int, repeats: int) -> float:
    model = CapsNet(CapsNetConfig()).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images = torch.rand(batch, 1, 28, 28, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    amp = device.type == "cuda"

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            out = model(images, labels)
            loss = capsule_loss(out.lengths, out.reconstruction, images, labels, model.config)
        optimizer.zero_grad(set_to_none=True)
        loss.total.backward()
        optimizer.step()

    return batch / timed(step, device, repeats, warmup=1)


@torch.no_grad()
def bench_inference(device: torch.device, repeats: int) -> float:
    model = CapsNet(CapsNetConfig()).to(device).eval()
    image = torch.rand(1, 1, 28, 28, device=device)
    return timed(lambda: model(image, return_trace=True, return_primary=True), device, repeats, warmup=3)


class PilImages(Dataset):
    """uint8 images served one at a time as PIL images, as torchvision's MNIST class does."""

    def __init__(self, images: np.ndarray, transform: v2.Compose) -> None:
        self.images, self.transform = images, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(Image.fromarray(self.images[index])), 0


def bench_input_pipeline(device: torch.device, batch: int, count: int = 10_240) -> dict[str, float]:
    """Images/s of one pass over `count` training images: per-image PIL transforms vs batched on the device."""
    images = torch.randint(0, 256, (count, 1, 28, 28), dtype=torch.uint8)
    transform = v2.Compose(
        [v2.ToImage(), v2.RandomCrop(28, padding=2), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True)]
    )
    loader = DataLoader(PilImages(images[:, 0].numpy(), transform), batch_size=batch, shuffle=True)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def per_image() -> None:
        for x, _ in loader:
            x.to(device)
        sync()

    on_device, labels = images.to(device), torch.zeros(count, dtype=torch.long, device=device)

    def batched() -> None:
        for _ in epoch_batches(on_device, labels, torch.randperm(count).tolist(), batch, seed=0, hflip=True):
            pass
        sync()

    baseline = count / timed(per_image, device, repeats=3, warmup=1)
    package = count / timed(batched, device, repeats=3, warmup=1)
    return {"baseline": baseline, "package": package, "speedup": package / baseline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    device = pick_device(args.device)
    torch.manual_seed(0)
    print(f"device: {describe_device(device)}; torch {torch.__version__}; batch {args.batch_size}")
    routing = bench_routing(device, args.batch_size, args.repeats)
    throughput = bench_training(device, args.batch_size, max(3, args.repeats // 2))
    latency = bench_inference(device, args.repeats * 3)
    pipeline = bench_input_pipeline(device, args.batch_size)
    rows = [
        ("routing fwd+bwd, einsum baseline", f"{1000 * routing['baseline_s']:.1f} ms", ""),
        (
            "routing fwd+bwd, capsnet",
            f"{1000 * routing['package_s']:.1f} ms",
            f"{routing['speedup']:.2f}x faster (target >= 2x on CPU)",
        ),
        ("  max |output difference|", f"{routing['output_diff']:.1e}", "target <= 1e-5"),
        ("  max relative gradient difference", f"{routing['grad_rel_diff']:.1e}", ""),
        (
            "training throughput, whole model",
            f"{throughput:.0f} images/s",
            "fwd + bwd + Adam, batch " + str(args.batch_size),
        ),
        ("single-image inference", f"{1000 * latency:.1f} ms", "trace + primary capsules + reconstruction"),
        (
            "input pipeline, per-image PIL transforms",
            f"{pipeline['baseline']:.0f} images/s",
            "DataLoader, main process",
        ),
        (
            "input pipeline, capsnet (batched)",
            f"{pipeline['package']:.0f} images/s",
            f"{pipeline['speedup']:.0f}x faster; shifts + flips, batch {args.batch_size}",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"| {'measure':<{width}} | value | note |\n|{'-' * (width + 2)}|---|---|")
    for name, value, note in rows:
        print(f"| {name:<{width}} | {value} | {note} |")


if __name__ == "__main__":
    main()
