"""The model card's tools run on the shipped checkpoints (a refactor once broke them unnoticed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("checkpoint", ["checkpoints/mnist.safetensors", "checkpoints/baselines/mnist-cnn.safetensors"])
def test_model_card_tables_print_the_headline_and_tables(checkpoint: str) -> None:
    result = subprocess.run(
        [sys.executable, "docs/model_card_tables.py", checkpoint, "--every", "10"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "- Test accuracy of the shipped file (float16 weights" in result.stdout
    assert result.stdout.count("| class | accuracy | correct |") == 1
    assert "| epoch | run | train loss |" in result.stdout and "(best)" in result.stdout
