"""Named training recipes: sets of option defaults, each saying what it is for.

- "paper": the paper's recipe (Adam at 1e-3, x0.96 after every epoch, batch 128): the defaults of
  `capsnet.training.options.TrainOptions`, for long runs (the shipped MNIST model: 150 epochs on a GPU).
- "fast": for a short budget on a CPU, chosen on a validation split of the MNIST training set
  (`--val-size 5000`, never the test set; `benchmarks/README.md` has the search): batch 64, a
  linear warm-up to a peak rate of 2e-3 over the first 3% of the batches, then a cosine decay to
  zero at the run's last batch (`capsnet.training.schedule`).
- "em-demo": EM routing in about a minute on a 2-core CPU: the tiny EM network, one epoch of 8,000 MNIST training
  images at Adam 1e-2, batch 64, r = 2 (as the shipped EM model was trained; r = 3 learned less in a short run): 70-74%
  of the test digits in 15-20 s on this project's 2-core CPUs (at 2,000 images and the paper's settings it reached
  10-18%); tested by `tests/test_em_capsnet.py`.
- "folder": for a folder of the user's own pictures, its values chosen from the folder (its size) and the network:
  `capsnet.training.folder_defaults`; the recipe of a run on a folder when none is given.
A recipe only sets defaults: an option given on the command line (or in the form) still wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Recipe:
    name: str
    title: str  # a few words, for the form
    summary: str  # one sentence: what it sets and what it is for
    values: dict[str, Any] = field(default_factory=dict)  # TrainOptions fields it sets


FOLDER_RECIPE = "folder"  # its values depend on the folder and the network: `capsnet.training.folder_defaults`

RECIPES: dict[str, Recipe] = {
    "paper": Recipe(
        "paper",
        "The paper's",
        "Adam at 1e-3, multiplied by 0.96 after every epoch, batch 128: the paper's recipe, for long runs.",
    ),
    "fast": Recipe(
        "fast",
        "Fast (for a CPU)",
        "Batch 64, a warm-up to 2e-3 over the first 3% of the batches, then a cosine decay to zero by the last "
        "batch: the most accuracy from a short run, chosen on held-out training images.",
        {"epochs": 1, "batch_size": 64, "lr": 2e-3, "schedule": "cosine", "warmup": 0.03},
    ),
    "em-demo": Recipe(
        "em-demo",
        "EM demo (a minute)",
        "The tiny EM network, one epoch of 8,000 images at Adam 1e-2, batch 64, r = 2: about 70% of the test digits "
        "in under a minute on a CPU, to see EM routing learn.",
        {
            "network": "em",
            "preset": "tiny",
            "epochs": 1,
            "batch_size": 64,
            "lr": 1e-2,
            "routing_iterations": 2,
            "train_size": 8000,
            "test_size": 2000,
        },
    ),
    FOLDER_RECIPE: Recipe(
        FOLDER_RECIPE,
        "For a folder",
        "For your own pictures: initial scales that do not saturate, a batch that suits the folder's size, about 500 "
        "optimiser steps whatever its size, a warm-up then a cosine decay: chosen from the folder.",
    ),
}
