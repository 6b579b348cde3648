"""Print the model card's tables for a shipped checkpoint, from its header and its metrics log.

    python docs/model_card_tables.py checkpoints/mnist.safetensors --every 10

Prints Markdown: the headline figures, the per-class test accuracy and the
per-epoch log (`<name>.metrics.jsonl`), for pasting into checkpoints/README.md.
With --every N the log keeps every Nth epoch, the first, the best and the last.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from capsnet.checkpoints.checkpoint import read_checkpoint_info
from capsnet.checkpoints.header import trained_epochs
from capsnet.files import read_jsonl
from dashboard.texts import format_duration


def headline(info: dict[str, Any]) -> str:
    correct, total = sum(info["per_class_correct"]), sum(info["per_class_total"])
    before = info.get("test_accuracy_before_export")
    lines = [
        f"- Epochs behind the model: {trained_epochs(info)}; training time "
        f"{format_duration(info.get('total_training_seconds', info.get('training_seconds', 0)))} on {info.get('hardware')}.",
        f"- Test accuracy of the shipped file ({info.get('weights_dtype')} weights, evaluated in float32): "
        f"**{100 * info['test_accuracy']:.2f}%** ({correct}/{total})"
        + (f"; before export (float32): {100 * before:.2f}%." if before is not None else "."),
    ]
    return "\n".join(lines)


def per_class(info: dict[str, Any]) -> str:
    rows = ["| class | accuracy | correct |", "|---|---|---|"]
    for name, acc, correct, total in zip(
        info["class_names"], info["per_class_accuracy"], info["per_class_correct"], info["per_class_total"], strict=True
    ):
        rows.append(f"| {name} | {100 * acc:.2f}% | {correct}/{total} |")
    return "\n".join(rows)


def per_epoch(records: list[dict[str, Any]], every: int = 1) -> str:
    best = max(records, key=lambda r: r["test_accuracy"])["epoch"] if records else None
    keep = {records[0]["epoch"], records[-1]["epoch"], best} if records else set()
    records = [r for r in records if r["epoch"] % every == 0 or r["epoch"] in keep]
    rows = [
        "| epoch | run | train loss | train acc. | test loss | test acc. | lr | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        rows.append(
            f"| {r['epoch']}{' (best)' if r['epoch'] == best else ''} | {r.get('run', '')} | {r['train_loss']:.4f} | {100 * r['train_accuracy']:.2f}% "
            f"| {r['test_loss']:.4f} | {100 * r['test_accuracy']:.2f}% | {r['lr']:.2e} | {r['seconds']:.0f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print the model card's tables for a shipped checkpoint.")
    parser.add_argument("checkpoint", type=Path, help="e.g. checkpoints/mnist.safetensors")
    parser.add_argument("--every", type=int, default=1, help="keep every Nth epoch (and the first, best, last)")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every must be at least 1, got {args.every}")
    info = read_checkpoint_info(args.checkpoint)[1].to_dict()
    records = read_jsonl(args.checkpoint.with_suffix(".metrics.jsonl"))
    print(headline(info), per_class(info), per_epoch(records, args.every), sep="\n\n")


if __name__ == "__main__":
    main()
