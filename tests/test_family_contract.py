"""The one contract every network family keeps (`capsnet.nn.family`): capabilities each declares, asked by every
caller instead of its name, and the wrong results that asking a family's name instead once gave."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import capsnet
from capsnet.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from capsnet.errors import CapsNetError
from capsnet.evaluation import evaluate
from capsnet.nn.family import NETWORKS, Network, Routing, register
from capsnet.nn.registry import network, network_of
from capsnet.runs.export import calibrate_checkpoint
from capsnet.training.watch import look

REPO = Path(__file__).resolve().parents[1]


def _em(preset: str = "tiny-decoder") -> torch.nn.Module:
    torch.manual_seed(0)
    net = network("em")
    config = net.preset("tiny", decoder_hidden=(32,)) if preset == "tiny-decoder" else net.preset(preset)
    return net.build(config).eval()


def test_every_family_declares_what_it_can_do() -> None:
    caps, cnn, em = network("capsnet"), network("cnn"), network("em")
    assert [n.routing.kind if n.routing else None for n in (caps, cnn, em)] == ["dynamic", None, "em"]
    assert caps.redraws(caps.preset("tiny")) and not cnn.redraws(cnn.preset("tiny"))
    assert em.redraws(em.preset("small-decoder")) and not em.redraws(em.preset("small"))
    assert caps.score_margins(caps.preset("paper")) == (0.9, 0.1) and em.score_margins(em.preset("tiny")) is None
    assert [n.score_symbol for n in (caps, cnn, em)] == ["|v|", "p", "a"]
    model = em.build(em.preset("tiny"))
    plain, costs = em.parameter_groups(model, 1e-3, 10.0)
    assert costs["lr"] == pytest.approx(1e-2) and len(plain["params"]) + len(costs["params"]) == len(
        list(model.parameters())
    )
    with pytest.raises(ValueError, match="no beta_u or beta_a"):
        caps.parameter_groups(caps.build(caps.preset("tiny")), 1e-3, 10.0)


def test_the_registry_is_open_to_a_new_family() -> None:
    """A family registers itself from its own module; callers find it by its config, as the shipped ones."""

    class ToyConfig:
        num_classes = 10

    toy = Network(
        "toy", "Toy", "Toy", "scores", "s", "toy loss", "a toy", ToyConfig, torch.nn.Linear, ("tiny",),
        routing=Routing("dynamic", "dynamic routing"), baseline=False, pairs=False, pairs_field=None,
        _loss=lambda *a: None, _redraws=lambda config: False,
    )  # fmt: skip
    try:
        assert register(toy) is toy and network("toy") is toy and network_of(ToyConfig()) is toy
        with pytest.raises(ValueError, match="registered already"):
            register(toy)
    finally:
        NETWORKS.pop("toy", None)
    assert set(NETWORKS) == {"capsnet", "cnn", "em", "efficient"}


def test_evaluate_honours_the_routing_iterations_of_an_em_network() -> None:
    """The evaluation keeps the EM network's routing count (not only a CapsNet's) and reports that r's figures."""
    model = _em("tiny")
    images, labels = torch.rand(12, 1, 28, 28), torch.arange(12) % 10
    for r in (1, 4):
        result = evaluate(model, images, labels, batch_size=5, routing_iterations=r)
        with torch.no_grad():
            expected = model(images, routing_iterations=r).activations
        torch.testing.assert_close(result.lengths, expected, rtol=1e-5, atol=1e-6)
    at_one = evaluate(model, images, labels, routing_iterations=1).lengths
    assert not torch.allclose(at_one, evaluate(model, images, labels, routing_iterations=4).lengths)
    cnn = network("cnn").build(network("cnn").preset("tiny")).eval()
    with pytest.raises(ValueError, match="does not route|network that routes"):
        evaluate(cnn, images, labels, routing_iterations=2)


@pytest.mark.slow
def test_the_evaluate_command_honours_routing_iterations_for_an_em_network(data_dir: Path, tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "em.safetensors", _em("tiny"), {"dataset": "mnist"})
    losses = {}
    for r in (1, 4):
        out = subprocess.run(
            [sys.executable, "-m", "capsnet", "evaluate", str(path), "--limit", "40", "--routing-iterations", str(r),
             "--json", "--data-dir", str(data_dir)],
            capture_output=True, text=True, timeout=300, cwd=REPO,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        losses[r] = json.loads(out.stdout)["loss"]
    assert losses[1] != losses[4]


def _small_mnist(data_dir: Path, root: Path, count: int) -> Path:
    """A data folder whose MNIST test set is the real one's first `count` digits (the training files linked)."""
    raw, source = root / "MNIST" / "raw", data_dir / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        (raw / name).symlink_to(source / name)
    images, labels = (source / "t10k-images-idx3-ubyte").read_bytes(), (source / "t10k-labels-idx1-ubyte").read_bytes()
    size = count.to_bytes(4, "big")
    (raw / "t10k-images-idx3-ubyte").write_bytes(images[:4] + size + images[8:16] + images[16 : 16 + 784 * count])
    (raw / "t10k-labels-idx1-ubyte").write_bytes(labels[:4] + size + labels[8 : 8 + count])
    return root


@pytest.mark.slow
def test_an_em_network_that_redraws_is_calibrated_and_watched(data_dir: Path, tmp_path: Path) -> None:
    """Its not-like-any-class thresholds are calibrated (once refused as "a CNN baseline redraws nothing") and a
    training run's watch keeps its reconstructions (once none for any network but the CapsNet)."""
    model = _em()
    scores, redrawn = look(model, torch.rand(3, 1, 28, 28), present=1)
    assert scores.shape == (3, 10) and redrawn is not None and redrawn.shape == (3, 28, 28)
    small = str(_small_mnist(data_dir, tmp_path / "data", 400))
    path = save_checkpoint(tmp_path / "em.safetensors", model, {"dataset": "mnist"})
    info = calibrate_checkpoint(path, small, device="cpu")
    assert info.novelty is not None and info.novelty["reconstruction_error"] > 0 and info.novelty["examples"] >= 20
    assert load_checkpoint(path).info.novelty == info.novelty
    cnn = network("cnn").build(network("cnn").preset("tiny"))
    _, nothing = look(cnn, torch.rand(2, 1, 28, 28), present=1)
    assert nothing is None
    with pytest.raises(CapsNetError, match="redraws nothing"):
        calibrate_checkpoint(save_checkpoint(tmp_path / "cnn.safetensors", cnn, {"dataset": "mnist"}), small)


def test_any_family_loads_by_default_and_the_public_api_names_each(tmp_path: Path) -> None:
    model = _em("tiny")
    loaded = load_checkpoint(save_checkpoint(tmp_path / "em.safetensors", model, {"dataset": "mnist"}))
    assert loaded.network == "em" and isinstance(loaded.model, capsnet.EMCapsNet)
    assert capsnet.EMCapsNetConfig is type(loaded.config) and capsnet.network_of(loaded.model).name == "em"
    assert {"CapsNet", "BaselineCNN", "EMCapsNet", "em_routing", "dynamic_routing"} <= set(dir(capsnet))


def test_one_reading_for_every_family_from_one_forward_pass() -> None:
    """`read` gives every network that routes the same type (scores, prediction, poses, the redraw, its routing's
    account), and the EM network's class layer and both convolutional layers come from one forward pass."""
    from capsnet.readings.explain import Explanation
    from capsnet.readings.explain_em import EMExplanation, explain_em_with_layers
    from capsnet.readings.reading import Reading, read

    image = torch.rand(28, 28).numpy()
    caps = network("capsnet").build(network("capsnet").preset("tiny")).eval()
    em = _em()
    calls = []
    em.register_forward_hook(lambda *_: calls.append(1))
    for model, symbol, account in ((caps, "|v|", Explanation), (em, "a", EMExplanation)):
        reading = read(model, image, iterations=2, layers=True)
        assert isinstance(reading, Reading) and isinstance(reading.routing, account) and reading.symbol == symbol
        assert reading.scores.shape == (10,) and reading.prediction == int(reading.scores.argmax())
        assert reading.poses.shape == (10, 16) and reading.iterations == 2 and reading.reconstruction is not None
    assert len(calls) == 1 and len(reading.layers) == 2  # the EM reading: one pass for all three capsule layers
    np.testing.assert_allclose(
        reading.layers[1].parent_activations, explain_em_with_layers(em, image, 2)[1][1].parent_activations
    )
    assert read(em, image).layers == ()  # the convolutional layers' traces only where asked for
    cnn = network("cnn").build(network("cnn").preset("tiny")).eval()
    with pytest.raises(ValueError, match="network that routes"):
        read(cnn, image)
