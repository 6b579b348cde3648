"""The shipped checkpoints' manifest (`checkpoints/manifest.json`): what each file is, proved once.

The export measures a file on its whole test set (the figures in its header) and then writes the file's
entry here: its SHA-256, its size, and its answers on the first 1,000 test examples. A check then needs
no full evaluation to prove that a shipped file is still what was measured: its bytes hash to the entry's
SHA-256, and today's code, reading those bytes, gives the same answers on the first 1,000 examples. Only
a file whose bytes changed needs measuring again, and the export does that.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from capsnet.checkpoints.checkpoint import Checkpoint, load_checkpoint
from capsnet.data.tasks import read_test_set
from capsnet.errors import CapsNetError
from capsnet.evaluation import Evaluation, evaluate_set
from capsnet.files import atomic_path, file_sha256, read_json
from capsnet.nn.registry import NETWORK_NAMES

MANIFEST_NAME = "manifest.json"
FIRST = 1000  # the test examples whose answers an entry keeps
ALLOWED_CHANGES = 2  # answers on the first 1,000 that another CPU's rounding may flip (a near-tie), at most


class ManifestError(CapsNetError):
    """A shipped file does not match its manifest entry, or the manifest cannot be read."""


@dataclass(frozen=True)
class ManifestEntry:
    """One shipped file: its bytes, what it is, and its answers on the first `FIRST` test examples."""

    sha256: str
    bytes: int
    network: str
    dataset: str
    test_accuracy: float  # the header's figure, measured by the export on the whole test set
    answers: str  # one class index per example (a digit), or a pair's two classes: "37" is 3 and 7

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ManifestEntry:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


def first_answers(checkpoint: Checkpoint, data_dir: str | os.PathLike | None = None, examples: int = FIRST) -> str:
    """What `checkpoint` answers on the first `examples` (`FIRST`) examples of its test set."""
    test = read_test_set(checkpoint.info.dataset_name, data_dir).first(examples)
    result = evaluate_set(checkpoint.model, test)
    if isinstance(result, Evaluation):
        answers = "".join(str(k) for k in result.predictions.tolist())
    else:
        assert result.answers is not None  # a pair evaluation keeps them
        answers = "".join(f"{a}{b}" for a, b in result.answers.tolist())
    return answers


def read_manifest(folder: str | os.PathLike) -> dict[str, ManifestEntry]:
    """The entries of `folder`'s manifest, keyed by each file's path inside `folder` ({} when there is none)."""
    path = Path(folder) / MANIFEST_NAME
    try:
        data = read_json(path)  # a regular file, bounded in size and depth: a FIFO, a link to /dev/zero, [[[... refused
        return {name: ManifestEntry.from_dict(entry) for name, entry in data["files"].items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, CapsNetError) as error:
        raise ManifestError(f"{path} is damaged ({type(error).__name__}): export the shipped files again") from None


def record(
    path: str | os.PathLike, folder: str | os.PathLike, data_dir: str | os.PathLike | None = None
) -> ManifestEntry:
    """Write `path`'s entry (a file inside `folder`, just exported and measured) into `folder`'s manifest."""
    path, folder = Path(path), Path(folder)
    name = path.resolve().relative_to(folder.resolve()).as_posix()
    checkpoint = load_checkpoint(path, device="cpu", networks=NETWORK_NAMES)
    info = checkpoint.info
    entry = ManifestEntry(
        sha256=file_sha256(path),
        bytes=path.stat().st_size,
        network=checkpoint.network,
        dataset=info.dataset_name,
        test_accuracy=float(info.test_accuracy or 0.0),
        answers=first_answers(checkpoint, data_dir),
    )
    entries = read_manifest(folder)
    entries[name] = entry
    with atomic_path(folder / MANIFEST_NAME) as tmp:
        text = json.dumps({"first": FIRST, "files": {k: asdict(v) for k, v in sorted(entries.items())}}, indent=1)
        tmp.write_text(text + "\n", encoding="utf-8")
    return entry


def check(
    path: str | os.PathLike,
    folder: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    examples: int = FIRST,
) -> ManifestEntry:
    """Prove that `path` is the file its entry describes and reads as it did on the first `examples` of the
    `FIRST` test examples its entry keeps (all of them by default); ManifestError (one line) if not."""
    if not 0 < examples <= FIRST:
        raise ValueError(f"examples must be in 1..{FIRST}, got {examples}")
    path, folder = Path(path), Path(folder)
    name = path.resolve().relative_to(folder.resolve()).as_posix()
    entry = read_manifest(folder).get(name)
    if entry is None:
        raise ManifestError(f"{name} has no entry in {folder / MANIFEST_NAME}: ship it with `python -m capsnet export`")
    if path.stat().st_size != entry.bytes or file_sha256(path) != entry.sha256:
        raise ManifestError(
            f"{name} is not the file its manifest entry measured (SHA-256 differs): export it again with "
            "`python -m capsnet export`, which measures it on the whole test set and writes its entry"
        )
    checkpoint = load_checkpoint(path, device="cpu", networks=NETWORK_NAMES)
    network, dataset = checkpoint.network, checkpoint.info.dataset_name
    if (network, dataset) != (entry.network, entry.dataset):
        raise ManifestError(
            f"{name} reads as a {network} on {dataset}; its entry says {entry.network} on {entry.dataset}"
        )
    answers = first_answers(checkpoint, data_dir, examples)
    width = len(entry.answers) // FIRST or 1  # a digit, or a pair's two
    kept = entry.answers[: examples * width]
    changed = sum(a != b for a, b in zip(_chunks(answers, width), _chunks(kept, width)))
    if len(answers) != len(kept) or changed > ALLOWED_CHANGES:
        raise ManifestError(
            f"{name}: today's code changes {changed} of its answers on the first {examples} test examples "
            f"(at most {ALLOWED_CHANGES} may differ by rounding): the network no longer reads its weights as it did"
        )
    return entry


def _chunks(text: str, width: int) -> list[str]:
    return [text[k : k + width] for k in range(0, len(text), width)]
