"""Where routing matters: the page's interactions server-side, and the one-off measure's images per second.

    python benchmarks/bench_routing_matters.py                       # the shipped MNIST model and its kept summary
    python benchmarks/bench_routing_matters.py --checkpoint checkpoints/fashion-mnist.safetensors --images 300

- Server: each interaction's rerun of the whole app script through `streamlit.testing.v1.AppTest`, median of
  `--repeats` after a warm-up, with the checkpoint (and its kept `.routing.json`, copied beside it) as the shipped
  model: opening the page, choosing another kind of change, turning the list's page, and the button that makes a
  test image the input (its own run, which ends in the switch; the Routing page's run that follows is timed apart).
- The one-off measure: images per second of `capsnet.readings.routing_matters.iteration_lengths` (convolutions and votes
  once per batch, routing for r = 1..5) against the full forward pass run anew for each r, on one thread.

Needs $CAPSNET_DATA_DIR (the test set). Timings are medians; on a shared machine read the ratios.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.data.tasks import read_test_set
from capsnet.device import describe_device
from capsnet.readings import routing_matters as rm

REPO = Path(__file__).resolve().parents[1]


def median_ms(action: Callable[[], object], repeats: int) -> float:
    action()  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def server(checkpoint: Path, repeats: int) -> dict[str, float]:
    """Median ms of each interaction of the page, through AppTest, in temporary app folders."""
    import os

    from streamlit.testing.v1 import AppTest

    folders = Path(tempfile.mkdtemp(prefix="bench-routing-matters-"))
    try:
        (folders / "checkpoints").mkdir()
        (folders / "runs").mkdir()
        shutil.copy(checkpoint, folders / "checkpoints" / "mnist.safetensors")
        if rm.sidecar_path(checkpoint).is_file():
            shutil.copy(rm.sidecar_path(checkpoint), folders / "checkpoints" / "mnist.routing.json")
        os.environ.update(CAPSNET_CHECKPOINTS_DIR=str(folders / "checkpoints"), CAPSNET_RUNS_DIR=str(folders / "runs"))
        at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=900).run()
        at.switch_page("app_pages/routing_matters.py").run()
        if not at.metric:  # no kept summary: measured once here (not timed)
            at.button(key="rm_measure_button").click().run()
        if at.exception:
            raise SystemExit(at.exception[0].stack_trace)
        results = {"open the page (rerun)": median_ms(at.run, repeats)}
        turn = iter(["fixes", "breaks", "all"] * (repeats + 1))
        results["choose a kind of change"] = median_ms(
            lambda: at.segmented_control(key="rm_effect").set_value(next(turn)).run(), repeats
        )
        at.segmented_control(key="rm_effect").set_value("all").run()
        pages = [n for n in at.number_input if n.key == "rm_page"]
        if pages:
            last = pages[0].max
            flip = iter([last, 1] * (repeats + 1))
            results["turn the list's page"] = median_ms(
                lambda: at.number_input(key="rm_page").set_value(next(flip)).run(), repeats
            )
            at.number_input(key="rm_page").set_value(1).run()
        opens = [b.key for b in at.button if (b.key or "").startswith("rm_open_")]
        click, routing = [], []
        for _ in range(repeats + 1):
            at.switch_page("app_pages/routing_matters.py").run()
            start = time.perf_counter()
            at.button(key=opens[0]).click().run()  # the click's run, the switch and the Routing page's run
            total = 1000 * (time.perf_counter() - start)
            start = time.perf_counter()
            at.run()  # the Routing page alone, its readings cached
            routing.append(1000 * (time.perf_counter() - start))
            click.append(total)
        if at.exception:
            raise SystemExit(at.exception[0].stack_trace)
        results["open an image on Routing (the click + Routing's first run)"] = statistics.median(click[1:])
        results["  of which the Routing page's rerun"] = statistics.median(routing[1:])
        return results
    finally:
        shutil.rmtree(folders, ignore_errors=True)


def measure_speed(checkpoint: Path, count: int) -> tuple[float, float]:
    """Images per second: the measure (votes once, routing r = 1..5) and the full forward pass for each r."""
    net = load_checkpoint(checkpoint, networks=("capsnet",)).model
    test = read_test_set(load_checkpoint(checkpoint).info.dataset_name).first(count)
    start = time.perf_counter()
    rm.iteration_lengths(net, test.images)
    fast = count / (time.perf_counter() - start)
    start = time.perf_counter()
    with torch.inference_mode():
        for begin in range(0, count, rm.BATCH_SIZE):
            for r in rm.ITERATIONS:
                net(test.images[begin : begin + rm.BATCH_SIZE], routing_iterations=r)
    slow = count / (time.perf_counter() - start)
    return fast, slow


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=REPO / "checkpoints" / "mnist.safetensors")
    parser.add_argument("--images", type=int, default=500, help="test images for the measure's speed")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"machine: {platform.processor() or platform.machine()}, {describe_device(torch.device('cpu'))}, "
          f"torch threads {torch.get_num_threads()}; checkpoint {args.checkpoint}")  # fmt: skip
    for name, ms in server(args.checkpoint, args.repeats).items():
        print(f"{name:62s} {ms:8.1f} ms")
    fast, slow = measure_speed(args.checkpoint, args.images)
    print(f"measure, r = 1..5 on the same votes: {fast:7.1f} images/s")
    print(f"full forward pass for each r:        {slow:7.1f} images/s  (the measure: {fast / slow:.2f}x as fast)")


if __name__ == "__main__":
    main()
