"""A comparison of routings as it is kept (`comparison.json`, written by `capsnet.runs.compare`): its table, and
what the table says in words. Read by the CLI and the dashboard; nothing here trains or imports a network."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILE = "comparison.json"
MOST_BYTES = 4_000_000  # a record of a few runs is a few KB: a larger file is not one


@dataclass(frozen=True)
class Contender:
    """One routing under comparison: its name in the table, its network and routing count."""

    key: str  # in the run folders' names and on the command line
    title: str
    network: str
    routing_iterations: int | None  # None: a routing with no count (one pass)


CONTENDERS = {
    c.key: c
    for c in (
        Contender("dynamic", "dynamic routing (r = 3)", "capsnet", 3),
        Contender("none", "no routing (r = 1, uniform couplings)", "capsnet", 1),
        Contender("attention", "self-attention routing (Efficient-CapsNet)", "efficient", None),
        Contender("em", "EM routing (r = 2)", "em", 2),
    )
}


@dataclass(frozen=True)
class Row:
    """One routing's line of the table: the means over its seeds, and the accuracy's spread."""

    routing: str
    title: str
    seeds: int
    accuracy: float
    spread: float  # the accuracy's max - min over the seeds (0 for one seed)
    parameters: int
    train_images_per_s: float
    read_images_per_s: float
    affnist_like_accuracy: float | None = None  # the mean over the seeds; None where it was not measured
    non_digits_flagged: float | None = None  # the mean over the seeds, of `non_digits`; None: no test
    non_digits: int = 0

    @property
    def flagged_text(self) -> str:
        """How many drawn non-digits it flags, as a cell: "7 of 8", "6.3 of 8" (a mean over seeds), or "-"."""
        if self.non_digits_flagged is None:
            return "-"
        return f"{self.non_digits_flagged:.3g} of {self.non_digits}"

    @property
    def affine_text(self) -> str:
        return "-" if self.affnist_like_accuracy is None else f"{100 * self.affnist_like_accuracy:.2f}%"


def _mean(results: list[dict[str, Any]], key: str) -> float | None:
    """The mean of `key` over `results`; None unless every result has it (an older record, or not measured)."""
    values = [r.get(key) for r in results]
    return None if any(v is None for v in values) else statistics.fmean(float(v) for v in values)  # type: ignore[arg-type]


def rows(record: dict[str, Any]) -> list[Row]:
    """The table's rows, in the order the routings were run."""
    by: dict[str, list[dict[str, Any]]] = {}
    for result in record["results"]:
        by.setdefault(result["routing"], []).append(result)
    out = []
    for key, results in by.items():
        accuracies = [float(r["test_accuracy"]) for r in results]
        title = CONTENDERS[key].title if key in CONTENDERS else key
        out.append(Row(
            key, title, len(results), statistics.fmean(accuracies), max(accuracies) - min(accuracies),
            int(results[0]["parameters"]), statistics.fmean(float(r["train_images_per_s"]) for r in results),
            statistics.fmean(float(r["read_images_per_s"]) for r in results), _mean(results, "affnist_like_accuracy"),
            _mean(results, "non_digits_flagged"), int(results[0].get("non_digits", 0)),
        ))  # fmt: skip
    return out


def budget_line(record: dict[str, Any]) -> str:
    """What every routing got alike, and the machine, in a line."""
    b = record["budget"]
    return (f"{b['dataset']}, {b['size']} presets, {b['epochs']} epoch(s) of {b['train_size'] or 'all'} images, batch "
            f"{b['batch_size']}, lr {b['lr']:g}, seeds {record['seeds']}; test on {b['test_size'] or 'all'} images; "
            f"{record['machine']}")  # fmt: skip


def table(record: dict[str, Any]) -> str:
    """The comparison as a Markdown table, with its budget and machine above it."""
    lines = [budget_line(record), "", "| routing | seeds | test accuracy | spread | affNIST-like | drawn non-digits "
             "flagged | parameters | train img/s | read img/s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for row in rows(record):
        lines.append(f"| {row.title} | {row.seeds} | {100 * row.accuracy:.2f}% | {100 * row.spread:.2f} | "
                     f"{row.affine_text} | {row.flagged_text} | {row.parameters:,} | {row.train_images_per_s:,.0f} | "
                     f"{row.read_images_per_s:,.0f} |")  # fmt: skip
    return "\n".join(lines)


def verdict(record: dict[str, Any]) -> str:
    """What the table says, in words that follow its numbers: the best routing, and routing against none."""
    table_rows = {row.routing: row for row in rows(record)}
    best = max(table_rows.values(), key=lambda row: row.accuracy)
    said = [f"With this budget {best.title} reads best, {100 * best.accuracy:.2f}%."]
    routed, plain = table_rows.get("dynamic"), table_rows.get("none")
    if routed is not None and plain is not None:
        gap = 100 * (routed.accuracy - plain.accuracy)
        noise = 100 * max(routed.spread, plain.spread)
        if min(routed.seeds, plain.seeds) < 2:
            said.append(f"Dynamic routing and none differ by {gap:+.2f} points on one seed, with no spread to judge "
                        "that by.")  # fmt: skip
        elif abs(gap) <= noise:
            said.append(f"Dynamic routing and none differ by {gap:+.2f} points, within the seeds' spread "
                        f"({noise:.2f}): on this budget routing makes no difference that the seeds can tell.")  # fmt: skip
        else:
            side = "ahead of" if gap > 0 else "behind"
            said.append(f"Dynamic routing is {abs(gap):.2f} points {side} no routing, beyond the seeds' spread "
                        f"({noise:.2f}).")  # fmt: skip
    said.extend(_robustness_said(list(table_rows.values())))
    if len(record["seeds"]) < 3:
        said.append("Fewer than three seeds: the spread says little; run --seeds 3 or more.")
    return " ".join(said)


def _robustness_said(table_rows: list[Row]) -> list[str]:
    """The affNIST-like set's best and worst, and who flags the most and the fewest drawn non-digits, in words."""
    said = []
    affine = [row for row in table_rows if row.affnist_like_accuracy is not None]
    if len(affine) >= 2:
        affine.sort(key=lambda row: row.affnist_like_accuracy or 0.0, reverse=True)
        best, worst = affine[0], affine[-1]
        said.append(f"On the affNIST-like digits (rotated, sheared and scaled) {best.title} holds best, "
                    f"{best.affine_text}, {worst.title} least, {worst.affine_text}.")  # fmt: skip
    flagging = [row for row in table_rows if row.non_digits_flagged is not None]
    if len(flagging) >= 2:
        flagging.sort(key=lambda row: row.non_digits_flagged or 0.0, reverse=True)
        most, fewest = flagging[0], flagging[-1]
        if most.non_digits_flagged == fewest.non_digits_flagged:
            said.append(f"Each flags {most.flagged_text} drawn non-digits as not like any class.")
        else:
            said.append(f"Of the drawn non-digits, {most.title} flags the most as not like any class "
                        f"({most.flagged_text}), {fewest.title} the fewest ({fewest.flagged_text}).")  # fmt: skip
    return said


def read_record(folder: Path) -> dict[str, Any] | None:
    """A comparison written to `folder`, or None where there is none (or it cannot be read as one)."""
    path = folder / FILE
    try:
        if not path.is_file() or path.stat().st_size > MOST_BYTES:
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or not isinstance(record.get("results"), list):
            return None
        rows(record)  # every field it needs, of the right kind
        table(record)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record


def newest(root: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest comparison in a folder of `root` (the runs folder), with its folder; None where there is none."""
    try:
        found = sorted(root.glob(f"*/{FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for path in found:
        record = read_record(path.parent)
        if record is not None:
            return path.parent, record
    return None
