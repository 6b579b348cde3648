"""Where routing matters: the answers at r = 1..5 from one pass of the convolutions, kept beside the checkpoint,
and the page that lists the images whose answer changes and opens one on the Routing page."""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_support import capsnet
from dashboard_fixtures import APP, app_dirs, app_run, app_with_run, clear_streamlit_caches, knobs_payload  # noqa: F401
from streamlit.testing.v1 import AppTest

from capsnet.checkpoints import measurements
from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.data.datasets import dataset_info
from capsnet.data.multimnist import Pairs
from capsnet.data.tasks import LabelledSet, read_test_set
from capsnet.files import FileWriteError, file_sha256
from capsnet.nn.routing import CouplingScores
from capsnet.readings import routing_matters as rm
from capsnet.readings.coupling_rules import read_rules, verdict

COUNT = 300  # test images: enough for the tiny model to change some answers with r
KEPT_COUNT = 60  # for the tests of the kept file, which measure again and again


@pytest.fixture(scope="module")
def test_images(data_dir: Path) -> LabelledSet:
    return read_test_set("mnist").first(COUNT)


@pytest.fixture
def run_copy(app_run: Path, tmp_path: Path) -> Path:  # noqa: F811
    """A copy of the tiny trained run's checkpoint, to keep a summary beside."""
    return Path(shutil.copy(app_run / "best.safetensors", tmp_path / "best.safetensors"))


@pytest.fixture(autouse=True)
def keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_the_fast_measure_agrees_with_the_whole_network_run_at_each_r(app_run: Path, test_images) -> None:  # noqa: F811
    """Convolutions and votes once, routing r times on them == the full forward pass run anew for each r."""
    test_images = test_images.first(200)
    net = load_checkpoint(app_run / "best.safetensors").model
    fast = rm.iteration_lengths(net, test_images.images, rm.ITERATIONS, batch_size=64)  # (N, R, K)
    with torch.inference_mode():
        slow = torch.stack([net(test_images.images, routing_iterations=r).lengths for r in rm.ITERATIONS], 1)
    assert fast.shape == (200, len(rm.ITERATIONS), 10)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)
    odd_batches = rm.iteration_lengths(net, test_images.images[:80], rm.ITERATIONS, batch_size=37)
    torch.testing.assert_close(odd_batches, fast[:80], rtol=1e-5, atol=1e-6)

    readings = read_rules(net, test_images.images, rm.ITERATIONS, rm.SEED)
    torch.testing.assert_close(readings.scores[:, :-1], fast)
    result = rm.summarise(readings, test_images.labels, rm.ITERATIONS, "mnist", net.config.routing_iterations)
    predictions, labels = slow.argmax(2).numpy(), test_images.labels.numpy()  # (N, R)
    changed = np.flatnonzero((predictions != predictions[:, :1]).any(1))
    assert len(changed) > 0, "the tiny model changes some answers with r"
    assert [c.index for c in result.changed] == changed.tolist()
    assert result.correct == tuple(int(c) for c in (predictions == labels[:, None]).sum(0))
    assert result.differs_from_first == tuple(int(c) for c in (predictions != predictions[:, :1]).sum(0))
    for image in result.changed:
        assert image.predictions == tuple(predictions[image.index].tolist()) and image.label == labels[image.index]
        np.testing.assert_allclose(image.lengths, slow[image.index].numpy(), atol=1e-4)
        at = result.shown_iterations(image)
        assert image.predictions[rm.ITERATIONS.index(at)] != image.predictions[0]  # the change shows there
    assert result.trained_iterations == 3 and result.dataset == "mnist" and result.total == 200


def test_the_summary_is_json_and_refuses_what_it_is_not(app_run: Path, test_images) -> None:  # noqa: F811
    net = load_checkpoint(app_run / "best.safetensors").model
    result = rm.measure(net, test_images.first(100), checkpoint_sha256="ab" * 32)
    assert rm.RoutingMatters.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    broken = result.to_dict() | {"correct": [1, 2]}
    with pytest.raises(ValueError, match="one count per iteration"):
        rm.RoutingMatters.from_dict(broken)
    with pytest.raises(ValueError, match="not a routing summary"):
        rm.RoutingMatters.from_dict({"format": rm.FORMAT})
    with pytest.raises(ValueError, match="pairs of digits"):
        digits = torch.zeros(4, 1, 28, 28, dtype=torch.uint8)
        pairs = Pairs(torch.tensor([0, 1]), torch.tensor([2, 3]), torch.zeros(2, 2, 2, dtype=torch.long))
        rm.measure(net, LabelledSet(dataset_info("multimnist"), digits, torch.arange(4), pairs))


def test_kept_lengths_are_written_with_their_four_decimals_only() -> None:
    """The changed images' lengths are rounded to DECIMALS as Python floats: 0.1235, not float32's
    0.12349999696016312 (which tripled the size of an EM network's summary, where nearly every image changes)."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.rand(50, len(rm.ITERATIONS) + 1, 10, generator=generator)  # (N, R + 1, K), float32
    entropy = torch.rand(50, len(rm.ITERATIONS) + 1, generator=generator)
    result = rm.summarise(CouplingScores(scores, entropy), np.arange(50) % 10, rm.ITERATIONS, "mnist", 2)
    lengths = scores[:, :-1].numpy()
    values = [v for image in result.changed for row in image.lengths for v in row]
    assert len(result.changed) > 10 and len(values) == len(result.changed) * len(rm.ITERATIONS) * 10
    assert all(len(repr(v).split(".")[1]) <= rm.DECIMALS for v in values)
    assert all(abs(v - x) <= 0.5 * 10**-rm.DECIMALS + 1e-7 for image in result.changed
               for v, x in zip(np.ravel(image.lengths), np.ravel(lengths[image.index])))  # fmt: skip


@pytest.mark.slow
def test_the_command_line_measures_on_the_device_asked_and_keeps_the_summary(
    run_copy: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m capsnet routing-matters CHECKPOINT --device cpu`: the whole test set measured where asked and kept
    beside the checkpoint; a device that does not exist is one line and exit 2, before anything is measured."""
    monkeypatch.setenv(measurements.CACHE_ENV, str(tmp_path / "cache"))
    sidecar = rm.sidecar_path(run_copy)
    wrong = capsnet("routing-matters", run_copy, "--device", "tpu")
    assert wrong.returncode == 2 and wrong.stdout == "" and not sidecar.exists()
    assert "unknown device 'tpu'" in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1

    done = capsnet("routing-matters", run_copy, "--device", "cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    kept = rm.read_kept(run_copy, 10_000)
    assert kept is not None and kept.checkpoint_sha256 == file_sha256(run_copy)
    trained = kept.iterations.index(kept.trained_iterations)
    assert f"r = {kept.trained_iterations} (trained): accuracy {100 * kept.accuracy[trained]:.2f}%" in done.stdout
    assert f"random (not routed): accuracy {100 * kept.rules()[-1].accuracy:.2f}%" in done.stdout
    assert verdict(kept.rules()) in done.stdout  # the experiment's verdict, as the dashboard says it
    assert f"kept in {sidecar}" in done.stdout

    # a place beside the checkpoint that cannot take the summary (here a folder stands there) sends
    # it to the user's store, and the command names that file; a bad file among several is its own line, and the
    # others are measured all the same (exit 2 at the end)
    sidecar.unlink()
    sidecar.mkdir()
    missing = tmp_path / "missing.safetensors"
    again = capsnet("routing-matters", missing, run_copy, "--device", "cpu")
    assert again.returncode == 2, again.stderr[-2000:]
    assert again.stderr.strip().splitlines() == [f"python -m capsnet routing-matters: error: {missing}: no such "
                                                 "checkpoint file"]  # fmt: skip
    stored = measurements.in_store(file_sha256(run_copy), rm.KIND)
    assert stored.is_file() and f"kept in {stored}" in again.stdout and f"kept in {sidecar}" not in again.stdout


def test_the_summary_is_kept_once_and_a_damaged_one_is_measured_again(
    run_copy: Path, test_images, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(measurements.CACHE_ENV, str(tmp_path / "cache"))
    test_images, count = test_images.first(KEPT_COUNT), KEPT_COUNT
    checkpoint = load_checkpoint(run_copy)
    sidecar = rm.sidecar_path(run_copy)
    assert sidecar == run_copy.parent / "best.routing.json"
    measured = rm.kept_or_measured(checkpoint, test_images)
    assert sidecar.is_file() and measured.checkpoint_sha256 == file_sha256(run_copy)
    assert rm.read_kept(run_copy, count) == measured  # the round trip
    stamp = sidecar.stat().st_mtime_ns
    assert rm.kept_or_measured(checkpoint, test_images) == measured and sidecar.stat().st_mtime_ns == stamp  # once

    text = sidecar.read_text()
    sidecar.write_text(text.replace(measured.checkpoint_sha256, "0" * 64))
    assert rm.read_kept(run_copy, count) is None  # another checkpoint's
    sidecar.write_text(text)
    assert rm.read_kept(run_copy, count + 1) is None  # another test set's
    damaged = {
        "cut short": text[: len(text) // 2],
        "not JSON": "\x00\xff garbage",
        "a wrong type": text.replace('"total": 60', '"total": "60"'),
        "a count out of range": text.replace('"correct": [', '"correct": [-5, ', 1),
        "another format": text.replace(f'"format": {rm.FORMAT}', f'"format": {rm.FORMAT + 1}', 1),
    }
    for what, content in damaged.items():
        assert content != text, what
        sidecar.write_text(content)
        assert rm.read_kept(run_copy, count) is None, what
        assert rm.kept_or_measured(checkpoint, test_images) == measured, what  # measured again...
        assert json.loads(sidecar.read_text()) == measured.to_dict(), what  # ...and kept whole
    sidecar.unlink()
    sidecar.mkdir()  # a folder where the file should be: not read, and the entry goes to the user's store instead
    assert rm.read_kept(run_copy, count) is None
    assert rm.kept_or_measured(checkpoint, test_images) == measured
    assert (tmp_path / "cache" / "measurements" / f"{measured.checkpoint_sha256}.routing.json").is_file()
    assert rm.read_kept(run_copy, count) == measured  # read back from the store
    (tmp_path / "not-a-folder").write_text("")  # nowhere to keep it: one line naming the store's file
    monkeypatch.setenv(measurements.CACHE_ENV, str(tmp_path / "not-a-folder"))
    with pytest.raises(FileWriteError, match="routing.json"):
        rm.keep(run_copy, measured)


def _values(array: list | dict) -> np.ndarray:
    """A plotly JSON data array: a list, or numbers packed as base64 ("bdata" with its "dtype")."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
    return np.asarray(array)


def _metric(at: AppTest, start: str) -> str:
    values = [m.value for m in at.metric if m.label.startswith(start)]
    assert values, [m.label for m in at.metric]
    return values[0]


def test_the_page_measures_lists_the_changes_and_opens_one_on_the_routing_page(
    app_with_run,  # noqa: F811
    app_run: Path,  # noqa: F811
    test_images,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The app on a test set of 300 images: measure (once), see the summary, pick a change, open it on Routing."""
    from dashboard import models

    monkeypatch.setattr(models, "test_set", lambda name: (test_images.images, test_images.labels))
    runs_root, _ = app_with_run
    kept = runs_root / app_run.name / "best.routing.json"
    expected = rm.measure(load_checkpoint(app_run / "best.safetensors").model, test_images)

    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("app_pages/routing_matters.py").run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert not at.metric and not kept.exists()  # not measured until asked
    at.button(key="rm_measure_button").click().run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert _metric(at, "r = 1") == f"{100 * expected.accuracy[0]:.2f}%"
    assert _metric(at, "r = 3") == f"{100 * expected.accuracy[2]:.2f}%"
    assert _metric(at, "Changed") == f"{len(expected.changed):,}"
    (chart,) = [json.loads(e.proto.spec) for e in at.get("plotly_chart")]  # accuracy over r, over the bars of changes
    bars, line = chart["data"]
    assert _values(line["x"]).tolist() == list(rm.ITERATIONS)
    assert _values(bars["y"]).tolist() == list(expected.differs_from_first)
    np.testing.assert_allclose(_values(line["y"]), expected.accuracy)
    shown = kept.parent / "best.safetensors"  # the app's copy of the run's checkpoint
    assert rm.read_kept(shown, COUNT) == replace(expected, checkpoint_sha256=file_sha256(shown))
    listed = [int(b.key.removeprefix("rm_open_")) for b in at.button if (b.key or "").startswith("rm_open_")]
    assert listed == [c.index for c in expected.changed][:12]

    at.segmented_control(key="rm_effect").set_value("fixes").run()
    fixes = [int(b.key.removeprefix("rm_open_")) for b in at.button if (b.key or "").startswith("rm_open_")]
    assert fixes == [c.index for c in expected.changed if expected.effect(c) == "fixes"][:12]
    at.segmented_control(key="rm_effect").set_value("all").run()

    image = expected.changed[0]
    at.button(key=f"rm_open_{image.index}").click().run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    r = expected.shown_iterations(image)
    assert at.session_state["input_label"] == f"test image #{image.index}"
    assert knobs_payload(at, "routing")[0]["r"] == r  # the Routing page, at the r that shows the change
    assert any(f"test image #{image.index}" in c.value for c in at.caption)

    clear_streamlit_caches()  # a new session reads the kept summary: nothing to measure
    again = AppTest.from_file(APP, default_timeout=120).run()
    again.switch_page("app_pages/routing_matters.py").run()
    assert not again.exception and not [b for b in again.button if b.key == "rm_measure_button"]
    assert _metric(again, "Changed") == f"{len(expected.changed):,}"


@pytest.mark.slow
def test_the_em_network_is_measured_at_each_r_and_its_changes_open_on_draw(
    app_dirs,  # noqa: F811
    tiny_em: Path,
    test_images,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The EM network's class activations at r = 1..5 (every capsule layer routed r times), each r's
    reading the whole forward pass at that r; the page measures it and opens a changed image on the Draw page."""
    from dashboard import models

    _, checkpoints = app_dirs
    path = Path(shutil.copy(tiny_em, checkpoints / "mnist-em.safetensors"))  # the session's tiny trained EM network
    net = load_checkpoint(path, networks=("em",)).model
    images = test_images.first(100)
    scores = rm.iteration_lengths(net, images.images, rm.ITERATIONS, batch_size=64)  # (N, R, K)
    with torch.inference_mode():
        whole = torch.stack([net(images.images, routing_iterations=r).activations for r in rm.ITERATIONS], 1)
    # the class layer is read traced (PyTorch, for its coupling entropies) there and by the kernel in a forward pass
    # (`em_native`): float32 sums in other orders, which five iterations of this tiny network's sharp routing carry to
    # about 1e-3 of an activation in a few images (`test_em_capsnet` holds the two ways equal on one path)
    torch.testing.assert_close(scores, whole, rtol=0, atol=5e-3)
    expected = rm.measure(net, test_images)
    assert expected.trained_iterations == 3 and expected.changed, "the tiny EM network changes some answers with r"

    monkeypatch.setattr(models, "test_set", lambda name: (test_images.images, test_images.labels))
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(checkpoint="mnist-em")
    at = at.run()
    at.switch_page("app_pages/routing_matters.py").run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert any("EM network routes" in m.value for m in at.markdown)
    assert any("5 minutes on two cores" in i.value for i in at.info)  # how long, for this network, before the button
    at.button(key="rm_measure_button").click().run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert _metric(at, "r = 1") == f"{100 * expected.accuracy[0]:.2f}%"
    assert _metric(at, "Changed") == f"{len(expected.changed):,}"
    assert any("were learned for r = 3" in m.value for m in at.markdown)  # not "ambiguous ones", as for a CapsNet
    assert not any("ambiguous ones, that routing decides" in m.value for m in at.markdown)
    assert any(c.value.startswith("a of ") for c in at.caption)  # the margins between activations
    # the list opens on the images one more iteration changes (not every image "changed")
    one_more = [c for c in expected.changed if c.predictions[2] != c.predictions[3]]  # r = 3 (trained) -> 4
    assert at.toggle(key="rm_next_only").value and 0 < len(one_more) < len(expected.changed)
    assert at.toggle(key="rm_next_only").label == f"Only the {len(one_more):,} whose answer changes from r = 3 to r = 4"
    listed = {int(b.key.removeprefix("rm_open_")) for b in at.button if b.key and b.key.startswith("rm_open_")}
    assert listed and listed <= {c.index for c in one_more}
    image = one_more[0]
    at.button(key=f"rm_open_{image.index}").click().run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert at.session_state["input_label"] == f"test image #{image.index}"
    assert [m for m in at.metric if m.label == "Prediction"]  # the Draw page, reading the EM network
