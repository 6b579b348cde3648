"""One epoch of training: a pass over its batches (`train_one_epoch`), with what it needs in one `EpochContext`.

The trainer (`capsnet.training.trainer`) calls it once per epoch. Ctrl-C, SIGTERM or SIGHUP set the `StopFlag`, checked
after every batch (several processes check it together every SYNC_EVERY batches); the sums it returns (`EpochSums`)
are what the epoch trained on, over every process, and what a resumable state keeps of an epoch stopped part-way.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from capsnet.data.tasks import Task
from capsnet.nn.registry import AnyConfig
from capsnet.training.collapse import CollapseWatch, TrainingCollapsedError
from capsnet.training.distributed import Distributed, reduce_sum
from capsnet.training.schedule import Schedule
from capsnet.training.step import training_step

REPORT_EVERY_S = 0.5  # seconds between progress reports (each one reads the running sums back from the device)
SYNC_EVERY = 20  # batches between the checks that need the device or every process: stop flag, collapse, learning
# seconds between the resumable states saved in the middle of an epoch (after the batch that passes it; under torchrun
# at the next sync point): a run killed without warning (a closed terminal, the OOM killer) loses at most about this
# much of a long epoch
SAVE_EVERY_S = 600.0


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class StopFlag:
    """Set by SIGINT, SIGTERM or SIGHUP (a closed terminal); the loop checks it after every batch. A second Ctrl-C aborts."""

    def __init__(self) -> None:
        self.stop = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():  # signals can only be set there
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.stop and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.stop = True

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@dataclass
class EpochSums:
    """What an epoch (or the part of one before a stop) trained on, summed over every process."""

    loss_sum: float = 0.0
    correct: float = 0.0
    seen: float = 0.0
    seconds: float = 0.0
    batches: int = 0  # this process's batches
    stopped: bool = False  # every process stopped part-way (Ctrl-C, SIGTERM): decided together

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.seen, 1)

    @property
    def accuracy(self) -> float:
        return self.correct / max(self.seen, 1)

    def __add__(self, other: EpochSums) -> EpochSums:
        """The sums of both parts of an epoch (this one's batch count and stop)."""
        return EpochSums(
            self.loss_sum + other.loss_sum,
            self.correct + other.correct,
            self.seen + other.seen,
            self.seconds + other.seconds,
            self.batches,
            self.stopped,
        )

    def to_state(self) -> dict[str, float]:
        return {k: float(getattr(self, k)) for k in ("loss_sum", "correct", "seen", "seconds")}

    @classmethod
    def from_state(cls, state: dict[str, float]) -> EpochSums:
        loss_sum, correct, seen, seconds = (
            float(state.get(k, 0.0)) for k in ("loss_sum", "correct", "seen", "seconds")
        )
        return cls(loss_sum, correct, seen, seconds)


# ---------------------------------------------------------------- one epoch


@dataclass
class EpochContext:
    """What one epoch trains with: the run's network, optimizer and processes, and this epoch's hooks."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    config: AnyConfig
    device: torch.device
    amp: bool
    stop: StopFlag
    env: Distributed
    on_batch: Callable[[int, float, float, float], None] | None = None  # (batches, mean loss, accuracy, images/s)
    bar: tqdm | None = None
    watch: CollapseWatch | None = None
    schedule: Schedule | None = None
    progress: tuple[float, float] = (1.0, 0.0)  # the run's progress at the epoch's first batch, its growth per batch
    on_save: Callable[[EpochSums], None] | None = None


def train_one_epoch(ctx: EpochContext, loader: Iterable[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> EpochSums:
    """One pass over `loader`'s (images, labels, reconstruction targets) batches, already on `ctx.device`.

    Nothing is read back from the device per batch: the running loss and accuracy are read only
    to report progress (at most every REPORT_EVERY_S), and the stop flag of a distributed run and
    the collapse watch only every SYNC_EVERY batches and at the end, when all processes check them
    together (so they all stop at the same batch, and agree whether the epoch was stopped).
    Raises TrainingCollapsedError when the watch says so. `ctx.progress` is (the run's progress at this
    epoch's first batch, its growth per batch), for a loss with a schedule. `ctx.on_save` is given the
    epoch's sums so far every SAVE_EVERY_S (several processes: at the next sync point), for a resumable state.
    """
    model, device, env, stop = ctx.model, ctx.device, ctx.env, ctx.stop
    on_batch, bar, watch, on_save = ctx.on_batch, ctx.bar, ctx.watch, ctx.on_save
    model.train()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    seen = batches = reported = 0
    reporting = on_batch is not None or bar is not None
    start = last_report = last_save = time.perf_counter()

    def totals(stopped: bool = False) -> EpochSums:  # every process together
        total_loss, total_correct, total_seen = reduce_sum(
            [loss_sum.item(), float(correct.item()), float(seen)], env, device
        )
        return EpochSums(total_loss, total_correct, total_seen, time.perf_counter() - start, batches, stopped)

    def report() -> None:
        mean_loss, accuracy = loss_sum.item() / seen, correct.item() / seen
        speed = seen * env.world / (time.perf_counter() - start)
        if on_batch is not None:
            on_batch(batches, mean_loss, accuracy, speed)
        if bar is not None:
            bar.set_postfix(loss=f"{mean_loss:.4f}", acc=f"{100 * accuracy:.2f}%", img_s=f"{speed:.0f}")

    for images, labels, targets in loader:
        at = ctx.progress[0] + batches * ctx.progress[1]  # how far the run is, 0 to 1
        out, loss = training_step(model, ctx.optimizer, images, labels, targets, ctx.config, ctx.amp, at)
        if ctx.schedule is not None:
            ctx.schedule.after_batch()
        batches += 1
        right = Task.right(out.scores, labels).sum()
        loss_sum += loss.total.detach().float() * len(images)
        correct += right
        seen += len(images)
        if watch is not None:
            watch.observe(loss.total, out.scores, right)
        if bar is not None:
            bar.update(1)
        if reporting and time.perf_counter() - last_report >= REPORT_EVERY_S:
            report()
            last_report, reported = time.perf_counter(), batches
        due = on_save is not None and time.perf_counter() - last_save >= SAVE_EVERY_S
        if batches % SYNC_EVERY == 0:
            stopping, saving = _agreed(stop, watch, env, device, due)
            if stopping:
                break
        elif stop.stop and not env.enabled:  # one process: stop at once; several stop together at a sync point
            break
        else:
            saving = due and not env.enabled  # one process saves when due; several together at a sync point
        if saving and on_save is not None:
            on_save(totals())
            last_save = time.perf_counter()
    if reporting and batches > reported:
        report()  # where the epoch (or its part before a stop) ended
    stopped, _ = _agreed(stop, watch, env, device)  # also for an epoch shorter than SYNC_EVERY batches
    return totals(stopped)


def _agreed(
    stop: StopFlag, watch: CollapseWatch | None, env: Distributed, device: torch.device, save_due: bool = False
) -> tuple[bool, bool]:
    """(whether any process was asked to stop, whether any is due to save); raises TrainingCollapsedError if any
    process's watch says so."""
    reason = watch.verdict() if watch is not None else None
    failed, stopping, saving = reduce_sum([float(reason is not None), float(stop.stop), float(save_due)], env, device)
    if failed:
        raise TrainingCollapsedError(reason or "training collapsed on another process")
    return stopping > 0, saving > 0
