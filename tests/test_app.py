"""The Streamlit app through AppTest: every page runs, and the main interactions do what they say."""

from __future__ import annotations

import dataclasses
import gc
import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from dashboard_fixtures import (  # noqa: F401
    APP,
    app_dirs,
    app_run,
    app_with_run,
    chart,
    clear_streamlit_caches,
    forget_knobs_held,
    knobs_payload,
    plotly_values,
    ship_affine_pair,
    turn_routing_knobs,
)
from PIL import Image
from streamlit.testing.v1 import AppTest

from capsnet.checkpoints import measurements
from capsnet.nn.em_capsnet import EMCapsNet, EMCapsNetConfig
from capsnet.readings import affnist
from capsnet.training.acceleration import choose_acceleration
from capsnet.training.options import TrainOptions
from dashboard import pages
from dashboard.knobs import payload

# every registered page, the Draw page (the default) first
PAGES = [pages.DRAW.path] + [p.path for p in pages.PAGES if p is not pages.DRAW]
# the pages whose charts need no trained model: runs, the guide, the network's shapes, the toy routing
MODEL_FREE = {p.path for p in (pages.TRAINING, pages.START, pages.ARCHITECTURE, pages.PLAYGROUND)}


@pytest.fixture(autouse=True)
def keep_torch_threads():
    """The app sets this process's torch threads for inference: give the next tests theirs back."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def new_app() -> AppTest:
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["eval_size"] = 1000  # evaluate on 1,000 test images: quick on a CPU
    return at


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.stack_trace for e in at.exception]


def prediction(at: AppTest) -> str | None:
    values = [m.value for m in at.metric if m.label == "Prediction"]
    return values[0] if values else None


def claim_rows(at: AppTest) -> dict[str, dict[str, str]]:
    """The claim's table as drawn (a column per network): {network: {figure: value}}."""
    table = at.table[-1].value
    return {name: dict(zip(table["figure"], table[name])) for name in table.columns if name != "figure"}


def pick_test_image(at: AppTest, index: int) -> AppTest:
    at.segmented_control(key="input_source").set_value("Test image").run()
    at.number_input(key="test_index").set_value(index).run()
    no_exception(at)
    return at


def fake_trainer(folder: Path, seconds: float) -> str:
    """A stand-in for the Python that runs `capsnet.training.trainer`: it only sleeps (the run's UI, not its training, is tested)."""
    import sys

    fake = folder / "fake-python"
    fake.write_text(f"#!{sys.executable}\nimport time\ntime.sleep({seconds})\n")
    fake.chmod(0o755)
    return str(fake)


def test_without_a_checkpoint_the_app_says_so(app_dirs) -> None:  # noqa: F811
    at = new_app().run()
    no_exception(at)
    assert any("No trained model yet" in w.value for w in at.sidebar.warning)
    assert at.segmented_control(key="input_source").value == "Test image"  # a first visit opens on test image #0
    assert at.session_state["input_label"] == "test image #0"
    at.segmented_control(key="input_source").set_value("Draw").run()
    assert any("Draw a digit" in i.value for i in at.info)
    at.segmented_control(key="input_source").set_value("Test image").run()
    no_exception(at)
    assert prediction(at) is None  # never the output of an untrained network
    assert any("No trained model is present" in w.value for w in at.warning)
    for page in PAGES[1:]:
        at.switch_page(page).run()
        no_exception(at)
        assert prediction(at) is None
        if page not in MODEL_FREE:  # the pages that read a model show nothing of an untrained one
            assert not at.get("plotly_chart"), page
    at.switch_page("app_pages/routing.py").run()
    assert any("python -m capsnet train" in w.value for w in at.warning)


def test_the_objects_the_imports_built_are_frozen_once(app_with_run) -> None:  # noqa: F811
    """Streamlit's collection after every run walks only what runs made: the app freezes once per process."""
    at = pick_test_image(new_app().run(), 3)
    frozen = gc.get_freeze_count()
    assert frozen > 100_000  # torch, plotly, streamlit and this package: the bulk of the heap
    at.switch_page("app_pages/routing.py").run()
    at.switch_page("app_pages/transform.py").run()
    no_exception(at)
    assert gc.get_freeze_count() <= frozen  # never again: a second freeze would keep each run's garbage cycles


@pytest.mark.parametrize("page", PAGES)
def test_each_page_runs_with_a_trained_checkpoint(app_with_run, page: str) -> None:  # noqa: F811
    at = new_app().run()
    no_exception(at)
    assert "run 20250101-000000-mnist" in at.sidebar.selectbox(key="checkpoint_picker").format_func(
        at.sidebar.selectbox(key="checkpoint_picker").value
    )
    pick_test_image(at, 0)
    assert prediction(at) is not None
    at.switch_page(page).run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]


def test_changing_the_test_image_changes_the_prediction(app_with_run, app_run) -> None:  # noqa: F811
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.data.datasets import as_tensors, load_dataset
    from capsnet.readings.reconstruction import reconstruct

    model = load_checkpoint(app_run / "best.safetensors").model
    images, _ = as_tensors(load_dataset("mnist", train=False))
    predicted = reconstruct(model, images[:50]).predictions
    first = 0
    other = int(np.flatnonzero(predicted != predicted[first])[0])
    at = new_app().run()
    pick_test_image(at, first)
    shown_first = prediction(at)
    pick_test_image(at, other)
    shown_other = prediction(at)
    assert shown_first == str(predicted[first]) and shown_other == str(predicted[other])
    assert shown_first != shown_other


def test_the_large_arrays_go_once_per_browser_session(app_with_run) -> None:  # noqa: F811
    """A model's decoder and an input's votes are carried by the first payload that needs them and named by the
    next (the browser holds them, js/store.js): a page switch or an r step sends kilobytes, not megabytes."""
    at = forget_knobs_held(pick_test_image(new_app().run(), 3)).run()  # the Draw page's redraw carries the decoder
    first = at.get("bidi_component")[0].proto.bytes
    header, _ = knobs_payload(at, "dimensions")
    (decoder,) = header["held"]
    assert header["held"][decoder] == ["w0", "b0", "w1", "b1", "w2", "b2"] and len(first) > 100_000
    at.switch_page("app_pages/dimensions.py").run()
    named = at.get("bidi_component")[0].proto.bytes
    assert decoder in payload.unpack(named)[0]["held"] and len(named) < 20_000  # named, not carried
    at.switch_page("app_pages/routing.py").run()
    carried = at.get("bidi_component")[0].proto.bytes
    turn_routing_knobs(at, 4).run()
    again = at.get("bidi_component")[0].proto.bytes
    assert len(carried) > 100_000 and len(again) < 20_000  # the votes once, then their name


def test_the_draw_page_redraws_any_class_in_the_browser(app_with_run, app_run) -> None:  # noqa: F811
    """The Draw page's what-if (a capsule redrawn) runs in the browser: the page sends every class capsule and the
    decoder once, and no select box reruns the server for another class."""
    at = forget_knobs_held(pick_test_image(new_app().run(), 3)).run()
    no_exception(at)
    header, arrays = knobs_payload(at, "dimensions")
    assert header["mode"] == "redraw" and header["caption"] == "reconstruction from capsule"
    assert header["prediction"] == int(prediction(at)) and arrays["poses"].shape == (10, 16) and "w2" in arrays
    assert not [b for b in at.selectbox if b.key == "reconstruct_as"]


def test_the_dimensions_knobs_carry_every_capsule_and_the_decoder(app_with_run, app_run) -> None:  # noqa: F811
    """The Capsule dimensions page hands the browser every class capsule as read, ranges that hold them, the input,
    and the decoder's weights, which redraw as the model does (the browser's arithmetic: test_knobs_browser.py)."""
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.readings.decoding import decode_vector

    at = pick_test_image(new_app().run(), 1)
    forget_knobs_held(at).switch_page("app_pages/dimensions.py").run()
    no_exception(at)
    header, arrays = knobs_payload(at, "dimensions")
    model = load_checkpoint(app_run / "best.safetensors").model.eval()
    assert header["labels"] == [f"Dimension {d + 1}" for d in range(16)] and header["capsule"] == header["prediction"]
    poses = arrays["poses"]
    assert poses.shape == (10, 16) and np.all(arrays["low"] <= poses) and np.all(poses <= arrays["high"])
    assert arrays["image"].shape == (28, 28)
    x = np.zeros(160, dtype=np.float64)
    x[16 * 3 : 16 * 4] = poses[3]
    for n in range(3):  # the decoder's layers as the browser gets them: ReLU, ReLU, sigmoid
        x = arrays[f"w{n}"].astype(np.float64) @ x + arrays[f"b{n}"]
        x = np.maximum(x, 0) if n < 2 else 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(x.reshape(28, 28), decode_vector(model, poses[3], 3), atol=1e-5)
    grid = chart(at, "perturbation_grid")
    assert grid["data"][0]["type"] == "image"


@pytest.mark.parametrize("iterations", [1, 4])
def test_every_routing_chart_draws_the_pages_one_iteration(app_with_run, iterations: int) -> None:  # noqa: F811
    at = pick_test_image(new_app().run(), 2)
    at.switch_page("app_pages/routing.py").run()
    no_exception(at)
    assert not [c for c in at.get("plotly_chart") if c.key == "coupling_maps"]  # drawn only once its expander opens
    at.session_state["routing_maps_open"] = True
    turn_routing_knobs(at, iterations).run()
    no_exception(at)
    assert knobs_payload(at, "routing")[0]["r"] == iterations
    keys = ("coupling_by_type", "coupling_maps", "votes_chosen", "votes_other")
    for key in keys:  # one iteration for the whole page: no chart plays on its own
        spec = chart(at, key)
        assert not spec.get("frames") and not spec["layout"].get("sliders") and not spec["layout"].get("updatemenus")
    if iterations > 1:  # each chart names the iteration the page's stepper chose: the last at first, then the first
        assert chart(at, "votes_chosen")["data"][3]["text"] == [f"iteration {iterations} of {iterations}"]
        assert chart(at, "coupling_maps")["layout"]["title"]["text"].endswith(f"iteration {iterations} of {iterations}")
        for _ in range(iterations - 1):
            at.button(key="routing_prev").click().run()
        shown = f"iteration 1 of {iterations}"
        assert chart(at, "votes_chosen")["data"][3]["text"] == [shown]
        assert chart(at, "votes_other")["data"][3]["text"] == [shown]
        assert chart(at, "coupling_maps")["layout"]["title"]["text"].endswith(shown)
        assert all(shown in a["text"] for a in chart(at, "coupling_by_type")["layout"]["annotations"][:2])
    assert len(chart(at, "iteration_lengths")["data"][0]["x"]) == iterations
    assert any("Procedure 1" in m.value for m in at.markdown)
    assert at.latex  # the formulas are shown


def png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def test_uploads(app_with_run) -> None:  # noqa: F811
    at = new_app().run()
    at.segmented_control(key="input_source").set_value("Upload").run()
    at.file_uploader(key="upload").set_value(("digit.png", b"not an image at all", "image/png")).run()
    no_exception(at)
    assert any("digit.png is not a readable image" in e.value for e in at.error)
    assert prediction(at) is None
    drawing = np.full((120, 90), 255, np.uint8)
    drawing[20:100, 40:50] = 0  # a dark '1' on white paper
    at.file_uploader(key="upload").set_value(("one.png", png(drawing), "image/png")).run()
    no_exception(at)
    assert not at.error and prediction(at) is not None
    # a phone's photo: megabytes of grain around a dark stroke on light paper, read like any other upload
    grain = np.random.default_rng(0).integers(100, 256, (2000, 1500), dtype=np.uint8)
    grain[400:1600, 700:820] = 0
    photo = png(grain)
    assert len(photo) > 2_000_000  # over the old 2 MB limit
    at.file_uploader(key="upload").set_value(("photo.png", photo, "image/png")).run()
    no_exception(at)
    assert not at.error and prediction(at) is not None


def config_number(key: str) -> float:
    """A number that .streamlit/config.toml sets (read as text: tomllib is Python 3.11+, the package allows 3.10)."""
    config = (Path(APP).parents[1] / ".streamlit" / "config.toml").read_text(encoding="utf-8")
    return float(re.search(rf"^{key} = ([0-9.e]+)", config, re.M).group(1))


def test_the_upload_limit_is_one_number() -> None:
    """The server's limit (.streamlit/config.toml) and the uploader's (which the page states) agree."""
    page = (Path(APP).parent / "app_pages" / "draw.py").read_text(encoding="utf-8")
    server = config_number("maxUploadSize")
    stated = int(re.search(r"^UPLOAD_MB = (\d+)", page, re.M).group(1))
    assert server == stated >= 10  # a phone's photo fits


def test_no_element_is_sent_as_a_reference_to_the_browsers_copy() -> None:
    """A reference to an element the browser has already let go kills its connection ("Cached ForwardMsg MISS", seen
    after a burst of key presses): .streamlit/config.toml makes every message smaller than the size from which
    Streamlit would cache it, so none is ever sent as a reference."""
    assert config_number("minCachedMessageSize") > config_number("maxMessageSize") * 1e6  # bytes, MB


def test_the_shipped_mnist_checkpoint_opens_first_and_broken_files_are_named(app_with_run, app_run) -> None:  # noqa: F811
    _, checkpoints = app_with_run
    shutil.copy(app_run / "best.safetensors", checkpoints / "mnist.safetensors")
    (checkpoints / "fashion-mnist.safetensors").write_bytes(b"truncated")
    at = new_app().run()
    no_exception(at)
    picker = at.sidebar.selectbox(key="checkpoint_picker")
    assert Path(picker.value).name == "mnist.safetensors"
    assert len(picker.options) == 2  # the shipped one and the run; the broken one is not selectable
    assert any("fashion-mnist.safetensors" in e.value for e in at.sidebar.error)
    assert not any(str(checkpoints) in e.value for e in at.sidebar.error)  # a name, not the server's path
    pick_test_image(at, 0)
    assert prediction(at) is not None
    # the one choice: picking the run in the box opens it, and it stays chosen across pages and reruns
    at.sidebar.selectbox(key="checkpoint_picker").select_index(1).run()  # the run, after the shipped file
    no_exception(at)
    run = at.session_state["model_path"]
    assert run.endswith("best.safetensors") and at.sidebar.selectbox(key="checkpoint_picker").value == run
    at.switch_page("app_pages/evaluate.py").run()
    assert at.sidebar.selectbox(key="checkpoint_picker").value == run and at.session_state["model_path"] == run


@pytest.mark.slow
def test_every_page_runs_on_the_shipped_fashion_mnist_model(app_dirs, data_dir: Path) -> None:  # noqa: F811
    _, checkpoints = app_dirs
    shutil.copy(Path(APP).parents[1] / "checkpoints" / "fashion-mnist.safetensors", checkpoints)
    at = new_app().run()
    no_exception(at)
    assert Path(at.sidebar.selectbox(key="checkpoint_picker").value).name == "fashion-mnist.safetensors"
    assert at.title[0].value == "Draw an item"  # the checkpoint's own word for an example
    assert at.segmented_control(key="input_source").value == "Test image"  # it opens on test images...
    assert any("A drawing can only be an outline" in i.value for i in at.info)  # ...and says why
    pick_test_image(at, 0)  # the first Fashion-MNIST test image is an ankle boot
    assert prediction(at) == "Ankle boot"
    for page in PAGES[1:]:
        at.switch_page(page).run()
        no_exception(at)
        assert not at.error, [e.value for e in at.error]
    assert "Ankle boot" in json.dumps(chart(at, "per_class_chart"))  # the class names come from the header


def test_a_missing_test_set_is_said_once_on_the_page_that_needs_it(
    app_with_run,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No MNIST on disk: the first visit opens no test image quietly (no message above the page), each page that
    needs the set says so once, and a link's test image says it cannot be opened."""
    import torchvision

    def offline(self: object) -> None:  # the one stand-in: a download would need the network
        raise RuntimeError("no network in tests")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", offline)
    (tmp_path / "no-data").mkdir()
    monkeypatch.setenv("CAPSNET_DATA_DIR", str(tmp_path / "no-data"))
    at = new_app()
    at.query_params.update(test="7")
    at = at.run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]  # the Draw page opens on its canvas, which needs no data
    assert any("test image `7` cannot be opened" in w.value for w in at.warning), [w.value for w in at.warning]
    at.segmented_control(key="input_source").set_value("Test image").run()
    missing = [e.value for e in at.error]
    assert len(missing) == 1 and "test set is not available" in missing[0] and "no-data" in missing[0], missing
    at.switch_page("app_pages/evaluate.py").run()
    no_exception(at)
    assert [e.value for e in at.error] == missing  # once, on the page that needs it
    at.switch_page("app_pages/routing.py").run()
    assert not at.error and any("No input yet" in i.value for i in at.info)


def test_every_page_runs_on_a_model_for_the_affine_claim(app_dirs, data_dir: Path) -> None:  # noqa: F811
    """A 40x40 CapsNet trained on moved digits (the shipped mnist-40 pair's kind): every page opens without an error,
    those that read a 28x28 input saying so."""
    _, checkpoints = app_dirs
    ship_affine_pair(checkpoints, capsnet=0.62, cnn=0.7)
    at = new_app()
    at.query_params.update(checkpoint="mnist-40")
    at = at.run()
    no_exception(at)
    assert Path(at.sidebar.selectbox(key="checkpoint_picker").value).name == "mnist-40.safetensors"
    assert any("40x40" in i.value for i in at.info)  # the Draw page says where this model belongs (28x28 inputs)
    for page in PAGES[1:]:
        at.switch_page(page).run()
        no_exception(at)
        assert not at.error, [e.value for e in at.error]


def test_the_training_page_lists_runs_and_a_second_start_is_refused(app_with_run, tmp_path: Path) -> None:  # noqa: F811

    from capsnet.runs import processes

    runs_root, _ = app_with_run
    running = processes.start_run(TrainOptions(epochs=1), runs_root, python=fake_trainer(tmp_path, seconds=60))
    try:
        at = new_app().run()
        no_exception(at)
        assert any(running.run_dir.name in m.value for m in at.sidebar.markdown)  # live progress panel
        at.sidebar.button(key="FormSubmitter:train_form-Start training").click().run()
        no_exception(at)
        assert any("already in progress" in e.value and running.run_dir.name in e.value for e in at.sidebar.error)
        at.run()  # the rerun that follows (the progress panel reruns the app): the refusal stays in view
        no_exception(at)
        assert any("already in progress" in e.value for e in at.sidebar.error)
        at.switch_page("app_pages/training.py").run()
        no_exception(at)
        chart(at, "training_curves")
        assert at.dataframe
        table = at.dataframe[0].value  # a run of every example and one of 300: one type per column
        assert sorted(table["examples"]) == ["300", "all"], list(table["examples"])
        # how each computes: the tiny CapsNet as this CPU chose (never compiled); the fake trainer records no choice
        made = choose_acceleration(torch.device("cpu")).precision
        assert sorted(table["computed"]) == sorted([made, "—"]), list(table["computed"])
    finally:
        processes.cancel_run(runs_root)


def test_evaluate_starts_on_the_first_1000_test_images(app_with_run) -> None:  # noqa: F811
    """All 10,000 take minutes with the paper's model on a CPU: an explicit choice, never the default."""
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=180)  # no eval_size set beforehand, unlike new_app()
    at.switch_page("app_pages/evaluate.py").run()
    no_exception(at)
    sizes = at.segmented_control(key="eval_size")
    assert sizes.value == 1000
    labels = list(sizes.options)  # as shown
    assert labels == ["first 1,000", "all 10,000 (takes a while on a CPU)"]
    assert any(m.label == "Mistakes (of 1,000)" for m in at.metric)
    # MNIST's class names are its class numbers: no "name" column repeating the "class" column
    (table,) = [d.value for d in at.dataframe]  # the per-class table
    assert list(table.columns) == ["class", "accuracy", "correct", "precision"]  # accuracy per class is its recall
    assert list(table["class"]) == list(range(10)) and ((0 <= table["precision"]) & (table["precision"] <= 1)).all()


def test_a_finished_run_replaces_the_progress_in_the_sidebar(app_with_run, tmp_path: Path) -> None:  # noqa: F811
    """The run's end is shown in the progress panel's own run (no Cancel, no loss left); the app reruns after."""
    import subprocess
    import time

    from capsnet.runs import processes

    runs_root, _ = app_with_run
    running = processes.start_run(TrainOptions(epochs=1), runs_root, python=fake_trainer(tmp_path, seconds=4))
    at = new_app().run()
    no_exception(at)
    assert any(running.run_dir.name in m.value for m in at.sidebar.markdown)
    assert "cancel_run" in [b.key for b in at.sidebar.button]
    try:
        processes._CHILDREN[running.pid].wait(timeout=60)
    except (KeyError, subprocess.TimeoutExpired):
        deadline = time.monotonic() + 60
        while processes.active_run(runs_root) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
    at.run()
    no_exception(at)
    assert any(running.run_dir.name in e.value and "failed" in e.value for e in at.sidebar.error)  # it never trained
    assert "cancel_run" not in [b.key for b in at.sidebar.button] and not at.sidebar.get("progress")
    assert at.session_state["progress_app_rerun"] is True  # the next tick reruns the whole app
    at.run()
    no_exception(at)
    assert "progress_app_rerun" not in at.session_state
    assert any(running.run_dir.name in e.value for e in at.sidebar.error)  # still shown until dismissed
    captions = [c.value for c in at.sidebar.caption if c.value.startswith("Runs are saved in")]
    assert len(captions) == 1


def _sidebar_stack_left_behind() -> None:
    """What a tick of the sidebar's progress fragment leaves in its script thread: the sidebar's container stack."""
    from streamlit.delta_generator_singletons import context_dg_stack, get_dg_singleton_instance

    singletons = get_dg_singleton_instance()
    context_dg_stack.set((singletons.main_dg, singletons.sidebar_dg))


def test_a_whole_app_run_after_a_sidebar_tick_draws_the_page_in_the_main_area(
    app_with_run,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A whole-app run that Streamlit starts in the thread of a progress tick (a click during the tick) starts on the
    sidebar's stack: without `sidebar.write_to_main` the page is drawn in the sidebar (seen in Chromium, 2 first
    visits out of 12), with it in the main area. The entry point calls it on every run, the stale stack given."""
    from dashboard import sidebar

    def script() -> None:  # AppTest runs its source alone: it imports what it uses
        import streamlit as st
        from test_app import _sidebar_stack_left_behind

        from dashboard import sidebar

        _sidebar_stack_left_behind()
        if st.session_state.get("reset"):
            sidebar.write_to_main()
        st.title("Draw a digit")

    for reset in (False, True):
        at = AppTest.from_function(script)
        at.session_state["reset"] = reset
        at.run()
        no_exception(at)
        assert [t.value for t in at.main.title] == (["Draw a digit"] if reset else [])
        assert [t.value for t in at.sidebar.title] == ([] if reset else ["Draw a digit"])

    calls = []

    def left_behind_then_reset() -> None:
        calls.append(True)
        _sidebar_stack_left_behind()
        write_to_main()

    write_to_main = sidebar.write_to_main
    monkeypatch.setattr(sidebar, "write_to_main", left_behind_then_reset)
    at = new_app().run()
    no_exception(at)
    assert calls and [t.value for t in at.main.title] == ["Draw a digit"] and not at.sidebar.title
    assert prediction(at) is not None  # the page's reading too, in the main area
    assert "checkpoint_picker" in [s.key for s in at.sidebar.selectbox]  # and the sidebar's own widgets stay there


def _reconfigured(run_dir: Path, target: Path, info: dict | None = None, **config: object) -> Path:
    """The tiny run's model saved with another config field (its weights still fit) and, if given, another info."""
    import dataclasses

    from capsnet.checkpoints.checkpoint import load_checkpoint, save_checkpoint

    checkpoint = load_checkpoint(run_dir / "best.safetensors")
    checkpoint.model.config = dataclasses.replace(checkpoint.config, **config)
    return save_checkpoint(target, checkpoint.model, checkpoint.info.to_dict() if info is None else info)


@pytest.mark.parametrize("page", PAGES[:3])
def test_a_model_trained_with_six_routing_iterations_opens_everywhere(app_dirs, app_run, page: str) -> None:  # noqa: F811
    """Training allows any r >= 1: the pages must not refuse the model's own r (they did above 5)."""
    _, checkpoints = app_dirs
    _reconfigured(app_run, checkpoints / "mnist.safetensors", routing_iterations=6)
    at = pick_test_image(new_app().run(), 0)
    assert prediction(at) is not None
    at.switch_page(page).run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    if page.endswith("routing.py"):
        header = knobs_payload(at, "routing")[0]
        assert header["r"] == 6 and header["max_r"] >= 6
        assert chart(at, "votes_chosen")["data"][3]["text"] == ["iteration 6 of 6"]


@pytest.mark.slow
def test_the_dimensions_page_says_where_its_ranges_come_from(app_dirs, app_run) -> None:  # noqa: F811
    _, checkpoints = app_dirs
    _reconfigured(app_run, checkpoints / "mnist.safetensors", info={"dataset": "mnist", "dimension_mean": [[0.0] * 8]})
    at = pick_test_image(new_app().run(), 0)
    at.switch_page("app_pages/dimensions.py").run()
    no_exception(at)
    captions = " ".join(c.value for c in at.caption)
    assert "±0.5 around 0" in captions and "no usable statistics" in captions and "mean ± 2 std" not in captions


def test_the_sidebar_form_offers_the_command_lines_defaults(app_with_run) -> None:  # noqa: F811
    at = new_app().run()
    no_exception(at)
    defaults = TrainOptions()
    assert at.sidebar.selectbox(key="train_dataset").value == defaults.dataset
    assert at.sidebar.selectbox(key="train_preset").value == (defaults.network, defaults.preset)
    assert at.sidebar.number_input(key="train_epochs").value == defaults.epochs
    assert at.sidebar.number_input(key="train_batch").value == defaults.batch_size
    assert at.sidebar.number_input(key="train_lr").value == pytest.approx(defaults.lr)
    assert at.sidebar.number_input(key="train_iterations").value == defaults.routing_iterations
    assert at.sidebar.number_input(key="train_beta_lr").value == pytest.approx(defaults.beta_lr)
    assert at.sidebar.selectbox(key="train_device").value == defaults.device


def _started(at: AppTest, runs_root: Path) -> Path:
    """The run folder that the sidebar's "Started <run> (pid ...)" names: there whether the run is still going, has
    ended or has failed by the time a test looks (the EM kernel trains the tiny network at hundreds of images a
    second, and under CI's load a test's page run can take longer than a short run)."""
    started = [re.match(r"Started (\S+) \(pid", s.value) for s in at.sidebar.success]
    names = [m.group(1) for m in started if m]
    assert len(names) == 1, [s.value for s in at.sidebar.success]
    return runs_root / names[0]


def _stop_runs(runs_root: Path) -> None:
    """Cancels the run a test started, if it is still going, and waits for its trainer to end."""
    from capsnet.runs import processes

    running = processes.cancel_run(runs_root)
    if running is not None and running.pid in processes._CHILDREN:
        processes._CHILDREN[running.pid].wait(timeout=60)


def test_the_sidebar_form_starts_an_em_run_with_its_beta_learning_rate(app_with_run) -> None:  # noqa: F811
    """The form's "β learning rate ×" is the CLI's --beta-lr: the run folder's arguments say what was asked for."""
    runs_root, _ = app_with_run
    at = new_app().run()
    at.sidebar.selectbox(key="train_preset").set_value(("em", "tiny"))
    at.sidebar.number_input(key="train_epochs").set_value(1)
    at.sidebar.number_input(key="train_size").set_value(2000)
    at.sidebar.number_input(key="test_size").set_value(100)
    at.sidebar.number_input(key="train_beta_lr").set_value(50.0)
    at.sidebar.button(key="FormSubmitter:train_form-Start training").click().run()
    no_exception(at)
    try:
        args = json.loads((_started(at, runs_root) / "args.json").read_text())
        assert (args["network"], args["preset"], args["beta_lr"], args["epochs"]) == ("em", "tiny", 50.0, 1)
    finally:
        _stop_runs(runs_root)


def test_the_em_demo_recipe_fills_the_form_with_a_run_that_learns_in_a_minute(app_with_run) -> None:  # noqa: F811
    """The "EM demo" recipe sets the model (the tiny EM network), its routing count (2, not the
    CapsNet's 3), the images and the learning rate; Start starts exactly that run."""

    runs_root, _ = app_with_run
    at = new_app().run()
    at.sidebar.radio(key="train_recipe").set_value("em-demo").run()
    no_exception(at)
    demo = TrainOptions.from_recipe("em-demo")
    assert at.sidebar.selectbox(key="train_preset_em-demo").value == ("em", "tiny")
    assert at.sidebar.number_input(key="train_iterations_em-demo").value == demo.routing_iterations == 2
    assert at.sidebar.number_input(key="train_size_em-demo").value == demo.train_size == 8000
    assert at.sidebar.number_input(key="test_size_em-demo").value == demo.test_size
    assert at.sidebar.number_input(key="train_lr_em-demo").value == pytest.approx(demo.lr)
    at.sidebar.button(key="FormSubmitter:train_form-Start training").click().run()
    no_exception(at)
    try:
        args = json.loads((_started(at, runs_root) / "args.json").read_text())
        wanted = ("em", "tiny", 2, 8000, 0.01, 64, 1)
        assert tuple(args[k] for k in ("network", "preset", "routing_iterations", "train_size", "lr",
                                       "batch_size", "epochs")) == wanted  # fmt: skip
    finally:
        _stop_runs(runs_root)


def test_the_sidebar_offers_the_fast_recipe_with_a_measured_time(app_with_run) -> None:  # noqa: F811
    at = new_app().run()
    no_exception(at)
    assert at.sidebar.radio(key="train_recipe").value == "paper"
    at.sidebar.radio(key="train_recipe").set_value("fast").run()
    no_exception(at)
    fast = TrainOptions.from_recipe("fast")
    assert at.sidebar.number_input(key="train_epochs_fast").value == fast.epochs
    assert at.sidebar.number_input(key="train_batch_fast").value == fast.batch_size
    assert at.sidebar.number_input(key="train_lr_fast").value == pytest.approx(fast.lr)
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "cosine decay" in captions and "On this machine" not in captions  # no run of this network measured yet
    at.sidebar.button(key="eta_measure").click().run(timeout=120)
    no_exception(at)
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "On this machine: about" in captions and "measured now" in captions, captions


def test_one_bad_run_folder_costs_one_row_never_the_page(app_with_run) -> None:  # noqa: F811
    """Damaged run folders, as found by probing: non-UTF-8 metrics, a metrics value of the wrong type, args with
    wrong types, and a checkpoint header naming a dataset this version does not know."""
    from capsnet.checkpoints.checkpoint import load_checkpoint, save_checkpoint

    runs_root, _ = app_with_run
    good = runs_root / "20250101-000000-mnist"
    bad = {name: runs_root / f"20250102-00000{i}-mnist" for i, name in enumerate(("bytes", "seconds", "args", "data"))}
    for folder in bad.values():
        shutil.copytree(good, folder)
    (bad["bytes"] / "metrics.jsonl").write_bytes(b'{"epoch": 1, "test_accuracy": 0.5}\n\xff\xfe\x00 broken\n')
    (bad["seconds"] / "metrics.jsonl").write_text('{"epoch": 1, "seconds": "abc", "train_loss": [1]}\n')
    args = json.loads((bad["args"] / "args.json").read_text())
    (bad["args"] / "args.json").write_text(json.dumps(args | {"epochs": "abc", "preset": ["x"], "train_size": {}}))
    checkpoint = load_checkpoint(good / "best.safetensors")
    save_checkpoint(bad["data"] / "best.safetensors", checkpoint.model, checkpoint.info.replace(dataset="cifar-11"))
    at = new_app().run()
    at.switch_page("app_pages/training.py").run()
    no_exception(at)
    table = at.dataframe[0].value
    assert set(table["run"]) == {good.name, *(f.name for f in bad.values())}
    for page in ("app_pages/draw.py", "app_pages/routing.py"):
        at = new_app()
        at.query_params["checkpoint"] = bad["data"].name
        at.run()
        at.switch_page(page).run()
        no_exception(at)


def test_the_training_page_shows_why_a_run_failed(app_with_run) -> None:  # noqa: F811
    from capsnet.files import write_json

    runs_root, _ = app_with_run
    failed = runs_root / "20250102-000000-mnist"
    failed.mkdir()
    write_json(failed / "args.json", TrainOptions(epochs=5).to_dict())
    reason = "training collapsed: after 300 batches the train accuracy is 10.1% (chance is 10%)"
    write_json(failed / "progress.json", {"status": "failed", "pid": 0, "epochs": 5, "reason": reason})
    at = new_app().run()
    at.switch_page("app_pages/training.py").run()
    no_exception(at)
    assert any(reason in e.label for e in at.expander), [e.label for e in at.expander]


def test_the_routing_page_steps_through_the_votes(app_with_run) -> None:  # noqa: F811
    at = pick_test_image(new_app().run(), 2)
    at.switch_page("app_pages/routing.py").run()
    no_exception(at)
    assert any("Showing **iteration 3 of 3**" in m.value for m in at.markdown)
    assert any("step every chart below" in c.value for c in at.caption)  # what the buttons do
    chosen, other = chart(at, "votes_chosen"), chart(at, "votes_other")
    assert len(plotly_values(chosen["data"][0]["x"])) == 8 * 36  # every capsule votes
    assert chosen["layout"]["title"]["text"] != other["layout"]["title"]["text"]  # the winner beside the runner-up
    sizes_last = chosen["data"][0]["marker"]["size"]
    at.button(key="routing_prev").click().run()
    no_exception(at)
    assert any("Showing **iteration 2 of 3**" in m.value for m in at.markdown)
    assert chart(at, "votes_chosen")["data"][0]["marker"]["size"] != sizes_last  # the weights of iteration 2
    assert chart(at, "votes_chosen")["data"][3]["text"] == ["iteration 2 of 3"]  # the chart names what it shows
    assert "iteration 2 of 3" in chart(at, "coupling_by_type")["layout"]["annotations"][0]["text"]
    at.button(key="routing_prev").click().run()
    assert at.button(key="routing_prev").disabled and not at.button(key="routing_next").disabled
    share = chart(at, "vote_share")
    if share["layout"]["barmode"] == "stack":  # the shares of each capsule, one bar per iteration
        assert len(share["data"]) == 10 and all(len(trace["x"]) == 3 for trace in share["data"])
    else:  # shares within two points of iteration 1's: their change, one bar per later iteration and capsule
        assert len(share["data"]) == 2 and all(len(trace["x"]) == 10 for trace in share["data"])
    overlay = chart(at, "vote_overlay")
    at.radio(key="overlay_mode").set_value("coupling").run()
    no_exception(at)
    assert chart(at, "vote_overlay")["layout"]["title"]["text"] != overlay["layout"]["title"]["text"]
    turn_routing_knobs(at, 1).run()  # one iteration: nothing to step or play
    no_exception(at)
    assert not [b for b in at.button if b.key in ("routing_prev", "routing_next")]
    assert len(chart(at, "votes_chosen")["data"]) == 5  # the votes, s_j, v_j and the selected ring (2): no label


def test_one_primary_capsule_is_selected_in_every_routing_view(app_with_run, app_run) -> None:  # noqa: F811
    """The linked views: the selected primary capsule's vote is ringed in both vote plots, its receptive field outlined
    on the input, and its couplings drawn; choosing another moves all three, and a click on a vote selects it."""
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.readings import agreement as ag
    from capsnet.readings.explain import explain

    at = pick_test_image(new_app().run(), 2)
    at.switch_page("app_pages/routing.py").run()
    no_exception(at)
    model = load_checkpoint(app_run / "best.safetensors").model
    config = model.config
    votes = explain(model, at.session_state["input_image"]).votes
    first = ag.first_primary(votes, at.session_state["input_image"], config)  # the longest where the ink is
    assert at.session_state["selected_primary"] == first

    def ringed(key: str) -> tuple[float, float]:
        data = chart(at, key)["data"]
        ring = data[-1]
        assert ring["name"] == "the selected capsule's vote"
        return float(plotly_values(ring["x"])[0]), float(plotly_values(ring["y"])[0])

    def vote_of(key: str, index: int) -> tuple[float, float]:
        points = chart(at, key)["data"][0]
        return float(plotly_values(points["x"])[index]), float(plotly_values(points["y"])[index])

    for key in ("votes_chosen", "votes_other"):
        assert ringed(key) == pytest.approx(vote_of(key, first))
    at.number_input(key="primary_type").set_value(3).run()
    at.number_input(key="primary_row").set_value(4).run()
    at.number_input(key="primary_col").set_value(1).run()
    no_exception(at)
    g = config.primary_grid
    picked = 2 * g * g + 4 * g + 1
    assert at.session_state["selected_primary"] == picked
    for key in ("votes_chosen", "votes_other"):
        assert ringed(key) == pytest.approx(vote_of(key, picked))
    (box,) = chart(at, "vote_overlay")["layout"]["shapes"]
    size = config.conv1_kernel + config.primary_kernel - 1
    assert (box["x0"], box["y0"], box["x1"]) == (2 - 0.5, 8 - 0.5, 2 + size - 0.5)  # column 1, row 4: stride 2
    bars = chart(at, "primary_coupling")["data"]
    np.testing.assert_allclose(plotly_values(bars[-1]["y"]), votes.coupling[-1, picked], rtol=1e-5)
    assert "type 3 at (4, 1)" in chart(at, "primary_coupling")["layout"]["title"]["text"]
    at.session_state["routing_maps_open"] = True  # the maps of every capsule outline it too
    at.run()
    (cell,) = chart(at, "coupling_maps")["layout"]["shapes"]
    assert cell["name"] == "selected capsule" and cell["x1"] - cell["x0"] == 1
    # a click on a vote (the plot's selection event) selects its capsule, and the picker follows
    at.session_state["votes_other"] = {"selection": {"points": [{"curve_number": 0, "point_index": 5}]}}
    at.run()
    no_exception(at)
    assert at.session_state["selected_primary"] == 5
    assert (at.number_input(key="primary_type").value, at.number_input(key="primary_col").value) == (1, 5 % g)


def test_the_transform_lens_follows_the_sliders(app_with_run) -> None:  # noqa: F811
    at = pick_test_image(new_app().run(), 1)
    at.switch_page("app_pages/transform.py").run()
    no_exception(at)

    def transformed() -> str:
        (images,) = [im for im in at.get("image") if "transformed" in im.captions]
        return images.value[1]

    before, pose = transformed(), chart(at, "lens_pose")["data"][0]["y"]
    sweep = chart(at, "lens_sweep")
    assert len(sweep["data"]) == 16 and all(len(t["x"]) == 37 for t in sweep["data"])  # 16 dimensions, 37 angles
    at.slider(key="lens_rotation").set_value(30.0).run()
    no_exception(at)
    assert transformed() != before and chart(at, "lens_pose")["data"][0]["y"] != pose
    assert any("Which dimensions of capsule" in m.value for m in at.markdown)
    at.button(key="lens_reset").click().run()
    assert at.slider(key="lens_rotation").value == 0.0 and transformed() == before


@pytest.mark.slow
def test_the_transform_lens_sets_the_capsnet_beside_a_cnn(
    app_with_run,  # noqa: F811
    tiny_baselines,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, checkpoints = app_with_run
    at = pick_test_image(new_app().run(), 1)
    at.switch_page("app_pages/transform.py").run()
    no_exception(at)
    assert any("No CNN baseline for this dataset yet" in c.value for c in at.caption)  # none shipped yet
    assert any("No pair trained on MNIST digits moved on 40x40" in c.value for c in at.caption)
    ship_baseline(checkpoints, tiny_baselines["mnist"], "mnist")
    ship_affine_pair(checkpoints, capsnet=0.62, cnn=0.7)
    at = new_app()
    at.query_params.update(checkpoint="20250101-000000-mnist")  # the run, not the "shipped" 40x40 pair
    at = pick_test_image(at.run(), 1)
    assert Path(at.sidebar.selectbox(key="checkpoint_picker").value).parent.name == "20250101-000000-mnist"
    at.switch_page("app_pages/transform.py").run()
    no_exception(at)
    # the affine claim's verdict reads the mnist-40 pair, whichever model is open: their affNIST-like figures
    verdict = " ".join(m.value for m in at.markdown)
    assert (
        "Here the CNN baseline is ahead, with the same budget of 2,000 training examples each, both from scratch "
        "(no warm start): 30.00% test error" in verdict
    )
    assert "Without any warm start" not in verdict  # no start-free record shipped: the pair alone
    assert "38.00%" in verdict and "not reproduced" in verdict and "disputed" in verdict
    table = claim_rows(at)
    assert list(table) == ["CapsNet", "CNN baseline"]  # a column per network: the table fits the page
    assert [table[n]["paper's test error"] for n in table] == ["21.0%", "34.0%"]
    assert [table[n]["here"] for n in table] == ["38.00% (10,000 test examples)", "30.00% (10,000 test examples)"]
    # a start-free pair's record beside the shipped files: its statement under the pair's, its rows in the table
    from capsnet.readings import claims

    pair = claims.verdict(
        "affnist", checkpoints / "mnist-40.safetensors", checkpoints / "baselines" / "mnist-40-cnn.safetensors"
    )
    scratch = dataclasses.replace(pair, rows=tuple(dataclasses.replace(r, error=r.error - 0.1) for r in pair.rows))
    claims.record_verdict(scratch, checkpoints / "claims" / "affnist-from-scratch.json")
    at.run()
    no_exception(at)
    assert any(m.value.startswith("**Without any warm start.** Here the CNN baseline is ahead") and "20.00%" in m.value
               for m in at.markdown)  # fmt: skip
    table = claim_rows(at)
    assert list(table)[2:] == ["CapsNet · from scratch", "CNN baseline · from scratch"]
    assert [table[n]["start"] for n in table] == ["from scratch"] * 4
    assert [table[n]["here"] for n in list(table)[2:]] == [
        "28.00% (10,000 test examples)",
        "20.00% (10,000 test examples)",
    ]
    curves = chart(at, "lens_claim")["data"]
    assert [plotly_values(t["x"]).tolist() for t in curves[:2]] == [[1000, 2000], [1000, 2000]]
    assert [t["name"] for t in curves[2:4]] == ["CapsNet, the kept file", "CNN baseline, the kept file"]
    assert [plotly_values(t["y"])[0] for t in curves[2:4]] == pytest.approx([38.0, 30.0])  # the table's figures
    cnn = next(m for m in at.metric if m.label == "CNN baseline on the transformed input")
    assert cnn.value in [str(d) for d in range(10)]
    at.selectbox(key="lens_robustness_size").set_value(2000).run()  # the cost is said before anything is measured
    assert any("The first time: about" in c.value and "reads 44,000 images" in c.value for c in at.caption)
    at.selectbox(key="lens_robustness_size").set_value(100)
    at.toggle(key="lens_robustness").set_value(True).run()
    no_exception(at)
    rotation, scale = chart(at, "lens_robustness_rotation"), chart(at, "lens_robustness_scale")
    assert [t["name"] for t in rotation["data"]] == ["CapsNet", "CNN"]
    assert len(plotly_values(rotation["data"][0]["x"])) == 13 and len(plotly_values(scale["data"][1]["y"])) == 9
    upright = plotly_values(rotation["data"][0]["y"])[6]  # 0 degrees: the plain accuracy on those 100 images
    assert 0 <= upright <= 100
    # kept in the measurement store, by each checkpoint's SHA-256: a new session reads them without measuring
    capsnet = Path(at.sidebar.selectbox(key="checkpoint_picker").value)
    kept = measurements.read(capsnet, "robustness")
    assert kept is not None and kept["rotation@100"]["accuracy"][6] * 100 == pytest.approx(upright)
    clear_streamlit_caches()
    monkeypatch.setattr(affnist, "accuracy_sweep", lambda *a, **k: pytest.fail("measured again"))
    at = new_app()
    at.query_params.update(checkpoint="20250101-000000-mnist")
    at = pick_test_image(at.run(), 1)
    at.switch_page("app_pages/transform.py").run()
    at.selectbox(key="lens_robustness_size").set_value(100)
    at.toggle(key="lens_robustness").set_value(True).run()
    no_exception(at)
    assert plotly_values(chart(at, "lens_robustness_rotation")["data"][0]["y"])[6] == pytest.approx(upright)


@pytest.mark.slow
def test_an_input_like_no_digit_is_flagged_by_the_em_model_too(app_dirs, data_dir: Path) -> None:  # noqa: F811
    """The shipped EM model's Draw page says whether the input is like a digit it knows (it was
    silent, reading grey noise as a digit at a = 1.00); a dot is flagged as barely active."""
    _, checkpoints = app_dirs
    shutil.copy(Path(APP).parents[1] / "checkpoints" / "mnist-em.safetensors", checkpoints)
    at = new_app()
    at.query_params.update(checkpoint="mnist-em", test="0")
    at.run()
    no_exception(at)
    said = [c.value for c in at.caption if "Looks like a digit the network knows" in c.value]
    assert said
    # its number tells digits apart: the redraw's error against its threshold (the activations sit at 1.00)
    pick_test_image(at, 1)
    assert [c.value for c in at.caption if "Looks like a digit the network knows" in c.value] != said
    noise = (np.random.default_rng(0).random((60, 60)) * 255).astype(np.uint8)
    at.segmented_control(key="input_source").set_value("Upload").run()
    at.file_uploader(key="upload").set_value(("noise.png", png(noise), "image/png")).run()
    no_exception(at)
    assert any("Not like any digit the network knows" in w.value for w in at.warning)
    dot = np.zeros((60, 60), dtype=np.uint8)
    dot[27:33, 27:33] = 255
    at.file_uploader(key="upload").set_value(("dot.png", png(dot), "image/png")).run()
    no_exception(at)
    said = " ".join(w.value for w in at.warning)
    assert "Not like any digit the network knows" in said and "its winning capsule is barely active (a = " in said


@pytest.mark.slow
def test_an_input_like_no_digit_is_flagged(app_dirs, data_dir: Path) -> None:  # noqa: F811
    """On the shipped model: a test digit looks like one, noise does not (though a class is still named)."""
    _, checkpoints = app_dirs
    shutil.copy(Path(APP).parents[1] / "checkpoints" / "mnist.safetensors", checkpoints)
    at = pick_test_image(new_app().run(), 0)
    assert any("Looks like a digit the network knows" in c.value for c in at.caption)
    noise = (np.random.default_rng(0).random((60, 60)) * 255).astype(np.uint8)
    at.segmented_control(key="input_source").set_value("Upload").run()
    at.file_uploader(key="upload").set_value(("noise.png", png(noise), "image/png")).run()
    no_exception(at)
    assert prediction(at) is not None  # it still names a class...
    assert any("Not like any digit the network knows" in w.value for w in at.warning)  # ...and says it is no digit


def test_a_shared_link_opens_that_view(app_with_run) -> None:  # noqa: F811
    runs_root, _ = app_with_run
    at = new_app()
    at.query_params.update(checkpoint="20250101-000000-mnist", test="12", iterations="2", capsule="4")
    at.run()
    no_exception(at)
    assert at.session_state["input_label"] == "test image #12" and at.session_state["test_index"] == 12
    at.switch_page("app_pages/routing.py").run()
    no_exception(at)
    header = knobs_payload(at, "routing")[0]
    assert header["r"] == 2 and header["capsule"] == 4
    assert "test image #12" in " ".join(c.value for c in at.caption)
    assert dict(at.query_params) == {
        "checkpoint": "20250101-000000-mnist",
        "test": "12",
        "iterations": "2",
        "capsule": "4",
    }  # fmt: skip  (the URL follows the state, to be shared)


@pytest.mark.slow
def test_each_model_keeps_its_own_routing_count_and_says_what_another_costs(app_dirs) -> None:  # noqa: F811
    """An r of 4 chosen for the CapsNet does not open the EM model (trained with 2) at 4, nor the
    other way round; away from its trained r each routing page says, beside the answer, how often the model is right
    at that r (Where routing matters' kept summaries of the shipped models), and at its trained r nothing."""
    _, checkpoints = app_dirs
    shipped = Path(APP).parents[1] / "checkpoints"
    accuracy = {}
    for name in ("mnist", "mnist-em"):
        for suffix in (".safetensors", ".routing.json"):
            shutil.copy(shipped / f"{name}{suffix}", checkpoints)
        kept = json.loads((shipped / f"{name}.routing.json").read_text())
        accuracy[name] = {r: f"{100 * c / kept['total']:.2f}%" for r, c in zip(kept["iterations"], kept["correct"])}
    at = new_app()
    at.query_params.update(checkpoint="mnist", test="412")
    at.run()
    at.switch_page(pages.ROUTING.path).run()
    no_exception(at)

    def said() -> str:
        return " ".join(i.value for i in at.info if "This model was trained with" in i.value)

    assert knobs_payload(at, "routing")[0]["r"] == 3 and said() == ""
    turn_routing_knobs(at, 4).run()
    no_exception(at)
    assert f"at r = 4 it answers {accuracy['mnist'][4]} of the MNIST test set right" in said()
    assert f"against {accuracy['mnist'][3]} at r = 3" in said()
    picker = at.sidebar.selectbox(key="checkpoint_picker")
    picker.select_index(next(i for i, o in enumerate(picker.options) if o.startswith("EM · "))).run()
    at.switch_page(pages.ROUTING.path_for("em")).run()
    no_exception(at)
    assert at.title[0].value == "EM routing"
    assert knobs_payload(at, "routing")[0]["r"] == 2 and said() == ""  # its own r, not the CapsNet's 4
    turn_routing_knobs(at, 4).run()
    no_exception(at)
    assert f"at r = 4 it answers {accuracy['mnist-em'][4]} of the MNIST test set right" in said()
    assert f"against {accuracy['mnist-em'][2]} at r = 2" in said()
    turn_routing_knobs(at, 5).run()
    picker = at.sidebar.selectbox(key="checkpoint_picker")
    picker.select_index(next(i for i, o in enumerate(picker.options) if o.startswith("MNIST · "))).run()
    at.switch_page(pages.ROUTING.path).run()
    no_exception(at)
    assert knobs_payload(at, "routing")[0]["r"] == 4  # the CapsNet's own, kept while the EM model was read


def _markdown_outside_code(text: str) -> str:
    """`text` without its code spans: what Markdown would still read as markup (a code span is shown as it is)."""
    return re.sub(r"(`+)(?:(?!\1).)*?\1", "", text)


def test_a_links_values_are_shown_as_text_never_as_markdown(app_with_run) -> None:  # noqa: F811
    """A shared link's values are data: a Markdown link, an image or an icon in one is shown as the characters it is
    (in a code span), never rendered as a live link, an outside image fetched on opening, or the app's own words."""
    hostile = {
        "checkpoint": "[Your link expired: sign in again](http://evil.example/login)",
        "test": "![](http://127.0.0.1:9/track.png)",
        "capsule": ":red[**admin**] `:material/lock:`",
        "iterations": "<img src=x onerror=alert(1)>",
    }
    at = new_app()
    at.query_params.update(**hostile)
    at.run()
    no_exception(at)
    notices = [w.value for w in at.warning if "The link's" in w.value]
    assert len(notices) == 4, notices
    for notice in notices:
        markup = _markdown_outside_code(notice)
        for opening in ("](", "![", "[", ":red", ":material", "<img", "http://"):
            assert opening not in markup, (opening, notice)
    assert any("evil" in n and "example" in n for n in notices)  # shown, as text


def test_a_link_with_bad_values_falls_back_with_a_notice(app_with_run) -> None:  # noqa: F811
    at = new_app()
    at.query_params.update(checkpoint="nope", test="99999", iterations="many", capsule="12")
    at.run()
    no_exception(at)
    notices = " ".join(w.value for w in at.warning)
    for part in ("checkpoint `nope` is not on this server", "test image `99999`", "iterations `many`", "capsule `12`"):
        assert part in notices, notices
    assert "run 20250101-000000-mnist" in at.sidebar.selectbox(key="checkpoint_picker").format_func(
        at.sidebar.selectbox(key="checkpoint_picker").value
    )  # the default model instead


def test_a_link_naming_a_checkpoint_by_a_path_echoes_no_path(app_with_run, app_run) -> None:  # noqa: F811
    """A link names a model by its name: one that names a file by a path (the server's own, or any) is told so
    without the path being shown in the app's words."""
    for path in (str(app_run / "best.safetensors"), "C:\\Users\\me\\model.safetensors", "../../etc/passwd"):
        at = new_app()
        at.query_params.update(checkpoint=path)
        at.run()
        no_exception(at)
        notices = " ".join(w.value for w in at.warning)
        assert "names a file by its path" in notices and "safetensors" not in notices and "etc" not in notices, notices


def in_order(node):
    """Every element under `node`, in page order (depth first)."""
    for child in getattr(node, "children", {}).values():
        yield child
        yield from in_order(child)


def test_a_mistake_opens_as_the_input_of_every_page(app_with_run) -> None:  # noqa: F811
    at = new_app().run()
    at.switch_page("app_pages/evaluate.py").run()
    no_exception(at)
    explore = [b for b in at.button if b.key and b.key.startswith("explore_")]
    assert explore, "the tiny model makes mistakes on 1,000 test images"
    index = int(explore[0].key.removeprefix("explore_"))
    explore[0].click().run()
    no_exception(at)
    assert at.session_state["input_label"] == f"test image #{index}"
    texts_in_order = [v if isinstance(v := getattr(node, "value", None), str) else "" for node in in_order(at.main)]
    said = [n for n, v in enumerate(texts_in_order) if isinstance(v, str) and f"#{index} is now the input" in v]
    mistakes = texts_in_order.index("The most confident mistakes")
    # said once, just under the button clicked (past the grid of reconstructions), so nothing above it moved
    assert len(said) == 1 and said[0] > mistakes, (said, mistakes)
    at.run()
    assert not any("is now the input" in m.value for m in at.markdown)  # once
    at.switch_page("app_pages/dimensions.py").run()
    no_exception(at)
    assert any(f"test image #{index}" in c.value for c in at.caption)


def test_a_link_beyond_the_slider_and_a_walk_across_pages(app_with_run) -> None:  # noqa: F811
    """iterations=10 is beyond what the Routing page offers (1 to 5, or the model's own r): refused with a notice, the
    page at the model's own r; the linked test image stays the input, and in the URL, on every
    page."""
    at = new_app()
    at.query_params.update(test="7", iterations="10")
    at.run()
    no_exception(at)
    assert any("The link's iterations `10` is not a number from 1 to 5: ignored." in w.value for w in at.warning)
    at.switch_page("app_pages/routing.py").run()
    no_exception(at)
    header = knobs_payload(at, "routing")[0]
    assert header["r"] == 3 and header["max_r"] == 5
    at.run()
    assert at.query_params["iterations"] == "3"  # the URL follows the page's r
    for page in ("app_pages/dimensions.py", "app_pages/transform.py", "app_pages/draw.py"):
        at.switch_page(page).run()
        no_exception(at)
        assert at.session_state["input_label"] == "test image #7" and at.query_params["test"] == "7", page
    assert (
        at.segmented_control(key="input_source").value == "Test image" and at.number_input(key="test_index").value == 7
    )


def ship_baseline(checkpoints: Path, source: Path, dataset: str) -> None:
    (checkpoints / "baselines").mkdir(exist_ok=True)
    shutil.copy(source, checkpoints / "baselines" / f"{dataset}-cnn.safetensors")


@pytest.mark.slow
def test_the_overlapping_digits_page(app_dirs, tiny_multimnist, tiny_baselines) -> None:  # noqa: F811
    _, checkpoints = app_dirs
    shutil.copy(tiny_multimnist, checkpoints / "multimnist.safetensors")
    ship_baseline(checkpoints, tiny_baselines["multimnist"], "multimnist")
    at = new_app().run()
    no_exception(at)
    assert Path(at.sidebar.selectbox(key="checkpoint_picker").value).name == "multimnist.safetensors"
    assert any("MultiMNIST" in i.value for i in at.info)  # the Draw page says where this model belongs
    at.switch_page("app_pages/overlap.py").run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    metric = next(m for m in at.metric if m.label == "CapsNet: the two longest capsules")
    cnn = next(m for m in at.metric if m.label == "CNN baseline: the two highest scores")  # the CNN's answer beside
    assert " and " in cnn.value and cnn.delta in ("right", "wrong")
    lengths = chart(at, "overlap_lengths")  # per class, the capsule length and the CNN's score
    assert [len(plotly_values(trace["y"])) for trace in lengths["data"]] == [10, 10]
    assert any("CNN baseline" in c.value and "error" in c.value for c in at.caption)
    (segmented,) = [im for im in at.get("image") if any("red: from capsule" in c for c in im.captions)]
    assert chart(at, "overlap_votes")["data"][1]["type"] == "heatmap"
    # the verdict on the paper's claim: this model against its CNN, with budgets, a curve and the dispute
    verdict = " ".join(m.value for m in at.markdown)
    assert "is ahead, with the same budget of 1,000 training examples each" in verdict and "disputed" in verdict
    assert list(claim_rows(at)) == ["CapsNet", "CNN baseline"]
    claim = chart(at, "overlap_claim")
    assert [t["name"] for t in claim["data"]][:2] == ["CapsNet here", "CNN baseline here"]
    at.button(key="overlap_random").click().run()
    no_exception(at)
    first, second = at.number_input(key="overlap_first").value, at.number_input(key="overlap_second").value
    assert first != 0 or second != 1
    assert any("True digits" in c.value for c in at.caption)
    # the shifts survive a visit to "Draw two", where the page stops before drawing them, and the digits too
    shifts = {k: at.slider(key=f"overlap_{k}").value for k in ("first_dy", "first_dx", "second_dy", "second_dx")}
    at.segmented_control(key="overlap_source").set_value("Draw two").run()
    no_exception(at)
    assert not at.main.slider  # no drawings kept yet: the page waits for them
    at.segmented_control(key="overlap_source").set_value("Test digits").run()
    no_exception(at)
    assert {k: at.slider(key=f"overlap_{k}").value for k in shifts} == shifts
    assert (at.number_input(key="overlap_first").value, at.number_input(key="overlap_second").value) == (first, second)
    for page in ("app_pages/routing.py", "app_pages/evaluate.py", "app_pages/transform.py"):
        at.switch_page(page).run()
        no_exception(at)
        assert any("MultiMNIST" in i.value for i in at.info), page  # not a crash on a 36x36 model
    assert metric.value and segmented.value


def test_the_guided_path_visits_every_page_once_and_ticks_what_was_opened(app_with_run) -> None:  # noqa: F811
    from dashboard import guided_path

    capsnet = [step for step in guided_path.GUIDED_PATH if step.network is None]
    assert sorted(step.page.path for step in capsnet) == sorted(p.path for p in pages.PAGES if p is not pages.START)
    assert [(s.page, s.network) for s in guided_path.GUIDED_PATH if s.network is not None] == [(pages.ROUTING, "em")]
    at = new_app().run()
    at.switch_page(pages.START.path).run()
    no_exception(at)
    assert at.title[0].value == "Start here"
    steps = [c for c in at.get("page_link")]
    assert [link.proto.page for link in steps][: len(capsnet)] == [s.page.url_path for s in capsnet]
    assert any("No EM model here yet" in c.value for c in at.caption)  # none in this app's folders: said, no button
    ticked = lambda: sum("visited" in m.value for m in at.markdown)  # noqa: E731
    assert ticked() == 1  # the Draw page, where the app opened
    # the Draw step says what the page opens on (it said "draw a digit" over a test image)
    draw = next(s for s in capsnet if s.page is pages.DRAW)
    assert at.session_state["input_source"] == "Test image" and "The page opens on a test image" in draw.do
    at.switch_page(pages.PLAYGROUND.path).run()
    at.switch_page(pages.START.path).run()
    no_exception(at)
    assert ticked() == 2
    assert "2 of 11 steps visited" in at.get("progress")[0].proto.text


def test_the_sidebar_says_a_warm_started_models_epochs_as_the_pages_do(app_dirs) -> None:  # noqa: F811
    """The shipped MultiMNIST model: "107 on MNIST + 8 on MultiMNIST", never a sum of 115."""
    _, checkpoints = app_dirs
    shutil.copy(Path(APP).parents[1] / "checkpoints" / "multimnist.safetensors", checkpoints)
    at = new_app().run()
    no_exception(at)
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "107 on MNIST + 8 on MultiMNIST" in captions and "115" not in captions


def test_the_form_offers_only_this_machines_devices(app_dirs, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """No cuda or mps on a machine without them; with a GPU, cuda is offered."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert new_app().run().sidebar.selectbox(key="train_device").options == ["auto", "cpu"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "cuda" in new_app().run().sidebar.selectbox(key="train_device").options


def test_a_test_image_in_a_link_to_a_pairs_model_is_said_to_be_ignored(app_dirs) -> None:  # noqa: F811
    """`test=3` opening the MultiMNIST model: a notice, not silence."""
    _, checkpoints = app_dirs
    shutil.copy(Path(APP).parents[1] / "checkpoints" / "multimnist.safetensors", checkpoints)
    at = new_app()
    at.query_params.update(checkpoint="multimnist", test="3")
    at.run()
    no_exception(at)
    notices = " ".join(w.value for w in at.warning)
    assert "test image `3` is one 28x28 image" in notices and "MultiMNIST" in notices, notices


def test_a_first_visit_is_pointed_to_the_primer_and_the_path(app_with_run) -> None:  # noqa: F811
    """The landing page points to Start here until it is opened; Start here opens with what a capsule is, in a few
    sentences and one picture, before the steps."""
    at = new_app().run()
    no_exception(at)
    assert any("New to capsules?" in i.value for i in at.info)
    assert any(link.proto.page == "start" for link in at.get("page_link"))
    at.switch_page("app_pages/start.py").run()
    no_exception(at)
    text = " ".join(m.value for m in at.markdown)
    assert "What is a capsule?" in text and "You have read" not in text
    assert text.index("What is a capsule?") < text.index("This path takes you")
    arrows = chart(at, "start_primer")["layout"]["annotations"]
    assert [a["text"] for a in arrows if a.get("text")][0].startswith("a 7, slanted right: |v| = 0.92")
    at.switch_page("app_pages/draw.py").run()
    assert not any("New to capsules?" in i.value for i in at.info)  # once Start here was opened


def test_one_click_opens_the_multimnist_model_and_one_brings_back_the_other(app_with_run, app_run) -> None:  # noqa: F811
    """Step 8 with the default model: no dead end."""
    _, checkpoints = app_with_run
    shutil.copy(app_run / "best.safetensors", checkpoints / "mnist.safetensors")  # the default: an MNIST model
    shutil.copy(Path(APP).parents[1] / "checkpoints" / "multimnist.safetensors", checkpoints)
    at = new_app().run()
    first = at.session_state["model_path"]
    assert Path(first).name == "mnist.safetensors"
    at.switch_page("app_pages/overlap.py").run()
    no_exception(at)
    assert any("Open the shipped MultiMNIST model" in i.value for i in at.info)
    at.button(key="switch_model").click().run()
    no_exception(at)
    assert Path(at.session_state["model_path"]).name == "multimnist.safetensors"
    assert at.get("plotly_chart") or at.image  # the page draws the pair now
    at.button(key="switch_back").click().run()
    no_exception(at)
    assert at.session_state["model_path"] == first
    assert any("Open the shipped MultiMNIST model" in i.value for i in at.info)


def test_a_first_visit_has_an_input_on_every_page(app_with_run) -> None:  # noqa: F811
    """Test image #0 is the input of a first visit, so Architecture, Routing, Capsule dimensions and the Transform
    lens show it instead of "No input yet"; a link's own test image wins."""
    at = new_app().run()
    assert at.session_state["input_label"] == "test image #0" and prediction(at) is not None
    for page in ("app_pages/architecture.py", "app_pages/routing.py", "app_pages/dimensions.py",
                 "app_pages/transform.py"):  # fmt: skip
        at.switch_page(page).run()
        no_exception(at)
        assert not any("No input yet" in i.value for i in at.info), page
    linked = new_app()
    linked.query_params.update(test="5")
    assert linked.run().session_state["input_label"] == "test image #5"


def _em_checkpoint(path: Path, decoder: bool) -> Path:
    """A tiny EM network (with a decoder, or without) as a checkpoint of MNIST: the pages need one, not a good one."""
    from capsnet.checkpoints.checkpoint import save_checkpoint

    torch.manual_seed(0)
    config = EMCapsNetConfig.preset("tiny", decoder_hidden=(64,) if decoder else ())
    return save_checkpoint(
        path, EMCapsNet(config), {"dataset": "mnist", "dataset_title": "MNIST", "test_accuracy": 0.1}
    )


@pytest.mark.slow
def test_every_page_runs_on_an_em_model(app_dirs, data_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    """The EM network in the picker: Draw, Dimensions and Evaluate read it (activations as its scores, its
    class layer's routing, the 16 pose entries redrawn by its decoder), every page that reads only the CapsNet says so
    in one line with a click to a CapsNet, none fails; without a decoder, what needs one says so."""
    _, checkpoints = app_dirs
    _em_checkpoint(checkpoints / "mnist-em.safetensors", decoder=True)
    shutil.copy(Path(APP).parents[1] / "checkpoints" / "mnist.safetensors", checkpoints)
    at = new_app()
    at.query_params.update(checkpoint="mnist-em")
    at = at.run()
    no_exception(at)
    picker = at.sidebar.selectbox(key="checkpoint_picker")
    assert Path(picker.value).name == "mnist-em.safetensors"
    assert picker.format_func(picker.value).startswith("EM · MNIST · ")  # the network named first
    assert picker.options[0].startswith("MNIST · ") and picker.options[1].startswith("EM · MNIST · ")  # CapsNet first
    assert prediction(at) is not None and not [i for i in at.info if "EM network" in i.value]  # Draw reads it
    routed = chart(at, "em_class_routing")
    shares = [plotly_values(t["y"]) for t in routed["data"] if t.get("xaxis") == "x2"]
    assert len(shares) == 10 and all(abs(s[0] - 0.1) < 1e-6 for s in shares)  # every child shared evenly at first
    assert knobs_payload(at, "dimensions")[0]["caption"] == "redrawn from the pose of"  # the redraw, in the browser
    for info in [p for p in pages.PAGES if p is not pages.DRAW]:  # each page's view for a network routed by EM
        at.switch_page(info.path_for("em")).run()
        no_exception(at)
        assert not at.error, [e.value for e in at.error]
    forget_knobs_held(at).switch_page(pages.DIMENSIONS.path).run()
    no_exception(at)
    header, arrays = knobs_payload(at, "dimensions")  # the sliders name the entries of the 4x4 pose
    assert header["labels"][0] == "Pose entry (1, 1)" and header["labels"][15] == "Pose entry (4, 4)"
    assert arrays["poses"].shape == (10, 16) and "w0" in arrays  # the EM decoder goes with them
    at.switch_page(pages.ARCHITECTURE.path).run()  # the EM network's own stages, counted from its config
    stage = at.radio(key="arch_stage")
    assert stage.options == [
        "Input",
        "ReLU Conv1",
        "PrimaryCaps",
        "ConvCaps1",
        "ConvCaps2",
        "Class capsules",
        "Decoder",
    ]
    stage.set_value("convcaps1").run()
    no_exception(at)
    assert any(r"\beta_u" in e.body for e in at.get("latex"))  # the M-step's cost, in the stage's formulas
    counts = [c.value for c in at.caption if "parameters in all" in c.value]
    net = EMCapsNet(EMCapsNetConfig.preset("tiny", decoder_hidden=(64,)))
    assert (
        counts
        and f"{net.num_parameters():,} parameters in all, {net.num_parameters(decoder=False):,} without" in counts[0]
    )
    at.switch_page(pages.EVALUATE.path).run()
    assert [m.label for m in at.metric][:2] == ["Test accuracy", "Mistakes (of 1,000)"]
    loss = [m for m in at.metric if m.label == "Test loss"][0]
    assert loss.help == "Spread loss at margin 0.9 + 0.0005 x reconstruction loss"
    assert chart(at, "reconstruction_grid")
    at.switch_page(pages.ROUTING.path_for("em")).run()  # EM routing in the class layer, one iteration at a time
    assert at.title[0].value == "EM routing" and at.markdown[-1].value.startswith("Showing **iteration 3 of 3**")
    at.button(key="routing_prev").click().run()
    at.button(key="routing_prev").click().run()
    no_exception(at)
    assert any("iteration 1 of 3" in m.value for m in at.markdown)
    shares = chart(at, "em_assignments")["data"][0]["z"]  # (types, positions): every child's share at the start
    assert np.allclose(plotly_values(shares), 0.1, atol=1e-6)
    turn_routing_knobs(at, 5).run()
    no_exception(at)
    assert any("iteration 5 of 5" in m.value for m in at.markdown)
    # ConvCaps1: where one child's unit of data went, over every window holding it (the most active child first)
    at.segmented_control(key="em_routing_layer").set_value("ConvCaps1").run()
    no_exception(at)
    circles = chart(at, "em_layer")["data"][1]  # over the parents' activations: the parents the child was given to
    given = plotly_values(circles["customdata"])
    assert 0 < len(given) <= 4 * 4 and given.sum() == pytest.approx(1.0, abs=0.02)  # <= 4 windows x 4 types (tiny)
    assert any("window" in m.value and "compete for it" in m.value for m in at.markdown)
    at.number_input(key="em_child_ConvCaps1_y").set_value(11).run()  # the last row: under no window of stride 2
    no_exception(at)
    assert any("is in **no window**" in m.value for m in at.markdown)
    assert len(chart(at, "em_layer")["data"]) == 1  # no circles
    at.segmented_control(key="em_routing_layer").set_value("ConvCaps2").run()
    at.number_input(key="em_child_ConvCaps2_y").set_value(2).run()
    at.number_input(key="em_child_ConvCaps2_x").set_value(2).run()  # the centre of 5x5: in all 9 windows of 3x3
    no_exception(at)
    boxes = chart(at, "em_child_windows")["layout"]["shapes"]
    assert [(b["x0"], b["y0"]) for b in boxes[:-1]] == [(x - 0.5, y - 0.5) for y in range(3) for x in range(3)]
    assert (boxes[-1]["x0"], boxes[-1]["y0"]) == (1.5, 1.5)  # the child's own cell
    turn_routing_knobs(at, 1).run()  # one M-step: before any agreement, equal shares
    no_exception(at)
    assert any("each of them is given the same 1/36 = 2.8%" in m.value for m in at.markdown)  # 9 windows x 4 types
    at.switch_page(pages.DRAW.path).run()
    at.switch_page(pages.ROUTING.path_for("em")).run()  # the layer and the child are kept across pages
    assert at.segmented_control(key="em_routing_layer").value == "ConvCaps2"
    assert at.number_input(key="em_child_ConvCaps2_x").value == 2
    at.segmented_control(key="em_routing_layer").set_value("class capsules").run()
    no_exception(at)
    assert chart(at, "em_assignments")
    at.switch_page(pages.TRANSFORM.path).run()  # the activations stay, the 16 pose entries follow the turn
    at.slider(key="lens_rotation").set_value(30.0).run()
    no_exception(at)
    turned = [m for m in at.metric if m.label == "Prediction"][0]
    assert turned.delta.startswith("a = ") and len(chart(at, "lens_pose")["data"][0]["x"]) == 16
    assert any("redrawn" not in c.value and "what the capsule redraws" in c.value for c in at.caption)
    at.switch_page(pages.OVERLAP.path).run()
    notices = [i.value for i in at.info if "EM network" in i.value]
    assert len(notices) == 1 and "\n" not in notices[0]  # the overlapping digits read vector capsules only: one line
    at.switch_page(pages.PLAYGROUND.path).run()  # the toy routes by both; the real votes below are a CapsNet's
    assert len([i for i in at.info if "EM network" in i.value]) == 1
    at.button(key="switch_model").click().run()  # one click to a CapsNet
    no_exception(at)
    assert Path(at.session_state["model_path"]).name == "mnist.safetensors"

    # the tiny preset has no decoder: Draw and Evaluate say they cannot redraw, Dimensions says why it cannot work
    _em_checkpoint(checkpoints / "mnist-em.safetensors", decoder=False)
    at = new_app()
    at.query_params.update(checkpoint="mnist-em")
    at = at.run()
    no_exception(at)
    assert prediction(at) is not None and any("no decoder" in c.value for c in at.caption)
    assert any("cannot say whether the input is like a class it knows" in c.value for c in at.caption)  # no check
    at.switch_page(pages.DIMENSIONS.path).run()
    assert [i.value for i in at.info if "no decoder" in i.value] and not at.get("slider")
    at.switch_page(pages.EVALUATE.path).run()
    assert any("no decoder" in c.value for c in at.caption) and "reconstruction" not in at.metric[2].help
    at.switch_page(pages.TRANSFORM.path).run()
    no_exception(at)
    assert any("no decoder to redraw them" in c.value for c in at.caption)


def test_enter_in_a_field_of_the_training_form_starts_nothing() -> None:
    """Enter in any field of a Streamlit form submits it by default: in the sidebar's training form it started a whole
    run with the other fields at their defaults. Only the Start training button submits it."""
    at = new_app().run()
    no_exception(at)

    def forms(node: object) -> list:  # the form blocks under `node`, as the browser receives them
        proto = getattr(node, "proto", None)
        is_form = proto is not None and "form" in proto.DESCRIPTOR.fields_by_name and proto.HasField("form")
        return ([proto.form] if is_form else []) + [f for c in getattr(node, "children", {}).values() for f in forms(c)]

    (form,) = [f for f in forms(at.sidebar) if f.form_id == "train_form"]
    assert not form.enter_to_submit


def test_a_model_that_cannot_be_opened_is_named_without_the_servers_folders(app_with_run) -> None:  # noqa: F811
    """The notice that a model cannot be opened names the file, never the server's absolute path to it."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    runs_root, _ = app_with_run
    good = runs_root / "20250101-000000-mnist" / "best.safetensors"
    bad = runs_root / "20250103-000000-mnist"
    shutil.copytree(good.parent, bad)
    with safe_open(str(good), framework="pt") as handle:  # the header reads (listed), the weights do not load
        tensors = {name: handle.get_tensor(name) * float("nan") for name in handle.keys()}
        for name in ("best.safetensors", "last.safetensors"):
            save_file(tensors, str(bad / name), metadata=handle.metadata())
    at = new_app()
    at.query_params["checkpoint"] = bad.name
    at.run()
    no_exception(at)
    said = [e.value for e in at.error if "Cannot open the model" in e.value]
    assert said and "best.safetensors: weights hold NaN or infinite values" in said[0], [e.value for e in at.error]
    assert str(runs_root) not in said[0] and "/" not in said[0], said


def test_a_model_of_other_data_opens_the_same_test_image_of_its_own_set(app_dirs, data_dir: Path) -> None:  # noqa: F811
    """The input is test image #0 of MNIST and the link says test=0; opening the Fashion-MNIST model on the Routing
    page makes the input that model's test image #0 (an ankle boot), not an MNIST digit shown to it, nor "No input
    yet" under a link that names one."""
    _, checkpoints = app_dirs
    shipped = Path(APP).parents[1] / "checkpoints"
    for name in ("mnist", "fashion-mnist"):
        shutil.copy(shipped / f"{name}.safetensors", checkpoints)
    at = new_app()
    at.query_params.update(checkpoint="mnist", test="0")
    at.run()
    at.switch_page("app_pages/routing.py").run()
    assert at.session_state["input_true_class"] == 7  # MNIST's test image #0
    picker = at.sidebar.selectbox(key="checkpoint_picker")
    fashion = next(o for o in picker.options if "fashion" in o.lower())
    picker.select(fashion).run()
    no_exception(at)
    assert not any("No input yet" in i.value for i in at.info)
    assert (
        at.session_state["input_label"] == "test image #0" and at.session_state["input_true_class"] == 9
    )  # ankle boot
    assert at.query_params["test"] == "0"
