"""Named training recipes: sets of option defaults, each saying what it is for.

- "paper": the paper's recipe (Adam at 1e-3, x0.96 after every epoch, batch 128): the defaults of
  `capsnet.training.options.TrainOptions`, for long runs (the shipped MNIST model: 150 epochs on a GPU).
- "fast": for a short budget on a CPU, chosen on a validation split of the MNIST training set
  (`--val-size 5000`, never the test set; `benchmarks/README.md` has the search): batch 64, a
  linear warm-up to a peak rate of 2e-3 over the first 3% of the batches, then a cosine decay to
  zero at the run's last batch (`capsnet.training.schedule`).
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
}
