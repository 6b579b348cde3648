"""Routing as a switch (capsnet/runs/compare.py, comparison.py, `python -m capsnet compare-routings`): every routing
trained from the same seed, data and budget; one table, a verdict that follows its numbers, resumable runs, and the
table on the Where routing matters page."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from cli_support import capsnet
from dashboard_fixtures import APP, app_dirs, clear_streamlit_caches  # noqa: F401
from streamlit.testing.v1 import AppTest

from capsnet.files import read_json
from capsnet.runs import comparison


def test_each_routing_trains_alike_into_one_table_and_a_finished_run_is_not_trained_again(
    data_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "compare"
    args = ("compare-routings", "--out", out, "--seeds", "1", "--train-size", "100", "--test-size", "400",
            "--batch-size", "50", "--data-dir", data_dir)  # fmt: skip
    done = capsnet(*args)
    assert done.returncode == 0, done.stderr
    record = json.loads((out / comparison.FILE).read_text())
    assert [r["routing"] for r in record["results"]] == ["dynamic", "none", "attention", "em"]
    assert {r["seed"] for r in record["results"]} == {0}
    for result in record["results"]:
        assert 0.0 <= result["test_accuracy"] <= 1.0 and result["parameters"] > 0 and result["read_images_per_s"] > 0
        args_json = json.loads((out / f"{result['routing']}-seed0" / "args.json").read_text())
        assert (args_json["seed"], args_json["train_size"], args_json["epochs"]) == (0, 100, 1)  # alike
    for result in record["results"]:  # the affNIST-like digits read, and the drawn non-digits counted where it redraws
        assert 0.0 <= result["affnist_like_accuracy"] <= 1.0 and result["non_digits"] == 8, result
    # the tiny CapsNet has its decoder, and 400 test images hold the 20 right answers its thresholds are taken from
    assert 0 <= record["results"][0]["non_digits_flagged"] <= 8
    assert "| affNIST-like | drawn non-digits flagged |" in done.stdout and " of 8 |" in done.stdout
    # the no-routing CapsNet is the CapsNet, trained with uniform couplings: the same weights to learn
    params = {r["routing"]: r["parameters"] for r in record["results"]}
    assert params["dynamic"] == params["none"] and params["attention"] < params["dynamic"]
    for title in ("dynamic routing (r = 3)", "no routing", "self-attention routing", "EM routing"):
        assert title in done.stdout
    assert "on one seed, with no spread to judge that by" in done.stdout
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/best.safetensors")}
    again = capsnet(*args)
    assert again.returncode == 0 and "training on" not in again.stderr  # every run had finished: none trains again
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/best.safetensors")} == stamps


def test_a_comparison_stopped_part_way_says_how_to_go_on_and_goes_on(data_dir: Path, tmp_path: Path) -> None:
    """SIGTERM in a run's training: the comparison ends with one line (not a missing-checkpoint error) and exit 2,
    the run is left resumable, and the same command finishes it."""
    out = tmp_path / "compare"
    args = ["compare-routings", "--out", str(out), "--routings", "none", "--seeds", "1", "--train-size", "3000",
            "--test-size", "100", "--batch-size", "32", "--data-dir", str(data_dir)]  # fmt: skip
    process = subprocess.Popen([sys.executable, "-m", "capsnet", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    progress = out / "none-seed0" / "progress.json"
    deadline = time.time() + 120
    while time.time() < deadline and not (progress.is_file() and read_json(progress).get("batch", 0) >= 3):
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, said = process.communicate(timeout=120)
    assert process.returncode == 2 and "stopped before its end: the same command goes on from there" in said, said
    assert "no such checkpoint" not in said and read_json(progress)["status"] == "stopped"
    done = capsnet(*args)
    assert done.returncode == 0 and "no routing" in done.stdout, done.stderr
    assert read_json(progress)["status"] == "finished"


def test_bad_arguments_are_one_line(tmp_path: Path) -> None:
    for args, said in (
        (("--seeds", "0"), "--seeds"),
        (("--seeds", "21"), "--seeds must be at most 20"),
        (("--routings", "capsule-magic"), "invalid choice"),
        (("--lr", "3"), "--lr must lie in (0, 1]"),
    ):
        done = capsnet("compare-routings", "--out", tmp_path / "x", *args)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)


def _record(accuracies: dict[str, list[float]]) -> dict:
    return {
        "budget": {"dataset": "mnist", "size": "tiny", "epochs": 1, "train_size": 100, "test_size": 100,
                   "batch_size": 50, "lr": 0.001},
        "seeds": list(range(len(next(iter(accuracies.values()))))),
        "machine": "CPU: a test",
        "results": [{"routing": key, "seed": n, "test_accuracy": a, "parameters": 10, "train_images_per_s": 1.0,
                     "read_images_per_s": 2.0} for key, values in accuracies.items() for n, a in enumerate(values)],
    }  # fmt: skip


def test_the_verdict_follows_the_numbers() -> None:
    level = comparison.verdict(_record({"dynamic": [0.95, 0.97, 0.96], "none": [0.96, 0.94, 0.97]}))
    assert "within the seeds' spread" in level and "no difference that the seeds can tell" in level
    ahead = comparison.verdict(_record({"dynamic": [0.97, 0.975, 0.972], "none": [0.90, 0.91, 0.905]}))
    assert "points ahead of no routing, beyond the seeds' spread" in ahead and "Fewer than three" not in ahead
    rows = comparison.rows(_record({"dynamic": [0.9, 0.8], "attention": [0.5, 0.7]}))
    assert [(r.routing, round(r.accuracy, 3), round(r.spread, 3)) for r in rows] == [
        ("dynamic", 0.85, 0.1),
        ("attention", 0.6, 0.2),
    ]


def test_the_verdict_names_the_most_robust_and_the_strictest() -> None:
    record = _record({"dynamic": [0.95, 0.96, 0.97], "none": [0.95, 0.96, 0.97], "attention": [0.9, 0.9, 0.9]})
    for result, affine, flagged in zip(record["results"], [0.7, 0.72, 0.74, 0.8, 0.8, 0.8, 0.5, 0.6, 0.4],
                                       [2, 3, 4, 8, 8, 8, 0, 1, 2]):  # fmt: skip
        result.update(affnist_like_accuracy=affine, non_digits_flagged=flagged, non_digits=8)
    said = comparison.verdict(record)
    assert "no routing (r = 1, uniform couplings) holds best, 80.00%, self-attention routing" in said
    assert "Efficient-CapsNet) least, 50.00%" in said
    assert "no routing (r = 1, uniform couplings) flags the most as not like any class (8 of 8)" in said
    assert "the fewest (1 of 8)" in said
    rows = {row.routing: row for row in comparison.rows(record)}
    assert (rows["dynamic"].affine_text, rows["dynamic"].flagged_text) == ("72.00%", "3 of 8")
    del record["results"][0]["non_digits_flagged"]  # a seed without the test: no mean over the others
    assert comparison.rows(record)[0].flagged_text == "-"
    older = _record({"dynamic": [0.9], "none": [0.8]})  # written before these columns: dashes, and no words on them
    assert "| - | - |" in comparison.table(older) and "affNIST" not in comparison.verdict(older)


def test_a_damaged_or_huge_record_is_no_record(tmp_path: Path) -> None:
    for text in ("{", "[]", '{"results": [{"routing": "dynamic"}]}', " " * (comparison.MOST_BYTES + 1)):
        (tmp_path / comparison.FILE).write_text(text)
        assert comparison.read_record(tmp_path) is None


def test_the_where_routing_matters_page_shows_the_newest_comparison(app_dirs, tmp_path: Path) -> None:  # noqa: F811
    runs_root, checkpoints = app_dirs
    shutil.copy(Path(APP).parents[1] / "checkpoints" / "mnist.safetensors", checkpoints)
    shutil.copy(Path(APP).parents[1] / "checkpoints" / "mnist.routing.json", checkpoints)  # its r = 1..5, kept
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.switch_page("app_pages/routing_matters.py").run()
    assert any("compare-routings" in m.value for m in at.markdown)  # none yet: how to make one
    kept = runs_root / "compare-mnist"
    kept.mkdir()
    (kept / comparison.FILE).write_text(
        json.dumps(_record({"dynamic": [0.97, 0.975, 0.972], "none": [0.9, 0.91, 0.905]}))
    )
    at.run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    frame = next(d.value for d in at.dataframe if "Routing" in d.value.columns)
    assert list(frame["Routing"]) == ["dynamic routing (r = 3)", "no routing (r = 1, uniform couplings)"]
    assert any("points ahead of no routing" in m.value for m in at.markdown)
    assert list(frame["affNIST-like"]) == ["-", "-"]  # a record of the test accuracy only
    # each trained model opens on every page: its run is listed, and a link names it by both folders
    run = kept / "dynamic-seed0"
    run.mkdir()
    (run / "args.json").write_text(json.dumps({"dataset": "mnist", "epochs": 1}))
    shutil.copy(Path(APP).parents[1] / "checkpoints" / "mnist.safetensors", run / "best.safetensors")
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update(checkpoint="compare-mnist/dynamic-seed0", test="0")
    at.run()
    assert not at.exception and not [w.value for w in at.warning], [w.value for w in at.warning]
    picker = at.sidebar.selectbox(key="checkpoint_picker")
    assert picker.value == str(run / "best.safetensors") and "run compare-mnist/dynamic-seed0" in picker.format_func(
        picker.value
    )


def test_no_routing_is_a_preset_of_the_capsnet() -> None:
    """`--preset no-routing`: the paper's CapsNet, the same weights, trained and read with its couplings uniform."""
    import torch

    from capsnet.nn.capsnet import CapsNet
    from capsnet.nn.config import CapsNetConfig
    from capsnet.training.options import TrainOptions

    config = CapsNetConfig.preset("no-routing")
    assert config.routing_iterations == 1 and config == CapsNetConfig.preset("paper", routing_iterations=1)
    assert "no-routing" in TrainOptions.__dataclass_fields__["preset"].metadata["choices"]
    torch.manual_seed(0)
    small = CapsNet(CapsNetConfig.preset("tiny", routing_iterations=1)).eval()
    with torch.no_grad():
        out = small(torch.rand(2, 1, 28, 28), return_trace=True)
    assert out.trace is not None and torch.allclose(out.trace.coupling, torch.full_like(out.trace.coupling, 0.1))
