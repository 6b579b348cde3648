"""Routing as a switch: the same data, seed and budget trained with each routing, and one table of what each learned.

Does routing earn its cost? The papers that ask (Paik, Kwak & Kim 2019; Gu & Tresp 2020; Mazzia et al. 2021) compare
networks trained with and without it. Here each routing is trained from the same seed, on the same images, for the
same epochs and batch: dynamic routing (the CapsNet, r = 3), no routing (the same CapsNet trained with r = 1: every
coupling stays uniform), self-attention routing (Efficient-CapsNet) and EM routing (r = 2), each at the preset of the
size asked ("tiny" or "paper"). Each run is a run folder of its own under the comparison's folder, resumable: a run
that finished is read again, not trained again. The table gives, per routing, the test accuracy (mean and spread
over the seeds), the accuracy on the affNIST-like digits (`capsnet.readings.affnist`: the test digits rotated, sheared
and scaled in the network's own frame), how many of the drawn non-digits (`capsnet.data.non_digits`) it flags as not
like any class (`capsnet.readings.novelty`, with its own calibrated thresholds), the parameters, and the images per
second in training and in reading on this machine.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from capsnet.checkpoints.checkpoint import Checkpoint, load_checkpoint
from capsnet.data.datasets import placed
from capsnet.data.non_digits import non_digits
from capsnet.data.tasks import read_test_set
from capsnet.device import describe_device, pick_device
from capsnet.errors import CapsNetError
from capsnet.evaluation import Evaluation, PairEvaluation, evaluate_set
from capsnet.files import atomic_path
from capsnet.nn.registry import network_of
from capsnet.readings import affnist, novelty
from capsnet.readings.affnist import affine_images, digit_canvas
from capsnet.readings.novelty import NoveltyThresholds
from capsnet.runs.comparison import CONTENDERS, FILE, Contender
from capsnet.training.folder import RunFolder
from capsnet.training.options import TrainOptions
from capsnet.training.trainer import train


@dataclass(frozen=True)
class Budget:
    """What every contender gets alike."""

    dataset: str = "mnist"
    size: str = "tiny"  # the preset of each network: "tiny" or "paper"
    epochs: int = 1
    train_size: int | None = 2_000
    test_size: int | None = 1_000
    batch_size: int = 100
    lr: float = 1e-3

    def options(self, contender: Contender, seed: int, out: Path, device: str, data_dir: str | None) -> TrainOptions:
        options = TrainOptions(
            dataset=self.dataset, network=contender.network, preset=self.size, epochs=self.epochs,
            train_size=self.train_size, test_size=self.test_size, batch_size=self.batch_size, lr=self.lr, seed=seed,
            out=str(out), progress=False, device=device, data_dir=data_dir,
        )  # fmt: skip
        counted = contender.routing_iterations
        return options if counted is None else dataclasses.replace(options, routing_iterations=counted)


@dataclass(frozen=True)
class Result:
    """One contender trained from one seed."""

    routing: str  # `Contender.key`
    seed: int
    test_accuracy: float
    parameters: int
    train_images_per_s: float
    read_images_per_s: float
    affnist_like_accuracy: float | None = None  # None: not a dataset of single MNIST digits
    non_digits_flagged: int | None = None  # of `non_digits`; None: no test (it redraws nothing, or is too weak)
    non_digits: int = 0


def _robustness(
    checkpoint: Checkpoint, result: Evaluation | PairEvaluation, budget: Budget, data_dir: str | None
) -> dict[str, Any]:
    """The affNIST-like set's accuracy and how many drawn non-digits the model flags as not like any class (its
    thresholds from its header, else from `result`, its test set's reading), for a network of single MNIST digits."""
    side, affine = digit_canvas(budget.dataset), affine_images(budget.dataset, data_dir, budget.test_size)
    if side is None or affine is None or not isinstance(result, Evaluation):
        return {}
    model = checkpoint.model
    found: dict[str, Any] = {"affnist_like_accuracy": affnist.accuracy(model, *affine)}
    thresholds = NoveltyThresholds.from_dict(checkpoint.info.novelty) or NoveltyThresholds.from_evaluation(result)
    drawings = torch.from_numpy(np.stack(list(non_digits().values()))).unsqueeze(1)  # (M, 1, 28, 28)
    found["non_digits"] = len(drawings)
    if thresholds is not None and network_of(model).redraws(model.config):
        drawings = placed(drawings, side)  # (M, 1, side, side), centred as a test digit is
        found["non_digits_flagged"] = int(novelty.flags(model, drawings, thresholds).sum())
    return found


def _finished(run: RunFolder) -> bool:
    progress = run.read_progress()
    return progress is not None and progress.status == "finished" and run.file(run.BEST).is_file()


def _trained(options: TrainOptions, run: RunFolder) -> None:
    """Train the run, go on with one that stopped part way (--resume), or leave one that finished as it is. A run
    stopped by Ctrl-C or SIGTERM ends the comparison with a CapsNetError saying how to go on."""
    if _finished(run):
        return
    train(dataclasses.replace(options, resume=run.has_state()))
    if not _finished(run):
        raise CapsNetError(f"{run.path} stopped before its end: the same command goes on from there")


def measure(
    contender: Contender, seed: int, budget: Budget, folder: Path, device: str = "cpu", data_dir: str | None = None
) -> Result:
    """Train `contender` from `seed` with `budget` in its own run folder under `folder` (or read the run that
    finished there), then read its test set with its best checkpoint."""
    run = RunFolder(folder / f"{contender.key}-seed{seed}")
    _trained(budget.options(contender, seed, run.path, device, data_dir), run)
    checkpoint = load_checkpoint(run.file(run.BEST), device=pick_device(device))
    test = read_test_set(budget.dataset, data_dir)
    if budget.test_size:
        test = test.first(budget.test_size)
    start = time.perf_counter()
    result = evaluate_set(checkpoint.model, test)
    read = len(test.labels) / max(time.perf_counter() - start, 1e-9)
    metrics = run.read_metrics()
    speeds = [float(m["images_per_s"]) for m in metrics if "images_per_s" in m]
    return Result(
        contender.key, seed, result.accuracy, sum(p.numel() for p in checkpoint.model.parameters()),
        speeds[-1] if speeds else float("nan"), read, **_robustness(checkpoint, result, budget, data_dir),
    )  # fmt: skip


def compare(
    routings: Sequence[str],
    seeds: Sequence[int],
    budget: Budget,
    folder: Path,
    device: str = "cpu",
    data_dir: str | None = None,
    on_result: Callable[[Result], None] | None = None,
) -> dict[str, Any]:
    """Every routing in `routings` from every seed; the record written to `folder`/comparison.json and returned."""
    unknown = [r for r in routings if r not in CONTENDERS]
    if unknown:
        raise ValueError(f"unknown routing {unknown[0]!r}; choose from {', '.join(CONTENDERS)}")
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    for key in routings:
        for seed in seeds:
            results.append(measure(CONTENDERS[key], seed, budget, folder, device, data_dir))
            if on_result is not None:
                on_result(results[-1])
    record = {
        "budget": asdict(budget),
        "seeds": list(seeds),
        "machine": describe_device(pick_device(device)),
        "results": [asdict(r) for r in results],
    }
    with atomic_path(folder / FILE) as tmp:
        tmp.write_text(json.dumps(record, indent=1))
    return record
