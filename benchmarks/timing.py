"""Timing helpers the benchmark scripts share: a warm-up, then the median (and best) of repeated runs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def times_s(fn: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of `repeats` runs of `fn`, after one warm-up run."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """The median milliseconds of `repeats` runs after a warm-up."""
    return 1000 * statistics.median(times_s(fn, repeats))


def median_s(fn: Callable[[], object], repeats: int) -> float:
    """The median seconds of `repeats` runs after a warm-up."""
    return statistics.median(times_s(fn, repeats))


def timed_ms(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(median, best) milliseconds of `repeats` runs after a warm-up: the best is what the work costs on a machine
    that other processes leave alone, the median what it cost here."""
    times = times_s(fn, repeats)
    return 1000 * statistics.median(times), 1000 * min(times)
