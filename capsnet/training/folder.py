"""A training run's folder: where its files are, and how they are read and written.

    runs/<timestamp>-<dataset>/
        args.json          the run's options (`TrainOptions.to_dict`), written when it starts
        progress.json      live progress (`Progress`), rewritten about once a second
        metrics.jsonl      one JSON line per epoch (`EpochRecord`)
        last.safetensors   the model after the latest epoch
        best.safetensors   the model with the best test accuracy so far
        train_state.pt     optimizer, schedule and position, for --resume (tensors and numbers only)
        watch.safetensors  the training window: fixed test images and the answers, per snapshot (`training.watch`)
        train.log          the trainer's output, when the dashboard started it
        .lock              held (flock) by the trainer writing the folder: one trainer per folder
        *.pending.safetensors  an epoch's checkpoints staged until its state is saved (see capsnet.training.checkpointer)

The trainer writes these files and everything else reads them, through this module only: the
names and the progress schema live here. Reading is tolerant (a file being written, missing, or
from an older version gives defaults, never an exception). The runs root is an argument, else
$CAPSNET_RUNS_DIR, else ./runs; folders are named from the clock and the dataset, never from user text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypedDict, cast

from capsnet.files import append_jsonl, atomic_write, read_json, read_jsonl, read_tail, write_json
from capsnet.training.folder_lock import FolderLock, RunFolderError, exclusive_lock

__all__ = [
    "EpochRecord",
    "FolderLock",
    "Progress",
    "exclusive_lock",
    "ProgressWriter",
    "RunFolder",
    "RunFolderError",
    "runs_root",
]

RUNS_ENV = "CAPSNET_RUNS_DIR"
PROGRESS_EVERY_S = 1.0  # progress.json is rewritten at most this often (always on a status change)

Status = Literal["starting", "running", "finished", "stopped", "failed"]


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value == value
        and abs(value) != float("inf")
    )


class EpochRecord(TypedDict, total=False):
    """One line of metrics.jsonl."""

    epoch: int
    train_loss: float
    train_accuracy: float
    train_images: int
    test_loss: float
    test_accuracy: float
    lr: float
    seconds: float
    images_per_s: float
    val_loss: float  # with --val-size: on the training images held out
    val_accuracy: float
    warning: str  # the run's sign that it is not learning, as progress.json said it at the epoch's end


_NUMERIC = frozenset(EpochRecord.__annotations__) - {"warning"}  # every other field of a metrics line is a number


@dataclass
class Progress:
    """progress.json: where a run is, for other processes (the dashboard's sidebar and runs page)."""

    status: Status = "starting"
    pid: int = 0
    dataset: str = ""
    epochs: int = 0  # the epochs the run goes to
    epoch: int = 0  # the epoch in progress, from 1
    batches: int = 0  # batches per epoch (per process)
    batch: int = 0  # batches done in this epoch
    started: float = 0.0  # time.time() at the start of this process
    updated: float = 0.0
    loss: float | None = None  # running means over this epoch
    accuracy: float | None = None
    images_per_s: float | None = None
    eta_s: float | None = None
    best_accuracy: float | None = None
    reason: str = ""  # why a failed run failed, in one line
    warning: str = ""  # why a running run seems not to learn, with what to try, in one line ("" while it learns)

    @property
    def fraction_done(self) -> float:
        """How much of the whole run is done, in [0, 1]."""
        total = self.epochs * self.batches
        return min(max(((self.epoch - 1) * self.batches + self.batch) / total, 0.0), 1.0) if total else 0.0

    @classmethod
    def from_dict(cls, data: Any) -> Progress | None:
        """Read tolerantly: a field of the wrong type keeps its default; not an object gives None."""
        if not isinstance(data, dict):
            return None
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            value: Any = data.get(f.name)  # a number where `numeric` says so (mypy does not follow the alias)
            default = f.default
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if isinstance(default, str) and isinstance(value, str):
                values[f.name] = value
            elif isinstance(default, int) and numeric:
                values[f.name] = int(value)
            elif (isinstance(default, float) or default is None) and numeric:
                values[f.name] = float(value)
        if values.get("status") not in ("starting", "running", "finished", "stopped", "failed"):
            values.pop("status", None)
        return cls(**values)


@dataclass
class RunFolder:
    """One run's folder and its files."""

    path: Path

    ARGS = "args.json"
    PROGRESS = "progress.json"
    METRICS = "metrics.jsonl"
    LAST = "last.safetensors"
    BEST = "best.safetensors"
    STATE = "train_state.pt"
    LOG = "train.log"
    LOCK = ".lock"
    WATCH = "watch.safetensors"  # the training window's snapshots (`capsnet.training.watch`)
    RUN_FILES = (METRICS, STATE, LAST, BEST)  # what a run that has trained leaves: never overwritten but by --resume

    @staticmethod
    def pending(name: str) -> str:
        """The staged form of a checkpoint's file name: last.pending.safetensors."""
        stem, _, suffix = name.partition(".")
        return f"{stem}.pending.{suffix}"

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def state_path(self) -> Path:
        return self.path / self.STATE

    @property
    def log_path(self) -> Path:
        return self.path / self.LOG

    def looks_like_a_run(self) -> bool:
        """Whether the folder holds any of a run's files."""
        markers = (self.ARGS, self.PROGRESS, self.METRICS, self.LOG, "request.json")
        return self.path.is_dir() and any((self.path / m).exists() for m in markers)

    # ------------------------------------------------------------ reading

    def read_progress(self) -> Progress | None:
        try:
            return Progress.from_dict(read_json(self.path / self.PROGRESS))
        except (OSError, ValueError):
            return None

    def read_metrics(self, limit: int | None = None) -> list[EpochRecord]:
        """The epochs' records, each with a whole `epoch` >= 1; a field of the wrong type is left out of its record
        (a hand-edited or damaged file costs those values, never its reader). `limit`: read at most that many
        lines (the dashboard's bound: a file of 200,000 lines is not read whole on every rerun)."""
        records: list[EpochRecord] = []
        try:
            lines = read_jsonl(self.path / self.METRICS, limit)
        except OSError:  # a FIFO, a folder, a device: this run shows no epochs, and every other run its own
            return records
        for raw in lines:
            if not isinstance(raw, dict) or not _whole(raw.get("epoch")) or raw["epoch"] < 1:
                continue
            record = {k: v for k, v in raw.items() if k in _NUMERIC and _finite(v)}
            if isinstance(raw.get("warning"), str) and raw["warning"]:
                record["warning"] = raw["warning"][:500]
            records.append(cast(EpochRecord, record))  # its keys are EpochRecord's, its values numbers
        return records

    def read_args(self) -> dict[str, Any]:
        """args.json as stored ({} if absent or unreadable); `TrainOptions.from_dict` makes options of it.

        A run started by an older dashboard that failed before its trainer wrote args.json has
        the dashboard's request.json instead.
        """
        for name in (self.ARGS, "request.json"):
            try:
                data = read_json(self.path / name)
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data
        return {}

    def checkpoint(self) -> Path | None:
        """The run's best model (or its latest), if an epoch has finished."""
        for name in (self.BEST, self.LAST):
            if (self.path / name).is_file():
                return self.path / name
        return None

    def has_state(self) -> bool:
        return (self.path / self.STATE).is_file()

    def holds_a_run(self) -> bool:
        """Whether a run has trained here (metrics, a state or checkpoints): args.json alone is a run not yet begun."""
        return any((self.path / name).exists() for name in self.RUN_FILES)

    def log_tail(self, lines: int = 40, max_bytes: int = 64_000) -> str:
        """The last `lines` lines of train.log ('' if it has none)."""
        try:
            text = read_tail(self.path / self.LOG, max_bytes).decode("utf-8", errors="replace")
        except OSError:  # absent, unreadable, or a FIFO or a device (refused before it is opened)
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # ------------------------------------------------------------ writing

    def write_args(self, args: dict[str, Any]) -> None:
        write_json(self.path / self.ARGS, args)

    def append_metrics(self, record: EpochRecord) -> None:
        append_jsonl(self.path / self.METRICS, dict(record))

    def write_metrics(self, records: list[EpochRecord]) -> None:
        """Replace metrics.jsonl with `records`, atomically (a resume reconciling it with the saved state)."""
        text = "".join(json.dumps(dict(r)) + "\n" for r in records)
        atomic_write(self.path / self.METRICS, lambda handle: handle.write(text.encode()))

    def remove_stale_temporaries(self) -> list[Path]:
        """Delete the temporary files of writes a killed trainer never finished (`.<name>.<random>.tmp`)."""
        removed = []
        for stale in self.path.glob(".*.tmp"):
            try:
                stale.unlink()
                removed.append(stale)
            except OSError:
                pass
        return removed

    def remove_uncommitted(self) -> list[Path]:
        """What a trainer killed before its first commit left behind: the temporaries of its writes and its staged
        checkpoints (a new run in the folder starts clean, as a resumed one does)."""
        removed = self.remove_stale_temporaries()
        for staged in self.path.glob(f"*.pending{Path(self.LAST).suffix}"):
            try:
                staged.unlink()
                removed.append(staged)
            except OSError:
                pass
        return removed

    def remove_if_empty(self) -> None:
        """Remove the folder if nothing but its lock file is in it (a run refused before it began)."""
        with contextlib.suppress(OSError):
            if {p.name for p in self.path.iterdir()} <= {self.LOCK}:
                (self.path / self.LOCK).unlink(missing_ok=True)
                self.path.rmdir()

    def lock(self) -> FolderLock:
        """Take the folder's lock, held until released or the process ends (even by kill -9); RunFolderError if
        another trainer holds it."""
        return FolderLock.take(self.path / self.LOCK)

    def in_use(self) -> bool:
        """Whether a trainer holds the folder's lock now (a killed one never does: the OS released it)."""
        return FolderLock.held(self.path / self.LOCK)

    def write_progress(self, progress: Progress) -> None:
        write_json(self.path / self.PROGRESS, dataclasses.asdict(progress))


@dataclass
class ProgressWriter:
    """Keeps a run's `Progress` and rewrites progress.json at most every PROGRESS_EVERY_S (at once when forced)."""

    folder: RunFolder
    progress: Progress
    enabled: bool = True  # only one process of a distributed run writes
    last: float = field(default=0.0, init=False)

    def update(self, force: bool = False, **fields: Any) -> None:
        self.progress = dataclasses.replace(self.progress, **fields)
        now = time.time()
        if self.enabled and (force or now - self.last >= PROGRESS_EVERY_S):
            self.last = now
            self.progress.updated = now
            self.folder.write_progress(self.progress)

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
        """After `batch` batches of epoch `epoch` (from 1) in this process, plus `done_before` from before a resume.

        `images_left`: the images of the epochs after this one; `speed` in images/s over all processes.
        """
        done = done_before + batch
        remaining = (self.progress.batches - done) * batch_size + images_left
        self.update(
            epoch=epoch,
            batch=done,
            loss=loss,
            accuracy=accuracy,
            images_per_s=speed,
            eta_s=remaining / max(speed, 1e-9),
        )


# ---------------------------------------------------------------- the runs root


def runs_root(root: str | os.PathLike | None = None) -> Path:
    """The runs folder: `root`, else $CAPSNET_RUNS_DIR, else ./runs."""
    return Path(root or os.environ.get(RUNS_ENV) or "runs")


def new_run_dir(root: str | os.PathLike, dataset: str) -> Path:
    """Create and return `root/<timestamp>-<dataset>`, with a suffix if a run took that name this second."""
    root = Path(root)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    # a folder of pictures ("/data/my photos@32") is named by its last part, in letters, digits and dashes only
    label = re.sub(r"[^A-Za-z0-9_-]+", "-", Path(dataset.rpartition("@")[0] or dataset).name).strip("-")[:40]
    for suffix in [""] + [f"-{n}" for n in range(2, 100)]:
        run_dir = root / f"{stamp}-{label or 'pictures'}{suffix}"
        try:
            run_dir.mkdir(parents=True)
            return run_dir
        except FileExistsError:
            continue
        except OSError as error:
            raise RunFolderError(f"cannot create a run folder in {root}: {error.strerror or error}") from None
    raise RunFolderError(f"could not create a new run folder in {root}")


def run_folders(root: str | os.PathLike | None = None) -> list[RunFolder]:
    """Every run folder in the runs root, newest first (by modification time, then name)."""
    root = runs_root(root)
    try:
        entries = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []
    folders = [RunFolder(p) for p in entries]
    folders = [f for f in folders if f.looks_like_a_run()]

    def newest(folder: RunFolder) -> tuple[float, str]:
        try:
            return folder.path.stat().st_mtime, folder.name
        except OSError:
            return 0.0, folder.name

    return sorted(folders, key=newest, reverse=True)
