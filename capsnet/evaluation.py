"""Evaluation: test loss, accuracy per class, confusion matrix, DigitCaps statistics.

    python -m capsnet evaluate checkpoints/mnist.safetensors [--json]
    python -m capsnet evaluate checkpoints/baselines/mnist-cnn.safetensors

Every network family is evaluated by the same functions: its class scores take the place of the
capsule lengths; a network that routes is evaluated at the routing iterations asked for; poses and
reconstructions are summarised where the network redraws its input (`Network.redraws`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor

from capsnet.data.tasks import LabelledSet, Task
from capsnet.device import exact_float32
from capsnet.memory import reading_batch
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNet, EMCapsNetConfig
from capsnet.nn.registry import AnyModel, network_of


@dataclass
class Evaluation:
    """The results of `evaluate` over a labelled set."""

    loss: float
    margin_loss: float
    reconstruction_loss: float
    correct: int
    total: int
    confusion: Tensor  # (K, K) int64, rows = true class, columns = prediction
    labels: Tensor  # (N,)
    predictions: Tensor  # (N,)
    lengths: Tensor  # (N, K) the class scores: capsule lengths, a CNN's probabilities, EM's activations
    # what only a network that redraws its input gives; None for the CNN baseline (and an EM network without decoder)
    dimension_mean: Tensor | None = None  # (K, D) over correctly classified examples of each class
    dimension_std: Tensor | None = None  # (K, D)
    reconstruction_errors: Tensor | None = None  # (N,) sum of squared pixel errors, decoded from the winning capsule
    loss_name: str = "cross-entropy"  # the network's loss (`Network.loss_name`)

    @property
    def redrawn(self) -> bool:
        """Whether the evaluated network redrew its inputs: pose statistics and reconstruction errors."""
        return self.dimension_mean is not None

    @property
    def winner_lengths(self) -> Tensor:
        """(N,) the length of each example's longest capsule."""
        return self.lengths.max(dim=1).values

    @property
    def right(self) -> Tensor:
        """(N,) bool: correctly classified."""
        return self.predictions == self.labels

    def class_precision(self) -> list[float]:
        """Of the examples predicted as each class, the share that are that class."""
        predicted = self.confusion.sum(dim=0).tolist()
        return [c / p if p else 0.0 for c, p in zip(self.class_correct, predicted)]

    @property
    def accuracy(self) -> float:
        return self.correct / max(self.total, 1)

    @property
    def class_correct(self) -> list[int]:
        return self.confusion.diagonal().tolist()

    @property
    def class_total(self) -> list[int]:
        return self.confusion.sum(dim=1).tolist()

    def class_accuracy(self) -> list[float]:
        """Of the examples of each class, the share predicted right (its recall)."""
        return [c / t if t else 0.0 for c, t in zip(self.class_correct, self.class_total)]

    def to_dict(self, class_names: list[str] | None = None) -> dict[str, Any]:
        """JSON-ready summary (without the per-example arrays)."""
        names = class_names or [str(k) for k in range(self.confusion.shape[0])]
        return {
            "loss": self.loss,
            "margin_loss": self.margin_loss,
            "reconstruction_loss": self.reconstruction_loss,
            "accuracy": self.accuracy,
            "correct": self.correct,
            "total": self.total,
            "per_class": [
                {"class": k, "name": names[k], "accuracy": acc, "correct": c, "total": t}
                for k, (acc, c, t) in enumerate(zip(self.class_accuracy(), self.class_correct, self.class_total))
            ],
            "confusion": self.confusion.tolist(),
        }


def routing_options(model: AnyModel, routing_iterations: int | None) -> dict[str, int]:
    """The forward pass's keyword for a routing count: {} for None; ValueError for a network that does not route."""
    if routing_iterations is None:
        return {}
    network_of(model).routes()  # ValueError for a network that does not route
    return {"routing_iterations": routing_iterations}


def _summarise_poses(model: AnyModel, out: Any, x: Tensor, y: Tensor, pose_sum: Tensor, pose_sq: Tensor) -> Tensor:
    """One batch's redraw errors (b,), from the winning capsule as a reader sees it (the loss used the true class's),
    and its right answers' true-class poses added to the per-class sums `pose_sum` and `pose_sq` (K, D)."""
    winners = (
        out.reconstruction
        if bool((out.prediction == y).all())
        else cast("CapsNet | EMCapsNet", model).decode(out.poses, out.prediction)
    )
    right = out.prediction == y
    poses = out.poses.double()[right, y[right]].cpu()  # (n_right, D): each example's true-class capsule
    classes = y[right].cpu()
    pose_sum.index_add_(0, classes, poses)
    pose_sq.index_add_(0, classes, poses * poses)
    return (winners.float() - x.float()).square().flatten(1).sum(dim=1).cpu()  # (b,)


@torch.no_grad()
@exact_float32()
def evaluate(
    model: AnyModel,
    images: Tensor,
    labels: Tensor,
    batch_size: int | None = None,
    device: torch.device | str | None = None,
    routing_iterations: int | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> Evaluation:
    """Run `model` over images (N, C, H, W) in [0, 1] with labels (N,), in batches (500, or fewer where this
    machine's memory is short: `capsnet.memory.reading_batch`), in eval mode.

    The loss masks the decoder by the true label, as in training; predictions are the highest
    class scores (the longest capsules). A network that routes runs `routing_iterations` (its own
    count when None); for one that does not, a count is a ValueError. Model mode is restored
    afterwards. `on_batch(done, total)` is called after each batch with the number of images done.
    """
    if len(images) != len(labels) or len(images) == 0:
        raise ValueError(f"need as many labels as images, and at least one: {len(images)} vs {len(labels)}")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    config = model.config
    batch_size = batch_size or reading_batch(model, config, 500)
    net = network_of(model)
    redraws = net.redraws(config)  # poses and redraws to summarise
    options = routing_options(model, routing_iterations)
    was_training = model.training
    model.eval()
    k, d = config.num_classes, cast("CapsNetConfig | EMCapsNetConfig", config).digit_dim if redraws else 0
    sums = torch.zeros(3, dtype=torch.float64)
    predictions, lengths, errors = [], [], []
    pose_sum = torch.zeros(k, d, dtype=torch.float64)
    pose_sq = torch.zeros(k, d, dtype=torch.float64)
    for start in range(0, len(images), batch_size):
        x = images[start : start + batch_size].to(device, non_blocking=True)
        y = labels[start : start + batch_size].to(device, non_blocking=True)
        out = model(x, y, **options)
        loss = net.loss(out, x, y, config)
        sums += torch.tensor([loss.total.item(), loss.margin.item(), loss.reconstruction.item()]) * len(x)
        predictions.append(out.prediction.cpu())
        lengths.append(out.scores.float().cpu())
        if redraws:  # poses to summarise, and a decoder
            errors.append(_summarise_poses(model, out, x, y, pose_sum, pose_sq))
        if on_batch is not None:
            on_batch(min(start + batch_size, len(images)), len(images))
    model.train(was_training)
    prediction = torch.cat(predictions)
    truth = labels.cpu().long()
    confusion = torch.bincount(truth * k + prediction, minlength=k * k).view(k, k)  # (K, K)
    count = confusion.diagonal().double().clamp(min=1).unsqueeze(1)  # (K, 1)
    mean = pose_sum / count
    std = (pose_sq / count - mean * mean).clamp(min=0).sqrt()
    total_loss, margin, recon = (sums / len(images)).tolist()
    return Evaluation(
        loss=total_loss,
        margin_loss=margin,
        reconstruction_loss=recon,
        correct=int(confusion.diagonal().sum()),
        total=len(images),
        confusion=confusion,
        labels=truth,
        predictions=prediction,
        lengths=torch.cat(lengths),
        loss_name=net.loss_name,
        **(
            dict(dimension_mean=mean.float(), dimension_std=std.float(), reconstruction_errors=torch.cat(errors))
            if redraws
            else {}
        ),
    )


def merge_evaluations(parts: list[Evaluation]) -> Evaluation:
    """One evaluation of the concatenated sets of `parts` (in order), exactly as `evaluate` over all of them gives it.

    Lets a caller evaluate a large set a chunk at a time (to show progress, or to reuse the
    chunks already done) and still get the whole set's figures, statistics included.
    """
    if not parts:
        raise ValueError("nothing to merge")
    totals = torch.tensor([p.total for p in parts], dtype=torch.float64)  # (P,)
    total = int(totals.sum())
    losses = torch.tensor([[p.loss, p.margin_loss, p.reconstruction_loss] for p in parts], dtype=torch.float64)
    loss, margin, recon = ((losses * totals[:, None]).sum(0) / total).tolist()
    confusion = torch.stack([p.confusion for p in parts]).sum(0)  # (K, K)
    counts = torch.stack([p.confusion.diagonal() for p in parts]).double()[:, :, None]  # (P, K, 1): correct per class
    if len({p.redrawn for p in parts}) != 1:
        raise ValueError("the parts come from different networks: some redraw their inputs, some do not")
    capsules: dict[str, Tensor] = {}
    if parts[0].redrawn:
        means = torch.stack([p.dimension_mean for p in parts]).double()  # type: ignore[misc]  # (P, K, D)
        squares = torch.stack([p.dimension_std for p in parts]).double() ** 2 + means**2  # type: ignore[misc]
        n = counts.sum(0).clamp(min=1)  # (K, 1)
        mean = (counts * means).sum(0) / n
        std = ((counts * squares).sum(0) / n - mean**2).clamp(min=0).sqrt()
        errors = torch.cat([p.reconstruction_errors for p in parts])  # type: ignore[misc]  # (N,)
        capsules = dict(dimension_mean=mean.float(), dimension_std=std.float(), reconstruction_errors=errors)
    return Evaluation(
        loss=loss,
        margin_loss=margin,
        reconstruction_loss=recon,
        correct=int(confusion.diagonal().sum()),
        total=total,
        confusion=confusion,
        labels=torch.cat([p.labels for p in parts]),
        predictions=torch.cat([p.predictions for p in parts]),
        lengths=torch.cat([p.lengths for p in parts]),
        loss_name=parts[0].loss_name,
        **capsules,
    )


@dataclass
class PairEvaluation:
    """MultiMNIST evaluated as the paper does: a pair is right when its two longest capsules are its two classes."""

    loss: float
    correct: int
    total: int
    answers: Tensor | None = None  # (N, 2) each pair's two longest capsules (highest scores), in ascending order

    @property
    def accuracy(self) -> float:
        return self.correct / max(self.total, 1)

    @property
    def error(self) -> float:
        return 1.0 - self.accuracy


@torch.no_grad()
@exact_float32()
def evaluate_pairs(
    model: AnyModel,
    digits: Tensor,
    labels: Tensor,
    pairs: Any,
    batch_size: int = 250,
    device: torch.device | str | None = None,
    on_batch: Callable[[int, int], None] | None = None,
    routing_iterations: int | None = None,
) -> PairEvaluation:
    """Evaluate on MultiMNIST `pairs` (`capsnet.data.multimnist.Pairs`) of uint8 `digits` (N, 1, 28, 28) and `labels`.

    The loss is the training loss: both margins, and each digit redrawn from its own capsule.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    digits, labels = digits.to(device), labels.to(device)
    net = network_of(model)
    options = routing_options(model, routing_iterations)
    loss_sum, correct, answers = 0.0, 0, []
    for start in range(0, len(pairs), batch_size):
        batch = pairs.take(digits, labels, start, start + batch_size)
        out = model(batch.images, batch.labels, **options)
        loss = net.loss(out, batch.parts, batch.labels, model.config)
        loss_sum += loss.total.item() * len(batch)
        correct += int(Task.right(out.scores, batch.labels).sum())
        answers.append(out.scores.topk(2, dim=1).indices.sort(dim=1).values.cpu())  # (B, 2)
        if on_batch is not None:
            on_batch(min(start + batch_size, len(pairs)), len(pairs))
    model.train(was_training)
    return PairEvaluation(
        loss=loss_sum / max(len(pairs), 1),
        correct=correct,
        total=len(pairs),
        answers=torch.cat(answers) if answers else torch.zeros(0, 2, dtype=torch.long),
    )


def format_report(result: Evaluation, class_names: list[str], title: str = "") -> str:
    """The human report: loss, accuracy, `Class 3: 99.31% (1003/1010)` lines, confusion matrix."""
    lines = [title] if title else []
    if not result.redrawn:  # the CNN baseline, an EM network without a decoder: its own loss alone
        lines.append(f"Test loss: {result.loss:.5f} ({result.loss_name})")
    else:  # the class loss ("margin" or "spread") and the reconstruction's share
        lines.append(
            f"Test loss: {result.loss:.5f} ({result.loss_name.removesuffix(' loss')} {result.margin_loss:.5f}, "
            f"reconstruction {result.reconstruction_loss:.5f})"
        )
    lines.append(f"Accuracy: {100 * result.accuracy:.2f}% ({result.correct}/{result.total})")
    numeric = all(name == str(k) for k, name in enumerate(class_names))
    for k, (acc, c, t) in enumerate(zip(result.class_accuracy(), result.class_correct, result.class_total)):
        suffix = "" if numeric else f"  {class_names[k]}"
        lines.append(f"Class {k}: {100 * acc:.2f}% ({c}/{t}){suffix}")
    lines.append("Confusion matrix (rows: true class, columns: predicted):")
    width = max(5, len(str(int(result.confusion.max()))) + 1)
    lines.append("     " + "".join(f"{k:>{width}}" for k in range(len(class_names))))
    for k, row in enumerate(result.confusion.tolist()):
        lines.append(f"{k:>4} " + "".join(f"{v:>{width}}" for v in row))
    return "\n".join(lines)


def evaluate_set(
    model: AnyModel,
    test: LabelledSet,
    batch_size: int | None = None,
    device: torch.device | str | None = None,
    routing_iterations: int | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> Evaluation | PairEvaluation:
    """`model` on a labelled set: an `Evaluation`, or for pairs a `PairEvaluation` judged as the paper does.

    `batch_size` defaults to the task's own (`Task.eval_batch`: 500 images, 250 pairs), or fewer where this machine's
    memory is short (`capsnet.memory.reading_batch`).
    """
    size = batch_size or reading_batch(model, model.config, test.task.eval_batch)
    if test.task.pairs:
        return evaluate_pairs(model, test.images, test.labels, test.pairs, size, device, on_batch, routing_iterations)
    return evaluate(model, test.images, test.labels, size, device, routing_iterations, on_batch)
