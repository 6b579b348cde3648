"""Training runs as background processes, for the dashboard: start, watch, cancel and resume them.

A run is `python -m capsnet train ... --out <runs root>/<timestamp>-<dataset>` started as a
detached process (its own session, output to the run folder's train.log), so a page switch or a
closed browser tab never stops it. One run at a time per machine: the run the dashboard started
holds `<runs root>/.active.lock` (`flock`, taken before the run folder is made and inherited by the
trainer), which the operating system releases when the trainer ends, even by kill -9; the file
says which run holds it. A run started from the command line into the same root also counts as
running: its trainer holds its own folder's lock (`capsnet.training.folder.FolderLock`).

What a run folder holds, and how it is read, is `capsnet.training.folder`; this module only adds
what needs the processes: whether a run is alive, and so what its status really is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from capsnet.device import pick_device
from capsnet.errors import CapsNetError
from capsnet.files import FileReadError, loads_json, read_regular_file
from capsnet.nn.registry import Network, network
from capsnet.training.folder import (
    EpochRecord,
    FolderLock,
    Progress,
    RunFolder,
    exclusive_lock,
    new_run_dir,
    run_folders,
    runs_root,
)
from capsnet.training.options import TrainOptions, stored_network

MAX_EPOCHS_SHOWN = 10_000  # the most epoch records a run's summary reads (a run's own count bounds it first)
LOCK_NAME = ".active.lock"  # flock'ed while the dashboard's run lives; it holds JSON saying which run that is

_CHILDREN: dict[int, subprocess.Popen] = {}  # processes this interpreter started, reaped once they end


class RunError(CapsNetError):
    """A training run could not be started, found or stopped."""


class RunInProgressError(RunError):
    """Another training run is already going on this machine."""


# ---------------------------------------------------------------- the lock


@dataclass
class ActiveRun:
    """The run that holds the machine (pid 0: a run being started, whose trainer has no pid yet)."""

    pid: int
    run_dir: Path
    dataset: str
    started: float
    from_dashboard: bool = True  # False: a command-line run found through its run folder's lock

    @property
    def name(self) -> str:
        return self.run_dir.name


def _reap() -> None:
    """Collect the exit status of the trainers this process started and that have ended (no zombies left)."""
    for pid, child in list(_CHILDREN.items()):
        if child.poll() is not None:
            del _CHILDREN[pid]


def active_run(root: str | os.PathLike | None = None, include_external: bool = True) -> ActiveRun | None:
    """The run now going on in this runs root, or None.

    The dashboard's run holds `<root>/.active.lock` (`flock`): taken as the run starts, inherited by the trainer,
    released by the operating system when the trainer ends, however it ends. With `include_external`, a run
    started from the command line into the root counts too: its trainer holds its folder's lock.
    """
    _reap()
    root = runs_root(root)
    lock = root / LOCK_NAME
    if FolderLock.held(lock):
        data = _lock_says(lock)
        return ActiveRun(
            pid=_count(data.get("pid")),
            run_dir=root / (str(data.get("run") or "") or "(starting)"),
            dataset=str(data.get("dataset") or ""),
            started=float(data.get("started") or 0.0) if isinstance(data.get("started"), (int, float)) else 0.0,
        )
    if include_external:
        for folder in run_folders(root):
            progress = folder.read_progress()
            if progress is not None and progress.status == "running" and folder.in_use():
                return ActiveRun(
                    pid=progress.pid,
                    run_dir=folder.path,
                    dataset=progress.dataset,
                    started=progress.started,
                    from_dashboard=False,
                )
    return None


def _lock_says(lock: Path) -> dict[str, Any]:
    """Which run holds the lock, as its JSON says ({} while the starting dashboard writes it, or if damaged)."""
    try:
        data = loads_json(read_regular_file(lock, 1 << 16), str(lock))
    except (OSError, ValueError, FileReadError):
        return {}
    return data if isinstance(data, dict) else {}


def _take_lock(root: Path, run: str) -> IO[str]:
    """Take the root's lock for a run about to start; the returned file is handed to the trainer's process."""
    handle = exclusive_lock(root / LOCK_NAME)  # without flock (Windows): one run at a time is up to the user
    if isinstance(handle, str):  # held
        running = active_run(root, include_external=False)
        raise RunInProgressError(
            _busy_message(running) if running else "a training run is starting; try again"
        ) from None
    _write_lock(handle, {"pid": 0, "run": run, "dataset": "", "started": time.time()})
    return handle


def _write_lock(handle: IO[str], payload: dict[str, Any]) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(payload))
    handle.flush()


def _busy_message(run: ActiveRun) -> str:
    origin = "" if run.from_dashboard else ", started from the command line"
    name = run.name if run.pid else "a run that is starting"
    return (
        f"A training run is already in progress: {name} (pid {run.pid}{origin}). "
        "One run at a time: cancel it or wait for it to finish."
    )


# ---------------------------------------------------------------- start, cancel, resume


def trainer_command(options: TrainOptions, python: str | None = None) -> list[str]:
    """The command line that trains with `options`."""
    return [python or sys.executable, "-m", "capsnet", "train", *options.to_argv()]


def _spawn(command: list[str], folder: RunFolder, lock: IO[str], dataset: str, log_mode: str) -> ActiveRun:
    """Start the trainer with the root's lock: the trainer inherits it, and this process lets go of its copy."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    kwargs: dict[str, Any] = {}
    if os.name == "posix":
        kwargs["start_new_session"] = True  # not killed with the dashboard, nor by Ctrl-C in its terminal
    else:
        kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
    try:
        with lock, open(folder.log_path, log_mode, encoding="utf-8") as log:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                close_fds=True,
                pass_fds=(lock.fileno(),) if os.name == "posix" else (),
                **kwargs,
            )
            started = time.time()
            _write_lock(lock, {"pid": process.pid, "run": folder.name, "dataset": dataset, "started": started})
    except OSError as error:
        raise RunError(f"could not start the trainer: {error}") from None
    _CHILDREN[process.pid] = process
    return ActiveRun(pid=process.pid, run_dir=folder.path, dataset=dataset, started=started)


def start_run(options: TrainOptions, root: str | os.PathLike | None = None, python: str | None = None) -> ActiveRun:
    """Start the trainer in the background with `options`, in a new run folder of the runs root.

    Raises ValueError for bad options (or a named device that is absent) and RunInProgressError
    (naming the running one) if a run is already going on.
    """
    options = dataclasses.replace(options, out=None, resume=False).validate()
    pick_device(options.device)
    root = runs_root(root)
    root.mkdir(parents=True, exist_ok=True)
    external = active_run(root)
    if external is not None:
        raise RunInProgressError(_busy_message(external))
    lock = _take_lock(root, "")
    try:
        folder = RunFolder(new_run_dir(root, options.dataset))
        options = dataclasses.replace(options, out=str(folder.path), progress=False)
        folder.write_args(options.to_dict())  # readable at once; the trainer writes it again as it starts
    except BaseException:
        lock.close()  # releases the lock
        raise
    return _spawn(trainer_command(options, python), folder, lock, options.dataset, "w")


def cancel_run(root: str | os.PathLike | None = None) -> ActiveRun | None:
    """Ask the dashboard's running trainer to stop (SIGTERM): it finishes its batch and saves a resumable state.

    Returns the run signalled, or None if there was none. Runs started from the
    command line are left alone.
    """
    run = active_run(root, include_external=False)
    if run is None or not run.pid:  # none, or one whose trainer is not started yet
        return None
    try:
        os.kill(run.pid, signal.SIGTERM)
    except ProcessLookupError:
        return None
    return run


def resume_run(name: str, root: str | os.PathLike | None = None, python: str | None = None) -> ActiveRun:
    """Continue a stopped run of this root from its train_state.pt, to the epochs it was started with."""
    root = runs_root(root)
    runs = {run.name: run for run in list_runs(root)}
    if name not in runs:
        raise RunError(f"no run named {name!r} in {root}")
    run = runs[name]
    if not run.resumable:
        raise RunError(f"{name} cannot be resumed (status {run.status}, no saved training state)")
    busy = active_run(root)
    if busy is not None:
        raise RunInProgressError(_busy_message(busy))
    lock = _take_lock(root, name)
    stored = TrainOptions.from_dict(run.args)
    options = TrainOptions(
        out=str(run.path), resume=True, epochs=run.epochs_total or stored.epochs, device=stored.device, progress=False
    )
    return _spawn(trainer_command(options, python), run.folder, lock, run.dataset, "a")


# ---------------------------------------------------------------- runs and their status


@dataclass
class RunSummary:
    """What a run folder says about the run, with its status checked against the live processes."""

    folder: RunFolder
    status: str  # starting | running | finished | stopped | failed
    dataset: str = ""
    epochs_total: int = 0
    metrics: list[EpochRecord] = field(default_factory=list)
    progress: Progress | None = None
    args: dict[str, Any] = field(default_factory=dict)
    reason: str = ""  # why a failed run failed, when known

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def path(self) -> Path:
        return self.folder.path

    @property
    def epochs_done(self) -> int:
        return len(self.metrics)

    @property
    def network(self) -> Network | None:
        """The run's network (args.json's; runs from before the CNN are CapsNets), or None if it names none known."""
        try:
            return network(stored_network(self.args))
        except ValueError:
            return None

    @property
    def best_accuracy(self) -> float | None:
        """The test accuracy of the run's best epoch: the best on test, or, with --val-size, the one best on validation."""
        scored = [m for m in self.metrics if isinstance(m.get("test_accuracy"), (int, float))]
        if not scored:
            return None
        key: Literal["val_accuracy", "test_accuracy"] = (
            "val_accuracy" if all(isinstance(m.get("val_accuracy"), (int, float)) for m in scored) else "test_accuracy"
        )
        return max(scored, key=lambda m: m[key])["test_accuracy"]

    @property
    def checkpoint(self) -> Path | None:
        return self.folder.checkpoint()

    @property
    def resumable(self) -> bool:
        return (
            self.status in ("stopped", "failed")
            and self.folder.has_state()
            and self.epochs_done < max(self.epochs_total, 1)
        )


def read_run(
    run_dir: str | os.PathLike, root: str | os.PathLike | None = None, active: ActiveRun | None | bool = True
) -> RunSummary:
    """Summarise one run folder: status, metrics per epoch, live progress, options.

    `active`: the root's dashboard run if the caller has it already (None: there is none);
    True, the default, looks it up.
    """
    folder = RunFolder(Path(run_dir))
    root = runs_root(root) if root is not None else folder.path.parent
    if active is True:
        active = active_run(root, include_external=False)
    progress = folder.read_progress()
    args = folder.read_args()
    holder = active if isinstance(active, ActiveRun) and active.run_dir.name == folder.name else None
    holder_alive = holder is not None and holder.pid > 0  # the root's lock is held: its trainer lives
    reason = ""
    epochs_total = (progress.epochs if progress and progress.epochs else 0) or _count(args.get("epochs"))
    # what the trainer committed, never more than the run's epochs (a longer file is not this run's record)
    metrics = folder.read_metrics(limit=min(epochs_total or MAX_EPOCHS_SHOWN, MAX_EPOCHS_SHOWN))
    if (progress is None or progress.status == "starting") and metrics and not holder_alive:
        # progress.json unreadable (or never past "starting"), but epochs were committed: trust those
        done = len(metrics) >= max(epochs_total, 1)
        status = "finished" if done else "stopped" if folder.has_state() else "failed"
        reason = "" if status != "failed" else f"progress.json is unreadable; {len(metrics)} epoch(s) were recorded"
    elif progress is None or progress.status == "starting":  # none yet, or none that says anything
        status = "starting" if holder is not None else "failed"
        reason = "" if holder is not None else "the trainer exited before training started"
    elif progress.status == "running":
        if folder.in_use() or holder_alive:
            status = "running"
        else:
            status, reason = "failed", "the trainer stopped without finishing (killed, or out of memory?)"
    elif holder_alive:
        status = "running"  # resumed: the new process has not rewritten progress.json yet
    else:
        status = progress.status
        if status == "failed":
            reason = progress.reason or "the trainer reported an error"
    if status == "failed" and not folder.log_path.is_file():
        reason = reason or "no log"
    return RunSummary(
        folder=folder,
        status=status,
        dataset=str(args.get("dataset") or (progress.dataset if progress else ""))[:60],
        epochs_total=epochs_total,
        metrics=metrics,
        progress=progress,
        args=args,
        reason=reason,
    )


def _count(value: Any) -> int:
    """A stored count, or 0 when it is not a whole number (a damaged args.json)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def list_runs(root: str | os.PathLike | None = None) -> list[RunSummary]:
    """Every run in the runs root, newest first."""
    root = runs_root(root)
    active = active_run(root, include_external=False)
    return [read_run(folder.path, root, active) for folder in run_folders(root)]
