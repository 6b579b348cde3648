"""`python -m capsnet train`: the command line of `capsnet.training.trainer`, generated from `TrainOptions`.

python -m capsnet train --dataset mnist --epochs 50
torchrun --nproc_per_node=4 -m capsnet train --dataset mnist --epochs 50
"""

from __future__ import annotations

import sys

from capsnet.errors import run_cli
from capsnet.training.options import TrainOptions
from capsnet.training.trainer import train


def main(argv: list[str] | None = None) -> int:
    def body() -> int:  # a folder dataset is read as the options are made: its faults are one line too
        train(TrainOptions.parse_args(argv), given=TrainOptions.given(argv))
        return 0

    return run_cli(body, prog="python -m capsnet train")


if __name__ == "__main__":
    sys.exit(main())
