"""The defaults of a run on a folder of the user's own pictures, chosen from the folder: the "folder" recipe.

A folder of a few hundred pictures is a few optimiser steps an epoch: at the paper's batch of 128 and 10 epochs,
the 352 training pictures of a 440-picture folder make 30 steps in all, and the paper's initial scales leave every
capsule saturated for longer than that. So a folder trains:

- at its pictures' own side up to `SIDE` (32), unless --image-size says another;
- from initial scales that do not saturate: the CapsNet's `official` preset (the official code's 1/32 on
  PrimaryCaps and its initial weights, as the `multimnist` preset has them), the CNN's and the EM
  network's own (the EM network routing twice, its per-type costs at 10 times the rate);
- at a batch that suits its size (`batch_for`) and for about `STEPS` optimiser steps, not a fixed count of
  epochs (`epochs_for`: a small folder is seen many times, a large one at least `MIN_EPOCHS` times);
- on a warm-up to a peak rate, then a cosine decay to zero at the last step (`capsnet.training.schedule`);
- with the shifts its side allows (`capsnet.data.image_folder.shift_for`); flips only where asked (`--hflip`).

`python -m capsnet train --dataset <folder>` takes these when no --recipe is given; an option given explicitly
still wins. The figures they reach are measured by `benchmarks/bench_folder.py` (docs/own-images.md).
"""

from __future__ import annotations

import math
from typing import Any

from capsnet.data import image_folder
from capsnet.data.datasets import DATASETS
from capsnet.errors import InvalidArgumentError
from capsnet.nn.registry import NETWORKS
from capsnet.training.recipes import FOLDER_RECIPE, RECIPES

STEPS = 500  # optimiser steps a run on a folder aims at, whatever its size
MIN_EPOCHS, MAX_EPOCHS = 3, 200
PRESETS = {"capsnet": "official", "cnn": "paper", "em": "small"}  # each family's preset for a folder
PEAK_LR = {"capsnet": 1e-3, "cnn": 1e-3, "em": 1e-2}  # the cosine schedule's peak rate, per family
WARMUP = 0.05  # the fraction of the steps spent warming up
# a family's own options: the EM network routes twice (as the em-demo recipe: r = 3 learns less in a short run) and
# moves its per-type costs beta_u and beta_a at 10 times the rate (each one number per capsule type, which Adam moves
# by about lr a step): on the shapes folder of benchmarks/bench_folder.py it learns far faster so
OWN = {"em": {"routing_iterations": 2, "beta_lr": 10.0}}
SIDE = 32  # pictures are read at this side, or at their own where smaller (a paper CapsNet step at 48 costs 4 times)


def batch_for(train_examples: int) -> int:
    """The batch for a folder of `train_examples` training pictures: 32 up to 5,000, 64 up to 20,000, else 128."""
    return 32 if train_examples <= 5_000 else 64 if train_examples <= 20_000 else 128


def epochs_for(train_examples: int, batch_size: int, steps: int = STEPS) -> int:
    """The epochs that make about `steps` optimiser steps of `batch_size` over `train_examples` pictures."""
    per_epoch = max(math.ceil(train_examples / batch_size), 1)
    return min(max(math.ceil(steps / per_epoch), MIN_EPOCHS), MAX_EPOCHS)


def train_examples(dataset: str) -> int:
    """The training pictures of a folder dataset (`photos`, `photos@48`); InvalidArgumentError for another name."""
    spec = image_folder.parse(dataset)
    if spec is None:
        raise InvalidArgumentError(
            f"the {FOLDER_RECIPE} recipe is for a folder of pictures; {dataset!r} names none (choose another --recipe)"
        )
    return len(image_folder.scan(spec).files[True])


def folder_values(dataset: str, network: str) -> dict[str, Any]:
    """The options the folder recipe sets for `network` on the folder `dataset`, chosen from its size."""
    try:
        presets = NETWORKS[network].presets
    except KeyError:
        raise InvalidArgumentError(f"unknown --network {network!r}; choose from {', '.join(NETWORKS)}") from None
    count = train_examples(dataset)
    batch = batch_for(count)
    spec = image_folder.parse(dataset)
    side = spec.side if spec is not None and spec.side else min(image_folder.scan(spec).side, SIDE) if spec else SIDE
    return {
        "image_size": side,
        "preset": PRESETS.get(network, presets[0]),  # another family: its first preset, the paper's
        "batch_size": batch,
        "epochs": epochs_for(count, batch),
        "lr": PEAK_LR.get(network, 1e-3),
        "schedule": "cosine",
        "warmup": WARMUP,
        **OWN.get(network, {}),
    }


def default_recipe(dataset: str) -> str:
    """The recipe a run takes when none is given: the folder recipe for a folder of pictures, else the paper's."""
    return FOLDER_RECIPE if dataset not in DATASETS and image_folder.parse(dataset) is not None else "paper"


def recipe_values(recipe: str, dataset: str, network: str) -> dict[str, Any]:
    """The option defaults `recipe` sets for a run of `network` on `dataset` (InvalidArgumentError when unknown)."""
    if recipe not in RECIPES:
        raise InvalidArgumentError(f"unknown --recipe {recipe!r}; choose from {', '.join(RECIPES)}")
    return folder_values(dataset, network) if recipe == FOLDER_RECIPE else dict(RECIPES[recipe].values)
