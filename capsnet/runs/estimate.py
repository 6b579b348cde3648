"""How long a training run will take on this machine, from a measured speed.

The speed is what an earlier run of the same network on the same input size measured here
(`images_per_s` in its metrics.jsonl, same precision), or, without one, a few training steps
timed now on synthetic batches (`measure_speed`). Evaluation after each epoch is counted at
three times the training speed (a forward pass without backward or update).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from capsnet.data import image_folder
from capsnet.data.datasets import dataset_info
from capsnet.device import pick_device
from capsnet.nn.registry import network
from capsnet.training.acceleration import Acceleration, lay_out
from capsnet.training.optimizer import run_optimizer
from capsnet.training.options import TrainOptions, stored_network
from capsnet.training.step import training_step

EVALUATION_SPEEDUP = 3.0  # a forward pass costs about a third of a training step
# the examples a named dataset trains on (an epoch) and tests on; MultiMNIST tests on 10 pairs of each test digit
EXAMPLES = {
    "mnist": (60_000, 10_000),
    "fashion-mnist": (60_000, 10_000),
    "multimnist": (60_000, 100_000),
    "mnist-40": (60_000, 10_000),
    "smallnorb": (24_300, 24_300),
    "cifar10": (50_000, 10_000),
}


@dataclass(frozen=True)
class Speed:
    images_per_s: float
    source: str  # where the figure comes from, for the user: "run 2026-...-mnist" or "measured now"


def _same_network(args: dict[str, Any], options: TrainOptions, chosen: Acceleration) -> bool:
    try:
        same_size = dataset_info(str(args.get("dataset"))).image_size == dataset_info(options.dataset).image_size
    except (KeyError, ValueError):
        return False
    acceleration = stored if isinstance(stored := args.get("acceleration"), dict) else {}
    return (
        same_size
        and stored_network(args) == options.network
        and args.get("preset") == options.preset
        and acceleration.get("amp") == chosen.amp  # runs from before the choice was recorded are not compared
        and bool(acceleration.get("compile")) == chosen.compile
    )


def recorded_speed(runs: Iterable[Any], options: TrainOptions) -> Speed | None:
    """The speed the newest matching run measured (`runs`: `capsnet.runs.processes.RunSummary`s, newest first)."""
    acceleration = options.acceleration(pick_device(options.device))
    for run in runs:
        speeds = [m.get("images_per_s") for m in run.metrics]
        speeds = [s for s in speeds if isinstance(s, (int, float)) and s > 0]
        if speeds and _same_network(run.args, options, acceleration):
            return Speed(float(statistics.median(speeds)), f"run {run.name}")
    return None


def measure_speed(options: TrainOptions, batch: int = 8, steps: int = 2) -> Speed:
    """Time `steps` training steps of the run's network on synthetic batches (after one warm-up step), uncompiled."""
    device = pick_device(options.device)
    info = dataset_info(options.dataset)
    acceleration = options.acceleration(device)
    config = options.network_config()
    model = lay_out(network(options.network).build(config).to(device).train(), acceleration)
    optimizer = run_optimizer(model, options.lr, options.beta_lr, acceleration.fused_adam)
    images = torch.rand(batch, info.channels, info.image_size, info.image_size, device=device)  # (B, C, H, W)
    labels = torch.randint(0, config.num_classes, (batch,), device=device)
    times = []
    for step in range(steps + 1):
        start = time.perf_counter()
        training_step(model, optimizer, images, labels, images, config, acceleration.amp)  # the trainer's own step
        if step:
            times.append(time.perf_counter() - start)
    source = f"measured now on {torch.get_num_threads()} of {os.cpu_count()} cores"
    if acceleration.compile:  # the steps timed are eager: compiling takes longer than this estimate may
        source = f"{source}, uncompiled: the run compiles, and goes faster after its first minute"
    return Speed(batch / statistics.median(times), source)


def estimate_seconds(options: TrainOptions, train_examples: int, test_examples: int, speed: Speed) -> float:
    """The run's training and per-epoch evaluation time at `speed`."""
    per_epoch = train_examples / speed.images_per_s + test_examples / (EVALUATION_SPEEDUP * speed.images_per_s)
    return options.epochs * per_epoch


def dataset_examples(dataset: str) -> tuple[int, int]:
    """(training, test) examples of `dataset`, a named one or a folder of pictures (counted from its files)."""
    if dataset in EXAMPLES:
        return EXAMPLES[dataset]
    info = dataset_info(dataset)  # a folder's: its pictures listed (cached), none decoded
    if info.own is None:
        raise ValueError(f"no example counts known for {dataset}")
    found = image_folder.scan(info.own)
    return len(found.files[True]), len(found.files[False])


def run_examples(options: TrainOptions) -> tuple[int, int]:
    """(training, test) examples a run of `options` reads an epoch: its dataset's, less --val-size, within
    --train-size and --test-size."""
    train, test = dataset_examples(options.dataset)
    train -= options.val_size or 0
    return min(train, options.train_size or train), min(test, options.test_size or test)
