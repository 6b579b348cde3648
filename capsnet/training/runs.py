"""Training runs as background processes, for the dashboard: start, watch, cancel and resume them.

A run is `python -m capsnet train ... --out <runs root>/<timestamp>-<dataset>` started as a
detached process (its own session, output to the run folder's train.log), so a page switch or a
closed browser tab never stops it. One run at a time per machine: `<runs root>/.active.json`
holds the pid and folder of the run the dashboard started; it is created atomically (O_CREAT |
O_EXCL), and a lock whose process has died is cleared by the next reader. A run started from the
command line into the same root also counts as running (its progress.json names a live pid).

What a run folder holds, and how it is read, is `capsnet.training.run_folder`; this module only adds
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
from typing import Any

from capsnet.device import pick_device
from capsnet.errors import CapsNetError
from capsnet.files import write_json
from capsnet.nn.registry import Network, network
from capsnet.training.options import TrainOptions
from capsnet.training.run_folder import EpochRecord, Progress, RunFolder, new_run_dir, run_folders, runs_root

LOCK_NAME = ".active.json"
STARTUP_GRACE_S = 15.0  # a lock being written is not stale for this long

_CHILDREN: dict[int, subprocess.Popen] = {}  # processes this interpreter started, to read their exit code


class RunError(CapsNetError):
    """A training run could not be started, found or stopped."""


class RunInProgressError(RunError):
    """Another training run is already going on this machine."""


# ---------------------------------------------------------------- processes


def pid_alive(pid: int | None) -> bool:
    """Whether process `pid` exists and is not a zombie (our own finished children are reaped here)."""
    if not pid or pid <= 0:
        return False
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        return False
    if hasattr(os, "WNOHANG"):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return False  # our child, just finished: now reaped
            return True  # our child, still running
        except ChildProcessError:
            pass  # not our child
        except OSError:
            pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def is_trainer(pid: int) -> bool:
    """Whether `pid` runs the trainer (guards against a recycled pid). True where /proc cannot tell."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return sys.platform != "linux" and pid_alive(pid)
    return b"capsnet\0train\0" in cmdline or b"capsnet.cli.train" in cmdline or b"capsnet-train" in cmdline


def _trainer_alive(pid: int | None) -> bool:
    return bool(pid) and pid_alive(pid) and is_trainer(int(pid))  # type: ignore[arg-type]


# ---------------------------------------------------------------- the lock


@dataclass
class ActiveRun:
    """The run that holds the machine."""

    pid: int
    run_dir: Path
    dataset: str
    started: float
    from_dashboard: bool = True  # False: a command-line run found through its progress.json

    @property
    def name(self) -> str:
        return self.run_dir.name


def _read_lock(lock: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(lock.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else None
    except FileNotFoundError:
        raise
    except (OSError, ValueError):
        return None


def active_run(root: str | os.PathLike | None = None, include_external: bool = True) -> ActiveRun | None:
    """The run now going on in this runs root, or None. Clears a stale lock (its process is gone).

    With `include_external`, a run started from the command line (no lock, but a
    progress.json with status running and a live trainer pid) counts too.
    """
    root = runs_root(root)
    lock = root / LOCK_NAME
    try:
        data = _read_lock(lock)
    except FileNotFoundError:
        data = None
        lock_exists = False
    else:
        lock_exists = True
    if lock_exists:
        if data is None:  # being written right now, or garbage
            try:
                age = time.time() - lock.stat().st_mtime
            except FileNotFoundError:
                age = 0.0
            if age < STARTUP_GRACE_S:
                return ActiveRun(pid=0, run_dir=root / "(starting)", dataset="", started=time.time())
            _remove_stale(lock, data)
        else:
            pid = int(data.get("pid") or 0)
            starting = data.get("starting") and pid_alive(pid)  # the dashboard that is starting it
            if starting or _trainer_alive(pid):
                return ActiveRun(
                    pid=pid,
                    run_dir=root / str(data.get("run", "")),
                    dataset=str(data.get("dataset", "")),
                    started=float(data.get("started") or 0.0),
                )
            _remove_stale(lock, data)
    if include_external:
        for folder in run_folders(root):
            progress = folder.read_progress()
            if progress is not None and progress.status == "running" and _trainer_alive(progress.pid):
                return ActiveRun(
                    pid=progress.pid,
                    run_dir=folder.path,
                    dataset=progress.dataset,
                    started=progress.started,
                    from_dashboard=False,
                )
    return None


def _remove_stale(lock: Path, seen: dict[str, Any] | None) -> None:
    """Remove `lock` if it still holds what we judged stale (another tab may have replaced it)."""
    try:
        if _read_lock(lock) == seen:
            lock.unlink()
    except FileNotFoundError:
        pass


def _take_lock(root: Path, payload: dict[str, Any]) -> Path:
    lock = root / LOCK_NAME
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            running = active_run(root, include_external=False)  # clears a stale lock
            if running is not None:
                raise RunInProgressError(_busy_message(running)) from None
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle)
        return lock
    raise RunInProgressError(f"could not take the training lock {lock}; try again")


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


def _spawn(command: list[str], folder: RunFolder, lock: Path, dataset: str, log_mode: str) -> ActiveRun:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    kwargs: dict[str, Any] = {}
    if os.name == "posix":
        kwargs["start_new_session"] = True  # not killed with the dashboard, nor by Ctrl-C in its terminal
    else:
        kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
    try:
        with open(folder.log_path, log_mode, encoding="utf-8") as log:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                close_fds=True,
                **kwargs,
            )
    except OSError as error:
        lock.unlink(missing_ok=True)
        raise RunError(f"could not start the trainer: {error}") from None
    _CHILDREN[process.pid] = process
    started = time.time()
    write_json(lock, {"pid": process.pid, "run": folder.name, "dataset": dataset, "started": started})
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
    lock = _take_lock(root, {"pid": os.getpid(), "starting": True, "run": "", "started": time.time()})
    try:
        folder = RunFolder(new_run_dir(root, options.dataset))
        options = dataclasses.replace(options, out=str(folder.path), progress=False)
        folder.write_args(options.to_dict())  # readable at once; the trainer writes it again as it starts
    except BaseException:
        lock.unlink(missing_ok=True)
        raise
    return _spawn(trainer_command(options, python), folder, lock, options.dataset, "w")


def cancel_run(root: str | os.PathLike | None = None) -> ActiveRun | None:
    """Ask the dashboard's running trainer to stop (SIGTERM): it finishes its batch and saves a resumable state.

    Returns the run signalled, or None if there was none. Runs started from the
    command line are left alone.
    """
    run = active_run(root, include_external=False)
    if run is None or not run.pid or not _trainer_alive(run.pid):
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
    lock = _take_lock(root, {"pid": os.getpid(), "starting": True, "run": name, "started": time.time()})
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
            return network(str(self.args.get("model") or "capsnet"))
        except ValueError:
            return None

    @property
    def best_accuracy(self) -> float | None:
        """The test accuracy of the run's best epoch: the best on test, or, with --val-size, the one best on validation."""
        scored = [m for m in self.metrics if isinstance(m.get("test_accuracy"), (int, float))]
        if not scored:
            return None
        key = (
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
    holder_alive = holder is not None and _trainer_alive(holder.pid)
    reason = ""
    if progress is None or progress.status == "starting":  # none yet, or none that says anything
        status = "starting" if holder is not None else "failed"
        reason = "" if holder is not None else "the trainer exited before training started"
    elif progress.status == "running":
        if _trainer_alive(progress.pid) or holder_alive:
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
        epochs_total=(progress.epochs if progress and progress.epochs else 0) or _count(args.get("epochs")),
        metrics=folder.read_metrics(),
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
