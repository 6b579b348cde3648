"""Not like any class: a calibrated signal that an input resembles nothing the network was trained on.

A CapsNet always has a longest capsule, so it always names a class: a single dot is read
as some digit. But it also says how sure it is (the winner's length |v|) and, better, it can
redraw the input from the winner's capsule: a digit it knows comes back close to the input,
a scribble comes back as the nearest digit, far from what was drawn. Both readings are
calibrated on the correctly classified test images: an input is flagged when its
reconstruction error is above what 99.5% of them reach, or its winner shorter than all but
0.5% of theirs. `score` is the larger of the two ratios to their threshold: above 1, flagged.

The thresholds are computed from an evaluation (`from_evaluation`), stored in each
checkpoint's header by the trainer and by export (`CheckpointInfo.novelty`), and for an older
checkpoint computed once from the test set and kept in the measurement store
(`capsnet.checkpoints.measurements`, read by `thresholds_for`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch

from capsnet.checkpoints import measurements
from capsnet.data.tasks import read_test_set
from capsnet.errors import CapsNetError
from capsnet.evaluation import Evaluation, evaluate, evaluate_set

QUANTILE = 0.995  # the share of correctly classified test images each threshold lets through (together ~99%)
KIND = "novelty"  # the measurement store's name for an older checkpoint's calibration


class NoCalibrationError(CapsNetError):
    """Too few test images are classified right to calibrate the thresholds on (a weak model)."""


@dataclass(frozen=True)
class NoveltyThresholds:
    """Where "like a class it knows" ends, from the correctly classified test images."""

    reconstruction_error: float  # sum of squared pixel errors of the winner's reconstruction (of [0, 1] images)
    length: float  # the winner's |v|
    quantile: float = QUANTILE
    examples: int = 0  # how many correct test images they were taken from
    flagged_right: float = 0.0  # share of the correctly classified test images flagged
    flagged_wrong: float = 0.0  # share of the misclassified ones flagged

    def score(self, reconstruction_error: np.ndarray | float, length: np.ndarray | float) -> np.ndarray:
        """max(error / its threshold, length threshold / length): above 1 means not like any class."""
        error = np.asarray(reconstruction_error, dtype=np.float64)
        winner = np.maximum(np.asarray(length, dtype=np.float64), 1e-6)
        return np.maximum(error / max(self.reconstruction_error, 1e-9), self.length / winner)

    def tripped(self, reconstruction_error: float, length: float) -> tuple[str, ...]:
        """Which of the two tests one input fails: "reconstruction" (redrawn too far from it), "length" (winner short)."""
        tests = []
        if float(reconstruction_error) > self.reconstruction_error:
            tests.append("reconstruction")
        if float(length) < self.length:
            tests.append("length")
        return tuple(tests)

    def flagged(self, reconstruction_error: np.ndarray | float, length: np.ndarray | float) -> np.ndarray:
        return self.score(reconstruction_error, length) > 1.0

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> NoveltyThresholds | None:
        """Read from a header tolerantly: None unless both thresholds are positive numbers."""
        if not isinstance(data, dict):
            return None
        try:
            values = {k: float(data[k]) for k in ("reconstruction_error", "length")}
            extra = {k: float(data[k]) for k in ("quantile", "flagged_right", "flagged_wrong") if k in data}
            examples = int(data.get("examples", 0))
        except (KeyError, TypeError, ValueError, OverflowError):  # int(Infinity) overflows
            return None
        if not all(np.isfinite(v) and v > 0 for v in values.values()) or examples < 0:
            return None
        if not all(np.isfinite(v) for v in extra.values()):
            return None
        return cls(**values, **extra, examples=examples)

    @classmethod
    def from_evaluation(cls, result: Evaluation, quantile: float = QUANTILE) -> NoveltyThresholds | None:
        """From the correctly classified examples of an evaluation (None if there are fewer than 20)."""
        right = result.right
        if int(right.sum()) < 20 or result.reconstruction_errors is None:  # too few, or a CNN (nothing redrawn)
            return None
        errors = result.reconstruction_errors[right].double()
        lengths = result.winner_lengths[right].double()
        made = cls(
            reconstruction_error=float(torch.quantile(errors, quantile)),
            length=float(torch.quantile(lengths, 1.0 - quantile)),
            quantile=quantile,
            examples=int(right.sum()),
        )
        flagged = torch.as_tensor(made.flagged(result.reconstruction_errors.numpy(), result.winner_lengths.numpy()))
        wrong = ~right
        return replace(
            made,
            flagged_right=float(flagged[right].float().mean()),
            flagged_wrong=float(flagged[wrong].float().mean()) if bool(wrong.any()) else 0.0,
        )


def thresholds_for(checkpoint: Any, data_dir: str | None = None) -> NoveltyThresholds:
    """A checkpoint's thresholds: from its header, else from the measurement store, else computed on its test set and kept.

    `checkpoint` is a loaded `capsnet.checkpoints.checkpoint.Checkpoint`. Raises the dataset's errors
    (missing, damaged) when they must be computed and the test set cannot be read, and NoCalibrationError when too
    few of its images are classified right to calibrate on.
    """
    stored = NoveltyThresholds.from_dict(checkpoint.info.novelty)
    if stored is not None:
        return stored
    found = NoveltyThresholds.from_dict(measurements.read(checkpoint.path, KIND))
    if found is not None:
        return found
    result = evaluate_set(checkpoint.model, read_test_set(checkpoint.info.dataset_name, data_dir))
    made = NoveltyThresholds.from_evaluation(result) if isinstance(result, Evaluation) else None
    if made is None:
        raise NoCalibrationError(f"{checkpoint.path}: too few test images are classified right to calibrate on")
    try:
        measurements.write(checkpoint.path, KIND, made.to_dict())
    except (OSError, CapsNetError):  # a read-only or full home: computed again next time, and predict goes on
        pass
    return made


def flags(model: Any, images: torch.Tensor, thresholds: NoveltyThresholds) -> np.ndarray:
    """Which of `images` (N, C, H, W) in [0, 1] `model` flags as not like any class: (N,) bool, from its winner's
    redraw and score against `thresholds` (as the Draw page reads one drawing). ValueError for a network that redraws
    nothing (a CNN)."""
    result = evaluate(model, images, torch.zeros(len(images), dtype=torch.long))  # the labels are not read here
    if result.reconstruction_errors is None:
        raise ValueError("this network redraws nothing: it has no not-like-any-class test")
    return thresholds.flagged(result.reconstruction_errors.numpy(), result.winner_lengths.numpy())
