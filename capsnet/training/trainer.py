"""The training loop: Adam on the network's own loss (the CapsNet's margin + reconstruction), on the run's schedule.

    python -m capsnet train --dataset mnist --epochs 50
    torchrun --nproc_per_node=4 -m capsnet train --dataset mnist --epochs 50

The options are `capsnet.training.options.TrainOptions`; the run folder's files are described in
`capsnet.training.run_folder`, and what is saved after each epoch in `capsnet.training.checkpointer`. The
steps: `prepare` (the run folder, or the state of a run to resume), `build` (model,
optimizer, schedule), `load_data`, then `fit`, an epoch at a time with `train_one_epoch`.
Ctrl-C or SIGTERM stops at the end of the current batch and leaves a resumable state, and a long
epoch saves one every SAVE_EVERY_S as well (a kill without warning loses at most that); a run
that diverges or collapses stops with the reason (`capsnet.training.collapse`).
"""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import torch
from tqdm import tqdm

from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.data.augment import augment_seed
from capsnet.data.datasets import dataset_info
from capsnet.data.tasks import Task
from capsnet.device import describe_device, pick_device, seed_everything
from capsnet.errors import CapsNetError
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.registry import AnyConfig, AnyModel, network
from capsnet.nn.warm_start import warm_config, warm_start
from capsnet.training.acceleration import Acceleration
from capsnet.training.checkpointer import Checkpointer, epoch_info
from capsnet.training.collapse import CollapseWatch, TrainingCollapsedError
from capsnet.training.distributed import Distributed, barrier, distributed_session, reduce_sum
from capsnet.training.optimizer import run_optimizer
from capsnet.training.options import TrainOptions
from capsnet.training.prepare import NETWORK_CONFIG, Prepared, prepare
from capsnet.training.run_folder import (
    EpochRecord,
    Progress,
    ProgressWriter,
)
from capsnet.training.schedule import Schedule
from capsnet.training.step import training_step
from capsnet.training.train_data import load_data
from capsnet.training.watch import Watcher

REPORT_EVERY_S = 0.5  # seconds between progress reports (each one reads the running sums back from the device)
SYNC_EVERY = 50  # batches between the checks that need the device or every process: stop flag, collapse
# seconds between the resumable states saved in the middle of an epoch (after the batch that passes it; under torchrun
# at the next sync point): a run killed without warning (a closed session, the OOM killer) loses at most about this
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


def train_one_epoch(
    model: torch.nn.Module,
    loader: Iterable[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    config: AnyConfig,
    device: torch.device,
    amp: bool,
    stop: StopFlag,
    env: Distributed,
    on_batch: Callable[[int, float, float, float], None] | None = None,
    bar: tqdm | None = None,
    watch: CollapseWatch | None = None,
    schedule: Schedule | None = None,
    progress: tuple[float, float] = (1.0, 0.0),
    on_save: Callable[[EpochSums], None] | None = None,
) -> EpochSums:
    """One pass over `loader`'s (images, labels, reconstruction targets) batches, already on `device`.

    Nothing is read back from the device per batch: the running loss and accuracy are read only
    to report progress (at most every REPORT_EVERY_S), and the stop flag of a distributed run and
    the collapse watch only every SYNC_EVERY batches and at the end, when all processes check them
    together (so they all stop at the same batch, and agree whether the epoch was stopped).
    Raises TrainingCollapsedError when the watch says so. `progress` is (the run's progress at this
    epoch's first batch, its growth per batch), for a loss with a schedule. `on_save` is given the
    epoch's sums so far every SAVE_EVERY_S (several processes: at the next sync point), for a resumable state.
    """
    model.train()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    seen = batches = reported = 0
    reporting = on_batch is not None or bar is not None
    start = last_report = last_save = time.perf_counter()

    def totals(stopped: bool = False) -> EpochSums:  # every process together
        summed = reduce_sum([loss_sum.item(), float(correct.item()), float(seen)], env, device)
        return EpochSums(
            summed[0], summed[1], summed[2], seconds=time.perf_counter() - start, batches=batches, stopped=stopped
        )

    def report() -> None:
        mean_loss, accuracy = loss_sum.item() / seen, correct.item() / seen
        speed = seen * env.world / (time.perf_counter() - start)
        if on_batch is not None:
            on_batch(batches, mean_loss, accuracy, speed)
        if bar is not None:
            bar.set_postfix(loss=f"{mean_loss:.4f}", acc=f"{100 * accuracy:.2f}%", img_s=f"{speed:.0f}")

    for images, labels, targets in loader:
        at = progress[0] + batches * progress[1]  # how far the run is, 0 to 1
        out, loss = training_step(model, optimizer, images, labels, targets, config, amp, at)
        if schedule is not None:
            schedule.after_batch()
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


# ---------------------------------------------------------------- the steps of a run


def build(
    options: TrainOptions,
    device: torch.device,
    acceleration: Acceleration,
    batches: int,
    resumed: AnyConfig | None = None,
) -> tuple[AnyModel, torch.optim.Adam, Schedule]:
    """The model (with an --init checkpoint's weights), Adam (fused if chosen), and the schedule over `batches` an epoch.

    `resumed`: the config a resumed run was built with, which a warm start may have taken from its source.
    """
    info = dataset_info(options.dataset)
    # the CNN takes a sigmoid per class where several digits are present
    config = resumed if resumed is not None else options.network_config()
    net = network(options.network)
    if config.num_classes != info.num_classes:
        raise CapsNetError(
            f"preset {options.preset} has {config.num_classes} classes, {info.title} has {info.num_classes}"
        )
    if options.init:
        start = load_checkpoint(options.init, networks=(options.network,))
        if start.config == config:
            model = net.build(config)
            model.load_state_dict(start.model.state_dict())
        else:  # a warm start onto a larger canvas: the convolutions as they are, W_ij laid onto the larger grid
            try:
                config = warm_config(start.config, config)
            except ValueError as error:
                raise CapsNetError(f"{options.init}: {error}") from None
            model = net.build(config)
            for line in warm_start(model, start.model):
                print(f"warm start from {options.init}: {line}", flush=True)
    else:
        model = net.build(config)
    model.to(device)
    optimizer = run_optimizer(model, options.lr, options.beta_lr, acceleration.fused_adam)
    schedule = Schedule(optimizer, options.schedule, lr_decay=options.lr_decay, epochs=options.epochs,
                        batches=batches, warmup=options.warmup)  # fmt: skip
    return model, optimizer, schedule


def loss_progress(done: int, total: int, warm: bool) -> tuple[float, float]:
    """(how far the run is after `done` of its `total` batches, what one batch adds), as the loss reads it.

    A loss with a schedule (the EM network's spread margin, growing from 0.2 to 0.9) follows the run; a warm start
    (--init, and its resumes) trains at the schedule's end: the ramp keeps a fresh network's capsules from dying
    early, and the model it starts from is past it (a new ramp would spend its first epoch on a slack margin).
    """
    return (1.0, 0.0) if warm else (done / total, 1 / total)


# ---------------------------------------------------------------- the loop


def _save_part(
    saver: Checkpointer, epoch: int, done_before: int, before: EpochSums, epoch_start: float, part: EpochSums
) -> None:
    """A resumable state in the middle of epoch `epoch` (0-based): the batches and sums of `part`, after `before`."""
    elapsed = saver.state.elapsed + time.perf_counter() - epoch_start
    saver.save_state(epoch, done_before + part.batches, (part + before).to_state(), elapsed=elapsed)


def fit(
    prepared: Prepared, env: Distributed, device: torch.device, on_epoch: Callable[[EpochRecord], None] | None = None
) -> list[EpochRecord]:
    """Build, load the data, and train epoch by epoch from where the run is, saving after each."""
    options, folder = prepared.options, prepared.folder
    seed_everything(options.seed + env.rank)
    data = load_data(options, device, env)
    per_process = len(data.sampler)
    batches = math.ceil(per_process / options.batch_size)
    total_batches = max(options.epochs * batches, 1)
    accel = prepared.acceleration
    seed_everything(options.seed + env.rank)  # the weights do not depend on what loading the data drew
    model, optimizer, scheduler = build(options, device, accel, batches, resumed=prepared.config)
    saver = Checkpointer(folder, model, optimizer, scheduler, enabled=env.is_main)
    state = saver.restore() if options.resume else saver.state
    if options.resume and env.is_main:
        for change in saver.reconcile():  # a trainer killed at an epoch's end left part of its records
            print(f"{folder.path}: {change}", file=sys.stderr)
    prepared.args[NETWORK_CONFIG] = model.config.to_dict()  # what a resume rebuilds, warm start or not
    if env.is_main and folder.read_args() != prepared.args:
        folder.write_args(prepared.args)  # on a resume, only once the saved state has proved sound
    if env.is_main:
        print(f"training on {describe_device(device)}: {accel.describe()}", flush=True)  # stdout: stderr is for errors
    net: torch.nn.Module = model
    use_cuda = device.type == "cuda"
    if accel.compile:
        net = cast(torch.nn.Module, torch.compile(net))  # an OptimizedModule: the model's attributes, compiled
    # what evaluates after each epoch: the compiled module where there is one process (the EM network's inference on a
    # CPU runs 1.7x faster compiled); under torchrun the main process evaluates alone, outside the DDP wrapper
    judge = cast(AnyModel, net) if accel.compile and not env.enabled else model
    if env.enabled:
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[env.local_rank] if use_cuda else None)
    amp = accel.amp
    start_epoch, start_batch = state.epoch, state.batch
    progress = ProgressWriter(
        folder,
        Progress(status="running", pid=os.getpid(), dataset=options.dataset, epochs=options.epochs, epoch=start_epoch + 1,
                 batches=batches, batch=start_batch, started=time.time()),
        enabled=env.is_main,
    )  # fmt: skip
    records: list[EpochRecord] = []
    if start_epoch >= options.epochs:
        if env.is_main:
            print(f"{folder.path}: already trained {start_epoch} epochs; raise --epochs to continue", file=sys.stderr)
        return records
    c = model.config
    # a network without capsules (and their margin loss) has no margins to collapse to: divergence only
    margins = (c.m_plus, c.m_minus) if isinstance(c, CapsNetConfig) else (math.inf, -math.inf)
    watch = CollapseWatch(c.num_classes, *margins, options.lr, device, present=data.present)
    resume_at = (start_epoch, start_batch) if options.resume else None
    window = Watcher(folder, model, data.test, batches, resume_at, enabled=env.is_main)  # a few test images, watched
    status, reason = "finished", ""
    with StopFlag() as stop:
        try:
            for epoch in range(start_epoch, options.epochs):
                data.sampler.set_epoch(epoch)
                done_before = start_batch if epoch == start_epoch else 0
                seed = augment_seed(options.seed, epoch, env.rank)
                loader = data.epoch(options.batch_size, seed=seed, start_batch=done_before)
                bar = None
                if options.progress and env.is_main:
                    bar = tqdm(total=batches, initial=done_before, desc=f"epoch {epoch + 1}/{options.epochs}",
                               unit="batch", dynamic_ncols=True)  # fmt: skip
                epoch_start = time.perf_counter()

                on_batch: Callable[[int, float, float, float], None] = functools.partial(
                    progress.batch_done,
                    epoch=epoch + 1,
                    done_before=done_before,
                    images_left=(options.epochs - epoch - 1) * per_process * env.world,
                    batch_size=options.batch_size * env.world,
                )
                on_batch = window.during(on_batch, epoch + 1, done_before)
                before = EpochSums.from_state(state.partial) if done_before else EpochSums()  # before a resume
                on_save = functools.partial(_save_part, saver, epoch, done_before, before, epoch_start)
                sums = train_one_epoch(
                    net, loader, optimizer, model.config, device, amp, stop, env,
                    on_batch if env.is_main else None, bar, watch, scheduler,
                    loss_progress(epoch * batches + done_before, total_batches, warm=prepared.origin is not None),
                    on_save,
                )  # fmt: skip
                if bar is not None:
                    bar.close()
                state.elapsed += time.perf_counter() - epoch_start
                sums = sums + before  # with the part of this epoch run before a resume
                if sums.stopped:
                    status = "stopped"
                    saver.save_state(epoch, done_before + sums.batches, sums.to_state())
                    break
                record: EpochRecord | None = None
                if env.is_main:
                    result = data.evaluate(judge, device)
                    info = epoch_info(options, epoch + 1, result, state.elapsed, device, prepared.origin)
                    val = data.evaluate_validation(judge, device)  # held-out training images (or pairs of them)
                    if val is not None:  # the best epoch is chosen on them
                        info = info.replace(
                            extra={
                                **info.extra,
                                "val_accuracy": val.accuracy,
                                "val_loss": val.loss,
                                "val_examples": val.total,
                            }
                        )
                    saver.save_models(epoch + 1, (val or result).accuracy, info)  # staged until the commit
                    record = {
                        "epoch": epoch + 1,
                        "train_loss": sums.loss,
                        "train_accuracy": sums.accuracy,
                        "train_images": int(sums.seen),
                        "test_loss": result.loss,
                        "test_accuracy": result.accuracy,
                        "lr": optimizer.param_groups[0]["lr"],
                        "seconds": round(time.perf_counter() - epoch_start + before.seconds, 2),  # with evaluation
                        "images_per_s": round(sums.seen / max(sums.seconds, 1e-9), 1),
                        **({"val_loss": val.loss, "val_accuracy": val.accuracy} if val is not None else {}),
                    }
                scheduler.after_epoch()
                saver.commit_epoch(epoch + 1, record)  # state, checkpoints, metrics line
                window.epoch_done(epoch + 1)  # the main process only
                if record is not None:
                    print(json.dumps(record), flush=True)
                    records.append(record)
                    if on_epoch is not None:
                        on_epoch(record)
                barrier(env)
        except TrainingCollapsedError as error:
            status, reason = "failed", str(error)
            raise
        except BaseException as error:
            status, reason = "failed", f"{type(error).__name__}: {' '.join(str(error).split())}"[:300]
            raise
        finally:
            best = max(saver.committed_best, 0.0)  # only what a saved state holds
            try:
                progress.update(force=True, status=status, best_accuracy=best, reason=reason)
            except CapsNetError as error:  # never hide the error that ended the run (a full disk fails both)
                print(f"{folder.path}: could not record the run's end: {error}", file=sys.stderr)
    return records


def train(options: TrainOptions, on_epoch: Callable[[EpochRecord], None] | None = None) -> list[EpochRecord]:
    """Train as `options` say; returns the per-epoch records (also appended to metrics.jsonl)."""
    options.validate()
    with distributed_session(options.device) as env:
        device = pick_device(options.device)
        if env.enabled and device.type == "cuda":
            device = torch.device("cuda", env.local_rank)  # one GPU per torchrun process
        prepared = prepare(options, env, device)  # with the acceleration chosen for the run's own options
        try:
            return fit(prepared, env, device, on_epoch)
        finally:
            if prepared.lock is not None:
                prepared.lock.release()
