"""The sidebar's "Train a model" form: its bounds, its labels, and the options it starts a run with.

The options themselves, and their defaults, are `capsnet.training.options.TrainOptions` (the same as
`python -m capsnet train --help`). The form offers a bounded subset of them, since anyone with
the page open can start a run on the machine that serves it.
"""

from __future__ import annotations

import functools
import math
import zlib
from pathlib import Path

import torch

from capsnet.data import image_folder
from capsnet.errors import CapsNetError
from capsnet.nn import registry
from capsnet.nn.routing import MAX_ROUTING_ITERATIONS
from capsnet.runs import estimate
from capsnet.training.folder_defaults import default_recipe
from capsnet.training.options import TrainOptions
from capsnet.training.recipes import FOLDER_RECIPE

DEFAULTS = TrainOptions()
EPOCHS = (1, 200)
BATCH_SIZE = (1, 1024)
ROUTING_ITERATIONS = (1, MAX_ROUTING_ITERATIONS)  # the one bound, from the config (the CLI refuses more too)
TRAIN_SIZE = (1, 60_000)  # the largest is the whole training set: no subset
TEST_SIZE = (1, 10_000)
IMAGE_SIZE = (0, image_folder.MAX_SIDE)  # a folder's pictures read at N x N; 0: the folder's own default
LEARNING_RATE = (1e-6, 1.0)
BETA_LR = (0.01, 1000.0)  # the EM layers' beta_u and beta_a: a multiple of the learning rate (the CLI's --beta-lr)


@functools.cache
def _parameters(name: str, preset: str) -> str:
    """'8.2 M' for the paper's model: counted on the meta device, nothing allocated."""
    with torch.device("meta"):
        net = registry.network(name)
        count = sum(p.numel() for p in net.build(net.preset(preset)).parameters())
    return f"{count / 1e6:.1f} M" if count >= 1e6 else f"{count / 1e3:.0f} k"


# the form's "Model" choices, as (network, preset): every preset of each network the CLI can train
MODEL_LABELS = {
    ("capsnet", "paper"): f"Paper's CapsNet ({_parameters('capsnet', 'paper')} parameters)",
    ("capsnet", "official"): "Paper's CapsNet, the official code's initial scales "
    f"({_parameters('capsnet', 'official')} parameters; learns at lr 1e-3 on 40x40 too)",
    ("capsnet", "cifar10"): "Paper's CapsNet for colour 32x32 CIFAR-10, 64 primary types "
    f"({_parameters('capsnet', 'cifar10')} parameters)",
    ("capsnet", "no-routing"): "Paper's CapsNet without routing, its couplings left uniform "
    f"({_parameters('capsnet', 'no-routing')} parameters)",
    ("capsnet", "tiny"): f"Tiny CapsNet ({_parameters('capsnet', 'tiny')} parameters, a quick demo)",
    ("capsnet", "multimnist"): "Paper's CapsNet for 36x36 MultiMNIST "
    f"({_parameters('capsnet', 'multimnist')} parameters)",
    ("cnn", "paper"): f"CNN baseline, the paper's with two pools ({_parameters('cnn', 'paper')} parameters on 28x28)",
    ("cnn", "multimnist"): f"CNN baseline for 36x36 MultiMNIST ({_parameters('cnn', 'multimnist')} parameters)",
    ("cnn", "tiny"): f"Tiny CNN baseline ({_parameters('cnn', 'tiny')} parameters, a quick demo)",
    ("em", "paper"): f"EM routing, matrix capsules, the paper's A=B=C=D=32 ({_parameters('em', 'paper')} parameters)",
    ("em", "paper-decoder"): "EM routing, the paper's A=B=C=D=32 with a decoder "
    f"({_parameters('em', 'paper-decoder')} parameters)",
    ("em", "small"): f"EM routing, the paper's small network ({_parameters('em', 'small')} parameters)",
    ("em", "small-decoder"): "EM routing, the small network with a decoder "
    f"({_parameters('em', 'small-decoder')} parameters)",
    ("em", "tiny"): f"Tiny EM network ({_parameters('em', 'tiny')} parameters, a quick demo)",
}


def model_labels() -> dict[tuple[str, str], str]:
    """The form's "Model" choices, as (network, preset): every preset of every registered network, in words of its
    own for the shipped ones, and a family registered later under its title (tests/test_options.py holds the shipped
    ones to their presets)."""
    labels = {}
    for net in registry.NETWORKS.values():
        for preset in net.presets:
            made = f"{net.title}, {preset} preset ({_parameters(net.name, preset)} parameters)"
            labels[(net.name, preset)] = MODEL_LABELS.get((net.name, preset)) or made
    return labels


def form_options(
    *,
    recipe: str = DEFAULTS.recipe,
    dataset: str = DEFAULTS.dataset,
    network: str = DEFAULTS.network,
    preset: str = DEFAULTS.preset,
    epochs: int = DEFAULTS.epochs,
    batch_size: int = DEFAULTS.batch_size,
    lr: float = DEFAULTS.lr,
    routing_iterations: int = DEFAULTS.routing_iterations,
    beta_lr: float = DEFAULTS.beta_lr,
    train_size: int = TRAIN_SIZE[1],
    test_size: int = TEST_SIZE[1],
    device: str = DEFAULTS.device,
    folder: str = "",
    image_size: int = 0,
) -> TrainOptions:
    """The run the form asks for, checked against the form's bounds: ValueError with a message a user can act on.
    `folder`: a folder of the user's own pictures on this server, trained on instead of `dataset`, read at
    `image_size` (0: the folder's default); it is read now, so that a fault in it is said here, not in a failed run."""
    value: object  # what a caller passed, checked below against bounds: whole numbers, then real ones
    low: float
    high: float
    for label, value, (low, high) in (
        ("epochs", epochs, EPOCHS),
        ("batch size", batch_size, BATCH_SIZE),
        ("routing iterations", routing_iterations, ROUTING_ITERATIONS),
        ("train size", train_size, TRAIN_SIZE),
        ("test size", test_size, TEST_SIZE),
        ("image size", image_size, IMAGE_SIZE),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{label} must be a whole number from {low} to {high}, got {value!r}")
    for label, value, (low, high) in (
        ("learning rate", lr, LEARNING_RATE),
        ("beta learning-rate multiplier", beta_lr, BETA_LR),
    ):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or math.isnan(value)
            or not low <= value <= high
        ):
            raise ValueError(f"{label} must lie between {low:g} and {high:g}, got {value!r}")
    named = folder.strip()
    if named:
        check_folder(named)
    elif recipe == FOLDER_RECIPE:
        raise ValueError(
            "the recipe for a folder trains your own pictures: name their folder, or choose another recipe"
        )
    whole_train, whole_test = examples(named or dataset)
    if (network, preset) not in model_labels():
        known = ", ".join(f"{m} {p}" for m, p in model_labels())
        raise ValueError(f"the model must be one of {known}, got {network} {preset}")
    # the form shows every field at once: an option the chosen network does not read stays at its default
    asked = {"routing_iterations": routing_iterations, "beta_lr": float(beta_lr)}
    own = {name: value for name, value in asked.items() if name in registry.network(network).run_options}
    return (
        TrainOptions.from_recipe(
            recipe,
            dataset=named or dataset,
            **({"image_size": image_size} if named and image_size else {}),  # else the recipe's, or the folder's
            network=network,
            preset=preset,
            epochs=epochs,
            batch_size=batch_size,
            lr=float(lr),
            **own,
            train_size=None if train_size >= whole_train else train_size,
            test_size=None if test_size >= whole_test else test_size,
            device=device,
        )
        .validate()
        .sized()
    )  # the recipe's schedule and warm-up; the form's own fields win over its defaults


def check_folder(named: str) -> None:
    """A ValueError in the form's words when `named` is no folder on this server (the command line's "unknown
    --dataset" names a flag the form does not have)."""
    if image_folder.parse(named) is not None:
        return
    path = Path(named)
    if path.exists():
        raise ValueError(
            f"{named} is a file, not a folder: name a folder of labelled pictures, one sub-folder per class"
        )
    raise ValueError(
        f"there is no folder {named} on this server: name a folder of labelled pictures (one sub-folder per class), "
        "or leave the field empty to train on the dataset chosen"
    )


def examples(dataset: str) -> tuple[int, int]:
    """(training, test) examples the form offers of `dataset` (a named one or a folder), within its bounds: the
    whole set when a field is at its largest. A folder that cannot be read offers the bounds (its run says why)."""
    try:
        train, test = estimate.dataset_examples(dataset)
    except (ValueError, CapsNetError):
        return TRAIN_SIZE[1], TEST_SIZE[1]
    return max(min(train, TRAIN_SIZE[1]), 1), max(min(test, TEST_SIZE[1]), 1)


def form_defaults(recipe: str, dataset: str, network: str | None = None, preset: str | None = None) -> TrainOptions:
    """What the form shows before anything is changed: `recipe`'s options for `dataset` (and the network chosen),
    with the whole of its training and test sets; the folder recipe on MNIST (no folder named yet) is the paper's."""
    if recipe == FOLDER_RECIPE and default_recipe(dataset) != FOLDER_RECIPE:
        recipe = "paper"
    chosen = {} if network is None else {"network": network, **({"preset": preset} if preset else {})}
    return TrainOptions.from_recipe(recipe, dataset=dataset, **chosen)


def scope(recipe: str, dataset: str, network: str) -> str:
    """What a form field's key says besides its name, so that its default follows what it depends on: the recipe,
    and for the folder recipe the folder (its size) and the network ("" for the paper's recipe: the bare names)."""
    if recipe != FOLDER_RECIPE:
        return "" if recipe == "paper" else recipe
    return f"{recipe}-{network}-{zlib.crc32(dataset.encode()):08x}"
