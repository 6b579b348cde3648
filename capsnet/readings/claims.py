"""The paper's two claims, and what the models here measure against them, read from their files.

Sabour, Frosst & Hinton (2017): on MultiMNIST a CapsNet errs on 5.2% of the pairs against 8.1% for
a CNN (section 6); trained on MNIST digits placed on 40x40 and tested on affNIST, it reaches 79%
against the CNN's 66% (section 5.2). A `Verdict` sets the paper's figures beside a pair of
checkpoints (a CapsNet and its CNN baseline): each one's test error, the examples it trained on,
its hours and epochs, which epoch was kept and how it was chosen, and its test error after each
epoch (from the `<name>.metrics.jsonl` shipped beside it, or a run's metrics.jsonl), and says
plainly which network is ahead here and whether the budgets were equal. A warm-started model's
examples, hours and epochs are those of its own run on the claim's data, not of the runs it began
from. For the affine claim the test error is the one on the affNIST-like set (`capsnet.readings.affnist`),
kept in the header by `capsnet.runs.export`; the curve after each epoch is then the runs' own test error,
on MNIST digits moved on 40x40.

A verdict can also be kept as a small JSON record (`record_verdict`, `read_record`) instead of its two checkpoints:
the start-free pair (both networks trained from scratch on the claim's data, `START_FREE`) is shipped that way, as
a row of its own beside the warm-started pair, without adding two models to the shipped files.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capsnet.checkpoints.checkpoint import read_checkpoint_info
from capsnet.errors import CapsNetError
from capsnet.files import read_json, read_jsonl, write_json
from capsnet.nn.registry import network_of

PAPER_ERROR = {  # the paper's test errors, fully trained
    "multimnist": {"capsnet": 0.052, "cnn": 0.081},
    "affnist": {"capsnet": 0.21, "cnn": 0.34},
}
NETWORKS = {"capsnet": "CapsNet", "cnn": "CNN baseline"}
CLAIMED = tuple(NETWORKS)  # a claim's rows, in order: the paper compares its CapsNet with its CNN baseline
TRAINING_DIGITS = 60_000  # MNIST's training set: one pair per digit and epoch
START_FREE = "{claim}-from-scratch.json"  # the start-free pair's record, in the shipped checkpoints' claims/ folder
RECORD_VERSION = 1
CLAIM_DATASET = {"multimnist": "multimnist", "affnist": "mnist-40"}  # what each claim's models are trained on
# the bounds of a believable metrics line: no epoch of more images, no run of more epochs or an epoch of more seconds
MAX_EPOCH_IMAGES, MAX_EPOCHS, MAX_EPOCH_SECONDS = 10**8, 10**5, 10**7


# two warm-start sources within this of each other's MNIST test accuracy count as equally converged: the shipped
# MNIST CapsNet (99.64%) and CNN (99.59%), each trained until its accuracy on held-out digits stopped improving
CONVERGED_GAP = 0.001


@dataclass(frozen=True)
class ClaimRow:
    """One network's standing: its checkpoint's test error and how it was reached."""

    network: str  # "capsnet" or "cnn"
    paper_error: float
    error: float | None  # the checkpoint's stated test error
    test_examples: int | None
    examples_seen: int  # training examples (pairs, for MultiMNIST) over all its epochs
    hours: float | None  # wall-clock hours of those epochs
    epochs: int | None  # its epochs on the claim's data
    chosen_epoch: int | None  # which of those the checkpoint holds (1 = the first), chosen on `chosen_on`
    lr: float | None
    chosen_on: str  # "validation" or "test": how the shipped epoch was picked
    curve: tuple[tuple[int, float], ...]  # (examples seen so far, test error) after each epoch
    lr_candidates: tuple[float, ...] = ()  # the learning rates its lr was chosen among, on validation (if any)
    started_from: int = 0  # examples seen by the runs it was warm-started from (single MNIST digits, say)
    source_accuracy: float | None = None  # the test accuracy of the model it was warm-started from, if stated

    @property
    def from_scratch(self) -> bool:
        """It began from its initial weights, not from another model."""
        return self.started_from == 0 and self.source_accuracy is None

    @property
    def kept_examples(self) -> int | None:
        """The training examples the kept checkpoint had seen: at its chosen epoch on the curve, else at the last."""
        if not self.curve:
            return self.examples_seen or None
        if self.chosen_epoch and self.chosen_epoch <= len(self.curve):
            return self.curve[self.chosen_epoch - 1][0]
        return self.curve[-1][0]


@dataclass(frozen=True)
class Verdict:
    claim: str  # "multimnist" or "affnist"
    rows: tuple[ClaimRow, ...]  # CapsNet first

    @property
    def leader(self) -> str | None:
        """The network with the lower test error here (None if either is unknown; the CNN's row on a tie)."""
        caps, cnn = self.rows
        if caps.error is None or cnn.error is None:
            return None
        return (caps if caps.error < cnn.error else cnn).network

    @property
    def interval(self) -> float:
        """The 95% sampling interval of the difference between the two test errors (1.96 standard errors), from
        each error and the test examples it was measured on (0 when either is unknown)."""
        caps, cnn = self.rows
        if caps.error is None or cnn.error is None or not caps.test_examples or not cnn.test_examples:
            return 0.0
        variance = caps.error * (1 - caps.error) / caps.test_examples + cnn.error * (1 - cnn.error) / cnn.test_examples
        return 1.96 * variance**0.5

    @property
    def converged_sources(self) -> bool:
        """Both networks were warm-started from MNIST models within CONVERGED_GAP of each other's test accuracy."""
        a, b = (r.source_accuracy for r in self.rows)
        return a is not None and b is not None and abs(a - b) <= CONVERGED_GAP

    @property
    def equal_budgets(self) -> bool:
        caps, cnn = self.rows
        return caps.examples_seen == cnn.examples_seen

    @property
    def from_scratch(self) -> bool:
        """Neither network began from another model: both trained from their initial weights on the claim's data."""
        return all(r.from_scratch for r in self.rows)

    def statement(self) -> str:
        """The verdict in plain words."""
        caps, cnn = self.rows
        if self.leader is None:
            missing = " and ".join(f"the {NETWORKS[r.network]}" for r in self.rows if r.error is None)
            if self.claim == "affnist":  # a run's own file: only an export measures the affNIST-like set
                return (
                    f"No verdict yet: {missing} has not been measured on the affNIST-like set. "
                    "`python -m capsnet export RUN/best.safetensors FILE.safetensors` measures it and keeps the "
                    "figure in the file's header; put the file in checkpoints/ (the CNN in checkpoints/baselines/)."
                )
            return f"No verdict: {missing} states no test figure."
        assert caps.error is not None and cnn.error is not None
        ahead, behind = (caps, cnn) if caps.error < cnn.error else (cnn, caps)
        assert ahead.error is not None and behind.error is not None
        budget = (
            f"with the same budget of {caps.examples_seen:,} training examples each"
            if self.equal_budgets
            else f"with budgets of {caps.examples_seen:,} training examples (CapsNet) and {cnn.examples_seen:,} (CNN)"
        )
        starts = ", both from scratch (no warm start)" if self.from_scratch else ""
        sources = (caps.source_accuracy, cnn.source_accuracy)
        if caps.started_from != cnn.started_from and self.converged_sources:
            assert sources[0] is not None and sources[1] is not None  # converged_sources: both are stated
            starts = (  # unequal lengths of training, but both sources had stopped improving: said, with figures
                f", each warm-started from a converged MNIST model (the CapsNet's at {100 * sources[0]:.2f}% after "
                f"{caps.started_from:,} digits, the CNN's at {100 * sources[1]:.2f}% after {cnn.started_from:,})"
            )
        elif caps.started_from != cnn.started_from:  # the headline says so: part of the lead may be the head start
            figures = [f" ({100 * a:.2f}%)" if a is not None else "" for a in sources]
            starts = (
                f", from unequal starts (the CapsNet from a model that had seen {caps.started_from:,} MNIST digits"
                f"{figures[0]}, the CNN from one that had seen {cnn.started_from:,}{figures[1]})"
            )
        paper_ahead = (caps if caps.paper_error < cnn.paper_error else cnn).network
        gap, noise = 100 * (behind.error - ahead.error), 100 * self.interval
        # within the sampling interval neither is ahead: the first sentence must not name a leader the next denies
        lead = "neither network is ahead" if gap <= noise else f"the {NETWORKS[ahead.network]} is ahead"
        text = (
            f"Here {lead}, {budget}{starts}: {100 * ahead.error:.2f}% test error ({NETWORKS[ahead.network]}) "
            f"against {100 * behind.error:.2f}% ({NETWORKS[behind.network]}). "
        )
        if any(r.chosen_epoch and r.epochs and r.chosen_epoch < r.epochs for r in self.rows):  # not the last epochs
            kept = [f"{r.chosen_epoch} of {r.epochs} for the {NETWORKS[r.network]}" for r in self.rows]
            text += f"The epochs kept: {' and '.join(kept)}. "
        if gap <= noise:
            text += (
                f"The difference, {gap:.2f} points, is within the test set's 95% sampling interval (±{noise:.2f}): "
                "these figures put neither network ahead of the other, in the paper's order or the opposite. "
            )
        elif self.leader == paper_ahead:
            text += f"That is the paper's order, by {gap:.2f} points, beyond the test set's ±{noise:.2f}. "
        else:
            text += (
                f"The paper reports the opposite ({100 * caps.paper_error:.1f}% against {100 * cnn.paper_error:.1f}%, "
                f"fully trained): the claim is not reproduced by these models, by {gap:.2f} points, beyond the test "
                f"set's ±{noise:.2f}. "
            )
        if self.claim == "affnist":  # wherever its figures meet the paper's
            text += (
                "The paper's figures are on the real affNIST; the affNIST-like set here is a stand-in, easier than "
                "affNIST, so its errors are lower than the paper's for both networks. "
            )
        unequal = []
        searched = caps.lr_candidates and caps.lr_candidates == cnn.lr_candidates
        if caps.lr is not None and cnn.lr is not None and caps.lr != cnn.lr and not searched:
            unequal.append(f"learning rates differ ({caps.lr:g} and {cnn.lr:g})")
        if caps.started_from and caps.started_from == cnn.started_from:
            text += f"Both began from models that had seen {caps.started_from:,} single MNIST digits each. "
        if searched:
            text += (
                f"Each network's learning rate is the better of {' and '.join(f'{c:g}' for c in caps.lr_candidates)} "
                f"on its own validation {'pairs' if self.claim == 'multimnist' else 'digits'} "
                f"({caps.lr:g} for the CapsNet, {cnn.lr:g} for the CNN). "
            )
        if "test" in (caps.chosen_on, cnn.chosen_on):
            unequal.append("an epoch was chosen on test data, not on a validation split")
        if unequal:
            text += "Not yet equal terms: " + "; ".join(unequal) + "."
        return text.strip()


def _row(network: str, claim: str, path: Path) -> ClaimRow:
    config, info = read_checkpoint_info(path)
    found = network_of(config)
    if found.name != network:  # the two swapped, or the EM network given as "the CapsNet"
        raise CapsNetError(
            f"{path} holds {found.described}, where the claim's {NETWORKS[network]} is asked for"
            + (": the CapsNet comes first, then the CNN" if found.name in NETWORKS else "")
        )
    if info.dataset_name != CLAIM_DATASET[claim]:
        raise CapsNetError(
            f"{path} was trained on {info.title or info.dataset_name}; the {claim} claim is about models trained on "
            f"{CLAIM_DATASET[claim]}"
        )
    recipe = info.recipe or {}
    metrics_path = path.with_name(path.name.replace(".safetensors", ".metrics.jsonl"))
    if not metrics_path.is_file():
        metrics_path = path.with_name("metrics.jsonl")  # a run's folder
    records = [r for r in read_jsonl(metrics_path) if _sound(r)]  # an absurd line is left out, not believed
    # a warm-started model's metrics begin with its source's runs: the claim counts the last run's examples
    last = records[-1].get("run") if records else None
    before = [r for r in records if r.get("run") != last]
    records = [r for r in records if r.get("run") == last]
    started_from = sum(int(r.get("train_images") or 0) for r in before)
    curve, seen = [], 0
    for record in records:
        seen += int(record.get("train_images") or 0)
        accuracy = record.get("test_accuracy")
        if isinstance(accuracy, (int, float)):
            curve.append((seen, 1.0 - float(accuracy)))
    seconds = [x for x in (_number(r.get("seconds")) for r in records) if x is not None]
    if records and len(seconds) == len(records):
        hours: float | None = sum(seconds) / 3600
    else:  # no timed metrics beside it: the header's hours of its own run (to the epoch it holds)
        hours = None if info.training_seconds is None else info.training_seconds / 3600
    # the header's best epoch counts within its own run (the shipped metrics number on from the source's epochs)
    chosen = info.best_epoch if info.best_epoch and (not records or info.best_epoch <= len(records)) else None
    if not curve and info.epochs:  # no metrics beside it: its own run's epochs, of the recipe's size
        train_size, val_size = recipe.get("train_size"), recipe.get("val_size")
        per_epoch = (
            train_size
            if isinstance(train_size, int)
            else TRAINING_DIGITS - (val_size if isinstance(val_size, int) else 0)
        )
        seen = info.epochs * per_epoch
    lr = recipe.get("lr")
    accuracy, examples = info.test_accuracy, info.test_examples
    if claim == "affnist":  # the affNIST-like set's figure, which `capsnet.runs.export` keeps in a mnist-40 header
        accuracy, examples = _number(info.extra.get("affnist_like_accuracy")), info.extra.get("affnist_like_examples")
        accuracy = accuracy if accuracy is not None and 0 <= accuracy <= 1 else None  # NaN printed "nan%"
    return ClaimRow(
        network=network,
        paper_error=PAPER_ERROR[claim][network],
        error=None if accuracy is None else 1.0 - accuracy,
        test_examples=examples if isinstance(examples, int) else None,
        examples_seen=seen,
        hours=hours,
        epochs=len(records) if records else info.epochs,
        chosen_epoch=chosen,
        lr=float(lr) if isinstance(lr, (int, float)) else None,
        chosen_on="validation" if "val_accuracy" in (info.extra or {}) else "test",
        curve=tuple(curve),
        lr_candidates=_candidates((info.extra or {}).get("lr_candidates")),
        started_from=started_from,
        source_accuracy=_number((info.started_from or {}).get("test_accuracy")),
    )


def _number(value: object) -> float | None:
    """A header's finite number, read tolerantly: None for anything else (NaN and infinities included)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return None
    return float(value)


def _sound(record: object) -> bool:
    """Whether a metrics line can be believed: a whole epoch, and its images, seconds and accuracy (where it has
    them) whole, finite and in range (absurd lines gave absurd budgets)."""
    if not isinstance(record, dict) or not _whole(record.get("epoch"), 1, MAX_EPOCHS):
        return False
    images, seconds, accuracy = record.get("train_images"), record.get("seconds"), record.get("test_accuracy")
    return (
        (images is None or _whole(images, 0, MAX_EPOCH_IMAGES))
        and (seconds is None or (_number(seconds) is not None and 0 <= seconds <= MAX_EPOCH_SECONDS))
        and (accuracy is None or (_number(accuracy) is not None and 0 <= accuracy <= 1))
    )


def _whole(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _candidates(value: object) -> tuple[float, ...]:
    """A header's `lr_candidates`, read tolerantly: a list of numbers, else none."""
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return ()
    return tuple(sorted(float(v) for v in value))


def verdict(claim: str, capsnet: str | Path, cnn: str | Path) -> Verdict:
    """The verdict on `claim` ("multimnist" or "affnist") from a CapsNet and a CNN checkpoint (their headers and
    metrics); raises CheckpointError for an unreadable file."""
    if claim not in PAPER_ERROR:
        raise ValueError(f"unknown claim {claim!r}; choose from {', '.join(PAPER_ERROR)}")
    if Path(capsnet).resolve() == Path(cnn).resolve():
        raise CapsNetError(f"{capsnet} is given twice: the claim compares a CapsNet with a CNN, one file each")
    return Verdict(claim, (_row("capsnet", claim, Path(capsnet)), _row("cnn", claim, Path(cnn))))


def record_verdict(verdict: Verdict, path: str | Path) -> None:
    """Keep `verdict` as a JSON record at `path` (written atomically): its claim and both rows, every field. A file
    already there is replaced only when it is a claim record itself: CapsNetError, in one line, for any other (a
    file that is not ours is never written over)."""
    if Path(path).exists() or Path(path).is_symlink():
        try:
            read_record(path)
        except CapsNetError:
            raise CapsNetError(
                f"{path} exists and is not a claim record: it is left as it is (name another file)"
            ) from None
    rows = [dataclasses.asdict(r) for r in verdict.rows]
    write_json(path, {"version": RECORD_VERSION, "claim": verdict.claim, "rows": rows}, kind="json")  # a path named


def read_record(path: str | Path) -> Verdict:
    """The verdict kept by `record_verdict`; raises CapsNetError, in one line, for a file that is not one."""
    try:
        data = read_json(path)
        if not isinstance(data, dict) or data.get("version") != RECORD_VERSION or data.get("claim") not in PAPER_ERROR:
            raise ValueError(f"not a version-{RECORD_VERSION} claim record")
        rows = tuple(_row_from_dict(r) for r in data["rows"])
        if tuple(r.network for r in rows) != CLAIMED:
            raise ValueError("its rows must be a CapsNet, then a CNN")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CapsNetError(f"{path}: cannot read the claim record: {error}") from None
    return Verdict(data["claim"], rows)


def _row_from_dict(data: Any) -> ClaimRow:
    fields = {f.name for f in dataclasses.fields(ClaimRow)}
    if not isinstance(data, dict) or not set(data) <= fields:
        raise ValueError(f"a row must be an object with the fields {', '.join(sorted(fields))}")
    row = dict(data)
    row["curve"] = tuple((_count(seen, "curve"), _share(error, "curve")) for seen, error in row.get("curve", ()))
    row["lr_candidates"] = tuple(_positive(c, "lr_candidates") for c in row.get("lr_candidates", ()))
    # every value in its range: a record is a file anyone can edit (`error: "abc"`, `test_examples:
    # -5` or a curve of 1e400 crashed the Transform lens)
    if row.get("network") not in CLAIMED or row.get("chosen_on") not in ("validation", "test"):
        raise ValueError(f"a row's network must be one of {', '.join(CLAIMED)}, and chosen_on validation or test")
    for name in ("paper_error", "error", "source_accuracy"):
        if row.get(name) is not None or name == "paper_error":
            row[name] = _share(row.get(name), name)
    for name in ("test_examples", "epochs", "chosen_epoch"):
        if row.get(name) is not None:
            row[name] = _count(row[name], name, low=1)
    row["examples_seen"] = _count(row.get("examples_seen"), "examples_seen")
    row["started_from"] = _count(row.get("started_from", 0), "started_from")
    for name in ("hours", "lr"):
        if row.get(name) is not None:
            row[name] = _positive(row[name], name)
    return ClaimRow(**row)


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}"[:120])
    return float(value)


def _share(value: Any, name: str) -> float:
    number = _finite(value, name)
    if not 0 <= number <= 1:
        raise ValueError(f"{name} must lie from 0 to 1, got {number}")
    return number


def _positive(value: Any, name: str) -> float:
    number = _finite(value, name)
    if number <= 0:
        raise ValueError(f"{name} must be above 0, got {number}")
    return number


def _count(value: Any, name: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be a whole number of at least {low}, got {value!r}"[:120])
    return value
