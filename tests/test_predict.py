"""The prediction CLI on the shipped MNIST model: real test digits, things that are no digit, files that are no image."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_support import capsnet
from PIL import Image, ImageDraw

from capsnet.data.datasets import load_dataset

CHECKPOINT = Path(__file__).resolve().parents[1] / "checkpoints" / "mnist.safetensors"


def predict(*args: str) -> subprocess.CompletedProcess[str]:
    return capsnet("predict", *args, "--checkpoint", str(CHECKPOINT))


@pytest.fixture
def files(data_dir: Path, tmp_path: Path) -> dict[str, Path]:
    test = load_dataset("mnist", train=False)
    made = {}
    for index in (0, 1):  # a 7 and a 2
        made[f"digit{index}"] = tmp_path / f"test-{index}.png"
        Image.fromarray(test.data[index].numpy()).save(made[f"digit{index}"])
    made["noise"] = tmp_path / "noise.png"
    Image.fromarray((np.random.default_rng(0).random((100, 100)) * 255).astype(np.uint8)).save(made["noise"])
    made["x"] = tmp_path / "letter-x.jpg"
    letter = Image.new("L", (200, 200), 255)  # dark ink on white paper, as a photo of a letter would be
    ImageDraw.Draw(letter).line([(30, 30), (170, 170)], fill=0, width=14)
    ImageDraw.Draw(letter).line([(170, 30), (30, 170)], fill=0, width=14)
    letter.save(made["x"])
    made["h"] = tmp_path / "letter-h.png"
    letter = Image.new("L", (200, 200), 255)
    for stroke in ([(50, 30), (50, 170)], [(150, 30), (150, 170)], [(50, 100), (150, 100)]):
        ImageDraw.Draw(letter).line(stroke, fill=0, width=14)
    letter.save(made["h"])
    made["text"] = tmp_path / "notes.png"
    made["text"].write_text("not an image")
    made["missing"] = tmp_path / "missing.png"
    return made


def test_predictions_with_the_not_like_any_class_flag(files: dict[str, Path]) -> None:
    names = ("digit0", "noise", "digit1", "x", "h")
    result = predict(*(str(files[k]) for k in names), "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["file"] for r in rows] == [str(files[k]) for k in names]
    seven, noise, two, letter, h = rows
    assert (seven["class_name"], two["class_name"]) == ("7", "2")
    assert len(seven["lengths"]) == 10 and max(seven["lengths"]) == seven["lengths"][7]
    assert not seven["not_like_any_class"] and not two["not_like_any_class"] and seven["novelty_score"] < 1
    assert noise["not_like_any_class"] and noise["novelty_score"] > 1  # noise looks like no digit
    assert letter["not_like_any_class"] and h["not_like_any_class"]  # nor do the letters X and H (the page says so)


def test_bad_files_get_one_line_each_and_the_rest_go_on(files: dict[str, Path]) -> None:
    result = predict(str(files["text"]), str(files["digit0"]), str(files["missing"]))
    assert result.returncode == 2
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 2 and "Traceback" not in result.stderr
    assert "notes.png is not a readable image" in errors[0] and "missing.png: No such file or directory" in errors[1]
    (line,) = result.stdout.strip().splitlines()  # the readable one is still read
    assert line.startswith(f"{files['digit0']}: 7 (|v| ") and "like its class" in line


def _colour_model(root: Path, calibrated: bool) -> Path:
    """An untrained tiny CapsNet of a two-class colour folder at 24x24 (its pictures in train/ and test/), with
    novelty thresholds in its header or without."""
    import dataclasses

    import torch

    from capsnet.checkpoints.checkpoint import save_checkpoint
    from capsnet.nn.capsnet import CapsNet
    from capsnet.nn.config import CapsNetConfig

    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for name in ("red", "blue"):
            (root / split / name).mkdir(parents=True)
            for n in range(2):
                pixels = (rng.random((30, 30, 3)) * 255).astype(np.uint8)
                Image.fromarray(pixels, mode="RGB").save(root / split / name / f"{n}.png")
    torch.manual_seed(0)
    config = dataclasses.replace(CapsNetConfig.preset("tiny"), in_channels=3, image_size=24, num_classes=2)
    info: dict[str, object] = {"dataset": f"{root}@24", "class_names": ["blue", "red"]}
    if calibrated:
        info["novelty"] = {"reconstruction_error": 1000.0, "length": 1e-3, "examples": 50}
    return save_checkpoint(root / "model.safetensors", CapsNet(config), info)


def _photo(path: Path) -> Path:
    Image.fromarray((np.random.default_rng(1).random((60, 40, 3)) * 255).astype(np.uint8), mode="RGB").save(path)
    return path


def test_a_colour_folder_model_reads_a_picture_as_its_folder_was_read(tmp_path: Path) -> None:
    """A colour folder's model reads a photo in colour at its own side, as its pictures were read in training."""
    model, photo = _colour_model(tmp_path / "folder", calibrated=True), _photo(tmp_path / "photo.png")
    done = capsnet("predict", "--checkpoint", model, photo, "--json")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert row["class_name"] in ("blue", "red") and len(row["lengths"]) == 2
    assert row["not_like_any_class"] is not None and row["novelty_score"] > 0


def test_a_model_too_weak_to_calibrate_answers_without_the_novelty_check_and_says_so(tmp_path: Path) -> None:
    """An untrained model classifies too few test pictures right to calibrate the not-like-any-class check on: it
    answers all the same, says so in one line, and its answers carry no check."""
    model, photo = _colour_model(tmp_path / "folder", calibrated=False), _photo(tmp_path / "photo.png")
    done = capsnet("predict", "--checkpoint", model, photo)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == (
        f"python -m capsnet predict: note: {model}: too few test images are classified right to calibrate on: the "
        "answers come without the not-like-any-class check"
    )
    (line,) = done.stdout.strip().splitlines()
    assert line.startswith(f"{photo}: ") and "not checked against its classes" in line, line
    rows = capsnet("predict", "--checkpoint", model, photo, "--json").stdout.splitlines()
    assert [json.loads(r)["not_like_any_class"] for r in rows] == [None]
