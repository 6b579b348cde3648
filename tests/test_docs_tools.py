"""The model card's tools run on the shipped checkpoints (a refactor once broke them unnoticed)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("checkpoint", ["checkpoints/mnist.safetensors", "checkpoints/baselines/mnist-cnn.safetensors"])
def test_model_card_tables_print_the_headline_and_tables(
    checkpoint: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python docs/model_card_tables.py CHECKPOINT --every 10`, run as __main__ in this process (it only reads a
    header and a log: a process of its own would spend its seconds importing torch)."""
    script = str(REPO / "docs" / "model_card_tables.py")
    monkeypatch.setattr("sys.argv", [script, str(REPO / checkpoint), "--every", "10"])
    runpy.run_path(script, run_name="__main__")
    out = capsys.readouterr().out
    assert "- Test accuracy of the shipped file (float16 weights" in out
    assert out.count("| class | accuracy | correct |") == 1
    assert "| epoch | run | train loss |" in out and "(best)" in out
