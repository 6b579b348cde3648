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
    options, given = TrainOptions.parse_args(argv), TrainOptions.given(argv)
    return run_cli(lambda: (train(options, given=given), 0)[1], prog="python -m capsnet train")


if __name__ == "__main__":
    sys.exit(main())
