"""The checkpoints a user can open: the shipped models and the best model of each training run.

Each is described from its safetensors header alone (dataset, accuracy, epochs), so
listing them reads no weights, and runs are found from their folders alone, so listing
checks no process; a file that cannot be read is listed with its error,
so the dashboard's picker can name it instead of hiding it. The shipped folder is an
argument, else $CAPSNET_CHECKPOINTS_DIR, else checkpoints/ beside the package; the CNN
baselines (`capsnet.nn.cnn`) are shipped in its baselines/ folder and listed apart, since
only Capsule Networks can be explained and the CNNs are there to be compared with.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from capsnet.checkpoints.checkpoint import CheckpointError, read_checkpoint_info
from capsnet.data.datasets import DATASETS
from capsnet.nn import registry
from capsnet.nn.registry import network_of
from capsnet.training.folder import RunFolder, run_folders, runs_root

CHECKPOINTS_ENV = "CAPSNET_CHECKPOINTS_DIR"
SHIPPED = (
    "mnist.safetensors",
    "fashion-mnist.safetensors",
    "multimnist.safetensors",
    "mnist-40.safetensors",
    "mnist-em.safetensors",
)  # in picker order
BASELINES = "baselines"  # the shipped CNNs: <dataset>-cnn.safetensors in this subfolder


def checkpoints_dir(path: str | os.PathLike | None = None) -> Path:
    """The shipped checkpoints: `path`, else $CAPSNET_CHECKPOINTS_DIR, else checkpoints/ beside the package."""
    if path:
        return Path(path)
    if os.environ.get(CHECKPOINTS_ENV):
        return Path(os.environ[CHECKPOINTS_ENV])
    return Path(__file__).resolve().parents[2] / "checkpoints"  # capsnet/runs/catalog.py -> the repository


MOST_EPOCHS = 100_000  # metrics lines read to count a run's epochs (a line an epoch)


@dataclass
class CheckpointEntry:
    """A checkpoint the dashboard can open, described from its header alone."""

    path: Path
    source: str  # "shipped" or "run"
    dataset: str = ""
    dataset_title: str = ""
    test_accuracy: float | None = None
    epochs: int | None = None  # all the epochs behind it, warm starts included
    epochs_said: str = ""  # the same in words: "8 epochs", or "107 on MNIST + 8 on MultiMNIST" for a warm start
    run: str = ""
    error: str = ""  # set when the file cannot be read; the entry is then not selectable
    network: str = "capsnet"  # or "cnn", "em"
    best_epoch: int | None = None  # a run's: the epoch its best model is from
    run_epochs: int | None = None  # a run's: the epochs it has run

    @property
    def name(self) -> str:
        """The file's name under its folder: `mnist.safetensors`, or `<run>/best.safetensors`."""
        return f"{self.run}/{self.path.name}" if self.run else self.path.name

    @property
    def label(self) -> str:
        """One short line for a picker (the sidebar's is about 30 characters wide): what, how good, from where."""
        title = self.dataset_title or self.dataset or "unknown dataset"
        if not self.error and registry.network(self.network).short:  # "EM · MNIST · ...": which network, first
            title = f"{registry.network(self.network).short} · {title}"
        acc = f"{100 * self.test_accuracy:.2f}%" if self.test_accuracy is not None else "accuracy unknown"
        if self.source == "shipped":  # the file is named only when it is not the dataset's own shipped model
            canonical = self.path.name in (f"{self.dataset}.safetensors", f"{self.dataset}-{self.network}.safetensors")
            return f"{title} · {acc} · shipped" + ("" if canonical else f" ({self.path.name})")
        said = self.epochs_said
        if self.run_epochs and self.best_epoch and self.run_epochs > self.best_epoch and "+" not in said:
            said = f"{self.run_epochs} epochs, the best at epoch {self.best_epoch}"  # not the run's length
        return f"{title} · {acc} · run {self.run}" + (f", {said}" if said else "")


def _describe(path: Path, source: str, run: str = "") -> CheckpointEntry:
    try:
        config, info = read_checkpoint_info(path)
    except CheckpointError as error:
        entry = CheckpointEntry(path=path, source=source, run=run)
        entry.error = str(error).replace(str(path), entry.name)  # a name under its folder, never the server's path
        return entry
    return CheckpointEntry(
        network=network_of(config).name,
        path=path,
        source=source,
        dataset=info.dataset,
        dataset_title=info.title,
        test_accuracy=info.test_accuracy,
        epochs=info.trained_epochs,
        epochs_said=info.epochs_said({name: d.title for name, d in DATASETS.items()}),
        run=run,
        best_epoch=info.epochs if run else None,
    )


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path` is a regular file that resolves inside `folder`: a link out of it (to /etc/shadow, say)
    or to a device is never listed, so never opened."""
    try:
        return path.is_file() and path.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


def _named_runs(root: str | os.PathLike | None) -> list[tuple[str, RunFolder]]:
    """Each run of the runs root by its folder's name, newest first; then the runs kept one level down, in a folder
    of runs (a comparison of routings keeps a run per routing and seed: `capsnet.runs.compare`), named
    `<folder>/<run>`."""
    found = [(run.name, run) for run in run_folders(root)]
    base = runs_root(root)
    try:
        folders = [p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return found
    for folder in sorted(folders, key=lambda p: p.name):
        if not RunFolder(folder).looks_like_a_run():
            found += [(f"{folder.name}/{run.name}", run) for run in sorted(run_folders(folder), key=lambda r: r.name)]
    return found


def list_checkpoints(
    checkpoints: str | os.PathLike | None = None,
    root: str | os.PathLike | None = None,
    network: str | tuple[str, ...] = "capsnet",
) -> list[CheckpointEntry]:
    """The shipped checkpoints (mnist, fashion-mnist, then any other) and each run's best model, newest run first,
    then those of each folder of runs (a comparison's), by name.

    Only those of `network` (a name or several): the Capsule Networks ("capsnet", "em"), or with "cnn" the
    baselines (shipped in baselines/). Broken files are listed with `error` set (with the Capsule Networks), so
    the picker can name them.
    """
    wanted = (network,) if isinstance(network, str) else tuple(network)
    baseline = {registry.network(name).baseline for name in wanted}
    if len(baseline) != 1:
        raise ValueError(f"the baselines are listed apart from the capsule networks, got {wanted}")
    folder = checkpoints_dir(checkpoints) / (BASELINES if baseline.pop() else "")
    shipped: list[Path] = []
    if folder.is_dir():
        files = sorted(p for p in folder.glob("*.safetensors") if _inside(p, folder))
        order = {name: k for k, name in enumerate(SHIPPED)}
        shipped = sorted(files, key=lambda p: (order.get(p.name, len(order)), p.name))
    entries = [_describe(path, "shipped") for path in shipped]
    for name, run in _named_runs(root):
        checkpoint = run.checkpoint()
        if checkpoint is not None and _inside(checkpoint, runs_root(root)):
            entry = _describe(checkpoint, "run", name)
            entry.run_epochs = max((int(m["epoch"]) for m in run.read_metrics(limit=MOST_EPOCHS)), default=None)
            entries.append(entry)
    return [e for e in entries if e.network in wanted]


def trained_on(dataset: str, entries: list[CheckpointEntry]) -> CheckpointEntry | None:
    """The readable entry trained on `dataset`: the shipped one, else the newest run's (entries come newest first)."""
    usable = [e for e in entries if not e.error and e.dataset == dataset]
    shipped = [e for e in usable if e.source == "shipped"]
    return next(iter(shipped or usable), None)


def baseline_for(dataset: str, baselines: list[CheckpointEntry]) -> CheckpointEntry | None:
    """The CNN to compare a `dataset` model with: the shipped one, else the newest run's."""
    return trained_on(dataset, [e for e in baselines if registry.network(e.network).baseline])


def default_checkpoint(entries: list[CheckpointEntry]) -> CheckpointEntry | None:
    """The one to open first: the shipped MNIST model, else any shipped one, else the newest run's."""
    usable = [e for e in entries if not e.error]
    for entry in usable:
        if entry.source == "shipped" and entry.path.name == SHIPPED[0]:
            return entry
    return usable[0] if usable else None
