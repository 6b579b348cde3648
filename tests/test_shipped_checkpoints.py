"""The trained models in checkpoints/: they load, reach the issue's floors on the full real test
sets, and score what their headers say (to 0.05%)."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.data.datasets import as_tensors, load_dataset
from capsnet.evaluation import evaluate
from capsnet.nn.config import CapsNetConfig
from capsnet.readings.novelty import NoveltyThresholds

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
# The lowest accuracy a shipped model may have: issue 4's floors (its targets, 99.70% and
# 93.6%, are in checkpoints/README.md with what the shipped models reach).
FLOORS = {"mnist": 0.9950, "fashion-mnist": 0.9150}

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_shipped_checkpoint_accuracy(name: str, data_dir: Path) -> None:
    path = CHECKPOINTS / f"{name}.safetensors"
    assert path.is_file(), f"checkpoints/{path.name} is missing: the project ships it"
    checkpoint = load_checkpoint(path)
    info = checkpoint.info
    assert info.dataset == name
    assert checkpoint.config == CapsNetConfig.preset("paper")  # the paper's architecture, 3 routing iterations
    assert checkpoint.model.num_parameters() == 8_215_568
    images, labels = as_tensors(load_dataset(name, train=False))
    result = evaluate(checkpoint.model, images, labels, batch_size=250)
    assert result.total == 10_000
    assert result.accuracy >= FLOORS[name], f"{name}: {result.accuracy:.4f} below the floor {FLOORS[name]}"
    assert result.accuracy == pytest.approx(info.test_accuracy, abs=0.0005)
    # float16 storage is allowed if it keeps the float32 model's accuracy to 0.02%
    assert abs(info.test_accuracy - info.test_accuracy_before_export) <= 0.0002 + 1e-9
    assert len(info.per_class_accuracy) == 10 and len(info.dimension_std) == 10
    # the not-like-any-class thresholds are in the header and almost never flag a test image read right
    thresholds = NoveltyThresholds.from_dict(info.novelty)
    assert thresholds is not None and thresholds.examples == result.correct
    flagged = thresholds.flagged(result.reconstruction_errors.numpy(), result.winner_lengths.numpy())
    assert flagged[result.right.numpy()].mean() <= 0.01 and flagged[result.right.numpy()].mean() == pytest.approx(
        thresholds.flagged_right, abs=0.002
    )


def test_shipped_multimnist_checkpoint(data_dir: Path) -> None:
    """The paper's network on MultiMNIST: its header's figure holds on the first 2,000 of the test pairs it was measured on."""
    from capsnet.data.datasets import stored_tensors
    from capsnet.data.multimnist import Pairs, test_pairs
    from capsnet.evaluation import evaluate_pairs

    path = CHECKPOINTS / "multimnist.safetensors"
    assert path.is_file(), "checkpoints/multimnist.safetensors is missing: the project ships it"
    checkpoint = load_checkpoint(path)
    info = checkpoint.info
    assert info.dataset == "multimnist" and checkpoint.config == CapsNetConfig.preset(
        "multimnist", primary_scale=1.0, init="torch"
    )  # warm-started from the shipped MNIST model, whose scales it keeps
    assert checkpoint.model.num_parameters() == 11_361_808
    assert info.test_examples >= 10_000 and info.weights_dtype == "float16"
    assert abs(info.test_accuracy - info.test_accuracy_before_export) <= 0.002
    digits, labels = stored_tensors(load_dataset("mnist", train=False))
    pairs = test_pairs(labels)
    first = Pairs(pairs.first[:2000], pairs.second[:2000], pairs.offsets[:2000])  # 200 test digits, 10 partners each
    result = evaluate_pairs(checkpoint.model, digits, labels, first)
    # 2,000 pairs: within 4 standard errors of the header's figure on 10,000 or more
    spread = 4 * (info.test_accuracy * (1 - info.test_accuracy) / 2000) ** 0.5
    assert abs(result.accuracy - info.test_accuracy) <= spread, (result.accuracy, info.test_accuracy)


@pytest.mark.parametrize("name", ["mnist", "multimnist"])
def test_shipped_cnn_baselines(name: str, data_dir: Path) -> None:
    """The CNN baselines the dashboard compares with: the paper's design with two pools, under 17 MB, as stated."""
    from capsnet.data.datasets import stored_tensors
    from capsnet.data.multimnist import Pairs, test_pairs
    from capsnet.evaluation import evaluate_pairs
    from capsnet.nn.cnn import CNNConfig

    path = CHECKPOINTS / "baselines" / f"{name}-cnn.safetensors"
    assert path.is_file(), f"checkpoints/baselines/{path.name} is missing: the project ships it"
    assert path.stat().st_size < 17e6
    checkpoint = load_checkpoint(path, architectures=("cnn",))
    info = checkpoint.info
    pairs = name == "multimnist"
    assert info.dataset == name and info.weights_dtype == "float16" and info.recipe["model"] == "cnn"
    assert checkpoint.config == CNNConfig.preset("multimnist" if pairs else "paper")
    assert checkpoint.model.num_parameters() == (5_930_770 if pairs else 4_587_282)
    if pairs:
        digits, labels = stored_tensors(load_dataset("mnist", train=False))
        every = test_pairs(labels)
        result = evaluate_pairs(checkpoint.model, digits, labels, Pairs(every.first[:2000], every.second[:2000],
                                                                        every.offsets[:2000]))  # fmt: skip
        spread = 4 * (info.test_accuracy * (1 - info.test_accuracy) / 2000) ** 0.5
        assert abs(result.accuracy - info.test_accuracy) <= spread, (result.accuracy, info.test_accuracy)
        return
    images, labels = as_tensors(load_dataset(name, train=False))
    result = evaluate(checkpoint.model, images, labels, batch_size=500)
    assert result.total == 10_000 and result.accuracy == pytest.approx(info.test_accuracy, abs=0.0005)
    assert result.accuracy >= 0.98  # a working baseline, whatever its epochs


@pytest.mark.parametrize("network", ["capsnet", "cnn"])
def test_shipped_affine_pair(network: str, data_dir: Path) -> None:
    """The pair for the paper's affine claim, trained on MNIST digits moved on 40x40: the affNIST-like figure in
    its header (which the Transform lens's verdict reads) holds on the first 1,000 affNIST-like test digits."""
    from capsnet.nn.cnn import CNNConfig
    from capsnet.readings import affnist

    path = CHECKPOINTS / ("mnist-40.safetensors" if network == "capsnet" else "baselines/mnist-40-cnn.safetensors")
    assert path.is_file(), f"checkpoints/{path.relative_to(CHECKPOINTS)} is missing: the project ships it"
    checkpoint = load_checkpoint(path, architectures=(network,))
    info = checkpoint.info
    assert info.dataset == affnist.TRAINING_SET and info.weights_dtype == "float16" and path.stat().st_size < 28e6
    if network == "capsnet":  # warm-started from the shipped MNIST model: its config, on 40x40
        assert checkpoint.config == CapsNetConfig.preset("paper", image_size=40)
        assert checkpoint.model.num_parameters() == 13_475_648
    else:
        assert checkpoint.config == CNNConfig.preset("paper", image_size=40)
        assert checkpoint.model.num_parameters() == 6_728_466
    assert info.extra["affnist_like_examples"] == 10_000 and "val_accuracy" in info.extra
    assert info.extra["moved_mnist_accuracy"] == pytest.approx(info.test_accuracy)
    result = affnist.measure(checkpoint.model, limit=1000)
    expected = info.extra["affnist_like_accuracy"]
    spread = 4 * (expected * (1 - expected) / 1000) ** 0.5  # 1,000 digits: within 4 standard errors
    assert abs(result.affnist_like_accuracy - expected) <= spread, (result.affnist_like_accuracy, expected)
