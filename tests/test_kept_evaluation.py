"""An evaluation kept once per checkpoint (capsnet.kept_evaluation): exact round trip, refusals of whatever is not
this checkpoint's, the command line's --keep, and the dashboard's Evaluate reading it instead of measuring."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import streamlit as st
import torch
from cli_support import capsnet

from capsnet import kept_evaluation
from capsnet.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from capsnet.data.tasks import read_test_set
from capsnet.evaluation import Evaluation, evaluate, merge_evaluations
from capsnet.nn.registry import network

FIELDS = ("loss", "margin_loss", "reconstruction_loss", "correct", "total", "loss_name")
TENSORS = ("confusion", "labels", "predictions", "lengths", "dimension_mean", "dimension_std", "reconstruction_errors")


def _same(kept: Evaluation | None, result: Evaluation) -> None:
    assert kept is not None
    for name in FIELDS:
        assert getattr(kept, name) == getattr(result, name), name
    for name in TENSORS:
        mine, theirs = getattr(kept, name), getattr(result, name)
        assert (mine is None) == (theirs is None), name
        if theirs is not None:
            assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), name


def _checkpoint(folder: Path, name: str, preset: str = "tiny", seed: int = 0) -> Path:
    torch.manual_seed(seed)
    config = network(name).preset(preset)
    if name == "em":
        config = network(name).preset(preset, decoder_hidden=(32,))
    return save_checkpoint(folder / f"{name}.safetensors", network(name).build(config), {"dataset": "mnist"})


@pytest.mark.parametrize("name", ["capsnet", "em", "cnn"])
def test_a_kept_evaluation_is_the_evaluation_exactly(data_dir: Path, tmp_path: Path, name: str) -> None:
    """Each family's evaluation of 40 test digits comes back from its entry equal to the last bit: losses, labels,
    predictions, class scores, the confusion matrix, and the pose statistics and errors of a network that redraws."""
    path = _checkpoint(tmp_path, name)
    test = read_test_set("mnist").first(40)
    result = evaluate(load_checkpoint(path).model, test.images, test.labels)
    kept = kept_evaluation.keep(path, result, "mnist", ship=True)
    assert kept == tmp_path / f"{name}.evaluation.json"
    _same(kept_evaluation.read_kept(path, "mnist", 40), result)
    assert merge_evaluations([kept_evaluation.read_kept(path, "mnist", 40)]).accuracy == result.accuracy  # type: ignore[list-item]


def test_an_entry_that_is_not_this_checkpoints_is_never_trusted(data_dir: Path, tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, "capsnet")
    test = read_test_set("mnist").first(30)
    result = evaluate(load_checkpoint(path).model, test.images, test.labels)
    kept = kept_evaluation.keep(path, result, "mnist", ship=True)
    assert kept_evaluation.read_kept(path, "mnist", 30) is not None
    assert kept_evaluation.read_kept(path, "mnist", 31) is None  # another size
    assert kept_evaluation.read_kept(path, "fashion-mnist", 30) is None  # another dataset
    entry = json.loads(kept.read_text())
    for change in (
        {"format": 2},
        {"labels": entry["labels"][:-1]},  # ragged: 29 labels for 30 images
        {"predictions": [10] * 30},  # no such class
        {"lengths": [[0.5]] * 30},  # one class
        {"lengths": "many"},
        {"dimension_mean": entry["dimension_mean"][:3]},  # the pose statistics of 3 classes for 10
        {"loss": "low"},
    ):
        kept.write_text(json.dumps(entry | change))
        assert kept_evaluation.read_kept(path, "mnist", 30) is None, change
    kept.write_text(json.dumps(entry))
    assert kept_evaluation.read_kept(path, "mnist", 30) is not None
    other = _checkpoint(tmp_path / "other", "capsnet", "tiny")  # same network, other bytes: another file's entry
    shutil.copy(kept, other.with_suffix(".evaluation.json"))
    with torch.no_grad():
        model = load_checkpoint(other).model
        next(model.parameters()).add_(1.0)
    save_checkpoint(other, model, {"dataset": "mnist"})
    assert kept_evaluation.read_kept(other, "mnist", 30) is None


def test_the_command_line_keeps_the_evaluation_beside_the_checkpoint(data_dir: Path, tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, "em")
    done = capsnet("evaluate", path, "--limit", "25", "--keep", "--device", "cpu", "--json")
    assert done.returncode == 0, done.stderr
    assert f"kept in {tmp_path / 'em.evaluation.json'}" in done.stderr
    kept = kept_evaluation.read_kept(path, "mnist", 25)
    assert kept is not None and kept.accuracy == json.loads(done.stdout)["accuracy"]
    for other in (["--routing-iterations", "1"], ["--dataset", "fashion-mnist"]):
        refused = capsnet("evaluate", path, "--limit", "25", "--keep", *other)
        assert refused.returncode != 0 and "--keep keeps the evaluation the dashboard shows" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1


def test_the_evaluate_page_reads_a_kept_evaluation_instead_of_measuring(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With its entry kept, the dashboard's first 1,000 images of a model are read, not measured
    (the paper-sized EM network took about 30 s); without one they are measured once and kept in the user's store."""
    from dashboard import models

    path = _checkpoint(tmp_path, "em")
    test = read_test_set("mnist").first(1000)
    result = evaluate(load_checkpoint(path).model, test.images, test.labels)  # as the page reads: 500 a batch
    kept_evaluation.keep(path, result, "mnist", ship=True)
    st.cache_data.clear()
    model = models.Model(load_checkpoint(path), "kept")

    def measured(*args: object, **kwargs: object) -> Evaluation:
        raise AssertionError("the kept evaluation should have been read")

    monkeypatch.setattr(models, "evaluate", measured)
    _same(model.evaluation(1000), result)
    path.with_suffix(".evaluation.json").unlink()  # none kept: measured once, and kept in the user's store
    monkeypatch.undo()
    st.cache_data.clear()
    _same(models.Model(load_checkpoint(path), "measured").evaluation(1000), result)
    assert (
        kept_evaluation.read_kept(path, "mnist", 1000) is not None and not path.with_suffix(".evaluation.json").exists()
    )


def test_the_evaluate_page_says_how_long_a_measurement_takes_before_it_starts(data_dir: Path, tmp_path: Path) -> None:
    """What is kept takes no time; what is left is said at the rate of 16 test images timed here."""
    from dashboard import models

    # weights of its own: the store is keyed by the file's SHA-256, and the test before keeps an evaluation of the
    # seed-0 file in the session's store (the same bytes whenever both are saved within one second)
    path = _checkpoint(tmp_path, "em", seed=1)
    st.cache_data.clear()
    model = models.Model(load_checkpoint(path), "timed")
    whole = model.evaluation_seconds(1000)
    assert whole > 0 and model.evaluation_seconds(2000) == pytest.approx(2 * whole)
    test = read_test_set("mnist").first(1000)
    kept_evaluation.keep(path, evaluate(model.net, test.images, test.labels, batch_size=250), "mnist", ship=True)
    assert model.evaluation_seconds(1000) == 0.0 and model.evaluation_seconds(500) == pytest.approx(whole / 2)
    assert model.evaluation_seconds(3000) == pytest.approx(2 * whole)
