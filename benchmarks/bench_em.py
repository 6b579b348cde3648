"""Speed of EM routing and of the EM network, measured as ratios within one run, on the CPU.

    python benchmarks/bench_em.py [--batch-size 64] [--repeats 5] [--threads N] [--only routing|reading|training]
    python benchmarks/bench_em.py --device cuda [--batch-size 128]   # the GPU table (4, below)
    python benchmarks/bench_em.py --only routing-matters [--images 256]   # 5, below; needs $CAPSNET_DATA_DIR

1. EM routing forward + backward on the votes of the small network's ConvCaps1 (3x3 stride 2 from 8 types on a
   12x12 grid to 16 types: 25 positions x 16 parents x 72 slots x 16 pose entries per example), r = 3: the
   package's `em_routing` (moments as batched products, a hand-written backward) against the straightforward
   formulation written here (the paper's formulas with broadcasting, votes laid out (B, P, I, J, H) as public
   implementations lay them, the Gaussian density taken directly, autograd for the backward), with a check that
   both give the same outputs and gradients.
2. Reading throughput and memory (a forward pass in eval mode without gradients, as evaluation, predict and the
   dashboard run it) at batch 500 of the EM networks (r = 2, as the shipped EM model) beside the CapsNet (r = 3), each in a fresh process so that its peak
   memory is its own, the rows in turn twice: the EM network read by the compiled kernel (`capsnet.nn.em_native`,
   the package's way on a CPU) against the PyTorch path (routing in chunks of at most `CPU_CHUNK_BYTES` of votes,
   the way wherever no C compiler works), images/s and the process's peak memory per image.
3. Training throughput (forward, loss, backward, Adam step, bf16 autocast where the CPU computes bf16 natively)
   of the EM networks ("small-decoder", "paper-decoder", r = 2) beside the dynamic-routing CapsNet ("paper"), the
   trainer's own step: the EM networks on the PyTorch path eager and compiled (where no C compiler works) and on
   the kernel's passes (`capsnet.nn.em_native_training`, the trainer's way on a CPU); the kernel's rows and the
   CapsNet's are measured a step of each in turn, `--repeats` rounds, so that a drift in the machine reaches each
   alike.
4. With `--device cuda`: the routing of 1 on the GPU, then one table of training and reading throughput at the batch
   size for the EM networks, the CapsNet and the seeds' einsum formulation of the CapsNet (`bench_training.py`'s
   baseline): training as the trainer runs it on CUDA (bf16 autocast, eager, then compiled), reading in float32
   without gradients as evaluation runs it, with the GPU's peak memory per image read. Eager rows come first, so a
   run cut short still has them.
5. `--only routing-matters`: Where routing matters with the shipped EM model (`checkpoints/mnist-em.safetensors`) on
   the first `--images` MNIST test digits, r = 1..5, `iteration_lengths` (ConvCaps1 routed once for every r) on the
   PyTorch path and with the compiled kernel, taking turns batch by batch (so that a drift in the machine's speed
   reaches each alike); with the time the whole test set would take.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from capsnet.device import describe_device
from capsnet.memory import keep_freed_memory
from capsnet.nn.em_routing import EPSILON, VARIANCE_FLOOR, em_routing, inverse_temperature, reach_counts
from capsnet.nn.matrix_capsules import ConvCapsules
from capsnet.nn.registry import network
from capsnet.training.acceleration import choose_acceleration, lay_out, make_adam
from capsnet.training.step import training_step


def straightforward_em(votes, acts, child_index, children, beta_u, beta_a, iterations):
    """The baseline: EM routing written directly from the paper's formulas, votes (B, P, I, J, H)."""
    batch, positions, slots, parents, _ = votes.shape
    counts = reach_counts(child_index, children).to(votes.dtype)
    R = (1.0 / (counts[child_index] * parents)).view(1, positions, slots, 1).expand(batch, -1, -1, parents)
    a_in = acts.unsqueeze(-1)  # (B, P, I, 1)
    flat = child_index.flatten()
    for t in range(iterations):
        lam = inverse_temperature(t + 1)
        r = R * a_in  # (B, P, I, J)
        n = r.sum(dim=2, keepdim=True)  # (B, P, 1, J)
        mu = (r.unsqueeze(-1) * votes).sum(dim=2, keepdim=True) / (n.unsqueeze(-1) + EPSILON)  # (B, P, 1, J, H)
        var = (r.unsqueeze(-1) * (votes - mu) ** 2).sum(dim=2, keepdim=True) / (n.unsqueeze(-1) + EPSILON)
        var = var + VARIANCE_FLOOR
        cost = (beta_u.view(-1, 1) + 0.5 * torch.log(var)) * (n.unsqueeze(-1) * parents / slots)
        a_out = torch.sigmoid(lam * (beta_a - cost.sum(dim=-1)))  # (B, P, 1, J)
        if t < iterations - 1:
            log_p = -0.5 * (((votes - mu) ** 2) / var + torch.log(2 * math.pi * var)).sum(dim=-1)  # (B, P, I, J)
            logits = torch.log(a_out) + log_p
            weight = torch.exp(logits - logits.detach().amax(dim=(1, 2, 3), keepdim=True))
            total = torch.zeros(batch, children, dtype=votes.dtype, device=votes.device).index_add(
                1, flat, weight.sum(-1).flatten(1)
            )
            R = weight / total[:, flat].view(batch, positions, slots, 1)
    return mu.squeeze(2), a_out.squeeze(2)


def timed(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median seconds of `fn` over `repeats` runs after `warmup` runs (each run waits for the GPU, if one is used)."""
    sync = torch.cuda.synchronize if torch.cuda.is_initialized() else (lambda: None)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_routing(batch: int, repeats: int, device: torch.device | None = None) -> None:
    device = device or torch.device("cpu")
    torch.manual_seed(0)
    layer = ConvCapsules(in_types=8, out_types=16, kernel=3, stride=2, in_size=12).to(device)
    positions, slots = layer.child_index.shape
    with torch.device(device):
        votes = torch.randn(batch, positions, 16, slots, 16, requires_grad=True)  # (B, P, J, I, H)
        acts = torch.rand(batch, positions, slots, requires_grad=True)
        beta_u = (torch.randn(16) * 0.1).requires_grad_()
        beta_a = (torch.randn(16) * 0.1).requires_grad_()
        g_mean, g_a = torch.randn(batch, positions, 16, 16), torch.randn(batch, positions, 16)
    votes_b = votes.detach().transpose(2, 3).contiguous().requires_grad_()  # (B, P, I, J, H)

    def ours() -> tuple[torch.Tensor, ...]:
        mean, a, _ = em_routing(votes, acts, layer.child_index, layer.children_count, beta_u, beta_a, 3)
        return torch.autograd.grad((mean * g_mean).sum() + (a * g_a).sum(), (votes, acts, beta_u, beta_a))

    def baseline() -> tuple[torch.Tensor, ...]:
        mean, a = straightforward_em(votes_b, acts, layer.child_index, layer.children_count, beta_u, beta_a, 3)
        return torch.autograd.grad((mean * g_mean).sum() + (a * g_a).sum(), (votes_b, acts, beta_u, beta_a))

    mine, theirs = ours(), baseline()
    torch.testing.assert_close(mine[0], theirs[0].transpose(2, 3), rtol=1e-3, atol=1e-4)
    for x, y in zip(mine[1:], theirs[1:]):
        torch.testing.assert_close(x, y, rtol=1e-3, atol=1e-4)
    t_ours, t_base = timed(ours, repeats), timed(baseline, repeats)
    print(f"EM routing fwd+bwd, batch {batch}, r=3, {positions}x16 parents x {slots} slots x 16 (same outputs and "
          f"gradients): package {1000 * t_ours:.0f} ms, straightforward {1000 * t_base:.0f} ms, "
          f"ratio {t_base / t_ours:.2f}x")  # fmt: skip


def peak_kb() -> int:
    """This process's peak resident memory in KB: VmHWM, its own address space's high-water mark (getrusage's
    ru_maxrss carries the parent's peak across fork and exec)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def read_once(name: str, preset: str, batch: int, way: str, seconds: float = 8.0) -> None:
    """One reading measurement in this process: prints 'images/s MB-per-image' for the parent process to collect.
    `way`: "kernel" (the compiled kernel, `capsnet.nn.em_native`) or "pytorch" (the PyTorch path in chunks)."""
    from capsnet.nn import em_native

    if way == "pytorch":
        os.environ[em_native.NATIVE_ENV] = "0"
    elif name == "em" and em_native.kernel() is None:
        raise SystemExit("no C compiler works here: the kernel cannot be measured")
    torch.manual_seed(0)
    net = network(name)
    # the EM networks at r = 2, as the shipped EM model was trained and is read; the CapsNet at the paper's r = 3
    model = net.build(net.preset(preset, routing_iterations=2 if name == "em" else 3)).eval()
    images = torch.rand(batch, 1, 28, 28)
    with torch.no_grad():
        model(images[:1])  # warm-up, and the model's own memory before the peak is measured
        before = peak_kb()
        start, runs = time.perf_counter(), 0
        while runs < 2 or time.perf_counter() - start < seconds:
            model(images)
            runs += 1
        rate = batch * runs / (time.perf_counter() - start)
    grown = peak_kb() - before
    print(f"{rate} {grown / 1024 / batch}")


def bench_reading(threads: int, rounds: int = 2) -> None:
    """Each row in a fresh process (its peak memory its own), the rows in turn `rounds` times so that a drift in the
    machine's speed reaches each alike; the ratios are taken within a round."""
    runs = (
        ("em", "paper-decoder", "pytorch"),
        ("em", "paper-decoder", "kernel"),
        ("em", "small-decoder", "pytorch"),
        ("em", "small-decoder", "kernel"),
        ("capsnet", "paper", "pytorch"),
    )
    batch = 500
    for round_ in range(1, rounds + 1):
        rates = {}
        for name, preset, way in runs:
            command = [sys.executable, __file__, "--read-once", name, preset, str(batch), way]
            command += ["--threads", str(threads)]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            rate, per_image = map(float, out.split())
            rates[preset, way] = rate
            how = "" if name != "em" else f", {'the compiled kernel' if way == 'kernel' else 'the PyTorch path'}"
            print(f"round {round_}: reading, {network(name).title} ({preset}), batch {batch}{how}: {rate:.1f} images/s, "
                  f"peak memory {per_image:.2f} MB an image", flush=True)  # fmt: skip
        capsnet = rates["paper", "pytorch"]
        for preset in ("paper-decoder", "small-decoder"):
            kernel, plain = rates[preset, "kernel"], rates[preset, "pytorch"]
            print(f"round {round_}: reading, {preset}: kernel / PyTorch path {kernel / plain:.2f}x; EM / CapsNet "
                  f"{kernel / capsnet:.2f}x with the kernel, {plain / capsnet:.2f}x without", flush=True)  # fmt: skip


def bench_training(batch: int, repeats: int) -> None:
    """The PyTorch path's rows one after the other; then the kernel's rows and the CapsNet's step by step in turn,
    `repeats` rounds (the machine's speed drifts by a fifth over minutes on a shared host: a row measured a minute
    after another compares a drift, not the code), the ratio taken within each round."""
    from capsnet.nn import em_native

    device = torch.device("cpu")
    accel = choose_acceleration(device, amp=None, fused_adam=None, compile=None)
    if accel.keep_memory:  # as the trainer does: every row alike
        keep_freed_memory()
    images, labels = torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    rates: dict[tuple[str, str], float] = {}
    said = {"pytorch": "the PyTorch path, eager", "kernel": "the kernel's passes", "eager": "eager"}

    def step_of(name: str, preset: str, iterations: int, how: str) -> tuple[Callable[[], object], str]:
        torch.manual_seed(0)
        net = network(name)
        config = net.preset(preset, routing_iterations=iterations)
        model = lay_out(net.build(config).train(), accel)
        optimizer = make_adam(model.parameters(), 1e-3, accel.fused_adam)
        stepped = torch.compile(model) if how == "compiled" else model
        step = functools.partial(training_step, stepped, optimizer, images, labels, images, config, accel.amp, 0.5)
        return step, f"training step, {net.title} ({preset}, r={iterations}, {model.num_parameters():,} parameters), "

    # the EM networks at r = 2 as the shipped EM model was trained (the small one and the paper's, both with the
    # decoder), beside the paper's dynamic-routing CapsNet (r = 3, eager: it trains slower compiled on a CPU); each
    # EM network three ways: the PyTorch path eager (routing in chunks), the PyTorch path compiled (a long CPU run's way
    # without a C compiler), and the kernel's passes (`em_native_training`, the trainer's way on a CPU)
    presets = ("small-decoder", "paper-decoder")
    os.environ[em_native.NATIVE_ENV] = "0"
    for preset in presets:
        for how in ("pytorch", "compiled"):
            step, title = step_of("em", preset, 2, how)
            start = time.perf_counter()
            step()  # compiles, when compiled
            first = time.perf_counter() - start
            rates[preset, how] = batch / timed(step, repeats)
            print(f"{title}batch {batch}, {accel.precision}, "
                  f"{said.get(how, f'the PyTorch path compiled (first step {first:.0f} s)')}: "
                  f"{rates[preset, how]:.1f} images/s", flush=True)  # fmt: skip
    os.environ[em_native.NATIVE_ENV] = "1"
    rows = {(preset, "kernel"): step_of("em", preset, 2, "kernel") for preset in presets}
    rows["paper", "eager"] = step_of("capsnet", "paper", 3, "eager")
    times: dict[tuple[str, str], list[float]] = {key: [] for key in rows}
    for step, _ in rows.values():
        step()  # warm up
    for _ in range(repeats):  # in turn, a step of each
        for key, (step, _) in rows.items():
            start = time.perf_counter()
            step()
            times[key].append(time.perf_counter() - start)
    os.environ.pop(em_native.NATIVE_ENV)
    for key, (_, title) in rows.items():
        rates[key] = batch / statistics.median(times[key])
        print(f"{title}batch {batch}, {accel.precision}, {said[key[1]]}: {rates[key]:.1f} images/s (median of "
              f"{repeats}, in turn)", flush=True)  # fmt: skip
    paper = rates["paper", "eager"]
    for preset in presets:
        kernel, before = rates[preset, "kernel"], max(rates[preset, "pytorch"], rates[preset, "compiled"])
        rounds = [c / e for e, c in zip(times[preset, "kernel"], times["paper", "eager"])]
        print(f"{preset}: kernel / the PyTorch path's best {kernel / before:.2f}x; EM / CapsNet {kernel / paper:.2f}x "
              f"with the kernel (round by round {min(rounds):.2f}-{max(rounds):.2f}x), {before / paper:.2f}x "
              f"without")  # fmt: skip


def bench_on_device(device: torch.device, batch: int, repeats: int) -> None:
    """Training and reading throughput on `device` (a GPU) at `batch`: the EM networks, the CapsNet and the seeds'
    einsum CapsNet, training eager then compiled (bf16 autocast, as the trainer runs on CUDA), reading eager."""
    from bench_training import Variant, seeds_einsum_routing  # the seeds' formulation, written once, there

    from capsnet.nn.config import CapsNetConfig

    accel = choose_acceleration(device)
    images, labels = torch.rand(batch, 1, 28, 28, device=device), torch.randint(0, 10, (batch,), device=device)
    seeds = ("seeds' einsum CapsNet", "paper", 3)
    runs = (seeds, ("capsnet", "paper", 3), ("em", "small", 3), ("em", "small-decoder", 2), ("em", "paper-decoder", 2))

    def build(name: str, preset: str, iterations: int) -> tuple[torch.nn.Module, object, str]:
        torch.manual_seed(0)
        if name == seeds[0]:
            config = CapsNetConfig.preset(preset)
            return Variant(config, seeds_einsum_routing).to(device), config, name
        net = network(name)
        config = net.preset(preset, routing_iterations=iterations)
        return net.build(config).to(device), config, f"{net.title} ({preset}, r={iterations})"

    print(f"\nOn {describe_device(device)}, batch {batch}, median of {repeats}: training {accel.precision}; "
          "reading float32, no gradients\n")  # fmt: skip
    print("| network | parameters | training, eager | reading, eager | peak memory a reading image |")
    print("|---|---|---|---|---|")
    train_rates = {}
    for name, preset, iterations in runs:
        model, config, title = build(name, preset, iterations)
        optimizer = make_adam(model.parameters(), 1e-3, accel.fused_adam)
        step = functools.partial(training_step, model.train(), optimizer, images, labels, images, config, accel.amp)
        train_rates[title, "eager"] = batch / timed(step, repeats, warmup=2)
        model.eval()
        with torch.no_grad():
            model(images)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            read = batch / timed(functools.partial(model, images), repeats)
            per_image = (torch.cuda.max_memory_allocated(device) - before) / 2**20 / batch
        parameters = sum(p.numel() for p in model.parameters())
        print(f"| {title} | {parameters:,} | {train_rates[title, 'eager']:,.0f} images/s | {read:,.0f} images/s | "
              f"{per_image:.2f} MB |", flush=True)  # fmt: skip
        del model, optimizer, step
    print("\n| network | training, compiled | compiled / eager | first step (compiling) |")
    print("|---|---|---|---|")
    for name, preset, iterations in runs:
        model, config, title = build(name, preset, iterations)
        optimizer = make_adam(model.parameters(), 1e-3, accel.fused_adam)
        compiled = torch.compile(model.train())
        step = functools.partial(training_step, compiled, optimizer, images, labels, images, config, accel.amp)
        start = time.perf_counter()
        step()
        first = time.perf_counter() - start
        rate = batch / timed(step, repeats, warmup=2)
        train_rates[title, "compiled"] = rate
        print(f"| {title} | {rate:,.0f} images/s | {rate / train_rates[title, 'eager']:.2f}x | {first:.0f} s |",
              flush=True)  # fmt: skip
        del model, optimizer, compiled, step


def bench_routing_matters(images: int) -> None:
    from pathlib import Path

    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.data.tasks import read_test_set
    from capsnet.nn import em_native
    from capsnet.readings.routing_matters import BATCH_SIZE, iteration_lengths

    model = load_checkpoint(Path(__file__).resolve().parents[1] / "checkpoints" / "mnist-em.safetensors").model.eval()
    test = read_test_set("mnist").first(images)

    def lengths(x: torch.Tensor, kernel: bool) -> torch.Tensor:
        os.environ[em_native.NATIVE_ENV] = "1" if kernel else "0"
        try:
            return iteration_lengths(model, x)
        finally:
            os.environ.pop(em_native.NATIVE_ENV)

    ways: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "before: iteration_lengths on the PyTorch path": functools.partial(lengths, kernel=False),
        "now: iteration_lengths with the compiled kernel": functools.partial(lengths, kernel=True),
    }
    seconds = dict.fromkeys(ways, 0.0)
    results: dict[str, list[torch.Tensor]] = {name: [] for name in ways}
    iteration_lengths(model, test.images[:2])  # warm
    for start in range(0, images, BATCH_SIZE):
        x = test.images[start : start + BATCH_SIZE]
        for name, way in ways.items():
            begin = time.perf_counter()
            results[name].append(way(x))
            seconds[name] += time.perf_counter() - begin
    first = next(iter(ways))
    outputs = {name: torch.cat(parts) for name, parts in results.items()}
    print(f"\nWhere routing matters, the shipped EM model, the first {images:,} MNIST test digits, r = 1..5:")
    for name, total in seconds.items():
        same = (outputs[name].argmax(-1) == outputs[first].argmax(-1)).float().mean().item()
        print(f"{name}: {images / total:.1f} images/s, 10,000 images in {10_000 * total / images / 60:.1f} min, "
              f"{seconds[first] / total:.2f}x; answers equal to the first way's: {100 * same:.2f}%", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--only", choices=("routing", "reading", "training", "routing-matters"), default=None, help="one part alone"
    )
    parser.add_argument("--images", type=int, default=256, help="test digits for --only routing-matters")
    parser.add_argument("--device", default="cpu", help="cuda: the routing and the GPU table (4) instead")
    parser.add_argument("--read-once", nargs=4, metavar=("NETWORK", "PRESET", "BATCH", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.read_once:
        name, preset, batch, way = args.read_once
        read_once(name, preset, int(batch), way)
        return
    device = torch.device(args.device)
    if device.type != "cpu":
        torch.zeros(1, device=device)  # starts CUDA, so that `timed` waits for it
        print(f"{describe_device(device)}, torch {torch.__version__}")
        bench_routing(args.batch_size, args.repeats, device)
        bench_on_device(device, args.batch_size, args.repeats)
        return
    print(f"{describe_device(torch.device('cpu'))}, torch {torch.__version__}")  # the device's words name its threads
    if args.only in (None, "routing"):
        bench_routing(args.batch_size, args.repeats)
    if args.only in (None, "reading"):
        bench_reading(torch.get_num_threads())
    if args.only in (None, "training"):
        bench_training(args.batch_size, args.repeats)
    if args.only in (None, "routing-matters"):
        bench_routing_matters(args.images)


if __name__ == "__main__":
    main()
