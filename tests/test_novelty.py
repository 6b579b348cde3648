"""Not like any class: thresholds from the right test images, tolerant reading, a cache for older checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from capsnet.checkpoints import measurements
from capsnet.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from capsnet.evaluation import evaluate
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.readings import novelty
from capsnet.readings.novelty import NoveltyThresholds

REPO = Path(__file__).resolve().parents[1]


def test_thresholds_are_the_quantiles_of_the_right_examples() -> None:
    torch.manual_seed(0)
    model = CapsNet(CapsNetConfig.preset("tiny")).eval()
    images = torch.rand(300, 1, 28, 28)
    with torch.no_grad():
        labels = model(images).prediction.clone()
    labels[:40] = (labels[:40] + 1) % 10  # 40 wrong, 260 right
    result = evaluate(model, images, labels)
    made = NoveltyThresholds.from_evaluation(result, quantile=0.9)
    right = result.right.numpy()
    errors, lengths = result.reconstruction_errors.numpy(), result.winner_lengths.numpy()
    assert made.examples == 260
    assert made.reconstruction_error == pytest.approx(np.quantile(errors[right], 0.9))
    assert made.length == pytest.approx(np.quantile(lengths[right], 0.1))
    flagged = made.flagged(errors, lengths)
    assert made.flagged_right == pytest.approx(flagged[right].mean()) and 0.1 <= made.flagged_right <= 0.2
    assert made.flagged_wrong == pytest.approx(flagged[~right].mean())
    assert made.score(made.reconstruction_error * 2, 1.0) == pytest.approx(2.0)
    assert made.score(0.0, made.length / 3) == pytest.approx(3.0)
    assert NoveltyThresholds.from_evaluation(evaluate(model, images[:10], labels[:10])) is None  # too few to tell


def test_thresholds_are_read_tolerantly() -> None:
    good = NoveltyThresholds(reconstruction_error=20.0, length=0.6, examples=9000)
    assert NoveltyThresholds.from_dict(good.to_dict()) == good
    for bad in (None, [], {"length": 0.5}, {"reconstruction_error": "x", "length": 0.5},
                {"reconstruction_error": -1.0, "length": 0.5}, {"reconstruction_error": float("nan"), "length": 1}):  # fmt: skip
        assert NoveltyThresholds.from_dict(bad) is None


@pytest.mark.slow
def test_an_older_checkpoint_is_calibrated_once_then_cached(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(measurements.CACHE_ENV, str(tmp_path / "cache"))
    loaded = load_checkpoint(tiny_checkpoint)
    assert NoveltyThresholds.from_dict(loaded.info.novelty) is not None  # the trainer stored them
    assert novelty.thresholds_for(loaded) == NoveltyThresholds.from_dict(loaded.info.novelty)
    older = save_checkpoint(tmp_path / "old.safetensors", loaded.model, loaded.info.replace(novelty=None))
    made = novelty.thresholds_for(load_checkpoint(older))  # computed on the real test set
    assert 0 < made.flagged_right <= 2 * (1 - made.quantile) + 0.001 and made.examples > 8000  # two thresholds
    assert len(list((tmp_path / "cache" / "measurements").glob("*.novelty.json"))) == 1

    def no_evaluation(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached thresholds should have been used")

    monkeypatch.setattr("capsnet.readings.novelty.evaluate_set", no_evaluation)
    assert novelty.thresholds_for(load_checkpoint(older)) == made


def test_errors_are_those_of_the_winners_reconstruction() -> None:
    """What the Draw page and the CLI score: the input redrawn from the winning capsule, also for a misclassified one."""
    torch.manual_seed(2)
    model = CapsNet(CapsNetConfig.preset("tiny")).eval()
    images = torch.rand(40, 1, 28, 28)
    with torch.no_grad():
        out = model(images)
        labels = out.prediction.clone()
        labels[:15] = (labels[:15] + 3) % 10  # 15 wrong
        winners = model.decode(out.poses, out.prediction)
    expected = (winners - images).square().flatten(1).sum(dim=1)
    torch.testing.assert_close(evaluate(model, images, labels, batch_size=16).reconstruction_errors, expected)


def test_the_notice_names_the_test_that_tripped() -> None:
    from capsnet.readings.novelty import NoveltyThresholds
    from dashboard import novelty_texts

    thresholds = NoveltyThresholds(reconstruction_error=10.0, length=0.6)
    assert thresholds.tripped(12.0, 0.9) == ("reconstruction",)
    assert thresholds.tripped(5.0, 0.3) == ("length",)
    assert thresholds.tripped(12.0, 0.3) == ("reconstruction", "length")
    assert thresholds.tripped(5.0, 0.9) == ()
    far = novelty_texts.not_like_any_class("digit", 1.2, 12.0, 0.9, "MNIST", thresholds)
    assert "reconstruction is far" in far and "past the threshold 10.0" in far and "short" not in far
    short = novelty_texts.not_like_any_class("digit", 2.0, 5.0, 0.3, "MNIST", thresholds)
    assert "winning capsule is short" in short and "under the threshold 0.60" in short and "far from" not in short


@pytest.mark.slow
def test_the_shipped_em_model_flags_what_the_help_text_says_it_flags(data_dir: Path) -> None:
    """The EM model's not-like-any-class test, from its header's thresholds (its decoder's redraw
    and its class activation), on drawn inputs through the Draw page's preprocessing: a dot, a scribble, an X, an H,
    a smiley and grey noise are flagged; an A and a bar pass (as the help text says); test digits pass."""
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.data.non_digits import non_digits
    from capsnet.data.tasks import read_test_set
    from capsnet.readings.explain_em import explain_em

    checkpoint = load_checkpoint(REPO / "checkpoints" / "mnist-em.safetensors")
    thresholds = NoveltyThresholds.from_dict(checkpoint.info.novelty)
    assert thresholds is not None

    def score(image: np.ndarray) -> float:
        reading = explain_em(checkpoint.model, image)
        assert reading.reconstruction_error is not None
        return float(thresholds.score(reading.reconstruction_error, float(reading.activations[reading.prediction])))

    drawn = non_digits()
    passing = {name: drawn.pop(name) for name in ("an A", "a bar")}
    for name, image in drawn.items():
        assert score(image) > 1.0, name
    passing |= {f"test digit {i}": image[0].numpy() for i, image in enumerate(read_test_set("mnist").first(5).images)}
    for name, image in passing.items():
        assert score(image) <= 1.0, name
