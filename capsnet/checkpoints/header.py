"""What a checkpoint says about itself: the typed "info" object of its safetensors header.

Every reader of a checkpoint's facts (the catalogue, the dashboard, export, the trainer's
--init lineage, the model card) goes through `CheckpointInfo.from_dict`, which is tolerant:
a missing key or a value of the wrong type gives the field's default, and keys it does not
know (from a newer version) are kept in `extra` and written back unchanged.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# the facts a run started with --init records of the checkpoint it started from (`started_from`)
ORIGIN_KEYS = (
    "dataset",
    "epochs",
    "total_epochs",
    "best_epoch",
    "test_accuracy",
    "training_seconds",
    "total_training_seconds",
    "hardware",
    "recipe",
)


FRACTIONS = ("test_accuracy", "test_accuracy_before_export")  # read only from 0 to 1, else as unsaid


@dataclass(frozen=True)
class CheckpointInfo:
    """The facts in a checkpoint's header. None (or empty) where the file does not say."""

    dataset: str = ""  # empty in the first headers, which were all MNIST's: read it through `dataset_name`
    dataset_title: str = ""
    class_names: list[str] = field(default_factory=list)
    epochs: int | None = None  # epochs of the run that saved it
    best_epoch: int | None = None
    total_epochs: int | None = None  # including the runs before it (--init lineage)
    test_accuracy: float | None = None
    test_loss: float | None = None
    test_examples: int | None = None
    per_class_accuracy: list[float] | None = None
    per_class_correct: list[int] | None = None
    per_class_total: list[int] | None = None
    confusion: list[list[int]] | None = None
    dimension_mean: list[list[float]] | None = None  # (K, D) over correctly classified test images of each class
    dimension_std: list[list[float]] | None = None  # (K, D)
    training_seconds: float | None = None
    total_training_seconds: float | None = None
    hardware: str = ""
    recipe: dict[str, Any] | None = None  # the options the run was started with
    started_from: dict[str, Any] | None = None  # the checkpoint an --init run began from (ORIGIN_KEYS)
    novelty: dict[str, float] | None = None  # `capsnet.readings.novelty.NoveltyThresholds`, calibrated on the test set
    weights_dtype: str = ""
    test_accuracy_before_export: float | None = None
    capsnet_version: str = ""
    torch_version: str = ""
    saved: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as they were

    # ------------------------------------------------------------ reading and writing

    @property
    def dataset_name(self) -> str:
        """The dataset the model was trained on; "mnist" for headers written before it was stored."""
        return self.dataset or "mnist"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> CheckpointInfo:
        """Read a header's info object; nothing here raises on odd content."""
        data = dict(data or {})
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name == "extra" or f.name not in data:
                continue
            value = _coerce(data.pop(f.name), hints[f.name])
            if value is not _INVALID and f.name in FRACTIONS and value is not None and not 0 <= value <= 1:
                value = _INVALID  # an accuracy of 5.0 made the claims' sampling interval complex
            if value is not _INVALID:
                values[f.name] = value
        data.pop("extra", None)
        return cls(**values, extra=data)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object stored in the header: the fields that say something, then `extra`."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and value is not None and value != "" and value != []:
                out[f.name] = value
        return {**out, **self.extra}

    def replace(self, **changes: Any) -> CheckpointInfo:
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------ what readers ask

    @property
    def title(self) -> str:
        """The dataset's display name ("MNIST"), or its CLI name, or ''."""
        return self.dataset_title or self.dataset

    @property
    def trained_epochs(self) -> int | None:
        """All the epochs behind the checkpoint: its run's, plus those of the checkpoint an --init run started from."""
        return self.total_epochs if self.total_epochs is not None else self.epochs

    def epochs_said(self, titles: Mapping[str, str] | None = None) -> str:
        """The epochs behind the checkpoint in words: "8 epochs", or, for a warm start from a model of another dataset,
        "107 on MNIST + 8 on MultiMNIST" (`titles` names the datasets); "" when the header says none."""
        own = self.epochs
        origin = self.started_from or {}
        before = trained_epochs(origin) if origin else None
        names = titles or {}
        if own and before and origin.get("dataset") and origin.get("dataset") != self.dataset:
            first, then = (names.get(str(d), str(d)) for d in (origin["dataset"], self.dataset))
            return f"{before} on {first} + {own} on {then}"
        total = self.trained_epochs
        return f"{total} epoch{'s' if total != 1 else ''}" if total else ""

    @property
    def all_training_seconds(self) -> float | None:
        return self.total_training_seconds if self.total_training_seconds is not None else self.training_seconds

    def dimension_stats(self, class_index: int, digit_dim: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(mean, std) of each of a class's `digit_dim` capsule dimensions, or None if the header lacks usable ones."""
        try:
            mean = np.asarray(self.dimension_mean, dtype=np.float32)[class_index]
            std = np.asarray(self.dimension_std, dtype=np.float32)[class_index]
        except (IndexError, TypeError, ValueError):
            return None
        if mean.shape != (digit_dim,) or std.shape != (digit_dim,):
            return None
        if not (np.isfinite(mean).all() and np.isfinite(std).all()):
            return None
        return mean, std

    def as_origin(self, path: str | Path) -> dict[str, Any]:
        """What a run started with --init from this checkpoint (at `path`) records of it; nested if it had one."""
        facts = self.to_dict()
        origin = {"checkpoint": Path(path).as_posix(), **{k: facts[k] for k in ORIGIN_KEYS if k in facts}}
        if self.started_from is not None:
            origin["started_from"] = self.started_from
        return origin


def trained_epochs(info: CheckpointInfo | Mapping[str, Any]) -> int | None:
    """All the epochs behind a checkpoint, from its info or from a `started_from` record."""
    return (info if isinstance(info, CheckpointInfo) else CheckpointInfo.from_dict(info)).trained_epochs


_INVALID = object()


def _coerce(value: Any, hint: Any) -> Any:
    """`value` if it has the type `hint` names (ints accepted as floats), else _INVALID."""
    args = typing.get_args(hint)
    if type(None) in args:
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint) or hint
    if origin is bool or isinstance(value, bool):
        return value if origin is bool and isinstance(value, bool) else _INVALID
    if origin is int:
        return value if isinstance(value, int) else _INVALID
    if origin is float:
        return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else _INVALID
    if origin is str:
        return value if isinstance(value, str) else _INVALID
    if origin is list:
        return list(value) if isinstance(value, list) else _INVALID
    if origin is dict:
        return dict(value) if isinstance(value, dict) else _INVALID
    return _INVALID
