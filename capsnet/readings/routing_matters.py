"""Where routing matters: the test images whose answer changes with the number of routing iterations, and the
test set read under each coupling rule on the same trained weights.

For a routing network and its labelled test set, every image is read with its couplings routed r = 1..5 times
(r = 1: the couplings stay as they start, uniform: no routing at all; for the EM network, the assignments fixed at
their start) and with random couplings, drawn per image from a seed and not routed (Paik, Kwak & Kim 2019, "Capsule
Networks Need an Improved Routing Algorithm", https://arxiv.org/abs/1907.13327, report that uniform or random
couplings often do as well as routing; Gu & Tresp 2020, "Improving the Robustness of Capsule Networks to Image
Affine Transformations", https://arxiv.org/abs/1911.07968, that a CapsNet without routing is as accurate and more
robust). The convolutions run once per batch; only routing runs again for each rule (`scores_by_coupling`). The result
is a typed, JSON-serialisable `RoutingMatters`: the accuracy and the mean coupling entropy under each rule, how many
answers each rule gains and loses against the trained r, and every image whose prediction differs between any two r,
with its prediction, capsule lengths and coupling entropy at each r and its answer under random couplings.

It is kept once per model as the checkpoint's "routing" entry in the measurement store
(`capsnet.checkpoints.measurements`): beside a checkpoint as `mnist.routing.json` when the CLI measures it (so
the shipped models carry theirs), else in the user's store. The entry names the SHA-256 of the checkpoint it
was measured on and is read back tolerantly: a missing, damaged or stale entry (another checkpoint's, another
test set's, an older format's) is never trusted, only measured again.

    python -m capsnet routing-matters checkpoints/mnist.safetensors   # measure and keep (once), print the summary
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from torch import Tensor

from capsnet.checkpoints import measurements
from capsnet.checkpoints.checkpoint import Checkpoint
from capsnet.data.tasks import LabelledSet
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.em_capsnet import EMCapsNet
from capsnet.nn.registry import network_of
from capsnet.nn.routing import CouplingScores
from capsnet.readings.coupling_rules import BATCH_SIZE, ITERATIONS, SEED, Rule, read_rules, verdict

FORMAT = 2  # the sidecar's layout; a file of another format is measured again (1: without the coupling rules)
KIND = "routing"  # the measurement store's name for this reading
DECIMALS = 4  # capsule lengths are kept to 4 decimals


@dataclass(frozen=True)
class ChangedImage:
    """A test image whose prediction differs between two numbers of routing iterations."""

    index: int  # in the test set
    label: int
    predictions: tuple[int, ...]  # one per entry of RoutingMatters.iterations
    lengths: tuple[tuple[float, ...], ...]  # (R, K): the capsule lengths at each r
    entropy: tuple[float, ...]  # (R,): its class layer's coupling entropy at each r (1: uniform)
    random_prediction: int  # with random couplings, not routed

    def right(self) -> tuple[bool, ...]:
        """Whether each r's prediction is the label."""
        return tuple(p == self.label for p in self.predictions)


@dataclass(frozen=True)
class RoutingMatters:
    """The accuracy under each coupling rule, and the images whose answer depends on the number of iterations."""

    dataset: str
    checkpoint_sha256: str  # of the checkpoint file measured ("" when not measured from a file)
    total: int  # test images read: the first `total` of the test set
    iterations: tuple[int, ...]  # the r measured, ascending
    trained_iterations: int  # the r the model was trained with
    correct: tuple[int, ...]  # right answers at each r
    differs_from_first: tuple[int, ...]  # images whose answer at r differs from the answer at iterations[0]
    changed: tuple[ChangedImage, ...]  # in test-set order
    entropy: tuple[float, ...]  # the mean coupling entropy of the class layer at each r
    seed: int  # of the random couplings
    random_correct: int  # right answers with random couplings
    random_gains: int  # right with random couplings, wrong at the trained r (or the last r, when it was not measured)
    random_losses: int  # the reverse
    random_entropy: float

    @property
    def accuracy(self) -> tuple[float, ...]:
        return tuple(c / self.total for c in self.correct)

    @property
    def own(self) -> int:
        """The r the experiment compares against: the trained r, else the last r measured."""
        return _own(self.iterations, self.trained_iterations)

    def rules(self) -> tuple[Rule, ...]:
        """Every coupling rule's row: uniform (r = 1, when measured), routed at each further r, then random."""
        own = self.iterations.index(self.own)
        rows = []
        for n, r in enumerate(self.iterations):
            gains = sum(c.right()[n] and not c.right()[own] for c in self.changed)
            losses = sum(c.right()[own] and not c.right()[n] for c in self.changed)
            name = "uniform" if r == 1 else "routed"
            rows.append(Rule(name, r, self.correct[n], self.total, gains, losses, self.entropy[n], r == self.own))
        random = Rule("random", 1, self.random_correct, self.total, self.random_gains, self.random_losses,
                      self.random_entropy, False)  # fmt: skip
        return (*rows, random)

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
        own = self.own
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
            "entropy": list(self.entropy),
            "seed": self.seed,
            "random_correct": self.random_correct,
            "random_gains": self.random_gains,
            "random_losses": self.random_losses,
            "random_entropy": self.random_entropy,
            "changed": [
                {
                    "index": c.index,
                    "label": c.label,
                    "predictions": list(c.predictions),
                    "lengths": [list(row) for row in c.lengths],
                    "entropy": list(c.entropy),
                    "random_prediction": c.random_prediction,
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
                entropy = _fractions(item["entropy"], "entropy", r)
                random_prediction = _int(item["random_prediction"], "random_prediction", low=0, high=k - 1)
                index = _int(item["index"], "index", 0, total - 1)
                changed.append(ChangedImage(index, label, predictions, lengths, entropy, random_prediction))
            result = cls(
                dataset=str(data["dataset"]),
                checkpoint_sha256=str(data["checkpoint_sha256"]),
                total=total,
                iterations=iterations,
                trained_iterations=_int(data["trained_iterations"], "trained_iterations", low=1),
                correct=_ints(data["correct"], "correct", low=0, high=total),
                differs_from_first=_ints(data["differs_from_first"], "differs_from_first", low=0, high=total),
                changed=tuple(changed),
                entropy=_fractions(data["entropy"], "entropy", r),
                seed=_int(data["seed"], "seed", low=0),
                random_correct=_int(data["random_correct"], "random_correct", low=0, high=total),
                random_gains=_int(data["random_gains"], "random_gains", low=0, high=total),
                random_losses=_int(data["random_losses"], "random_losses", low=0, high=total),
                random_entropy=_fractions([data["random_entropy"]], "random_entropy", 1)[0],
            )
        except (KeyError, TypeError, IndexError) as error:
            raise ValueError(f"not a routing summary: {type(error).__name__} {error}") from None
        if len(result.correct) != r or len(result.differs_from_first) != r:
            raise ValueError("correct and differs_from_first need one count per iteration")
        return result


def _own(iterations: Sequence[int], trained: int) -> int:
    return trained if trained in iterations else iterations[-1]


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


def _fractions(values: Any, name: str, count: int) -> tuple[float, ...]:
    """`count` numbers from 0 to 1 (entropies divided by their largest value)."""
    if not isinstance(values, list) or len(values) != count:
        raise ValueError(f"{name} must be a list of {count} numbers")
    numbers = tuple(_float(v) for v in values)
    if any(not 0 <= v <= 1 for v in numbers):
        raise ValueError(f"{name} must lie from 0 to 1")
    return numbers


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
    """The class scores (capsule lengths or activations) of every image at each number of routing iterations:
    (N, R, K), float32, on the CPU (`read_rules` without random couplings)."""
    return read_rules(model, images, iterations, None, batch_size=batch_size, on_batch=on_batch).scores


def summarise(
    readings: CouplingScores,
    labels: Tensor | np.ndarray,
    iterations: Sequence[int] = ITERATIONS,
    dataset: str = "",
    trained_iterations: int = 3,
    checkpoint_sha256: str = "",
    seed: int = SEED,
) -> RoutingMatters:
    """The summary of `read_rules`' readings (random couplings in the last column) for test images with these (N,)
    labels."""
    scores = np.asarray(readings.scores, dtype=np.float32)
    entropy = np.clip(np.asarray(readings.entropy, dtype=np.float64), 0.0, 1.0)  # (N, R + 1)
    labels = np.asarray(labels, dtype=np.int64)
    rules = len(iterations) + 1
    if scores.ndim != 3 or scores.shape[:2] != (len(labels), rules) or entropy.shape != (len(labels), rules):
        raise ValueError(
            f"expected scores (N, {rules}, K) and entropy (N, {rules}) for {len(labels)} labels, got "
            f"{tuple(scores.shape)} and {tuple(entropy.shape)}"
        )
    lengths, entropy, random = scores[:, :-1], entropy[:, :-1], scores[:, -1].argmax(axis=1)  # .., .., (N,)
    predictions = lengths.argmax(axis=2)  # (N, R)
    own = list(iterations).index(_own(iterations, trained_iterations))
    right_own, right_random = predictions[:, own] == labels, random == labels  # (N,)
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
                tuple(float(v) for v in np.round(entropy[i], DECIMALS)),
                int(random[i]),
            )
            for i, rows in zip(changed, rounded)
        ),  # fmt: skip
        entropy=tuple(float(v) for v in np.round(entropy.mean(axis=0), DECIMALS)),
        seed=seed,
        random_correct=int(right_random.sum()),
        random_gains=int((right_random & ~right_own).sum()),
        random_losses=int((right_own & ~right_random).sum()),
        random_entropy=float(np.round(readings.entropy[:, -1].double().mean().clamp(0, 1).item(), DECIMALS)),
    )


def measure(
    model: CapsNet | EMCapsNet,
    test: LabelledSet,
    iterations: Sequence[int] = ITERATIONS,
    checkpoint_sha256: str = "",
    on_batch: Callable[[int, int], None] | None = None,
) -> RoutingMatters:
    """`model` on every image of `test` under each coupling rule (single images only, not pairs)."""
    if test.task.pairs:
        raise ValueError(f"{test.info.title} examples are pairs of digits: this measure is for single images")
    readings = read_rules(model, test.images, iterations, SEED, on_batch=on_batch)  # (N, R + 1, K), (N, R + 1)
    trained = model.config.routing_iterations
    return summarise(readings, test.labels, iterations, test.info.name, trained, checkpoint_sha256, SEED)


# ---------------------------------------------------------------- kept in the measurement store


def sidecar_path(checkpoint_path: str | os.PathLike) -> Path:
    """Where a checkpoint's summary ships beside it: `mnist.safetensors` -> `mnist.routing.json`."""
    return measurements.beside(checkpoint_path, KIND)


def read_kept(
    checkpoint_path: str | os.PathLike,
    total: int,
    iterations: Sequence[int] = ITERATIONS,
    classes: int | None = None,
) -> RoutingMatters | None:
    """The kept summary of this checkpoint on `total` test images (of `classes` classes, where given); None when there
    is none to trust (missing, unreadable, damaged, measured on another checkpoint or another test set, or not of
    the model's classes: a file's SHA-256 anyone can compute, so an entry is checked against the model too)."""
    data = measurements.read(checkpoint_path, KIND)
    try:
        result = RoutingMatters.from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if classes is not None and any(len(row) != classes for image in result.changed for row in image.lengths):
        return None  # an image labelled 19 for a model of 10 classes crashed the page
    return result if result.total == total and result.iterations == tuple(iterations) else None


def keep(checkpoint_path: str | os.PathLike, result: RoutingMatters) -> Path:
    """Keep `result` as the checkpoint's "routing" entry: beside it (a run's folder, the shipped ones), else in the
    user's store; FileWriteError (one line) when neither can be written."""
    return measurements.write(checkpoint_path, KIND, result.to_dict(), ship=True)


def kept_or_measured(
    checkpoint: Checkpoint, test: LabelledSet, on_batch: Callable[[int, int], None] | None = None
) -> RoutingMatters:
    """The checkpoint's kept summary on all of `test`, else measured now and kept (once per checkpoint)."""
    kept = read_kept(checkpoint.path, len(test), classes=checkpoint.config.num_classes)
    if kept is not None:
        return kept
    sha256 = measurements.checkpoint_sha256(checkpoint.path)
    model = checkpoint.model
    network_of(model).routes()  # before any measuring, as `iteration_lengths` would say
    result = measure(cast("CapsNet | EMCapsNet", model), test, checkpoint_sha256=sha256, on_batch=on_batch)
    keep(checkpoint.path, result)
    return result


def describe(result: RoutingMatters) -> str:
    """A few lines for a terminal: each coupling rule's accuracy and entropy, how many answers change, the verdict."""
    lines = [f"{result.dataset}: {result.total:,} test images, trained with r = {result.trained_iterations}"]
    for rule, differs in zip(result.rules(), (*result.differs_from_first, None)):
        name = "random (not routed)" if rule.name == "random" else f"r = {rule.iterations}" + (
            " (uniform)" if rule.name == "uniform" else " (trained)" if rule.trained else "")  # fmt: skip
        line = f"  {name}: accuracy {100 * rule.accuracy:.2f}%, coupling entropy {rule.entropy:.3f}"
        if differs is not None:
            line += f", answer differs from r = {result.iterations[0]} on {differs:,}"
        lines.append(line)
    lines.append(f"  {len(result.changed):,} images change their answer between some two r")
    return "\n".join(lines + ["", verdict(result.rules())])
