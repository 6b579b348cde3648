"""Training: Adam with exponential learning-rate decay, margin + reconstruction loss.

    python -m capsnet.train --dataset mnist --epochs 50
    torchrun --nproc_per_node=4 -m capsnet.train --dataset mnist --epochs 50

A run folder holds:
    metrics.jsonl      one JSON line per epoch (loss, accuracy, learning rate, speed)
    progress.json      live progress, rewritten about once a second (for the dashboard)
    last.safetensors   the model after the latest epoch
    best.safetensors   the model with the best test accuracy so far
    train_state.pt     optimizer, schedule and position for --resume (tensors only)
    args.json          the options the run was started with
Ctrl-C or SIGTERM stops at the end of the current batch and leaves a resumable state.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Dataset
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm

import capsnet
from capsnet.augment import SHIFT, augment_seed, epoch_batches
from capsnet.checkpoint import load_checkpoint, read_checkpoint_info, save_checkpoint, trained_epochs
from capsnet.cli import ArgumentParser, run_cli
from capsnet.config import PRESETS, CapsNetConfig
from capsnet.data import DATASETS, as_tensors, dataset_info, load_dataset, stored_tensors, subset
from capsnet.device import DEVICE_CHOICES, describe_device, pick_device, seed_everything
from capsnet.errors import CapsNetError
from capsnet.evaluate import Evaluation, evaluate
from capsnet.files import append_jsonl, atomic_path, read_json, write_json
from capsnet.losses import capsule_loss
from capsnet.model import CapsNet
from capsnet.runs import new_run_dir, runs_root

STATE_FILE = "train_state.pt"


@dataclass
class TrainOptions:
    """Everything a training run needs; the CLI flags map one to one."""

    dataset: str = "mnist"
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    lr_decay: float = 0.96  # multiplied into the learning rate after every epoch
    routing_iterations: int = 3
    preset: str | None = None  # model preset; default: the dataset's name
    seed: int = 0
    device: str = "auto"
    train_size: int | None = None  # use a random subset of the training set
    test_size: int | None = None  # evaluate on a random subset of the test set
    data_dir: str | None = None
    download: bool = True  # fetch a missing dataset from torchvision's mirrors
    out: str | None = None  # run folder; default <timestamp>-<dataset> in $CAPSNET_RUNS_DIR, else runs/
    resume: bool = False
    # start from this checkpoint's weights (fresh optimizer), e.g. to train a shipped model further
    init: str | None = None
    hflip: bool | None = None  # default: on for Fashion-MNIST
    amp: bool | None = None  # bf16 autocast; default on for CUDA
    compile: bool | None = None  # torch.compile; default on for CUDA
    progress: bool = True  # tqdm bar

    def validate(self) -> None:
        dataset_info(self.dataset)
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose from {', '.join(PRESETS)}")
        for name in ("epochs", "batch_size", "routing_iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("train_size", "test_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name.replace('_', '-')} must be at least 1, got {value}")
        if not self.lr > 0 or not 0 < self.lr_decay <= 1:
            raise ValueError(f"need lr > 0 and 0 < lr-decay <= 1, got {self.lr} and {self.lr_decay}")
        if self.resume and not self.out:
            raise ValueError("--resume needs --out, the run folder to continue")
        if self.resume and self.init:
            raise ValueError("--init starts a new run from weights; --resume continues a run: choose one")


# ---------------------------------------------------------------- small pieces


class StopFlag:
    """Set by SIGINT/SIGTERM; the loop checks it after every batch. A second Ctrl-C aborts."""

    def __init__(self) -> None:
        self.stop = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():  # signals can only be set there
            for sig in (signal.SIGINT, signal.SIGTERM):
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
class Distributed:
    """Rank and world size; world 1 when not launched by torchrun."""

    rank: int = 0
    local_rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1 or dist.is_initialized()


def setup_distributed(device_name: str) -> Distributed:
    """Join the process group when launched by torchrun (RANK and WORLD_SIZE set)."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return Distributed()
    use_cuda = torch.cuda.is_available() and device_name in ("auto", "cuda")
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    return Distributed(rank=dist.get_rank(), local_rank=local_rank, world=dist.get_world_size())


def reduce_sum(values: list[float], env: Distributed, device: torch.device) -> list[float]:
    """Sum numbers over all ranks (identity without torchrun)."""
    if not env.enabled:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


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


def origin_of(path: str | os.PathLike, info: dict[str, Any]) -> dict[str, Any]:
    """What a run started with --init records of the checkpoint it started from (header `info`; nested if it had one)."""
    origin = {"checkpoint": Path(path).as_posix(), **{k: info[k] for k in ORIGIN_KEYS if k in info}}
    if "started_from" in info:
        origin["started_from"] = info["started_from"]
    return origin


def checkpoint_info(
    options: TrainOptions,
    epoch: int,
    result: Evaluation,
    seconds: float,
    device: torch.device,
    best_epoch: int,
    origin: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The facts stored in a checkpoint's header; `origin`: the checkpoint an --init run started from."""
    info = dataset_info(options.dataset)
    before = origin or {}
    lineage = {
        "total_epochs": epoch + (trained_epochs(before) or 0),
        "total_training_seconds": round(
            seconds + float(before.get("total_training_seconds", before.get("training_seconds", 0.0))), 1
        ),
    }
    recipe = {
        k: v for k, v in dataclasses.asdict(options).items() if k not in ("data_dir", "download", "out", "resume")
    }
    if origin is not None:
        lineage["started_from"] = origin
        recipe["init"] = origin["checkpoint"]  # also after a --resume, which leaves options.init unset
    return {
        "dataset": options.dataset,
        "dataset_title": info.title,
        "class_names": list(info.classes),
        "epochs": epoch,
        "best_epoch": best_epoch,
        "test_accuracy": result.accuracy,
        "test_loss": result.loss,
        "test_examples": result.total,
        "per_class_accuracy": result.class_accuracy(),
        "dimension_mean": result.dimension_mean.tolist(),
        "dimension_std": result.dimension_std.tolist(),
        "training_seconds": round(seconds, 1),
        "hardware": describe_device(device),
        "recipe": recipe,
        "capsnet_version": capsnet.__version__,
        "torch_version": torch.__version__,
        "saved": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **lineage,
    }


class ProgressFile:
    """progress.json for other processes (the dashboard): rewritten at most once a second, always on status changes."""

    def __init__(self, path: Path, base: dict[str, Any]) -> None:
        self.path, self.base, self.last = path, base, 0.0

    def update(self, force: bool = False, **fields: Any) -> None:
        self.base.update(fields)
        now = time.time()
        if force or now - self.last >= 1.0:
            self.last = now
            write_json(self.path, {**self.base, "updated": now})

    def batch_done(
        self,
        batch: int,
        loss: float,
        accuracy: float,
        speed: float,
        *,
        epoch: int,
        done_before: int,
        images_left: int,
        batch_size: int,
    ) -> None:
        """After `batch` batches of this epoch's run (plus `done_before` from before a resume)."""
        done = done_before + batch
        remaining = (self.base["batches"] - done) * batch_size + images_left
        self.update(
            epoch=epoch + 1,
            batch=done,
            loss=loss,
            accuracy=accuracy,
            images_per_s=speed,
            eta_s=remaining / max(speed, 1e-9),
        )


# ---------------------------------------------------------------- the loop

REPORT_EVERY_S = 0.5  # seconds between progress reports (each one reads the running sums back from the device)


def train_one_epoch(
    model: torch.nn.Module,
    loader: Iterable[tuple[torch.Tensor, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    config: CapsNetConfig,
    device: torch.device,
    amp: bool,
    stop: StopFlag,
    env: Distributed,
    on_batch: Callable[[int, float, float, float], None] | None,
    bar: tqdm | None,
) -> dict[str, float]:
    """One pass over `loader`'s (images, labels) batches, already on `device`; returns sums and the batch count.

    The running loss and accuracy stay on the device; they are read back (a host sync, which would
    stall a GPU's queue on every batch) only to report progress, at most every REPORT_EVERY_S.
    """
    model.train()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    seen = batches = reported = 0
    reporting = on_batch is not None or bar is not None
    start = last_report = time.perf_counter()

    def report() -> None:
        mean_loss, accuracy = loss_sum.item() / seen, correct.item() / seen
        speed = seen * env.world / (time.perf_counter() - start)
        if on_batch is not None:
            on_batch(batches, mean_loss, accuracy, speed)
        if bar is not None:
            bar.set_postfix(loss=f"{mean_loss:.4f}", acc=f"{100 * accuracy:.2f}%", img_s=f"{speed:.0f}")

    for images, labels in loader:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            out = model(images, labels)
            loss = capsule_loss(out.lengths, out.reconstruction, images, labels, config)
        optimizer.zero_grad(set_to_none=True)
        loss.total.backward()
        optimizer.step()
        batches += 1
        loss_sum += loss.total.detach().float() * len(images)
        correct += (out.prediction == labels).sum()
        seen += len(images)
        if bar is not None:
            bar.update(1)
        if reporting and time.perf_counter() - last_report >= REPORT_EVERY_S:
            report()
            last_report, reported = time.perf_counter(), batches
        stop_now = stop.stop
        if env.enabled:
            stop_now = reduce_sum([float(stop.stop)], env, device)[0] > 0
        if stop_now:
            break
    if reporting and batches > reported:
        report()  # where the epoch (or its part before a stop) ended
    loss_sum, correct, seen = reduce_sum([loss_sum.item(), float(correct.item()), float(seen)], env, device)
    return {
        "loss": loss_sum / max(seen, 1),
        "accuracy": correct / max(seen, 1),
        "seen": seen,
        "batches": batches,
        "seconds": time.perf_counter() - start,
    }


def partial_sums(stats: dict[str, float]) -> dict[str, float]:
    """What `train_one_epoch` did before a stop, as sums that a resumed epoch can add to."""
    return {
        "loss_sum": stats["loss"] * stats["seen"],
        "correct": stats["accuracy"] * stats["seen"],
        "seen": stats["seen"],
        "seconds": stats["seconds"],
    }


def merge_partial(stats: dict[str, float], partial: dict[str, float]) -> dict[str, float]:
    """The stats of a whole epoch: this process's part plus the `partial_sums` saved before a resume."""
    seen = stats["seen"] + partial["seen"]
    return stats | {
        "loss": (stats["loss"] * stats["seen"] + partial["loss_sum"]) / max(seen, 1),
        "accuracy": (stats["accuracy"] * stats["seen"] + partial["correct"]) / max(seen, 1),
        "seen": seen,
        "seconds": stats["seconds"] + partial["seconds"],
    }


def train(options: TrainOptions, on_epoch: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Train as `options` say; returns the per-epoch records (also appended to metrics.jsonl)."""
    options.validate()
    env = setup_distributed(options.device)
    device = pick_device(options.device)
    if env.enabled and device.type == "cuda":
        device = torch.device("cuda", env.local_rank)  # one GPU per torchrun process
    use_cuda = device.type == "cuda"
    amp = use_cuda if options.amp is None else options.amp  # on a CPU only when asked (slower without AVX512-BF16)
    run_dir = Path(options.out) if options.out else new_run_dir(runs_root(), options.dataset)
    state_path = run_dir / STATE_FILE
    if env.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)

    # resume: the stored options win for everything that defines the run
    state: dict[str, Any] | None = None
    origin: dict[str, Any] | None = None
    if options.resume:
        if not state_path.is_file():
            raise CapsNetError(f"--resume: no {STATE_FILE} in {run_dir}; start a new run without --resume")
        try:
            state = torch.load(state_path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as error:
            raise CapsNetError(
                f"--resume: {state_path} is damaged or not a training state ({type(error).__name__})"
            ) from None
        try:
            stored = read_json(run_dir / "args.json")
        except (OSError, ValueError) as error:
            raise CapsNetError(f"--resume: cannot read the run's args.json in {run_dir} ({error})") from None
        if not isinstance(state, dict) or not isinstance(stored, dict):
            raise CapsNetError(f"--resume: the saved state in {run_dir} is not a training state")
        for key in (
            "dataset",
            "preset",
            "batch_size",
            "lr",
            "lr_decay",
            "routing_iterations",
            "seed",
            "train_size",
            "test_size",
            "hflip",
        ):
            setattr(options, key, stored.get(key, getattr(options, key)))
        origin = stored.get("started_from")
        if origin is None and stored.get("init") and Path(stored["init"]).is_file():  # begun before origins were kept
            origin = origin_of(stored["init"], read_checkpoint_info(stored["init"])[1])
    seed_everything(options.seed + env.rank)
    info = dataset_info(options.dataset)
    train_set: Dataset = subset(
        load_dataset(options.dataset, train=True, data_dir=options.data_dir, download=options.download),
        options.train_size,
        options.seed,
    )
    hflip = info.hflip if options.hflip is None else options.hflip
    test_images, test_labels = as_tensors(
        subset(
            load_dataset(options.dataset, train=False, data_dir=options.data_dir, download=options.download),
            options.test_size,
            options.seed,
        )
    )

    config = CapsNetConfig.preset(options.preset or options.dataset, routing_iterations=options.routing_iterations)
    if config.num_classes != info.num_classes:
        raise ValueError(f"preset has {config.num_classes} classes, {info.title} has {info.num_classes}")
    model = CapsNet(config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=options.lr)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=options.lr_decay)
    start_epoch = start_batch = 0
    best_accuracy, best_epoch, elapsed = -1.0, 0, 0.0
    if options.init:
        start = load_checkpoint(options.init)
        if start.config != config:
            raise CapsNetError(
                f"{options.init}: its model config differs from this run's ({options.preset or options.dataset} preset)"
            )
        model.load_state_dict(start.model.state_dict())
        origin = origin_of(options.init, start.info)
    # the sums of an epoch interrupted part-way, so that its record covers the whole epoch
    partial: dict[str, float] = {"loss_sum": 0.0, "correct": 0.0, "seen": 0.0, "seconds": 0.0}
    if state is not None:
        try:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            start_epoch, start_batch = int(state["epoch"]), int(state["batch"])
            best_accuracy, best_epoch, elapsed = (
                float(state["best_accuracy"]),
                int(state["best_epoch"]),
                float(state["elapsed"]),
            )
            partial.update({k: float(v) for k, v in state.get("partial", {}).items() if k in partial})
        except (KeyError, RuntimeError, TypeError, ValueError) as error:
            raise CapsNetError(
                f"--resume: the saved state in {run_dir} does not fit this model ({type(error).__name__})"
            ) from None
        if env.is_main and stored.get("epochs") != options.epochs:
            write_json(run_dir / "args.json", stored | {"epochs": options.epochs})  # what a later resume continues to
    elif env.is_main:
        stored_args = dataclasses.asdict(options) | {"preset": options.preset or options.dataset}
        write_json(run_dir / "args.json", stored_args | ({"started_from": origin} if origin else {}))

    net: torch.nn.Module = model
    if options.compile if options.compile is not None else use_cuda:
        net = torch.compile(net)
    if env.enabled:
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[env.local_rank] if use_cuda else None)

    # the whole training set lives on the device as uint8; batches are gathered and augmented there
    train_images, train_labels = (t.to(device) for t in stored_tensors(train_set))  # (N, 1, 28, 28), (N,)
    sampler = DistributedSampler(train_set, num_replicas=env.world, rank=env.rank, shuffle=True, seed=options.seed)
    batches_per_epoch = math.ceil(len(sampler) / options.batch_size)
    progress = ProgressFile(
        run_dir / "progress.json",
        {
            "status": "running",
            "pid": os.getpid(),
            "dataset": options.dataset,
            "epochs": options.epochs,
            "epoch": start_epoch + 1,
            "batches": batches_per_epoch,
            "batch": start_batch,
            "started": time.time(),
        },
    )
    records: list[dict[str, Any]] = []
    if start_epoch >= options.epochs:
        if env.is_main:
            print(f"{run_dir}: already trained {start_epoch} epochs; raise --epochs to continue", file=sys.stderr)
        return records

    def save_state(epoch: int, batch: int, epoch_sums: dict[str, float] | None = None) -> None:
        if not env.is_main:
            return
        payload = {
            "partial": epoch_sums or {},
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "epoch": epoch,
            "batch": batch,
            "best_accuracy": best_accuracy,
            "best_epoch": best_epoch,
            "elapsed": elapsed,
        }
        with atomic_path(state_path) as tmp:
            torch.save(payload, tmp)

    status = "finished"
    with StopFlag() as stop:
        try:
            for epoch in range(start_epoch, options.epochs):
                sampler.set_epoch(epoch)
                done_before = start_batch if epoch == start_epoch else 0
                loader = epoch_batches(
                    train_images,
                    train_labels,
                    list(sampler),
                    options.batch_size,
                    seed=augment_seed(options.seed, epoch, env.rank),
                    shift=SHIFT,
                    hflip=hflip,
                    start_batch=done_before,
                )
                bar = None
                if options.progress and env.is_main:
                    bar = tqdm(
                        total=batches_per_epoch,
                        initial=done_before,
                        desc=f"epoch {epoch + 1}/{options.epochs}",
                        unit="batch",
                        dynamic_ncols=True,
                    )
                epoch_start = time.perf_counter()

                on_batch = functools.partial(
                    progress.batch_done,
                    epoch=epoch,
                    done_before=done_before,
                    images_left=(options.epochs - epoch - 1) * len(sampler) * env.world,
                    batch_size=options.batch_size * env.world,
                )

                stats = train_one_epoch(
                    net, loader, optimizer, config, device, amp, stop, env, on_batch if env.is_main else None, bar
                )
                if bar is not None:
                    bar.close()
                elapsed += time.perf_counter() - epoch_start
                resumed = epoch == start_epoch and start_batch > 0
                if resumed:  # add the part of this epoch run before the resume
                    stats = merge_partial(stats, partial)
                if stop.stop:
                    status = "stopped"
                    save_state(epoch, done_before + int(stats["batches"]), partial_sums(stats))
                    break
                record: dict[str, Any] = {}
                if env.is_main:
                    result = evaluate(model, test_images, test_labels, device=device)
                    if result.accuracy > best_accuracy:
                        best_accuracy, best_epoch = result.accuracy, epoch + 1
                    record = {
                        "epoch": epoch + 1,
                        "train_loss": stats["loss"],
                        "train_accuracy": stats["accuracy"],
                        "train_images": int(stats["seen"]),
                        "test_loss": result.loss,
                        "test_accuracy": result.accuracy,
                        "lr": optimizer.param_groups[0]["lr"],
                        "seconds": round(
                            time.perf_counter() - epoch_start + (partial["seconds"] if resumed else 0.0), 2
                        ),
                        "images_per_s": round(stats["seen"] / max(stats["seconds"], 1e-9), 1),
                    }
                    ckpt = checkpoint_info(options, epoch + 1, result, elapsed, device, best_epoch, origin)
                    save_checkpoint(run_dir / "last.safetensors", model, ckpt)
                    if best_epoch == epoch + 1:
                        save_checkpoint(run_dir / "best.safetensors", model, ckpt)
                    append_jsonl(run_dir / "metrics.jsonl", record)
                    print(json.dumps(record), flush=True)
                scheduler.step()
                save_state(epoch + 1, 0)
                if env.is_main:
                    records.append(record)
                    if on_epoch is not None:
                        on_epoch(record)
                if env.enabled:
                    dist.barrier()
        except BaseException:
            status = "failed"
            raise
        finally:
            if env.is_main:
                progress.update(force=True, status=status, best_accuracy=max(best_accuracy, 0.0))
    if env.enabled:
        dist.destroy_process_group()
    return records


# ---------------------------------------------------------------- CLI


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m capsnet.train", description="Train a Capsule Network (Sabour et al. 2017).")
    d = TrainOptions()
    p.add_argument("--dataset", choices=list(DATASETS), default=d.dataset)
    p.add_argument("--epochs", type=p.positive_int, default=d.epochs, help="total epochs (also when resuming)")
    p.add_argument("--batch-size", type=p.positive_int, default=d.batch_size)
    p.add_argument("--lr", type=p.positive_float, default=d.lr, help="Adam learning rate")
    p.add_argument("--lr-decay", type=p.positive_float, default=d.lr_decay, help="learning rate factor per epoch")
    p.add_argument("--routing-iterations", type=p.positive_int, default=d.routing_iterations)
    p.add_argument("--preset", choices=list(PRESETS), default=None, help="model preset (default: the dataset's)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--device", choices=DEVICE_CHOICES, default=d.device)
    p.add_argument("--train-size", type=p.positive_int, default=None, help="train on a random subset of N images")
    p.add_argument("--test-size", type=p.positive_int, default=None, help="evaluate on a random subset of N images")
    p.add_argument("--data-dir", default=None, help="dataset root (default: $CAPSNET_DATA_DIR, else ./data)")
    p.add_argument(
        "--out", default=None, help="run folder (default: <timestamp>-<dataset> in $CAPSNET_RUNS_DIR, else runs/)"
    )
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last state")
    p.add_argument("--init", default=None, help="start from this checkpoint's weights, with a fresh optimizer")
    p.add_argument(
        "--download",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fetch a missing dataset from torchvision's mirrors (default: on)",
    )
    p.add_argument(
        "--hflip",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="random horizontal flips (default: on for Fashion-MNIST)",
    )
    p.add_argument(
        "--amp",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bf16 autocast (default: on for CUDA; on a CPU only when asked)",
    )
    p.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile (default: on for CUDA)"
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = TrainOptions(**vars(args))
    return run_cli(lambda: (train(options), 0)[1], prog="python -m capsnet.train")


if __name__ == "__main__":
    sys.exit(main())
