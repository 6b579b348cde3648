"""`python -m capsnet evaluate`: the command line of `capsnet.evaluation`."""

from __future__ import annotations

import json
import sys

from capsnet import kept_evaluation
from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.data.datasets import dataset_info
from capsnet.data.tasks import read_test_set, task
from capsnet.device import pick_device
from capsnet.errors import ArgumentParser, CapsNetError, run_cli, said_out_of_memory
from capsnet.evaluation import Evaluation, PairEvaluation, evaluate_set, format_report
from capsnet.memory import check_reading_fits
from capsnet.nn.registry import NETWORK_NAMES, network_of
from capsnet.nn.routing import MAX_ROUTING_ITERATIONS

BATCH, MAX_BATCH = 500, 100_000  # the batch read by default, and the most asked for (no test set here holds more)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m capsnet evaluate", description="Evaluate a capsnet checkpoint on its test set."
    )
    parser.add_argument("checkpoint", help="path to a .safetensors checkpoint")
    parser.add_argument("--dataset", default=None, help="dataset to evaluate on (default: the checkpoint's)")
    parser.add_argument("--data-dir", default=None, help="dataset root (default: $CAPSNET_DATA_DIR, else ./data)")
    parser.add_argument(
        "--batch-size", type=parser.whole_number_in(1, MAX_BATCH), default=None,
        help=f"images read at once, at most {MAX_BATCH:,} and the test set's size (default: {BATCH})",
    )  # fmt: skip
    parser.add_argument("--limit", type=parser.positive_int, default=None, help="evaluate on the first N test images")
    parser.add_argument(
        "--routing-iterations", type=parser.whole_number_in(1, MAX_ROUTING_ITERATIONS), default=None,
        help=f"routing iterations r, from 1 to {MAX_ROUTING_ITERATIONS} (default: the checkpoint's)",
    )  # fmt: skip
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    parser.add_argument(
        "--keep", action="store_true",
        help="keep the result beside the checkpoint (<name>.evaluation.json): the dashboard's Evaluate page then "
        "opens on the first --limit images at once (its own dataset and routing count only)",
    )  # fmt: skip
    return parser


def check_batch(batch_size: int | None, size: int, title: str) -> None:
    """Refuse, in one line, an empty test set, or a batch asked for that is larger than the whole set."""
    if size == 0:
        raise CapsNetError(f"the {title} test set holds no images: nothing to evaluate")
    if batch_size is not None and batch_size > size:
        raise CapsNetError(f"--batch-size {batch_size:,} is more than the {size:,} images of the {title} test set: "
                           f"at most {size:,}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def run() -> int:
        device = pick_device(args.device)
        checkpoint = load_checkpoint(args.checkpoint, device=device, networks=NETWORK_NAMES)
        net = network_of(checkpoint.config)
        if args.routing_iterations is not None and net.routing is None:
            raise CapsNetError(f"{checkpoint.path} holds {net.described}: --routing-iterations does not apply to it")
        name = args.dataset or checkpoint.info.dataset_name
        info = dataset_info(name)
        unlike = checkpoint.unlike(info.title, info.image_size, info.channels, info.classes)
        if unlike is not None:
            raise CapsNetError(f"{unlike}: evaluate it on its own dataset")
        if args.keep and (name != checkpoint.info.dataset_name or args.routing_iterations is not None):
            raise CapsNetError("--keep keeps the evaluation the dashboard shows: on the checkpoint's own dataset, at "
                               "its own routing count (leave out --dataset and --routing-iterations)")  # fmt: skip
        if args.keep and task(name).pairs:
            raise CapsNetError(f"{info.title} is read on the Overlapping digits page, which keeps no evaluation")
        # measured before the data is read: a batch that would not fit is one line naming one that does
        asked = args.batch_size or BATCH
        batch = min(asked, args.limit or asked)  # a batch is never larger than what is read
        check_reading_fits(checkpoint.model, checkpoint.config, batch, f"reading with the {net.title}")
        whole = read_test_set(name, args.data_dir)
        check_batch(args.batch_size, len(whole), info.title)
        test = whole.first(args.limit)
        with said_out_of_memory(asked):
            result = evaluate_set(checkpoint.model, test, asked, device, args.routing_iterations)
        if args.keep and isinstance(result, Evaluation):  # single images (pairs were refused above)
            print(f"kept in {kept_evaluation.keep(checkpoint.path, result, name, ship=True)}", file=sys.stderr)
        if isinstance(result, PairEvaluation):  # MultiMNIST: the fixed test pairs, judged as the paper does
            facts = {"loss": result.loss, "accuracy": result.accuracy, "error": result.error}
            if args.json:
                print(json.dumps({**facts, "correct": result.correct, "total": result.total, "dataset": name,
                                  "checkpoint": str(checkpoint.path)}))  # fmt: skip
            else:
                print(f"{checkpoint.path} on the {info.title} test pairs")
                print(f"Error: {100 * result.error:.2f}% ({result.total - result.correct}/{result.total} pairs wrong: "
                      f"the two highest {net.scores} are not the two digits)")  # fmt: skip
                print(f"Test loss: {result.loss:.5f}")
            return 0
        names = list(info.classes)
        if args.json:
            summary = result.to_dict(names)
            summary.update(checkpoint=str(checkpoint.path), dataset=name)
            print(json.dumps(summary))
        else:
            print(format_report(result, names, f"{checkpoint.path} on the {info.title} test set"))
        return 0

    return run_cli(run, prog="python -m capsnet evaluate")


if __name__ == "__main__":
    sys.exit(main())
