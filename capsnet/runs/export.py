"""Turn a run's checkpoint into a shipped one: float16 weights, re-evaluated, metrics kept beside it.

    python -m capsnet export runs/mnist/best.safetensors checkpoints/mnist.safetensors

The weights are stored as float16 (half the size); the exported file is loaded
back as float32 and evaluated on the full test set, and the accuracies in its
header are those of the exported file itself, so that what the header says is
what anyone who loads it will measure (a mnist-40 model's header also keeps its accuracy on
the affNIST-like set, `capsnet.readings.affnist`). The run's metrics.jsonl is written to
`<name>.metrics.jsonl` beside it for the model card; for a run started with
--init, the log of the run it started from comes first, so the epochs are
numbered over the whole training. A file exported into the shipped checkpoints'
folder gets its entry in that folder's manifest (`capsnet.checkpoints.manifest`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from capsnet.checkpoints import manifest
from capsnet.checkpoints.checkpoint import load_checkpoint, read_checkpoint_info, save_checkpoint
from capsnet.checkpoints.header import ORIGIN_KEYS, CheckpointInfo, trained_epochs
from capsnet.data.datasets import DATASETS, dataset_info
from capsnet.data.tasks import read_test_set, task
from capsnet.device import pick_device
from capsnet.errors import CapsNetError
from capsnet.evaluation import Evaluation, PairEvaluation, evaluate_set
from capsnet.files import atomic_path, read_jsonl, scratch_beside, writable
from capsnet.nn.registry import NETWORK_NAMES, AnyModel, network_of
from capsnet.readings import affnist
from capsnet.readings.novelty import NoveltyThresholds
from capsnet.runs.catalog import checkpoints_dir


def export_checkpoint(
    source: str | Path,
    target: str | Path,
    half: bool = True,
    data_dir: str | None = None,
    device: str = "auto",
    first: int | None = None,
    on_note: Callable[[str], None] | None = None,
) -> CheckpointInfo:
    """Export `source` to `target`; returns the exported file's info (header).

    The model is measured on its whole test set (a MultiMNIST model on its 100,000 fixed test pairs), or on its
    first `first` examples (pairs) for a quicker look; the header says how many (`test_examples`). `on_note` hears
    one line for each run of the lineage whose log was not found (its epochs are missing from the written log).
    """
    source, target = Path(source), Path(target)
    dtype = torch.float16 if half else None
    if target.exists() and source.exists() and target.resolve() == source.resolve():
        raise CapsNetError(f"{target} is the source itself: export to another file (the source stays as trained)")
    run = load_checkpoint(source, device=pick_device(device), networks=NETWORK_NAMES)  # a bad source: no folder made
    writable(target, "safetensors")  # before the minutes of evaluation, not after: nor over what is not a checkpoint
    writable(target.with_suffix(".metrics.jsonl"), "jsonl")
    if _in_shipped(target):  # a damaged manifest stops the export before anything is written, not after
        manifest.read_manifest(checkpoints_dir())
    if half:
        _refuse_float16_overflow(run.model, source)
    name = run.info.dataset_name
    test = read_test_set(name, data_dir)
    test = test.first(first)

    def measure(model: AnyModel) -> Evaluation | PairEvaluation:
        return evaluate_set(model, test)

    before = measure(run.model)
    # the stored weights are measured in a staging file; `target` is written once, with the final header
    target.parent.mkdir(parents=True, exist_ok=True)
    with scratch_beside(target) as staging:  # a killed export's is removed by the next write beside `target`
        save_checkpoint(staging, run.model, run.info, dtype=dtype)
        exported = load_checkpoint(staging, device=pick_device(device), networks=NETWORK_NAMES)
    after = measure(exported.model)
    info = run.info.replace(
        test_accuracy=after.accuracy,
        test_loss=after.loss,
        test_examples=after.total,
        weights_dtype="float16" if half else "float32",
        test_accuracy_before_export=before.accuracy,
        class_names=list(dataset_info(name).classes),
    )
    if isinstance(after, Evaluation):
        thresholds = NoveltyThresholds.from_evaluation(after)  # None for a network that redraws nothing
        info = info.replace(
            per_class_accuracy=after.class_accuracy(),
            per_class_correct=after.class_correct,
            per_class_total=after.class_total,
            confusion=after.confusion.tolist(),
            dimension_mean=after.dimension_mean.tolist() if after.dimension_mean is not None else None,
            dimension_std=after.dimension_std.tolist() if after.dimension_std is not None else None,
            novelty=thresholds.to_dict() if thresholds else None,
        )
    if name == affnist.TRAINING_SET:  # the paper's affine test: also read the affNIST-like set
        measured = affnist.measure(exported.model, data_dir, first, moved_accuracy=after.accuracy)  # the same digits
        info = info.replace(extra={**info.extra, **measured.header_facts()})
    lineage = read_lineage(source, info)  # read before anything is written: a bad log must not leave half an export
    save_checkpoint(target, exported.model, info, dtype=dtype)
    log = target.with_suffix(".metrics.jsonl")
    if lineage.records:
        with atomic_path(log, "jsonl") as tmp:
            tmp.write_text("".join(json.dumps(record) + "\n" for record in lineage.records), encoding="utf-8")
        if on_note is not None:
            for unmatched in lineage.unmatched:
                on_note(f"note: {log} lacks the epochs of the run that saved {unmatched}: the file there is not the "
                        "checkpoint the run started from (missing, or its header differs), so no log beside it is "
                        "read; the later epochs are numbered on all the same")  # fmt: skip
            for missing in lineage.missing:
                on_note(f"note: {log} lacks the epochs of the run that saved {missing}: no log beside it "
                        f"({missing.parent / 'metrics.jsonl'}); the later epochs are numbered on all the same")  # fmt: skip
    _record_if_shipped(target, data_dir)
    return info


def _record_if_shipped(path: Path, data_dir: str | None = None) -> None:
    """A file in the shipped folder gets its manifest entry written anew (its bytes changed): the entry proves it in CI."""
    if _in_shipped(path):
        manifest.record(path, checkpoints_dir(), data_dir)


def _in_shipped(path: Path) -> bool:
    return path.resolve().is_relative_to(checkpoints_dir().resolve())


def _refuse_float16_overflow(model: AnyModel, source: Path) -> None:
    """One line naming the cause, the file and the way out, when a weight is too large for float16 (65504)."""
    limit = torch.finfo(torch.float16).max
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and bool((tensor.abs() > limit).any()):
            largest = float(tensor.abs().max())
            raise CapsNetError(
                f"{source}: weight {name} reaches {largest:.3g}, beyond float16's {limit:g}: export it with --float32"
            )


def calibrate_checkpoint(path: str | Path, data_dir: str | None = None, device: str = "auto") -> CheckpointInfo:
    """Add the not-like-any-class thresholds (`capsnet.readings.novelty`) to a checkpoint's header; the weights are kept.

    For checkpoints made before the thresholds were stored. The file is rewritten atomically
    with the same tensors (float16 weights stay float16, bit for bit).
    """
    path = Path(path)
    writable(path)
    checkpoint = load_checkpoint(path, device=pick_device(device), networks=NETWORK_NAMES)
    net = network_of(checkpoint.config)
    if not net.redraws(checkpoint.config):
        raise CapsNetError(f"{path}: {net.described} that redraws nothing has no not-like-any-class thresholds")
    if checkpoint.info.dataset in DATASETS and task(checkpoint.info.dataset).pairs:
        raise CapsNetError(f"{path}: a MultiMNIST model has no not-like-any-class thresholds to calibrate")
    result = evaluate_set(checkpoint.model, read_test_set(checkpoint.info.dataset_name, data_dir))
    assert isinstance(result, Evaluation)  # single examples: pairs were refused above
    thresholds = NoveltyThresholds.from_evaluation(result)
    info = checkpoint.info.replace(novelty=thresholds.to_dict() if thresholds else None)
    dtype = torch.float16 if checkpoint.info.weights_dtype == "float16" else None
    save_checkpoint(path, checkpoint.model, info, dtype=dtype)
    _record_if_shipped(path, data_dir)
    return info


def record_lr_search(path: str | Path, candidates: list[float], data_dir: str | None = None) -> CheckpointInfo:
    """Say in a checkpoint's header that its learning rate was the best of `candidates` on its validation split.

    The run that chose it must have held out a validation split (its header's `val_accuracy`), and its
    own learning rate must be one of the candidates. The weights are kept bit for bit (the file is
    rewritten atomically with the same tensors and dtype).
    """
    path = Path(path)
    writable(path)
    checkpoint = load_checkpoint(path, networks=NETWORK_NAMES)
    info = checkpoint.info
    lr = (info.recipe or {}).get("lr")
    if "val_accuracy" not in (info.extra or {}):
        raise CapsNetError(f"{path}: its run held out no validation split, so no learning rate was chosen on one")
    if not isinstance(lr, (int, float)) or not any(abs(lr - c) <= 1e-12 for c in candidates):
        raise CapsNetError(f"{path}: its learning rate {lr!r} is not among the candidates {candidates}")
    info = info.replace(extra={**(info.extra or {}), "lr_candidates": sorted(float(c) for c in candidates)})
    dtype = torch.float16 if info.weights_dtype == "float16" else None
    save_checkpoint(path, checkpoint.model, info, dtype=dtype)
    _record_if_shipped(path, data_dir)  # the header changed, so the bytes did: the manifest entry follows
    return info


def _epoch_span(facts: dict[str, Any]) -> tuple[int, int]:
    """(epochs of its own run, epochs of the runs before it) for a header or a `started_from` record."""
    own = int(facts.get("epochs") or 0)
    return own, (trained_epochs(facts) or own) - own


@dataclass(frozen=True)
class Lineage:
    """The per-epoch records behind a checkpoint, and the checkpoints of its lineage whose run's log was not found."""

    records: list[dict[str, Any]]
    missing: list[Path]  # no log beside them
    unmatched: list[Path] = field(default_factory=list)  # not the checkpoint the record names (not read)


def read_lineage(checkpoint: Path, info: CheckpointInfo | Mapping[str, Any]) -> Lineage:
    """The per-epoch records behind `checkpoint` (with header `info`), oldest first, each naming its run.

    A run started with --init records the checkpoint it started from in
    `started_from`; that run's records, up to the epoch the checkpoint was taken
    at, come first, and the later runs' epochs are numbered on from them. A
    shipped model's log (`name.metrics.jsonl`) already spans its own lineage.
    A log that cannot be found is left out; the numbering still counts its epochs. A `started_from` path is
    followed only to the checkpoint it names: a file there whose header is not the one recorded (anything else, a
    hostile header's /etc path included) is not the origin, and no log beside it is read.
    """
    facts = info.to_dict() if isinstance(info, CheckpointInfo) else dict(info)
    chain: list[tuple[Path, dict[str, Any]]] = [(checkpoint, facts)]
    origin = facts.get("started_from")
    while isinstance(origin, dict) and origin.get("checkpoint"):
        chain.append((Path(origin["checkpoint"]), origin))
        origin = origin.get("started_from")
    records: list[dict[str, Any]] = []
    missing: list[Path] = []
    unmatched: list[Path] = []
    for depth, (path, facts) in enumerate(reversed(chain)):
        own, before = _epoch_span(facts)
        newest = depth == len(chain) - 1  # the exported checkpoint: its run's whole log, epochs after it included
        if not newest and not _is_origin(path, facts):
            unmatched.append(path)
            records = [r for r in records if r["epoch"] <= before]
            continue
        shipped = path.with_suffix(".metrics.jsonl")
        if not newest and shipped.is_file():
            records = [r for r in _epochs(shipped) if r["epoch"] <= before + own]
            missing = []  # a shipped log spans its whole lineage
            continue
        log = path.parent / "metrics.jsonl"
        if not log.is_file():
            missing.append(path)
        kept = [r for r in _epochs(log) if newest or r["epoch"] <= own]
        records = [r for r in records if r["epoch"] <= before]
        records += [{**r, "epoch": r["epoch"] + before, "run": path.parent.name} for r in kept]
    return Lineage(records, missing, unmatched)


def _is_origin(path: Path, facts: Mapping[str, Any]) -> bool:
    """Whether `path` is a capsnet checkpoint whose header says what the `started_from` record `facts` says of it."""
    try:
        info = read_checkpoint_info(path)[1]
    except (CapsNetError, OSError):
        return False
    found = info.as_origin(path)
    return all(found.get(key) == facts.get(key) for key in ORIGIN_KEYS)


def _epochs(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics log that name a whole epoch >= 1 (a damaged line is left out, not a crash)."""
    return [
        r
        for r in read_jsonl(path)
        if isinstance(r, dict)
        and isinstance(r.get("epoch"), int)
        and not isinstance(r["epoch"], bool)
        and r["epoch"] >= 1
    ]
