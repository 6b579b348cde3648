"""Where routing matters: the test images whose answer changes with the number of routing iterations.

For a CapsNet and its labelled test set, every image is read at r = 1..5 routing iterations (r = 1: uniform
couplings, no routing at all). The convolutions and the votes u_hat_{j|i} are computed once per batch; only
routing (`capsnet.nn.dynamic_routing.dynamic_routing`) runs again for each r, on the same votes. The result is a typed,
JSON-serialisable `RoutingMatters`: the accuracy at each r, and every image whose prediction differs between
any two r, with its prediction and capsule lengths at each r.

It is kept once per model as the checkpoint's "routing" entry in the measurement store
(`capsnet.checkpoints.measurements`): beside a checkpoint as `mnist.routing.json` when the CLI measures it (so
the shipped models carry theirs), else in the user's store. The entry names the SHA-256 of the checkpoint it
was measured on and is read back tolerantly: a missing, damaged or stale entry (another checkpoint's, another
test set's) is never trusted, only measured again.

    python -m capsnet routing-matters checkpoints/mnist.safetensors   # measure and keep (once), print the summary
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from capsnet.checkpoints import measurements
from capsnet.checkpoints.checkpoint import Checkpoint
from capsnet.data.tasks import LabelledSet
from capsnet.device import exact_float32
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.em_capsnet import EMCapsNet
from capsnet.nn.registry import network_of

ITERATIONS = (1, 2, 3, 4, 5)
BATCH_SIZE = 128  # u_hat of 128 paper-sized examples is 94 MB (float32)
FORMAT = 1  # the sidecar's layout; a file of another format is measured again
KIND = "routing"  # the measurement store's name for this reading
DECIMALS = 4  # capsule lengths are kept to 4 decimals


@dataclass(frozen=True)
class ChangedImage:
    """A test image whose prediction differs between two numbers of routing iterations."""

    index: int  # in the test set
    label: int
    predictions: tuple[int, ...]  # one per entry of RoutingMatters.iterations
    lengths: tuple[tuple[float, ...], ...]  # (R, K): the capsule lengths at each r

    def right(self) -> tuple[bool, ...]:
        """Whether each r's prediction is the label."""
        return tuple(p == self.label for p in self.predictions)


@dataclass(frozen=True)
class RoutingMatters:
    """The accuracy at each number of routing iterations, and the images whose answer depends on it."""

    dataset: str
    checkpoint_sha256: str  # of the checkpoint file measured ("" when not measured from a file)
    total: int  # test images read: the first `total` of the test set
    iterations: tuple[int, ...]  # the r measured, ascending
    trained_iterations: int  # the r the model was trained with
    correct: tuple[int, ...]  # right answers at each r
    differs_from_first: tuple[int, ...]  # images whose answer at r differs from the answer at iterations[0]
    changed: tuple[ChangedImage, ...]  # in test-set order

    @property
    def accuracy(self) -> tuple[float, ...]:
        return tuple(c / self.total for c in self.correct)

    def shown_iterations(self, image: ChangedImage) -> int:
        """The r at which to look at `image` on the Routing page: the model's own r if its answer there differs
        from the one without routing (r = iterations[0]), else the first r whose answer does."""
        first = image.predictions[0]
        if self.trained_iterations in self.iterations:
            if image.predictions[self.iterations.index(self.trained_iterations)] != first:
                return self.trained_iterations
        return next((r for r, p in zip(self.iterations, image.predictions) if p != first), self.iterations[-1])

    def effect(self, image: ChangedImage) -> str:
        """What routing does to `image`'s answer, the model's own r (else the last) against the first: "fixes" (wrong
        without routing, right with it), "breaks" (the reverse), or "other" (a change elsewhere, or wrong both times)."""
        own = self.trained_iterations if self.trained_iterations in self.iterations else self.iterations[-1]
        before, after = image.right()[0], image.right()[self.iterations.index(own)]
        return "fixes" if after and not before else "breaks" if before and not after else "other"

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "what": "predictions at each number of routing iterations: capsnet/readings/routing_matters.py",
            "dataset": self.dataset,
            "checkpoint_sha256": self.checkpoint_sha256,
            "total": self.total,
            "iterations": list(self.iterations),
            "trained_iterations": self.trained_iterations,
            "correct": list(self.correct),
            "differs_from_first": list(self.differs_from_first),
            "changed": [
                {
                    "index": c.index,
                    "label": c.label,
                    "predictions": list(c.predictions),
                    "lengths": [list(row) for row in c.lengths],
                }
                for c in self.changed
            ],  # fmt: skip
        }

    @classmethod
    def from_dict(cls, data: Any) -> RoutingMatters:
        """The inverse of `to_dict`; ValueError (one line) for anything that is not one."""
        try:
            if data["format"] != FORMAT:
                raise ValueError(f"format {data['format']!r}, not {FORMAT}")
            iterations = _ints(data["iterations"], "iterations", low=1)
            r, total = len(iterations), _int(data["total"], "total", low=1)
            if r == 0 or list(iterations) != sorted(set(iterations)):
                raise ValueError("iterations must be distinct and ascending")
            changed = []
            for item in data["changed"]:
                lengths = tuple(tuple(_float(v) for v in row) for row in item["lengths"])
                k = len(lengths[0]) if lengths else 0
                predictions = _ints(item["predictions"], "predictions", low=0, high=k - 1)
                if len(lengths) != r or len(predictions) != r or any(len(row) != k for row in lengths):
                    raise ValueError("a changed image needs one prediction and one row of lengths per iteration")
                label = _int(item["label"], "label", low=0, high=k - 1)
                changed.append(ChangedImage(_int(item["index"], "index", 0, total - 1), label, predictions, lengths))
            result = cls(
                dataset=str(data["dataset"]),
                checkpoint_sha256=str(data["checkpoint_sha256"]),
                total=total,
                iterations=iterations,
                trained_iterations=_int(data["trained_iterations"], "trained_iterations", low=1),
                correct=_ints(data["correct"], "correct", low=0, high=total),
                differs_from_first=_ints(data["differs_from_first"], "differs_from_first", low=0, high=total),
                changed=tuple(changed),
            )
        except (KeyError, TypeError, IndexError) as error:
            raise ValueError(f"not a routing summary: {type(error).__name__} {error}") from None
        if len(result.correct) != r or len(result.differs_from_first) != r:
            raise ValueError("correct and differs_from_first need one count per iteration")
        return result


def _int(value: Any, name: str, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}"[:120])
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} {value} out of range")
    return value


def _ints(values: Any, name: str, low: int | None = None, high: int | None = None) -> tuple[int, ...]:
    if not isinstance(values, list):
        raise ValueError(f"{name} must be a list")
    return tuple(_int(v, name, low, high) for v in values)


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise ValueError(f"a length must be a finite number, got {value!r}"[:120])
    return float(value)


# ---------------------------------------------------------------- measuring


def iteration_lengths(
    model: CapsNet | EMCapsNet,
    images: Tensor,
    iterations: Sequence[int] = ITERATIONS,
    batch_size: int = BATCH_SIZE,
    on_batch: Callable[[int, int], None] | None = None,
) -> Tensor:
    """The capsule lengths of every image at each number of routing iterations: (N, R, K), float32, on the CPU.

    Each network says how (`scores_by_iterations`): the CapsNet runs its convolutions and votes once per batch and
    routes them again for each r; the EM network gives its class activations a_j, every capsule layer routed r
    times (its first capsule layer once for every r; the later ones again for each r, as their votes depend on the
    layer before). `on_batch(done,
    total)` after each batch. The model is used in inference mode and left as it was.
    """
    network_of(model).routes()  # ValueError for a network that does not route
    if len(iterations) == 0 or min(iterations) < 1:
        raise ValueError(f"iterations must be at least 1, got {list(iterations)}")
    if images.dim() != 4 or len(images) == 0:
        raise ValueError(f"expected a non-empty batch of images (N, C, H, W), got {tuple(images.shape)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    weight = next(model.parameters())
    device, dtype = weight.device, weight.dtype
    was_training = model.training
    model.eval()
    parts = []
    try:
        with torch.inference_mode(), exact_float32():  # a GPU's answers are then the CPU's
            for start in range(0, len(images), batch_size):
                x = images[start : start + batch_size].to(device, dtype)  # (B, C, H, W)
                parts.append(model.scores_by_iterations(x, iterations).float().cpu())  # (B, R, K)
                if on_batch is not None:
                    on_batch(min(start + batch_size, len(images)), len(images))
    finally:
        model.train(was_training)
    return torch.cat(parts)  # (N, R, K)


def summarise(
    lengths: Tensor | np.ndarray,
    labels: Tensor | np.ndarray,
    iterations: Sequence[int] = ITERATIONS,
    dataset: str = "",
    trained_iterations: int = 3,
    checkpoint_sha256: str = "",
) -> RoutingMatters:
    """The summary of `iteration_lengths`' (N, R, K) lengths for test images with these (N,) labels."""
    lengths = np.asarray(lengths, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    if lengths.ndim != 3 or lengths.shape[0] != len(labels) or lengths.shape[1] != len(iterations):
        raise ValueError(
            f"expected lengths (N, {len(iterations)}, K) for {len(labels)} labels, got {tuple(lengths.shape)}"
        )
    predictions = lengths.argmax(axis=2)  # (N, R)
    changed = np.flatnonzero((predictions != predictions[:, :1]).any(axis=1))  # differs between some two r
    rounded = np.round(lengths[changed].astype(np.float64), DECIMALS)  # (C, R, K): float64, so 0.1235 stays 0.1235
    return RoutingMatters(
        dataset=dataset,
        checkpoint_sha256=checkpoint_sha256,
        total=len(labels),
        iterations=tuple(int(r) for r in iterations),
        trained_iterations=int(trained_iterations),
        correct=tuple(int(c) for c in (predictions == labels[:, None]).sum(axis=0)),
        differs_from_first=tuple(int(c) for c in (predictions != predictions[:, :1]).sum(axis=0)),
        changed=tuple(
            ChangedImage(
                int(i),
                int(labels[i]),
                tuple(int(p) for p in predictions[i]),
                tuple(tuple(float(v) for v in row) for row in rows),
            )
            for i, rows in zip(changed, rounded)
        ),  # fmt: skip
    )


def measure(
    model: CapsNet | EMCapsNet,
    test: LabelledSet,
    iterations: Sequence[int] = ITERATIONS,
    checkpoint_sha256: str = "",
    on_batch: Callable[[int, int], None] | None = None,
) -> RoutingMatters:
    """`model` on every image of `test` at each number of routing iterations (single images only, not pairs)."""
    if test.task.pairs:
        raise ValueError(f"{test.info.title} examples are pairs of digits: this measure is for single images")
    lengths = iteration_lengths(model, test.images, iterations, on_batch=on_batch)  # (N, R, K)
    return summarise(
        lengths, test.labels, iterations, test.info.name, model.config.routing_iterations, checkpoint_sha256
    )


# ---------------------------------------------------------------- kept in the measurement store


def sidecar_path(checkpoint_path: str | os.PathLike) -> Path:
    """Where a checkpoint's summary ships beside it: `mnist.safetensors` -> `mnist.routing.json`."""
    return measurements.beside(checkpoint_path, KIND)


def read_kept(
    checkpoint_path: str | os.PathLike, total: int, iterations: Sequence[int] = ITERATIONS
) -> RoutingMatters | None:
    """The kept summary of this checkpoint on `total` test images; None when there is none to trust (missing,
    unreadable, damaged, or measured on another checkpoint or another test set)."""
    data = measurements.read(checkpoint_path, KIND)
    try:
        result = RoutingMatters.from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return result if result.total == total and result.iterations == tuple(iterations) else None


def keep(checkpoint_path: str | os.PathLike, result: RoutingMatters) -> Path:
    """Keep `result` as the checkpoint's "routing" entry: beside it (a run's folder, the shipped ones), else in the
    user's store; FileWriteError (one line) when neither can be written."""
    return measurements.write(checkpoint_path, KIND, result.to_dict(), ship=True)


def kept_or_measured(
    checkpoint: Checkpoint, test: LabelledSet, on_batch: Callable[[int, int], None] | None = None
) -> RoutingMatters:
    """The checkpoint's kept summary on all of `test`, else measured now and kept (once per checkpoint)."""
    kept = read_kept(checkpoint.path, len(test))
    if kept is not None:
        return kept
    sha256 = measurements.checkpoint_sha256(checkpoint.path)
    model = checkpoint.model
    network_of(model).routes()  # before any measuring, as `iteration_lengths` would say
    result = measure(cast("CapsNet | EMCapsNet", model), test, checkpoint_sha256=sha256, on_batch=on_batch)
    keep(checkpoint.path, result)
    return result


def describe(result: RoutingMatters) -> str:
    """A few lines for a terminal: the accuracy at each r and how many answers change."""
    lines = [f"{result.dataset}: {result.total:,} test images, trained with r = {result.trained_iterations}"]
    for r, accuracy, differs in zip(result.iterations, result.accuracy, result.differs_from_first):
        lines.append(f"  r = {r}: accuracy {100 * accuracy:.2f}%, answer differs from r = 1 on {differs:,}")
    lines.append(f"  {len(result.changed):,} images change their answer between some two r")
    return "\n".join(lines)
