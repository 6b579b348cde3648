"""An evaluation kept once per checkpoint: the Evaluate page's first test images, read back instead of measured.

The paper-sized EM network reads the first 1,000 MNIST test images in about 30 s on a 2-core CPU (the CapsNet in
about 9): the dashboard's Evaluate page opens on them. So the `Evaluation` of a checkpoint on the first N images of
its own test set, at its own routing count, is kept as the checkpoint's "evaluation" entry in the measurement store
(`capsnet.checkpoints.measurements`): beside it as `<name>.evaluation.json` when the command line keeps it (so a
shipped model carries its own), else in the user's store when the dashboard measures it. Every figure the page shows
is in it (losses, per-example labels, predictions and class scores, the confusion matrix, the pose statistics and
reconstruction errors of a network that redraws), stored exactly: the entry gives back the `Evaluation` that
`evaluate` gave. An entry that is missing, damaged, another checkpoint's, another dataset's or another size's is
never trusted, only measured again.

    python -m capsnet evaluate checkpoints/mnist-em.safetensors --limit 1000 --keep
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from capsnet.checkpoints import measurements
from capsnet.evaluation import Evaluation

KIND = "evaluation"  # the measurement store's name for this entry
FORMAT = 1  # the entry's layout; an entry of another format is measured again


def to_entry(result: Evaluation, dataset: str) -> dict[str, Any]:
    """`result` (an evaluation of the first `result.total` images of `dataset`'s test set) as a JSON-ready entry."""
    entry: dict[str, Any] = {
        "format": FORMAT,
        "what": f"the evaluation of the first {result.total:,} {dataset} test images at the model's own routing",
        "dataset": dataset,
        "total": result.total,
        "loss": result.loss,
        "margin_loss": result.margin_loss,
        "reconstruction_loss": result.reconstruction_loss,
        "loss_name": result.loss_name,
        "labels": result.labels.tolist(),
        "predictions": result.predictions.tolist(),
        "lengths": result.lengths.tolist(),
    }
    if result.redrawn:
        entry.update(
            dimension_mean=result.dimension_mean.tolist(),  # type: ignore[union-attr]
            dimension_std=result.dimension_std.tolist(),  # type: ignore[union-attr]
            reconstruction_errors=result.reconstruction_errors.tolist(),  # type: ignore[union-attr]
        )
    return entry


def from_entry(data: Any, dataset: str, total: int) -> Evaluation | None:
    """The `Evaluation` an entry holds, when it is one of the first `total` images of `dataset`; None otherwise
    (another dataset, size or format, or anything malformed: a wrong type, a ragged or mis-shaped array)."""
    try:
        if data.get("format") != FORMAT or data.get("dataset") != dataset or data.get("total") != total:
            return None
        labels = torch.tensor(data["labels"], dtype=torch.int64)  # (N,)
        predictions = torch.tensor(data["predictions"], dtype=torch.int64)  # (N,)
        lengths = torch.tensor(data["lengths"], dtype=torch.float32)  # (N, K)
        if labels.shape != (total,) or predictions.shape != (total,) or lengths.dim() != 2 or len(lengths) != total:
            return None
        k = lengths.shape[1]
        if k < 2:
            return None
        if min(labels.min(), predictions.min()) < 0 or max(labels.max(), predictions.max()) >= k:
            return None
        confusion = torch.bincount(labels * k + predictions, minlength=k * k).view(k, k)  # (K, K)
        redrawn: dict[str, torch.Tensor] = {}
        if "dimension_mean" in data:
            mean = torch.tensor(data["dimension_mean"], dtype=torch.float32)  # (K, D)
            std = torch.tensor(data["dimension_std"], dtype=torch.float32)  # (K, D)
            errors = torch.tensor(data["reconstruction_errors"], dtype=torch.float32)  # (N,)
            if mean.dim() != 2 or mean.shape[0] != k or std.shape != mean.shape or errors.shape != (total,):
                return None
            redrawn = dict(dimension_mean=mean, dimension_std=std, reconstruction_errors=errors)
        losses = [float(data[name]) for name in ("loss", "margin_loss", "reconstruction_loss")]
        return Evaluation(
            loss=losses[0],
            margin_loss=losses[1],
            reconstruction_loss=losses[2],
            correct=int(confusion.diagonal().sum()),
            total=total,
            confusion=confusion,
            labels=labels,
            predictions=predictions,
            lengths=lengths,
            loss_name=str(data["loss_name"]),
            **redrawn,
        )
    except (AttributeError, KeyError, TypeError, ValueError, RuntimeError, OverflowError):
        return None


def read_kept(checkpoint_path: str | os.PathLike, dataset: str, total: int) -> Evaluation | None:
    """The kept evaluation of this checkpoint on the first `total` images of `dataset`'s test set, or None."""
    return from_entry(measurements.read(checkpoint_path, KIND), dataset, total)


def keep(checkpoint_path: str | os.PathLike, result: Evaluation, dataset: str, ship: bool = False) -> Path:
    """Keep `result` as the checkpoint's evaluation: beside it when `ship` (the command line), else in the user's
    store; FileWriteError (one line) when neither can be written."""
    return measurements.write(checkpoint_path, KIND, to_entry(result, dataset), ship=ship)
