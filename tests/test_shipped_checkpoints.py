"""The trained models in checkpoints/: each is the file the export measured on its whole test set (its SHA-256 in
checkpoints/manifest.json), today's code reads it as it did then (its answers on the first 1,000 test examples),
and its header, which holds the whole-set figures, reaches the floors and says what the model card says.

The whole test sets are measured once per file, by `python -m capsnet export`, which writes the manifest entry;
a file whose bytes changed without a new entry fails here with that advice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from capsnet.checkpoints import manifest
from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.nn.cnn import CNNConfig
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.efficient_capsnet import EfficientCapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNetConfig
from capsnet.nn.registry import NETWORK_NAMES
from capsnet.readings import affnist, routing_matters
from capsnet.readings.novelty import NoveltyThresholds
from capsnet.training.options import stored_network

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
# The lowest accuracy a shipped model may have: the project's floors (its targets, 99.70% and
# 93.6%, are in checkpoints/README.md with what the shipped models reach).
FLOORS = {"mnist": 0.9950, "fashion-mnist": 0.9150}
EM_FLOOR = 0.993  # the best public PyTorch figure, reached by the shipped EM model (checkpoints/README.md)
SHIPPED = sorted(p.relative_to(CHECKPOINTS).as_posix() for p in CHECKPOINTS.rglob("*.safetensors"))
# the first examples whose kept answers are checked again: 400, but 100 for the five slowest readers, whose 400 took
# 8-18 s of the suite each on one AVX2 core: the EM network (its float32 forward reads about 10 digits a second), the
# paper's CapsNet on 40x40 and 36x36 (4,608 and 3,200 primary capsules to route) and the CNN baselines there. A network
# that no longer reads its weights as it did changes far more than the 2 answers allowed in any 100
SLOWEST = ["mnist-em", "mnist-40", "multimnist", "baselines/mnist-40-cnn", "baselines/multimnist-cnn"]
CHECKED = {f"{name}.safetensors": 100 for name in SLOWEST}

pytestmark = pytest.mark.slow


def test_every_shipped_file_has_a_manifest_entry() -> None:
    assert set(manifest.read_manifest(CHECKPOINTS)) == set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_file_is_what_its_export_measured(name: str, data_dir: Path) -> None:
    """The bytes are the measured ones, and today's code gives the same answers on the first 400 or 100 (`CHECKED`)
    of the 1,000 test examples whose answers the manifest keeps (tests/test_manifest.py checks all 1,000 on one
    file)."""
    entry = manifest.check(CHECKPOINTS / name, CHECKPOINTS, examples=CHECKED.get(name, 400))
    info = load_checkpoint(CHECKPOINTS / name, networks=NETWORK_NAMES).info
    assert entry.test_accuracy == pytest.approx(info.test_accuracy)  # the header's whole-set figure


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_shipped_checkpoint_accuracy(name: str) -> None:
    path = CHECKPOINTS / f"{name}.safetensors"
    assert path.is_file(), f"checkpoints/{path.name} is missing: the project ships it"
    checkpoint = load_checkpoint(path)
    info = checkpoint.info
    assert info.dataset == name
    assert checkpoint.config == CapsNetConfig.preset("paper")  # the paper's architecture, 3 routing iterations
    assert checkpoint.model.num_parameters() == 8_215_568
    assert info.test_examples == 10_000
    assert info.test_accuracy >= FLOORS[name], f"{name}: {info.test_accuracy:.4f} below the floor {FLOORS[name]}"
    # float16 storage is allowed if it keeps the float32 model's accuracy to 0.02%
    assert abs(info.test_accuracy - info.test_accuracy_before_export) <= 0.0002 + 1e-9
    assert len(info.per_class_accuracy) == 10 and len(info.dimension_std) == 10
    assert sum(info.per_class_correct) == round(info.test_accuracy * 10_000)
    # the not-like-any-class thresholds are in the header and almost never flag a test image read right
    thresholds = NoveltyThresholds.from_dict(info.novelty)
    assert thresholds is not None and thresholds.examples == sum(info.per_class_correct)
    assert thresholds.flagged_right <= 0.01


def test_shipped_multimnist_checkpoint() -> None:
    """The paper's network on MultiMNIST, measured by its export on all 100,000 test pairs."""
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


@pytest.mark.parametrize("name", ["mnist", "multimnist"])
def test_shipped_cnn_baselines(name: str) -> None:
    """The CNN baselines the dashboard compares with: the paper's design with two pools, under 17 MB, as stated."""
    path = CHECKPOINTS / "baselines" / f"{name}-cnn.safetensors"
    assert path.is_file(), f"checkpoints/baselines/{path.name} is missing: the project ships it"
    assert path.stat().st_size < 17e6
    checkpoint = load_checkpoint(path, networks=("cnn",))
    info = checkpoint.info
    pairs = name == "multimnist"
    assert info.dataset == name and info.weights_dtype == "float16" and stored_network(info.recipe) == "cnn"
    assert checkpoint.config == CNNConfig.preset("multimnist" if pairs else "paper")
    assert checkpoint.model.num_parameters() == (5_930_770 if pairs else 4_587_282)
    assert info.test_examples == (100_000 if pairs else 10_000)
    if not pairs:
        assert info.test_accuracy >= 0.98  # a working baseline, whatever its epochs


@pytest.mark.parametrize("network", ["capsnet", "cnn"])
def test_shipped_affine_pair(network: str) -> None:
    """The pair for the paper's affine claim, trained on MNIST digits moved on 40x40: the affNIST-like figure in
    its header (which the Transform lens's verdict reads) was measured by its export on all 10,000 digits."""
    path = CHECKPOINTS / ("mnist-40.safetensors" if network == "capsnet" else "baselines/mnist-40-cnn.safetensors")
    assert path.is_file(), f"checkpoints/{path.relative_to(CHECKPOINTS)} is missing: the project ships it"
    checkpoint = load_checkpoint(path, networks=(network,))
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
    assert 0.5 < info.extra["affnist_like_accuracy"] <= 1.0


def test_shipped_em_model() -> None:
    """The EM network (checkpoints/README.md, "EM routing"): the paper's A=B=C=D=32 network with a
    decoder, routed by 2 EM iterations, its whole-set figures and pose statistics in the header, at or above the
    99.3% the best public PyTorch implementation reports, on the whole test set."""
    path = CHECKPOINTS / "mnist-em.safetensors"
    assert path.is_file(), "checkpoints/mnist-em.safetensors is missing: the project ships it"
    checkpoint = load_checkpoint(path, networks=("em",))
    info = checkpoint.info
    assert info.dataset == "mnist" and info.test_examples == 10_000
    assert checkpoint.config == EMCapsNetConfig.preset("paper-decoder", routing_iterations=2)
    assert checkpoint.model.num_parameters(decoder=False) == 318_964  # the paper's "310K", within 3%
    assert info.test_accuracy >= EM_FLOOR, f"{info.test_accuracy:.4f} below the floor {EM_FLOOR}"
    assert abs(info.test_accuracy - info.test_accuracy_before_export) <= 0.0002 + 1e-9
    assert sum(info.per_class_correct) == round(info.test_accuracy * 10_000)
    assert len(info.dimension_mean) == len(info.dimension_std) == 10  # the Dimensions page's slider ranges
    assert all(len(row) == 16 for row in info.dimension_std)  # the 16 entries of a 4x4 pose


def test_shipped_efficient_capsnet() -> None:
    """Efficient-CapsNet (docs/networks.md): the paper's MNIST network, 161,824 parameters without its decoder, at or
    above 99.65% on the whole test set (the paper's single models: 99.74% on average)."""
    path = CHECKPOINTS / "mnist-efficient.safetensors"
    assert path.is_file(), "checkpoints/mnist-efficient.safetensors is missing: the project ships it"
    checkpoint = load_checkpoint(path, networks=("efficient",))
    info = checkpoint.info
    assert info.dataset == "mnist" and info.test_examples == 10_000
    assert checkpoint.config == EfficientCapsNetConfig.preset("paper")
    assert checkpoint.model.num_parameters(decoder=False) == 161_824
    assert info.test_accuracy >= 0.9965, f"{info.test_accuracy:.4f} below the floor 0.9965"
    assert abs(info.test_accuracy - info.test_accuracy_before_export) <= 0.0002 + 1e-9
    assert sum(info.per_class_correct) == round(info.test_accuracy * 10_000)


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "mnist-em"])
def test_a_shipped_routing_summary_belongs_to_its_checkpoint(name: str) -> None:
    """Where routing matters opens at once for the shipped models: each `<name>.routing.json` was measured on the
    very bytes shipped (its SHA-256), on the whole test set, at the iterations the model was trained with; the EM
    network's takes about 5 minutes of a 2-core CPU to measure again."""
    path = CHECKPOINTS / f"{name}.safetensors"
    kept = routing_matters.read_kept(path, 10_000)
    assert kept is not None, f"{routing_matters.sidecar_path(path).name} is missing or measured another file"
    checkpoint = load_checkpoint(path, networks=("capsnet", "em"))
    assert kept.trained_iterations == checkpoint.config.routing_iterations
    assert kept.correct[kept.iterations.index(kept.trained_iterations)] == round(checkpoint.info.test_accuracy * 10_000)


def test_the_shipped_em_model_carries_its_quick_evaluation() -> None:
    """The Evaluate page opens at once on the EM model's first 1,000 test digits (measuring them
    takes about 30 s on 2 cores): `mnist-em.evaluation.json` was measured on the very bytes shipped, and agrees with
    the header's per-class counts where the two overlap (every class's share of the first 1,000 is below its whole)."""
    from capsnet import kept_evaluation

    path = CHECKPOINTS / "mnist-em.safetensors"
    kept = kept_evaluation.read_kept(path, "mnist", 1000)
    assert kept is not None, "mnist-em.evaluation.json is missing or measured another file"
    info = load_checkpoint(path, networks=("em",)).info
    assert kept.redrawn and kept.total == 1000 and kept.accuracy >= 0.99
    assert all(c <= whole for c, whole in zip(kept.class_correct, info.per_class_correct))
