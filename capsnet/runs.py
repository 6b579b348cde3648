"""Training runs for the dashboard: start, watch, cancel, resume and list them.

A run is `python -m capsnet.train ... --out runs/<timestamp>-<dataset>` started as a
detached background process (its own session, output to `<run>/train.log`), so a
page switch or a closed browser tab never stops it. One run at a time per machine:
`<runs root>/.active.json` holds the pid and folder of the run the dashboard
started; it is created atomically (O_CREAT | O_EXCL), and a lock whose process has
died is cleared by the next reader. A run started from the command line into the
same root also counts as running (its progress.json names a live pid).

The runs root is an argument, else $CAPSNET_RUNS_DIR, else ./runs. Run folders are
always named here from the clock and the dataset, never from user text.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from capsnet.errors import CapsNetError
from capsnet.files import read_json, read_jsonl, write_json

RUNS_ENV = "CAPSNET_RUNS_DIR"
LOCK_NAME = ".active.json"
LOG_NAME = "train.log"
STARTUP_GRACE_S = 15.0  # a lock being written is not stale for this long

# bounds of the dashboard's training form
EPOCHS = (1, 200)
BATCH_SIZE = (1, 1024)
ROUTING_ITERATIONS = (1, 5)
TRAIN_SIZE = (1, 60000)
TEST_SIZE = (1, 10000)
PRESETS = ("paper", "tiny")  # the paper's model, or the small one for quick demos

_CHILDREN: dict[int, subprocess.Popen] = {}  # processes this interpreter started, to read their exit code


class RunError(CapsNetError):
    """A training run could not be started, found or stopped."""


class RunInProgressError(RunError):
    """Another training run is already going on this machine."""


# ---------------------------------------------------------------- places


def runs_root(root: str | os.PathLike | None = None) -> Path:
    """The runs folder: `root`, else $CAPSNET_RUNS_DIR, else ./runs."""
    return Path(root or os.environ.get(RUNS_ENV) or "runs")


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
    """Whether `pid` runs capsnet.train (guards against a recycled pid). True where /proc cannot tell."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return sys.platform != "linux" and pid_alive(pid)
    return b"capsnet.train" in cmdline or b"capsnet-train" in cmdline


def _trainer_alive(pid: int | None) -> bool:
    return bool(pid) and pid_alive(pid) and is_trainer(int(pid))  # type: ignore[arg-type]


# ---------------------------------------------------------------- the form


@dataclass(frozen=True)
class TrainRequest:
    """What the dashboard's "Train a model" form asks for, validated and bounded."""

    dataset: str = "mnist"
    epochs: int = 5
    batch_size: int = 128
    lr: float = 1e-3
    routing_iterations: int = 3
    device: str = "auto"
    train_size: int = 60000
    test_size: int = 10000
    preset: str = "paper"

    def validate(self) -> TrainRequest:
        """Raise ValueError with a message a user can act on; return self when fine."""
        from capsnet.data import DATASETS
        from capsnet.device import DEVICE_CHOICES, pick_device

        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; choose from {', '.join(DATASETS)}")
        for name, (low, high) in (
            ("epochs", EPOCHS),
            ("batch_size", BATCH_SIZE),
            ("routing_iterations", ROUTING_ITERATIONS),
            ("train_size", TRAIN_SIZE),
            ("test_size", TEST_SIZE),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name.replace('_', ' ')} must be a whole number from {low} to {high}, got {value!r}")
        if (
            isinstance(self.lr, bool)
            or not isinstance(self.lr, (int, float))
            or not 0 < self.lr <= 1
            or math.isnan(self.lr)
        ):
            raise ValueError(f"learning rate must be greater than 0 and at most 1, got {self.lr!r}")
        if self.preset not in PRESETS:
            raise ValueError(f"model must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.device not in DEVICE_CHOICES:
            raise ValueError(f"unknown device {self.device!r}; choose from {', '.join(DEVICE_CHOICES)}")
        pick_device(self.device)  # a named device that is absent is a ValueError
        return self

    def command(self, run_dir: Path, python: str | None = None) -> list[str]:
        """The trainer's command line for this request, writing to `run_dir`."""
        args = [
            python or sys.executable,
            "-m",
            "capsnet.train",
            "--dataset",
            self.dataset,
            "--epochs",
            str(self.epochs),
            "--batch-size",
            str(self.batch_size),
            "--lr",
            repr(float(self.lr)),
            "--routing-iterations",
            str(self.routing_iterations),
            "--device",
            self.device,
            "--train-size",
            str(self.train_size),
            "--test-size",
            str(self.test_size),
            "--out",
            str(run_dir),
            "--no-progress",
        ]
        if self.preset == "tiny":
            args += ["--preset", "tiny"]
        return args


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
        for run_dir in _run_dirs(root):
            progress = _read_progress(run_dir)
            if progress.get("status") == "running" and _trainer_alive(int(progress.get("pid") or 0)):
                return ActiveRun(
                    pid=int(progress["pid"]),
                    run_dir=run_dir,
                    dataset=str(progress.get("dataset", "")),
                    started=float(progress.get("started") or 0.0),
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


def new_run_dir(root: Path, dataset: str) -> Path:
    """Create and return `root/<timestamp>-<dataset>`, with a suffix if a run took that name this second."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for suffix in [""] + [f"-{n}" for n in range(2, 100)]:
        run_dir = root / f"{stamp}-{dataset}{suffix}"
        try:
            run_dir.mkdir(parents=True)
            return run_dir
        except FileExistsError:
            continue
    raise RunError(f"could not create a new run folder in {root}")


def _spawn(command: list[str], run_dir: Path, root: Path, lock: Path, dataset: str, log_mode: str) -> ActiveRun:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    kwargs: dict[str, Any] = {}
    if os.name == "posix":
        kwargs["start_new_session"] = True  # not killed with the dashboard, nor by Ctrl-C in its terminal
    else:
        kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
    try:
        with open(run_dir / LOG_NAME, log_mode, encoding="utf-8") as log:
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
    write_json(lock, {"pid": process.pid, "run": run_dir.name, "dataset": dataset, "started": started})
    return ActiveRun(pid=process.pid, run_dir=run_dir, dataset=dataset, started=started)


def start_run(request: TrainRequest, root: str | os.PathLike | None = None, python: str | None = None) -> ActiveRun:
    """Validate `request` and start the trainer in the background, in a new run folder.

    Raises ValueError for a bad request and RunInProgressError (naming the running
    one) if a run is already going on.
    """
    request.validate()
    root = runs_root(root)
    root.mkdir(parents=True, exist_ok=True)
    external = active_run(root)
    if external is not None:
        raise RunInProgressError(_busy_message(external))
    lock = _take_lock(root, {"pid": os.getpid(), "starting": True, "run": "", "started": time.time()})
    try:
        run_dir = new_run_dir(root, request.dataset)
        write_json(run_dir / "request.json", asdict(request))
    except BaseException:
        lock.unlink(missing_ok=True)
        raise
    return _spawn(request.command(run_dir, python), run_dir, root, lock, request.dataset, "w")


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
    args = run.args
    command = [
        python or sys.executable,
        "-m",
        "capsnet.train",
        "--out",
        str(run.path),
        "--resume",
        "--epochs",
        str(int(run.epochs_total or args.get("epochs") or 1)),  # progress.json holds the latest --epochs
        "--device",
        str(args.get("device") or "auto"),
        "--no-progress",
    ]
    return _spawn(command, run.path, root, lock, run.dataset, "a")


# ---------------------------------------------------------------- reading runs


@dataclass
class RunSummary:
    """What a run folder says about the run."""

    name: str
    path: Path
    status: str  # starting | running | finished | stopped | failed
    dataset: str = ""
    epochs_total: int = 0
    metrics: list[dict[str, Any]] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    reason: str = ""  # why a failed run failed, when known

    @property
    def epochs_done(self) -> int:
        return len(self.metrics)

    @property
    def best_accuracy(self) -> float | None:
        values = [m["test_accuracy"] for m in self.metrics if isinstance(m.get("test_accuracy"), (int, float))]
        return max(values) if values else None

    @property
    def checkpoint(self) -> Path | None:
        """The run's best model (or its latest), if an epoch has finished."""
        for name in ("best.safetensors", "last.safetensors"):
            if (self.path / name).is_file():
                return self.path / name
        return None

    @property
    def resumable(self) -> bool:
        return (
            self.status in ("stopped", "failed")
            and (self.path / "train_state.pt").is_file()
            and self.epochs_done < max(self.epochs_total, 1)
        )


def _read_progress(run_dir: Path) -> dict[str, Any]:
    try:
        data = read_json(run_dir / "progress.json")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _run_dirs(root: Path) -> list[Path]:
    try:
        entries = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []
    markers = ("args.json", "progress.json", "metrics.jsonl", LOG_NAME, "request.json")
    return [p for p in entries if any((p / m).exists() for m in markers)]


def read_run(run_dir: str | os.PathLike, root: str | os.PathLike | None = None) -> RunSummary:
    """Summarise one run folder: status, metrics per epoch, live progress, options."""
    run_dir = Path(run_dir)
    root = runs_root(root) if root is not None else run_dir.parent
    progress = _read_progress(run_dir)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    args: dict[str, Any] = {}
    for name in ("args.json", "request.json"):
        try:
            loaded = read_json(run_dir / name)
        except (OSError, ValueError):
            continue
        if isinstance(loaded, dict):
            args = {**loaded, **args}
    active = active_run(root, include_external=False)
    holds_lock = active is not None and active.run_dir.name == run_dir.name
    pid = int(progress.get("pid") or 0)
    state = progress.get("status")
    reason = ""
    if state == "running":
        if _trainer_alive(pid) or (holds_lock and active is not None and _trainer_alive(active.pid)):
            status = "running"
        else:
            status, reason = "failed", "the trainer stopped without finishing (killed, or out of memory?)"
    elif state in ("finished", "stopped", "failed"):
        status = state
        if holds_lock and active is not None and _trainer_alive(active.pid):
            status = "running"  # resumed: the new process has not rewritten progress.json yet
        elif state == "failed":
            reason = "the trainer reported an error"
    elif holds_lock:
        status = "starting"
    else:
        status, reason = "failed", "the trainer exited before training started"
    if status == "failed" and not (run_dir / LOG_NAME).is_file():
        reason = reason or "no log"
    return RunSummary(
        name=run_dir.name,
        path=run_dir,
        status=status,
        dataset=str(args.get("dataset") or progress.get("dataset") or ""),
        epochs_total=int(progress.get("epochs") or args.get("epochs") or 0),
        metrics=metrics,
        progress=progress,
        args=args,
        reason=reason,
    )


def list_runs(root: str | os.PathLike | None = None) -> list[RunSummary]:
    """Every run in the runs root, newest first."""
    root = runs_root(root)
    dirs = _run_dirs(root)
    dirs.sort(key=lambda p: (p.stat().st_mtime if p.exists() else 0.0, p.name), reverse=True)
    return [read_run(p, root) for p in dirs]


def log_tail(run_dir: str | os.PathLike, lines: int = 40, max_bytes: int = 64_000) -> str:
    """The last `lines` lines of a run's train.log ('' if it has none)."""
    path = Path(run_dir) / LOG_NAME
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
