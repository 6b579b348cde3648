"""Where the EM network's time and bytes go, per operation and per layer, for a training step and for a reading.

    python benchmarks/profile_em.py [--presets paper-decoder small] [--batch-size 32] [--threads N] [--top 12]

For each preset (the shipped EM model's network, `paper-decoder`, and the paper's `small` one), `torch.profiler`
records one training step (forward, loss, backward, Adam; bf16 autocast where the CPU computes bf16 natively, the
trainer's own step) and one reading (a forward pass in eval mode without gradients, as evaluation and the dashboard
run it), after a warm-up step of each. Printed: the time of each layer (Conv1, PrimaryCaps, ConvCaps1, ConvCaps2,
the class capsules, the decoder, and the backward and the optimizer as wholes), the operations that take the most
time by themselves, and what each of them allocated (the peak memory of a reading is `bench_em.py --only reading`'s:
measured in a fresh process, where the profiler's own count misses what an operation frees before it returns). The dynamic-routing CapsNet
(`paper`) is profiled beside it for comparison. The figures are written up in `benchmarks/README.md`.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from capsnet.device import describe_device
from capsnet.memory import keep_freed_memory
from capsnet.nn.registry import network
from capsnet.training.acceleration import choose_acceleration, lay_out, make_adam
from capsnet.training.step import training_step

LAYERS = ("conv1", "primary", "convcaps1", "convcaps2", "classes", "digits", "decoder")  # both families' layers
PHASES = ("step: forward and loss", "step: backward", "step: optimizer")  # `capsnet.training.step`'s scopes


@contextmanager
def labelled_layers(model: nn.Module) -> Iterator[None]:
    """Each top-level layer's forward inside a `record_function` named after it, for the profiler's per-layer view."""
    handles = []
    for name in LAYERS:
        layer = getattr(model, name, None)
        if not isinstance(layer, nn.Module):
            continue
        scopes: list[record_function] = []

        def enter(_module: nn.Module, _args: object, name: str = name, scopes: list = scopes) -> None:
            scopes.append(record_function(f"layer: {name}"))
            scopes[-1].__enter__()

        def leave(_module: nn.Module, _args: object, _out: object, scopes: list = scopes) -> None:
            scopes.pop().__exit__(None, None, None)

        handles += [layer.register_forward_pre_hook(enter), layer.register_forward_hook(leave)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def profiled(label: str, run: Callable[[], object], batch: int, top: int) -> None:
    """Profile one call of `run` (after a warm-up call) and print its layers and its top operations."""
    run()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("whole"):
            run()
    events = prof.key_averages()
    whole = next(e for e in events if e.key == "whole").cpu_time_total
    print(f"\n== {label}: {whole / 1e3:.0f} ms for {batch} images ({batch / whole * 1e6:.1f} images/s)")
    scopes = [e for e in events if e.key.startswith("layer: ") or e.key in PHASES]
    for e in sorted(scopes, key=lambda e: -e.cpu_time_total):
        print(f"   {e.key:28s} {e.cpu_time_total / 1e3:9.1f} ms  {100 * e.cpu_time_total / whole:5.1f}%")
    ops = [e for e in events if not e.key.startswith(("layer: ", "step: ")) and e.key != "whole"]
    print(f"   {'top operations by self time':42s} {'self ms':>9s} {'share':>6s} {'calls':>6s} {'self alloc MB':>14s}")
    for e in sorted(ops, key=lambda e: -e.self_cpu_time_total)[:top]:
        print(f"   {e.key[:42]:42s} {e.self_cpu_time_total / 1e3:9.1f} {100 * e.self_cpu_time_total / whole:5.1f}% "
              f"{e.count:6d} {e.self_cpu_memory_usage / 2**20:14.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["paper-decoder", "small"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--no-capsnet", action="store_true", help="leave out the dynamic-routing CapsNet")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    accel = choose_acceleration(device)
    if accel.keep_memory:  # as the trainer does
        keep_freed_memory()
    print(f"{describe_device(device)}, torch {torch.__version__}, "
          f"training in {accel.precision}")  # fmt: skip
    runs = [("em", preset) for preset in args.presets] + ([] if args.no_capsnet else [("capsnet", "paper")])
    batch = args.batch_size
    for name, preset in runs:
        torch.manual_seed(0)
        net = network(name)
        config = net.preset(preset)
        model = lay_out(net.build(config).train(), accel)  # as the trainer lays it out
        images, labels = torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
        optimizer = make_adam(model.parameters(), 1e-3, accel.fused_adam)
        step = functools.partial(training_step, model, optimizer, images, labels, images, config, accel.amp, 0.5)

        def train(model: nn.Module = model, step: Callable[[], object] = step) -> object:
            return model.train(), step()

        def read(model: nn.Module = model, images: torch.Tensor = images) -> object:
            with torch.no_grad():
                return model.eval()(images)

        title = f"{net.title} {preset} (r = {config.routing_iterations}, {model.num_parameters():,} parameters)"
        with labelled_layers(model):
            profiled(f"training step, {title}, {accel.precision}", train, batch, args.top)
            profiled(f"reading, {title}, float32", read, batch, args.top)


if __name__ == "__main__":
    main()
