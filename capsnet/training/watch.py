"""A training run's window: a few fixed test images, and what the network being trained makes of them as it learns.

The trainer picks the window once (a seeded choice of `WINDOW_SIZE` test examples, one per class where it
can) and takes a snapshot of it before the first batch, every `DURING_EPOCH_S` seconds within a long epoch,
and after every epoch: each image's class scores (a CapsNet's capsule lengths, an EM network's activations, the
CNN baseline's class probabilities), and for a network that redraws its input (`Network.redraws`: the CapsNet, an
EM network with a decoder) the image redrawn from its winning capsule (from its two highest for a MultiMNIST
pair). The snapshots go to the run folder's `watch.safetensors`, rewritten atomically:

    images           (n, H, W) uint8     the window, the same for the whole run (also after --resume); colour (n, H, W, 3)
    labels           (n, L) int64        each example's class (L = 2 for a MultiMNIST pair)
    epoch, batch     (S,) int32          when each snapshot was taken: in epoch `epoch` (from 1), after
                                         `batch` of its batches (all of them: at its end)
    scores           (S, n, K) float32
    reconstructions  (S, n, H, W) uint8  where the network redraws its input
    metadata         format, version, dataset, network, redraws (and "capsules", the same, which readers before
                     "redraws" read), batches (per epoch), m_plus, m_minus (nan where the loss sets no margins)

At most `KEEP` snapshots are kept: when one more comes, every other one before the newest is dropped,
so the whole run stays covered, more sparsely as it grows. `read_window` is tolerant: a missing,
damaged or half-written file reads as no snapshot yet (None), never an exception.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.numpy import load as load_tensors
from safetensors.numpy import save as save_tensors
from torch import Tensor

from capsnet.data.multimnist import Pairs
from capsnet.data.pictures import as_inputs, as_pictures
from capsnet.data.tasks import LabelledSet
from capsnet.errors import CapsNetError
from capsnet.files import FileReadError, atomic_write, loads_json, read_regular_file
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.em_capsnet import EMCapsNet
from capsnet.nn.registry import AnyModel, network_of
from capsnet.training.folder import RunFolder

WINDOW_SIZE = 10  # test examples in the window: one per class of a 10-class dataset
WINDOW_SEED = 1710  # the window's choice: the same examples for every run of a dataset (and test-set subset)
KEEP = 50  # snapshots kept at most
DURING_EPOCH_S = 60.0  # within an epoch that lasts longer, a snapshot at most this often
MAX_BYTES = 64_000_000  # a window file larger than this is not read
FORMAT, VERSION = "capsnet-watch", "1"


# ---------------------------------------------------------------- the math


def window_examples(test: LabelledSet, count: int = WINDOW_SIZE, seed: int = WINDOW_SEED) -> tuple[Tensor, Tensor]:
    """The window: `count` test examples, one per class first (by class), then others, in a seeded choice.

    Returns images (n, C, H, W) float in [0, 1] and labels (n, L) (a MultiMNIST pair: both digits, chosen
    by its first). The same set and seed give the same window.
    """
    total = len(test)
    if total == 0 or count < 1:
        raise ValueError(f"a window needs at least one test example and count >= 1, got {total} and {count}")
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed))  # (N,)
    classes = (test.labels[test.pairs.first] if test.pairs is not None else test.labels)[order].long()  # (N,)
    position = torch.arange(total)
    first = torch.full((test.info.num_classes,), total).scatter_reduce(0, classes, position, reduce="amin")  # (K,)
    picked = first[first < total]  # positions in `order` of each present class's first example, by class
    others = torch.ones(total, dtype=torch.bool)
    others[picked] = False
    chosen = order[torch.cat([picked, position[others]])[:count]]  # (n,)
    if test.pairs is not None:
        p = test.pairs
        batch = Pairs(p.first[chosen], p.second[chosen], p.offsets[chosen]).take(
            test.images, test.labels, 0, len(chosen)
        )
        return batch.images, batch.labels.long()  # (n, 1, 36, 36), (n, 2)
    return test.images[chosen].float(), test.labels[chosen].long()[:, None]  # (n, C, H, W), (n, 1)


def look(model: AnyModel, images: Tensor, present: int) -> tuple[np.ndarray, np.ndarray | None]:
    """What `model` makes of `images` (n, C, H, W) on its device, in eval mode (its mode restored after).

    Returns the scores (n, K) and, for a network that redraws its input, each image redrawn from its `present`
    highest-scoring capsules, merged as min(sum, 1) (n, H, W) in [0, 1]; None for a network without a decoder.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = model(images)
            if not network_of(model).redraws(model.config):
                return out.scores.float().cpu().numpy(), None
            top = out.scores.topk(present, dim=1).indices  # (n, L)
            redrawing = cast("CapsNet | EMCapsNet", model)  # a network that redraws has a decoder
            parts = torch.stack([redrawing.decode(out.poses, top[:, k]) for k in range(present)], 1)  # (n, L, C, H, W)
            redrawn = parts.float().sum(dim=1).clamp(max=1.0)  # (n, C, H, W)
            return out.scores.float().cpu().numpy(), as_pictures(redrawn)  # (n, H, W) or (n, H, W, 3)
    finally:
        model.train(was_training)


def thinned(count: int, keep: int = KEEP) -> np.ndarray:
    """The indices of `count` snapshots to keep: all up to `keep`, else every other one and the newest."""
    if count <= keep:
        return np.arange(count)
    return np.append(np.arange(0, count - 1, 2), count - 1)


def _to_bytes(images: np.ndarray) -> np.ndarray:
    return np.round(np.clip(images, 0.0, 1.0) * 255).astype(np.uint8)


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class WindowHistory:
    """A run's window and its snapshots, as `read_window` reads them."""

    dataset: str
    redrawn: bool  # there are reconstructions: the network redraws its input (the CapsNet, an EM one with decoder)
    batches: int  # per epoch
    m_plus: float
    m_minus: float
    images: np.ndarray  # (n, H, W) float32 in [0, 1], or (n, H, W, 3) for colour
    labels: np.ndarray  # (n, L) int64
    epochs: np.ndarray  # (S,) the epoch each snapshot was taken in, from 1
    batch: np.ndarray  # (S,) that epoch's batches done (`batches`: at its end)
    scores: np.ndarray  # (S, n, K) float32
    reconstructions: np.ndarray | None  # (S, n, H, W) (or (S, n, H, W, 3)) in [0, 1], where the network redraws
    network: str = "capsnet"  # the registry's name ("cnn" for a file older than the name that has no capsules)

    @property
    def margins(self) -> tuple[float, float] | None:
        """(m+, m-) the scores are trained toward (`Network.score_margins`), None where the loss sets none."""
        return None if np.isnan(self.m_plus) or np.isnan(self.m_minus) else (self.m_plus, self.m_minus)

    def __len__(self) -> int:
        return len(self.epochs)

    def label(self, s: int) -> str:
        """When snapshot `s` was taken, for people: "before training", "epoch 3", "epoch 3, batch 120 of 469"."""
        epoch, batch = int(self.epochs[s]), int(self.batch[s])
        if batch == 0 and epoch == 1:
            return "before training"
        return f"epoch {epoch}" if batch >= self.batches else f"epoch {epoch}, batch {batch} of {self.batches}"

    def predictions(self, s: int) -> np.ndarray:
        """(n, L) the L highest scores' classes of snapshot `s`, in the labels' order of classes (sorted)."""
        present = self.labels.shape[1]
        return np.sort(np.argsort(-self.scores[s], axis=1, kind="stable")[:, :present], axis=1)

    def right(self, s: int) -> np.ndarray:
        """(n,) bool: the L highest scores of snapshot `s` are exactly each example's classes."""
        return (self.predictions(s) == np.sort(self.labels, axis=1)).all(axis=1)


def _header(data: bytes) -> dict[str, str]:
    size = int.from_bytes(data[:8], "little")
    meta = loads_json(data[8 : 8 + size], "the watch file's header").get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise ValueError("metadata is not an object")
    return meta


def window_stamp(folder: RunFolder | str | Path) -> tuple[int, int] | None:
    """The window file's (modification time in ns, size): what changes when a snapshot is added; None without one."""
    path = (folder if isinstance(folder, RunFolder) else RunFolder(Path(folder))).file(RunFolder.WATCH)
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def read_window(folder: RunFolder | str | Path) -> WindowHistory | None:
    """The run's window file, or None when it has none yet, or one that is damaged, half-written or inconsistent."""
    path = (folder if isinstance(folder, RunFolder) else RunFolder(Path(folder))).file(RunFolder.WATCH)
    try:
        data = read_regular_file(path, MAX_BYTES)
        meta = _header(data)
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            return None
        t = load_tensors(data)
        redrawn = meta.get("redraws", meta.get("capsules")) == "true"  # "capsules" in a file written before the name
        images, labels, epochs, batch, scores = (t[k] for k in ("images", "labels", "epoch", "batch", "scores"))
        recon = t.get("reconstructions") if redrawn else None
        s, n = len(epochs), len(images)
        shapes_fit = (
            (images.ndim == 3 or images.ndim == 4 and images.shape[3] == 3) and labels.ndim == 2 and len(labels) == n and batch.shape == (s,) and s > 0
            and scores.ndim == 3 and scores.shape[:2] == (s, n)
            and (not redrawn or (recon is not None and recon.shape == (s, *images.shape)))
            and labels.size and 0 <= labels.min() and labels.max() < scores.shape[2]
        )  # fmt: skip
        if not shapes_fit or not np.isfinite(scores).all():
            return None
        return WindowHistory(
            dataset=str(meta.get("dataset", "")),
            redrawn=redrawn,
            network=str(meta.get("network") or ("capsnet" if redrawn else "cnn")),
            batches=max(int(meta.get("batches", "0")), 1),
            m_plus=float(meta.get("m_plus", "nan")),
            m_minus=float(meta.get("m_minus", "nan")),
            images=images.astype(np.float32) / 255,
            labels=labels.astype(np.int64),
            epochs=epochs.astype(np.int64),
            batch=batch.astype(np.int64),
            scores=scores.astype(np.float32),
            reconstructions=recon.astype(np.float32) / 255 if recon is not None else None,
        )
    except (OSError, ValueError, KeyError, TypeError, SafetensorError, FileReadError, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------- writing


class Watcher:
    """Takes a run's window snapshots and writes them to its folder (on the main process only: `enabled`).

    A snapshot that cannot be taken or written costs the window, never the run: it says why once on
    stderr and takes no more.
    """

    def __init__(
        self,
        folder: RunFolder,
        model: AnyModel,
        test: LabelledSet,
        batches: int,
        resume_at: tuple[int, int] | None = None,
        enabled: bool = True,
        every_s: float = DURING_EPOCH_S,
    ) -> None:
        """`resume_at`: (epochs finished, batches of the next one done) of a resumed run, whose window and
        snapshots up to there are kept; a new run starts its window afresh with a snapshot before training."""
        self.folder, self.model, self.batches, self.every_s = folder, model, batches, every_s
        self.enabled = enabled
        self.last = time.monotonic()
        if enabled:
            try:
                self._start(test, resume_at)
            except (CapsNetError, OSError, RuntimeError, ValueError) as error:
                self._give_up(error)

    def _start(self, test: LabelledSet, resume_at: tuple[int, int] | None) -> None:
        model, folder, batches = self.model, self.folder, self.batches
        c, net = model.config, network_of(model)
        m_plus, m_minus = net.score_margins(c) or (math.nan, math.nan)
        self.meta = {
            "format": FORMAT, "version": VERSION, "dataset": test.info.name, "batches": str(batches),
            "redraws": "true" if net.redraws(c) else "false", "network": net.name,
            "capsules": "true" if net.redraws(c) else "false",  # what a reader from before "redraws" reads
            "m_plus": str(m_plus), "m_minus": str(m_minus),
        }  # fmt: skip
        images, labels = window_examples(test)
        self.labels = labels.numpy()  # (n, L)
        self.images = _to_bytes(as_pictures(images))  # (n, H, W), or (n, H, W, 3) for colour
        self.epochs, self.batch = np.zeros(0, np.int32), np.zeros(0, np.int32)
        self.scores = np.zeros((0, len(images), c.num_classes), np.float32)
        self.reconstructions = np.zeros((0, *self.images.shape), np.uint8)
        old = read_window(folder) if resume_at is not None else None
        same = (self.images.shape, self.labels.shape, net.redraws(c), c.num_classes)
        if (
            old is not None
            and resume_at is not None
            and ((old.images.shape, old.labels.shape, old.redrawn, old.scores.shape[2]) == same)
        ):
            keep = (old.epochs < resume_at[0] + 1) | ((old.epochs == resume_at[0] + 1) & (old.batch <= resume_at[1]))
            self.images, self.labels = _to_bytes(old.images), old.labels  # the same window as before the stop
            self.epochs, self.batch = old.epochs[keep].astype(np.int32), old.batch[keep].astype(np.int32)
            self.scores = old.scores[keep]
            if old.reconstructions is not None:
                self.reconstructions = _to_bytes(old.reconstructions[keep])
        self.inputs = as_inputs(self.images).to(next(model.parameters()).device)  # (n, C, H, W)
        if resume_at is None or not len(self.epochs):
            self.snapshot(resume_at[0] + 1 if resume_at else 1, resume_at[1] if resume_at else 0)

    def snapshot(self, epoch: int, batch: int) -> None:
        """Look at the window now (in epoch `epoch`, after `batch` of its batches) and rewrite the file."""
        if not self.enabled:
            return
        self.last = time.monotonic()
        try:
            scores, redrawn = look(self.model, self.inputs, self.labels.shape[1])
            self.epochs, self.batch = np.append(self.epochs, epoch), np.append(self.batch, batch)
            self.scores = np.concatenate([self.scores, scores[None]])
            if redrawn is not None:
                self.reconstructions = np.concatenate([self.reconstructions, _to_bytes(redrawn)[None]])
            keep = thinned(len(self.epochs))
            self.epochs, self.batch, self.scores = self.epochs[keep], self.batch[keep], self.scores[keep]
            if redrawn is not None:
                self.reconstructions = self.reconstructions[keep]
            self._write()
        except (CapsNetError, OSError, RuntimeError, ValueError) as error:
            self._give_up(error)

    def _give_up(self, error: Exception) -> None:
        print(f"{self.folder.path}: the training window stops: {error}", file=sys.stderr, flush=True)
        self.enabled = False

    def _write(self) -> None:
        tensors = {"images": self.images, "labels": self.labels, "epoch": self.epochs, "batch": self.batch,
                   "scores": self.scores.astype(np.float32)}  # fmt: skip
        if self.meta["redraws"] == "true":
            tensors["reconstructions"] = self.reconstructions
        data = save_tensors({k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata=self.meta)
        atomic_write(self.folder.file(RunFolder.WATCH), lambda handle: handle.write(data))

    def epoch_done(self, epoch: int) -> None:
        """After epoch `epoch` (from 1) is saved."""
        self.snapshot(epoch, self.batches)

    def during(
        self, on_batch: Callable[[int, float, float, float], None], epoch: int, done_before: int
    ) -> Callable[[int, float, float, float], None]:
        """The trainer's progress report `on_batch`, also taking a snapshot when `every_s` have passed since the last."""

        def report(batch: int, loss: float, accuracy: float, speed: float) -> None:
            on_batch(batch, loss, accuracy, speed)
            done = done_before + batch
            if self.enabled and done < self.batches and time.monotonic() - self.last >= self.every_s:
                self.snapshot(epoch, done)

        return report
