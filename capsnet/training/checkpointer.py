"""What a training run saves as it goes (in the manner of timm's CheckpointSaver).

After every epoch: `last.safetensors`, `best.safetensors` when the accuracy is the best so far,
`train_state.pt` (optimizer, schedule, position) for --resume, and the epoch's metrics line; on a
stop part-way through an epoch, the state with the sums of the part already trained. Only the
main process of a distributed run writes. Every file is written atomically.

An epoch's records commit together: its checkpoints are first staged (`last.pending.safetensors`),
then the state is saved with the epoch's metrics record in it (the commit point), then the staged
files take their names and the metrics line is appended. A trainer killed anywhere in between
leaves files that `reconcile` (run on --resume) brings back to one consistent epoch: staged
checkpoints of a committed epoch are promoted, those of an uncommitted one removed, metrics lines
past the state dropped and a committed one that is missing appended. A write that fails (a full disk) removes
what the epoch staged before its one line is raised: the folder stays at the last committed epoch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import cast

import torch

import capsnet
from capsnet.checkpoints.checkpoint import read_checkpoint_info, save_checkpoint
from capsnet.checkpoints.header import CheckpointInfo
from capsnet.data.datasets import dataset_info
from capsnet.device import describe_device
from capsnet.errors import CapsNetError
from capsnet.evaluation import Evaluation, PairEvaluation
from capsnet.files import FileWriteError, atomic_path, write_failure
from capsnet.nn.registry import AnyModel
from capsnet.readings.novelty import NoveltyThresholds
from capsnet.training.folder import EpochRecord, RunFolder
from capsnet.training.options import TrainOptions
from capsnet.training.schedule import Schedule


@dataclass
class TrainState:
    """Where a run is: what train_state.pt holds besides the model, optimizer and scheduler."""

    epoch: int = 0  # epochs finished
    batch: int = 0  # batches of epoch `epoch + 1` already trained (a stop part-way)
    best_accuracy: float = -1.0
    best_epoch: int = 0
    elapsed: float = 0.0  # seconds of training so far
    partial: dict[str, float] = field(default_factory=dict)  # the interrupted epoch's sums (`EpochSums`)
    record: dict = field(default_factory=dict)  # the metrics line of epoch `epoch`, committed with this state


class Checkpointer:
    """Saves and restores one run's model, optimizer and scheduler in its folder."""

    def __init__(
        self,
        folder: RunFolder,
        model: AnyModel,
        optimizer: torch.optim.Optimizer,
        scheduler: Schedule,
        enabled: bool = True,
    ) -> None:
        self.folder, self.model, self.optimizer, self.scheduler = folder, model, optimizer, scheduler
        self.enabled = enabled  # False on the other processes of a distributed run
        self.state = TrainState()
        self.committed_best = -1.0  # the best accuracy of a saved state: all that may be claimed

    def reconcile(self) -> list[str]:
        """Bring the folder back to the epoch its train_state.pt records (after a kill); returns what was done."""
        done: list[str] = []
        committed = self.state.epoch
        for name in (RunFolder.LAST, RunFolder.BEST):
            staged = self.folder.file(RunFolder.pending(name))
            if not staged.is_file():
                continue
            try:
                epoch = read_checkpoint_info(staged)[1].epochs
            except CapsNetError:
                epoch = None
            if epoch == committed:
                staged.replace(self.folder.file(name))
                done.append(f"kept the saved epoch's {name}")
            else:
                staged.unlink()
                done.append(f"dropped {staged.name} of an epoch that was not saved")
        metrics = self.folder.read_metrics()
        kept = [r for r in metrics if isinstance(r.get("epoch"), int) and r["epoch"] <= committed]
        if (
            self.state.record
            and self.state.record.get("epoch") == committed
            and committed not in [r["epoch"] for r in kept]
        ):
            kept.append(cast(EpochRecord, self.state.record))  # the metrics line saved with the state
        if kept != metrics:
            self.folder.write_metrics(kept)
            done.append(f"metrics.jsonl made to end at epoch {committed}")
        done += [f"removed {p.name}" for p in self.folder.remove_stale_temporaries()]
        return done

    def drop_staged(self) -> None:
        """Remove the checkpoints staged for an epoch that is not to be committed (a write of it failed)."""
        for name in (RunFolder.LAST, RunFolder.BEST):
            self.folder.file(RunFolder.pending(name)).unlink(missing_ok=True)

    def restore(self) -> TrainState:
        """Load train_state.pt into the model, optimizer and scheduler (for --resume); never runs code."""
        path = self.folder.state_path
        if not path.is_file():
            raise CapsNetError(f"--resume: no {path.name} in {self.folder.path}; start a new run without --resume")
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # the weights-only unpickler runs no code, but a random or hostile pickle fails in
            # many ways: UnpicklingError, EOFError, IndexError and KeyError from its stack, struct.error
            raise CapsNetError(
                f"--resume: {path} is damaged or not a training state ({type(error).__name__})"
            ) from None
        try:
            self.model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(saved["optimizer"])
            self.scheduler.load_state_dict(saved["scheduler"])
            self.state = TrainState(
                epoch=int(saved["epoch"]),
                batch=int(saved["batch"]),
                best_accuracy=float(saved["best_accuracy"]),
                best_epoch=int(saved["best_epoch"]),
                elapsed=float(saved["elapsed"]),
                partial={k: float(v) for k, v in dict(saved.get("partial") or {}).items()},
                record=dict(saved.get("record") or {}),
            )
        except (KeyError, RuntimeError, TypeError, ValueError, AttributeError) as error:
            raise CapsNetError(
                f"--resume: the saved state in {self.folder.path} does not fit this model ({type(error).__name__})"
            ) from None
        self.committed_best = self.state.best_accuracy
        return self.state

    def save_state(
        self, epoch: int, batch: int = 0, partial: dict[str, float] | None = None, elapsed: float | None = None
    ) -> None:
        """train_state.pt: `epoch` epochs done and `batch` batches of the next (with their sums in `partial`).

        `elapsed`: the training seconds to store, where they differ from the state's (a save in the middle of an
        epoch, whose seconds the state counts only at its end).
        """
        self.state.epoch, self.state.batch, self.state.partial = epoch, batch, dict(partial or {})
        if not self.enabled:
            return
        payload = {
            **asdict(self.state),
            **({"elapsed": elapsed} if elapsed is not None else {}),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }
        try:
            with atomic_path(self.folder.state_path) as tmp:
                torch.save(payload, tmp)
        except RuntimeError as error:  # torch.save's own error for a failed write (a full disk)
            raise write_failure(self.folder.state_path, error) from None
        self.committed_best = self.state.best_accuracy

    def commit_epoch(self, epoch: int, record: EpochRecord | None) -> None:
        """Epoch `epoch` is done: save the state with its metrics `record` (the commit), then give the staged
        checkpoints their names and append the metrics line."""
        self.state.record = dict(record or {})
        try:
            self.save_state(epoch)
        except FileWriteError:
            self.drop_staged()  # the epoch is not committed: its staged checkpoints go, as `reconcile` would drop them
            raise
        if not self.enabled:
            return
        for name in (RunFolder.LAST, RunFolder.BEST):
            staged = self.folder.file(RunFolder.pending(name))
            if staged.is_file():
                staged.replace(self.folder.file(name))
        if record:
            self.folder.append_metrics(record)

    def save_models(self, epoch: int, accuracy: float, info: CheckpointInfo) -> bool:
        """Stage last.safetensors, and best.safetensors if `accuracy` is the best so far (`commit_epoch` gives
        them their names); returns whether it is."""
        best = accuracy > self.state.best_accuracy
        info = info.replace(best_epoch=epoch if best else self.state.best_epoch)
        if self.enabled:
            try:
                save_checkpoint(self.folder.file(RunFolder.pending(RunFolder.LAST)), self.model, info)
                if best:
                    save_checkpoint(self.folder.file(RunFolder.pending(RunFolder.BEST)), self.model, info)
            except FileWriteError:
                self.drop_staged()
                raise
        if best:  # only once saved
            self.state.best_accuracy, self.state.best_epoch = accuracy, epoch
        return best


def epoch_info(
    options: TrainOptions,
    epoch: int,
    result: Evaluation | PairEvaluation,
    seconds: float,
    device: torch.device,
    origin: dict | None = None,
) -> CheckpointInfo:
    """The facts a checkpoint saved after `epoch` records; `origin`: the checkpoint an --init run started from."""
    data = dataset_info(options.dataset)
    before = CheckpointInfo.from_dict(origin or {})
    recipe = options.how_made()
    if origin is not None:
        recipe["init"] = origin["checkpoint"]  # also after a --resume, which leaves options.init unset
    return CheckpointInfo(
        dataset=options.dataset,
        dataset_title=data.title,
        class_names=list(data.classes),
        epochs=epoch,
        total_epochs=epoch + (before.trained_epochs or 0),
        test_accuracy=result.accuracy,
        test_loss=result.loss,
        test_examples=result.total,
        **(_class_statistics(result) if isinstance(result, Evaluation) else {}),
        training_seconds=round(seconds, 1),
        total_training_seconds=round(seconds + (before.all_training_seconds or 0.0), 1),
        hardware=describe_device(device),
        recipe=recipe,
        started_from=origin,
        capsnet_version=capsnet.__version__,
        torch_version=torch.__version__,
        saved=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def _class_statistics(result: Evaluation) -> dict:
    """What a single-label evaluation adds to the header: per class, the poses' spread, the novelty thresholds."""
    if result.dimension_mean is None or result.dimension_std is None:  # the CNN baseline: no poses, no reconstructions
        return dict(per_class_accuracy=result.class_accuracy())
    thresholds = NoveltyThresholds.from_evaluation(result)
    return dict(
        per_class_accuracy=result.class_accuracy(),
        dimension_mean=result.dimension_mean.tolist(),
        dimension_std=result.dimension_std.tolist(),
        novelty=thresholds.to_dict() if thresholds else None,
    )
