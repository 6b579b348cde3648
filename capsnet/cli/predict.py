"""Predict the class of image files, and say when one looks like no class at all.

    python -m capsnet predict digit.png other.jpg [--checkpoint PATH] [--json]

Each PNG or JPEG is read as the model's task reads its data: for a digit or item model the dashboard's
preprocessing (crop, fit 20x20, centre by centre of mass, as MNIST was made); for a model of a folder of pictures
(or of CIFAR-10) as the folder's pictures are, at the model's side and channels (`picture_from_bytes`). Then the
network (any that redraws its input: the CapsNet, an EM network with a decoder). For each file: the class, the
class scores (capsule lengths, or EM activations), and the not-like-any-class flag with its score
(`capsnet.readings.novelty`; above 1 flagged). A model too weak to calibrate that check on answers without it, and
says so in one line. A file that cannot be read gets one line on stderr and the others go on; the exit code is 2
if any failed. The default checkpoint is the dashboard's: the shipped MNIST model.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch

from capsnet.checkpoints.checkpoint import Checkpoint, load_checkpoint
from capsnet.data.datasets import DATASETS
from capsnet.data.image_folder import picture_from_bytes
from capsnet.data.preprocess import as_model_input, preprocess_upload
from capsnet.data.tasks import task
from capsnet.device import pick_device
from capsnet.errors import ArgumentParser, CapsNetError, run_cli
from capsnet.files import read_regular_file
from capsnet.nn.registry import network_of
from capsnet.readings.novelty import NoCalibrationError, NoveltyThresholds, thresholds_for
from capsnet.runs.catalog import default_checkpoint, list_checkpoints

PROG = "python -m capsnet predict"


@dataclass
class Prediction:
    """What the network makes of one image file."""

    file: str
    predicted: int
    class_name: str
    lengths: list[float]
    not_like_any_class: bool | None  # None: the model is too weak to calibrate the check on
    novelty_score: float | None
    reconstruction_error: float


MAX_FILE_BYTES = 50_000_000  # an image file larger than this is refused before it is read
BATCH = 64  # files read and classified at a time


def read_input(checkpoint: Checkpoint, data: bytes, name: str) -> torch.Tensor:
    """One picture file's bytes as the model's task reads its data: (1, C, S, S) in [0, 1]. A digit or item model
    (28x28 grey) reads it as a drawing is read; any other model of single pictures (a folder's, CIFAR-10's) as its
    pictures were read, at its own side and channels."""
    dataset = checkpoint.info.dataset_name
    if dataset in DATASETS and task(dataset).takes_drawings:
        return as_model_input(preprocess_upload(data, name))
    config = checkpoint.config
    picture = picture_from_bytes(data, config.image_size, config.in_channels == 3, name)  # (C, S, S) uint8
    return picture[None].float().div(255)


def refusal(checkpoint: Checkpoint) -> str | None:
    """Why `checkpoint` reads no single picture file (a pair, a digit placed on a canvas, a crop), or None."""
    dataset = checkpoint.info.dataset_name
    read = task(dataset) if dataset in DATASETS else None
    if read is None or read.kind == "image":
        return None
    info = DATASETS[dataset]
    what = {  # a smallNORB model said "mnist-40"
        "pair": "pairs of digits (MultiMNIST)",
        "placed": "digits placed anywhere on it (mnist-40)",
        "crop": f"crops of {info.title}'s {info.noun}s",
    }[read.kind]
    side = checkpoint.config.image_size
    return f"{checkpoint.path} reads {side}x{side} {what}; predict reads one picture per file"


def predict_files(
    checkpoint: Checkpoint, thresholds: NoveltyThresholds | None, paths: list[str], batch_size: int = BATCH
) -> Iterator[Prediction | str]:
    """A `Prediction` for each readable file, else the one-line error for it, in the files' order; read and classified
    `batch_size` files at a time, so that memory stays that of one batch however many files are named (all of
    them in one batch took 4.2 GB for 2,000 images)."""
    for start in range(0, len(paths), batch_size):
        yield from _predict_batch(checkpoint, thresholds, paths[start : start + batch_size])


def _predict_batch(
    checkpoint: Checkpoint, thresholds: NoveltyThresholds | None, paths: list[str]
) -> list[Prediction | str]:
    results: list[Prediction | str] = []
    inputs, where = [], []
    for path in paths:
        try:
            inputs.append(read_input(checkpoint, read_regular_file(path, MAX_FILE_BYTES), path))
            where.append(len(results))
            results.append("")
        except (OSError, CapsNetError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            results.append(f"{path}: {reason}" if not str(reason).startswith(path) else str(reason))
    if not inputs:
        return results
    model = checkpoint.model
    x = torch.cat(inputs).to(next(model.parameters()).device)  # (B, C, S, S)
    with torch.inference_mode():
        out = model(x)
    errors = (out.reconstruction - x).square().flatten(1).sum(dim=1).cpu().numpy()  # (B,)
    lengths = out.scores.float().cpu().numpy()  # (B, K): capsule lengths, or an EM network's activations
    scores = None if thresholds is None else thresholds.score(errors, lengths.max(axis=1))
    names = checkpoint.class_names
    for b, slot in enumerate(where):
        predicted = int(out.prediction[b])
        results[slot] = Prediction(
            file=paths[slot],
            predicted=predicted,
            class_name=names[predicted],
            lengths=[round(float(v), 4) for v in lengths[b]],
            not_like_any_class=None if scores is None else bool(scores[b] > 1.0),
            novelty_score=None if scores is None else round(float(scores[b]), 3),
            reconstruction_error=round(float(errors[b]), 3),
        )
    return results


def describe(result: Prediction) -> str:
    lengths = " ".join(f"{v:.2f}" for v in result.lengths)
    if result.novelty_score is None:
        verdict = "not checked against its classes"
    elif result.not_like_any_class:
        verdict = f"NOT LIKE ANY CLASS (score {result.novelty_score:.2f})"
    else:
        verdict = f"like its class (score {result.novelty_score:.2f})"
    return f"{result.file}: {result.class_name} (|v| {max(result.lengths):.2f}) · {verdict} · lengths {lengths}"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog=PROG, description="Classify image files with a CapsNet checkpoint.")
    parser.add_argument("images", nargs="+", help="PNG or JPEG files, one digit (or item) each")
    parser.add_argument("--checkpoint", default=None, help="a .safetensors checkpoint (default: the shipped MNIST)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    parser.add_argument("--data-dir", default=None, help="the test set, for a checkpoint without thresholds")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    args = parser.parse_args(argv)

    def body() -> int:
        path = args.checkpoint
        if path is None:
            chosen = default_checkpoint(list_checkpoints())
            if chosen is None:
                raise CapsNetError("no checkpoint: pass --checkpoint, or train one (python -m capsnet train)")
            path = chosen.path
        checkpoint = load_checkpoint(path, device=pick_device(args.device))
        net = network_of(checkpoint.config)
        if not net.redraws(checkpoint.config):
            raise CapsNetError(f"{path} holds {net.described} that redraws nothing: predict needs a network that "
                               "redraws its input, to say when an image is like no class")  # fmt: skip
        refused = refusal(checkpoint)
        if refused is not None:
            raise CapsNetError(refused)
        thresholds: NoveltyThresholds | None
        try:
            thresholds = thresholds_for(checkpoint, args.data_dir)
        except NoCalibrationError as weak:  # answered all the same, without the check, and said once
            thresholds = None
            print(f"{PROG}: note: {weak}: the answers come without the not-like-any-class check", file=sys.stderr)
        results = predict_files(checkpoint, thresholds, args.images)
        failed = 0
        for result in results:
            if isinstance(result, str):
                failed += 1
                print(f"{PROG}: error: {' '.join(result.split())}", file=sys.stderr)
            elif args.json:
                print(json.dumps(asdict(result)))
            else:
                print(describe(result))
        return 2 if failed else 0

    return run_cli(body, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
