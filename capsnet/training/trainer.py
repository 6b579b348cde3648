"""The training loop: Adam on the network's own loss (the CapsNet's margin + reconstruction), on the run's schedule.

    python -m capsnet train --dataset mnist --epochs 50
    torchrun --nproc_per_node=4 -m capsnet train --dataset mnist --epochs 50

The options are `capsnet.training.options.TrainOptions`; the run folder's files are described in
`capsnet.training.folder`, and what is saved after each epoch in `capsnet.training.checkpointer`. The
steps: `prepare` (the run folder, or the state of a run to resume), `set_up` (`load_data`, then `build`: model,
optimizer, schedule), then `fit`, a plain loop over the epochs: `train_epoch` (its batches, `train_one_epoch` of
`capsnet.training.epoch`), `evaluate`, the schedule's step, and the commit of what the epoch saves.
Ctrl-C or SIGTERM stops at the end of the current batch and leaves a resumable state, and a long
epoch saves one every SAVE_EVERY_S (`capsnet.training.epoch`) as well (a kill without warning loses at most that); a
run that diverges or collapses stops with the reason (`capsnet.training.collapse`).
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import torch
from tqdm import tqdm

from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.data.augment import augment_seed
from capsnet.data.datasets import dataset_info
from capsnet.device import describe_device, pick_device, seed_everything
from capsnet.errors import CapsNetError, out_of_memory
from capsnet.memory import check_fits, keep_freed_memory
from capsnet.nn.registry import AnyConfig, AnyModel, network, network_of
from capsnet.nn.warm_start import warm_config, warm_start
from capsnet.training.acceleration import Acceleration, lay_out
from capsnet.training.checkpointer import Checkpointer, epoch_info
from capsnet.training.collapse import CollapseWatch, TrainingCollapsedError
from capsnet.training.distributed import Distributed, barrier, distributed_session
from capsnet.training.epoch import EpochContext, EpochSums, StopFlag, train_one_epoch
from capsnet.training.folder import EpochRecord, Progress, ProgressWriter
from capsnet.training.folder_defaults import default_recipe
from capsnet.training.optimizer import run_optimizer
from capsnet.training.options import TrainOptions
from capsnet.training.prepare import NETWORK_CONFIG, Prepared, prepare
from capsnet.training.recipes import FOLDER_RECIPE
from capsnet.training.schedule import Schedule
from capsnet.training.train_data import Data, load_data
from capsnet.training.watch import Watcher

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
                model = net.build(config)
                carried = warm_start(model, start.model)
            except ValueError as error:
                raise CapsNetError(f"{options.init}: {error}") from None
            for line in carried:
                print(f"warm start from {options.init}: {line}", flush=True)
    else:
        model = net.build(config)
    lay_out(model.to(device), acceleration)
    optimizer = run_optimizer(model, options.lr, options.beta_lr, acceleration.fused_adam)
    schedule = Schedule(optimizer, options.schedule, lr_decay=options.lr_decay, epochs=options.epochs,
                        batches=batches, warmup=options.warmup)  # fmt: skip
    return model, optimizer, schedule


def judge_of(
    model: AnyModel, net: torch.nn.Module, acceleration: Acceleration, env: Distributed, device: torch.device
) -> AnyModel:
    """What evaluates after each epoch: the compiled module on a GPU where there is one process and the network says
    it judges compiled (`Network.judges_compiled`); else the eager model. The eager EM layers read by the compiled
    kernel on a CPU (`capsnet.nn.em_native`, about 1 MB an image) or in chunks of bounded memory, where a compiled
    pass routes the whole evaluation batch at once: about 26 GB for the paper-sized EM network at 500 images on a CPU,
    21.6 GB on an H100 (1.35 GB eager, for 1.5x the speed). Under torchrun the main process evaluates alone, outside
    the DDP wrapper."""
    gpu = device.type != "cpu" and network_of(model).judges_compiled
    compiled = acceleration.compile and not env.enabled and gpu
    return cast(AnyModel, net) if compiled else model


def loss_progress(done: int, total: int, warm: bool) -> tuple[float, float]:
    """(how far the run is after `done` of its `total` batches, what one batch adds), as the loss reads it.

    A loss with a schedule (the EM network's spread margin, growing from 0.2 to 0.9) follows the run; a warm start
    (--init, and its resumes) trains at the schedule's end: the ramp keeps a fresh network's capsules from dying
    early, and the model it starts from is past it (a new ramp would spend its first epoch on a slack margin).
    """
    return (1.0, 0.0) if warm else (done / total, 1 / total)


# ---------------------------------------------------------------- the loop


@dataclass
class Run:
    """What every epoch of a run shares: its data, model (as built, as trained, as judged), optimizer, schedule,
    what it saves and the progress it reports, and where it starts (a resumed run inside an epoch)."""

    prepared: Prepared
    env: Distributed
    device: torch.device
    data: Data
    batches: int  # per epoch, in this process
    model: AnyModel  # as built: what is saved
    net: torch.nn.Module  # what trains: compiled where chosen, inside DDP under torchrun
    judge: AnyModel  # what evaluates after each epoch
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    saver: Checkpointer
    progress: ProgressWriter
    start_epoch: int
    start_batch: int

    @property
    def options(self) -> TrainOptions:
        return self.prepared.options

    @property
    def warm(self) -> bool:
        """Whether the run started from a checkpoint (--init): its loss trains at its schedule's end."""
        return self.prepared.origin is not None


def seed(options: TrainOptions, env: Distributed) -> None:
    """Every random generator from the run's seed, each process its own."""
    seed_everything(options.seed + env.rank)


def set_up(prepared: Prepared, env: Distributed, device: torch.device) -> Run:
    """Load the data, build the model, optimizer and schedule (restored on --resume), record the network built."""
    options, folder, accel = prepared.options, prepared.folder, prepared.acceleration
    if device.type == "cpu":  # refused in one line, before anything is built, if the batch would not fit the memory
        config, family = prepared.config or options.network_config(), network(options.network)
        check_fits(config, options.batch_size, f"the {family.title} ({options.preset} preset)")
    seed(options, env)
    data = load_data(options, device, env)
    batches = math.ceil(len(data.sampler) / options.batch_size)
    seed(options, env)  # the weights do not depend on what loading the data drew
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
    if accel.compile:
        net = cast(torch.nn.Module, torch.compile(net))  # an OptimizedModule: the model's attributes, compiled
    judge = judge_of(model, net, accel, env, device)
    if env.enabled:
        net = torch.nn.parallel.DistributedDataParallel(
            net, device_ids=[env.local_rank] if device.type == "cuda" else None
        )
    done = state.epoch >= options.epochs  # resumed after its last epoch was committed: the last epoch, whole
    progress = ProgressWriter(
        folder,
        Progress(status="running", pid=os.getpid(), dataset=options.dataset, epochs=options.epochs,
                 epoch=options.epochs if done else state.epoch + 1, batches=batches,
                 batch=batches if done else state.batch, started=time.time()),
        enabled=env.is_main,
    )  # fmt: skip
    return Run(prepared, env, device, data, batches, model, net, judge, optimizer, scheduler, saver, progress,
               state.epoch, state.batch)  # fmt: skip


class Trained(NamedTuple):
    """An epoch trained (or stopped part-way): its sums, with those of its part before a resume."""

    sums: EpochSums
    batches: int  # this process's batches of the epoch done, before a resume included
    start: float  # `time.perf_counter()` as this process's part of it began
    seconds_before: float  # the wall time of its part before a resume

    def seconds(self) -> float:
        """The epoch's wall time until now (its evaluation included, when asked after it)."""
        return time.perf_counter() - self.start + self.seconds_before


def train_epoch(run: Run, epoch: int, stop: StopFlag, watch: CollapseWatch, window: Watcher) -> Trained:
    """Epoch `epoch` (from 0), from where a resume left it: its batches, shuffled and augmented from the run's seed,
    with the progress reported, the window watched and a resumable state saved on the way."""
    options, env, data, batches = run.options, run.env, run.data, run.batches
    data.sampler.set_epoch(epoch)
    done_before = run.start_batch if epoch == run.start_epoch else 0  # this epoch's batches run before a resume
    loader = data.epoch(options.batch_size, seed=augment_seed(options.seed, epoch, env.rank), start_batch=done_before)
    bar = None
    if options.progress and env.is_main:
        bar = tqdm(total=batches, initial=done_before, desc=f"epoch {epoch + 1}/{options.epochs}",
                   unit="batch", dynamic_ncols=True)  # fmt: skip
    epoch_start = time.perf_counter()
    on_batch: Callable[[int, float, float, float], None] = functools.partial(
        run.progress.batch_done,
        epoch=epoch + 1,
        done_before=done_before,
        images_left=(options.epochs - epoch - 1) * len(data.sampler) * env.world,
        batch_size=options.batch_size * env.world,
    )
    on_batch = window.during(_said(run, watch, on_batch), epoch + 1, done_before)
    before = EpochSums.from_state(run.saver.state.partial) if done_before else EpochSums()  # before a resume
    progress = loss_progress(epoch * batches + done_before, max(options.epochs * batches, 1), run.warm)
    ctx = EpochContext(
        run.net, run.optimizer, run.model.config, run.device, run.prepared.acceleration.amp, stop, env,
        on_batch if env.is_main else None, bar, watch, run.schedule, progress,
        functools.partial(_save_part, run.saver, epoch, done_before, before, epoch_start),
    )  # fmt: skip
    sums = train_one_epoch(ctx, loader)
    if bar is not None:
        bar.close()
    run.saver.state.elapsed += time.perf_counter() - epoch_start
    sums = sums + before  # with the part of this epoch run before a resume
    return Trained(sums, done_before + sums.batches, epoch_start, before.seconds)


def _said(
    run: Run, watch: CollapseWatch, on_batch: Callable[[int, float, float, float], None]
) -> Callable[[int, float, float, float], None]:
    """`on_batch`, reporting first the watch's sign that the run is not learning (`say_warning`)."""

    def report(batch: int, loss: float, accuracy: float, speed: float) -> None:
        say_warning(run, watch)
        on_batch(batch, loss, accuracy, speed)

    return report


def say_warning(run: Run, watch: CollapseWatch, force: bool = False) -> None:
    """Put the watch's sign that the run is not learning (or its end) in progress.json, and in the log when it
    appears (not again while it stays)."""
    if watch.warning != run.progress.progress.warning:
        if watch.warning and not run.progress.progress.warning and run.env.is_main:
            print(f"warning: {watch.warning}", flush=True)
        run.progress.update(force=force, warning=watch.warning)


def learning_advice(options: TrainOptions) -> str:
    """What a run that does not learn could try besides a lower learning rate: a folder's own defaults, or the
    official code's initial scales where the network has them."""
    if options.recipe != FOLDER_RECIPE and default_recipe(options.dataset) == FOLDER_RECIPE:
        return f"the folder's own defaults (--recipe {FOLDER_RECIPE})"
    if options.preset == "paper" and "official" in network(options.network).presets:
        return "the official code's initial scales (--preset official)"
    return ""


def _save_part(
    saver: Checkpointer, epoch: int, done_before: int, before: EpochSums, epoch_start: float, part: EpochSums
) -> None:
    """A resumable state in the middle of epoch `epoch` (0-based): the batches and sums of `part`, after `before`."""
    elapsed = saver.state.elapsed + time.perf_counter() - epoch_start
    saver.save_state(epoch, done_before + part.batches, (part + before).to_state(), elapsed=elapsed)


def evaluate(run: Run, epoch: int) -> tuple[Any, Any]:
    """The test set's evaluation and the validation split's (or None) after epoch `epoch` (from 0); the epoch's
    checkpoints are staged with them in their headers (the best chosen on validation where there is one)."""
    options, data, judge, device = run.options, run.data, run.judge, run.device
    result = data.evaluate(judge, device)
    info = epoch_info(options, epoch + 1, result, run.saver.state.elapsed, device, run.prepared.origin)
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
    run.saver.save_models(epoch + 1, (val or result).accuracy, info)  # staged until the commit
    return result, val


def epoch_record(epoch: int, trained: Trained, result: Any, val: Any, lr: float) -> EpochRecord:
    """Epoch `epoch`'s line of metrics.jsonl (from 0), once evaluated: `result` on test, `val` on validation or None."""
    sums = trained.sums
    return {
        "epoch": epoch + 1,
        "train_loss": sums.loss,
        "train_accuracy": sums.accuracy,
        "train_images": int(sums.seen),
        "test_loss": result.loss,
        "test_accuracy": result.accuracy,
        "lr": lr,
        "seconds": round(trained.seconds(), 2),  # with evaluation
        "images_per_s": round(sums.seen / max(sums.seconds, 1e-9), 1),
        **({"val_loss": val.loss, "val_accuracy": val.accuracy} if val is not None else {}),
    }


def record_end(run: Run, status: str, reason: str) -> None:
    """progress.json's last word: how the run ended, and the best accuracy a saved state holds."""
    best = max(run.saver.committed_best, 0.0)  # only what a saved state holds
    try:
        run.progress.update(force=True, status=status, best_accuracy=best, reason=reason)
    except CapsNetError as error:  # never hide the error that ended the run (a full disk fails both)
        print(f"{run.prepared.folder.path}: could not record the run's end: {error}", file=sys.stderr)


def fit(
    prepared: Prepared, env: Distributed, device: torch.device, on_epoch: Callable[[EpochRecord], None] | None = None
) -> list[EpochRecord]:
    """Build, load the data, and train epoch by epoch from where the run is, saving after each."""
    try:
        run = set_up(prepared, env, device)
    except BaseException:
        if env.is_main:
            prepared.abandon()
        raise
    options, folder, saver = run.options, prepared.folder, run.saver
    model, data, batches = run.model, run.data, run.batches
    start_epoch, start_batch = run.start_epoch, run.start_batch
    records: list[EpochRecord] = []
    if start_epoch >= options.epochs:
        if env.is_main:
            print(f"{folder.path}: already trained {start_epoch} epochs; raise --epochs to continue", file=sys.stderr)
            # a trainer killed at its last commit left progress.json "running"
            record_end(run, "finished", "")
        return records
    c = model.config
    # a network whose loss sets no margins has none to collapse to: divergence only
    margins = network_of(c).score_margins(c) or (math.inf, -math.inf)
    watch = CollapseWatch(c.num_classes, *margins, options.lr, device, present=data.present,
                          advice=learning_advice(options), loss_falls=getattr(c, "margin_start", None) is None)  # fmt: skip
    resume_at = (start_epoch, start_batch) if options.resume else None
    window = Watcher(folder, model, data.test, batches, resume_at, enabled=env.is_main)  # a few test images, watched
    status, reason = "finished", ""
    with StopFlag() as stop:
        try:
            for epoch in range(start_epoch, options.epochs):
                trained = train_epoch(run, epoch, stop, watch, window)
                if trained.sums.stopped:
                    status = "stopped"
                    saver.save_state(epoch, trained.batches, trained.sums.to_state())
                    break
                record: EpochRecord | None = None
                if env.is_main:
                    result, val = evaluate(run, epoch)  # and the epoch's checkpoints staged
                    record = epoch_record(epoch, trained, result, val, run.optimizer.param_groups[0]["lr"])
                    say_warning(run, watch, force=True)
                    if watch.warning:
                        record["warning"] = watch.warning
                run.schedule.after_epoch()
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
            said = out_of_memory(error, options.batch_size)  # one line naming --batch-size, not an allocator's trace
            if said is not None:
                status, reason = "failed", str(said)
                raise said from None
            status, reason = "failed", f"{type(error).__name__}: {' '.join(str(error).split())}"[:300]
            raise
        finally:
            record_end(run, status, reason)
    return records


def train(
    options: TrainOptions, on_epoch: Callable[[EpochRecord], None] | None = None, given: Collection[str] = ()
) -> list[EpochRecord]:
    """Train as `options` say; returns the per-epoch records (also appended to metrics.jsonl). `given`: the options a
    command line set explicitly (`TrainOptions.given`), which a resumed run must not contradict."""
    options = options.validate().sized()  # a folder of pictures: the side it is read at, in its name from now on
    with distributed_session(options.device) as env:
        device = pick_device(options.device)
        if env.enabled and device.type == "cuda":
            device = torch.device("cuda", env.local_rank)  # one GPU per torchrun process
        prepared = prepare(options, env, device, given)  # with the acceleration chosen for the run's own options
        if prepared.acceleration.keep_memory:
            keep_freed_memory()
        try:
            return fit(prepared, env, device, on_epoch)
        finally:
            if prepared.lock is not None:
                prepared.lock.release()
