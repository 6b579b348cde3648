"""The network registry: each network's contract (config, presets, module, what it offers, its loss)."""

from __future__ import annotations

import pytest
import torch

from capsnet.nn.capsnet import CapsNet
from capsnet.nn.cnn import CNN_PRESETS, BaselineCNN, CNNConfig
from capsnet.nn.config import PRESETS, CapsNetConfig
from capsnet.nn.efficient_capsnet import EfficientCapsNet, EfficientCapsNetConfig
from capsnet.nn.em_capsnet import EM_PRESETS, EMCapsNet, EMCapsNetConfig
from capsnet.nn.registry import NETWORKS, network, network_of
from capsnet.training.options import TrainOptions


def test_every_network_declares_its_contract() -> None:
    assert set(NETWORKS) == {"capsnet", "cnn", "em", "efficient"}
    capsnet, cnn = network("capsnet"), network("cnn")
    assert (capsnet.config_type, capsnet.module_type, capsnet.presets) == (CapsNetConfig, CapsNet, tuple(PRESETS))
    assert (cnn.config_type, cnn.module_type, cnn.presets) == (CNNConfig, BaselineCNN, tuple(CNN_PRESETS))
    assert capsnet.routing is not None and capsnet.routing.kind == "dynamic" and cnn.routing is None
    assert capsnet.run_options == ("routing_iterations",) and cnn.run_options == ()
    em = network("em")
    assert (em.config_type, em.module_type, em.presets) == (EMCapsNetConfig, EMCapsNet, tuple(EM_PRESETS))
    assert em.routing is not None and em.routing.kind == "em" and em.run_options == ("routing_iterations", "beta_lr")
    assert not em.baseline and cnn.baseline and not em.pairs and not capsnet.baseline
    efficient = network("efficient")
    assert (efficient.config_type, efficient.module_type) == (EfficientCapsNetConfig, EfficientCapsNet)
    assert efficient.routing is not None and efficient.routing.kind == "attention" and efficient.run_options == ()
    with pytest.raises(ValueError, match="unknown network 'rnn'; this capsnet reads capsnet, cnn, em, efficient"):
        network("rnn")


@pytest.mark.parametrize("name", ["capsnet", "cnn", "em", "efficient"])
def test_a_network_is_found_from_its_config_or_its_model(name: str) -> None:
    net = network(name)
    config = net.preset("tiny")
    model = net.build(config)
    assert network_of(config) is net and network_of(model) is net and isinstance(model, net.module_type)
    with pytest.raises(ValueError, match="needs a"):
        net.build(network("cnn" if name == "capsnet" else "capsnet").preset("tiny"))
    # the task sets the input size, and the CNN's sigmoid per class where an example holds several digits
    task = net.config_for("tiny", 36, pairs=net.pairs)
    assert task.image_size == 36 and (net.pairs_field is None or getattr(task, net.pairs_field))


@pytest.mark.parametrize("name", ["capsnet", "cnn", "em"])
def test_each_network_brings_its_own_loss(name: str) -> None:
    torch.manual_seed(0)
    net = network(name)
    config = net.preset("tiny")
    model = net.build(config).train()
    images, labels = torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])
    loss = net.loss(model(images, labels), images, labels, config)
    assert torch.isfinite(loss.total) and loss.total > 0
    assert (loss.reconstruction > 0) == net.redraws(config)  # only a network that redraws its input


def test_a_run_builds_the_config_of_its_network_for_its_dataset() -> None:
    caps = TrainOptions(dataset="multimnist", preset="multimnist", routing_iterations=4).network_config()
    assert isinstance(caps, CapsNetConfig) and caps.image_size == 36 and caps.routing_iterations == 4
    cnn = TrainOptions(dataset="multimnist", network="cnn", preset="multimnist").network_config()
    assert isinstance(cnn, CNNConfig) and cnn.image_size == 36 and cnn.multi_label
    assert TrainOptions(network="cnn").network_config() == CNNConfig.preset("paper")
