"""`python -m capsnet claims`: the verdict of `capsnet.readings.claims` on a CapsNet and its CNN, printed or kept."""

from __future__ import annotations

import sys

from capsnet.errors import ArgumentParser, run_cli
from capsnet.readings.claims import PAPER_ERROR, record_verdict, verdict


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m capsnet claims",
        description="The paper's claim (MultiMNIST, or affNIST with mnist-40 models) for a CapsNet and a CNN: which "
        "is ahead, on what budgets and from what starts. Each checkpoint is read with its metrics beside it "
        "(NAME.metrics.jsonl, or a run folder's metrics.jsonl); an affNIST-like figure needs an exported file.",
    )
    parser.add_argument("claim", choices=sorted(PAPER_ERROR), help="which claim")
    parser.add_argument("capsnet", help="the CapsNet's checkpoint")
    parser.add_argument("cnn", help="the CNN baseline's checkpoint")
    parser.add_argument(
        "--record", metavar="FILE", default=None,
        help="also keep the verdict as a JSON record (what the dashboard reads for the start-free pair)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    def body() -> int:
        result = verdict(args.claim, args.capsnet, args.cnn)
        print(result.statement())
        if args.record:
            record_verdict(result, args.record)
            print(f"kept in {args.record}")
        return 0

    return run_cli(body, prog="python -m capsnet claims")


if __name__ == "__main__":
    sys.exit(main())
