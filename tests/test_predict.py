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
