"""A run's start: its folder (new, or the one to resume), held by one trainer, and its stored options.

`prepare` makes or opens the run folder (rank 0 names a new one for every process), takes its lock
(`RunFolder.lock`: one trainer per folder), refuses a folder that already holds a run unless asked
to --resume, reads a resumed run's options and lineage, and makes what args.json is to hold, with the
acceleration chosen for this machine. The trainer (`capsnet.training.trainer`) then builds, writes args.json
once the run is built, and fits; a new run refused before that leaves nothing behind (`Prepared.abandon`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from capsnet.checkpoints.checkpoint import read_checkpoint_info
from capsnet.errors import CapsNetError
from capsnet.nn.registry import AnyConfig, network
from capsnet.training.acceleration import Acceleration
from capsnet.training.distributed import Distributed, from_main
from capsnet.training.folder import FolderLock, RunFolder, RunFolderError, new_run_dir, runs_root
from capsnet.training.options import COMPUTE_CHOICES, TrainOptions

NETWORK_CONFIG = "network_config"  # args.json's record of the network as built


@dataclass
class Prepared:
    """A run ready to build: its options (a resumed run's stored ones), folder and lineage."""

    options: TrainOptions
    folder: RunFolder
    origin: dict[str, Any] | None  # the checkpoint an --init run started from
    args: dict[str, Any]  # what args.json is to hold, written once the run's state has loaded
    acceleration: Acceleration  # bf16 or float32, fused Adam, compile: chosen for this machine
    lock: FolderLock | None = None  # the main process's hold on the folder, released by `train`
    config: AnyConfig | None = (
        None  # a resumed run's network config, as it was built (a warm start's differs from its preset)
    )
    made: tuple[Path, ...] = ()  # the folders made for this run, deepest first (its own, and an --out's parents)

    def abandon(self) -> None:
        """A new run refused before it began (its data missing, its warm start refused) leaves no folder behind that
        was made for it; a folder that was there before (an --out, the dashboard's) keeps what it
        held (the dashboard's own args.json and log say why its run failed)."""
        if not self.options.resume:
            _remove_made(self.folder, self.made)


def _remove_made(folder: RunFolder, made: tuple[Path, ...]) -> None:
    """Remove the folders made for a run that never began (its args.json, if written, with them): only empty ones."""
    if not made:
        return
    folder.file(RunFolder.ARGS).unlink(missing_ok=True)
    folder.remove_if_empty()
    for parent in made[1:]:
        with contextlib.suppress(OSError):
            parent.rmdir()  # only when empty


def prepare(options: TrainOptions, env: Distributed, device: torch.device, given: Collection[str] = ()) -> Prepared:
    """The run folder (rank 0 names a new one for every process), and a resumed run's stored options.

    args.json records the acceleration chosen for this machine and the run's options (a resumed run's stored ones:
    its network decides whether a CPU compiles), and a resume on another machine chooses again and records that.
    """
    if options.out:
        path = Path(options.out)
        made = tuple(p for p in (path, *path.parents) if not p.exists())
        if options.resume and not path.is_dir():  # a typo was made into a folder, then refused
            raise RunFolderError(f"--resume: no run folder at {path}")
        if env.is_main:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise RunFolderError(f"cannot use {path} as the run folder: {error.strerror or error}") from None
    else:
        path = Path(from_main(str(new_run_dir(runs_root(), options.dataset)) if env.is_main else None, env))
        made = (path,)
    folder = RunFolder(path)
    lock = folder.lock() if env.is_main else None  # one trainer per folder, before anything in it is read or written
    try:
        prepared = _prepare_locked(options, env, device, folder, lock, given)
    except BaseException:
        if lock is not None:
            _remove_made(folder, made)  # an --init that cannot be read, say: no folder left for it
            lock.release()
        raise
    prepared.made = made
    return prepared


def _prepare_locked(
    options: TrainOptions,
    env: Distributed,
    device: torch.device,
    folder: RunFolder,
    lock: FolderLock | None,
    given: Collection[str],
) -> Prepared:
    if not options.resume and env.is_main and folder.holds_a_run():
        stored = folder.read_args()
        what = f" ({stored.get('dataset', '?')}, {len(folder.read_metrics())} epochs)" if stored else ""
        raise RunFolderError(
            f"{folder.path} already holds a run{what}: continue it with --resume, or choose another --out"
        )
    origin, config = None, None
    if options.resume:
        stored = folder.read_args()
        if not stored:
            raise CapsNetError(f"--resume: cannot read the run's {RunFolder.ARGS} in {folder.path}")
        options = options.resumed_from(stored, given).validate()
        origin = stored.get("started_from")
        if origin is None and stored.get("init") and Path(stored["init"]).is_file():  # begun before origins were kept
            origin = read_checkpoint_info(stored["init"])[1].as_origin(stored["init"])
        # what a later resume reads: the epochs, and the choices of how to compute as they now stand
        args = stored | {"epochs": options.epochs} | {name: getattr(options, name) for name in COMPUTE_CHOICES}
        config = _resumed_config(stored, folder, options)
    else:
        if env.is_main:
            folder.remove_uncommitted()  # a run killed in its first epoch left its writes half done
        if options.init:
            origin = read_checkpoint_info(options.init)[1].as_origin(options.init)
        args = options.to_dict() | ({"started_from": origin} if origin else {})
    acceleration = options.acceleration(device)  # from the run's own options: a resumed run's network decides
    args["acceleration"] = acceleration.to_dict()  # written by the trainer once the run is built and its state sound
    return Prepared(options, folder, origin, args, acceleration, lock, config)


def _resumed_config(stored: dict[str, Any], folder: RunFolder, options: TrainOptions) -> AnyConfig | None:
    """The config a run's network was built with: args.json's, else (a run begun before args.json kept it) the
    header of its checkpoint; None when neither exists (the run is rebuilt from its options)."""
    kept = stored.get(NETWORK_CONFIG)
    try:
        if isinstance(kept, dict):
            return network(options.network).from_dict(kept)
        made = folder.checkpoint()
        return read_checkpoint_info(made)[0] if made is not None else None
    except ValueError as error:
        raise CapsNetError(f"--resume: the network stored in {folder.path} cannot be rebuilt: {error}") from None
