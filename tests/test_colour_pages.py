"""Every dashboard page with a colour model: a tiny CapsNet trained on CIFAR-10's binary format, written by
the test, walked through each page with AppTest."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import made_once
from dashboard_fixtures import APP, chart, clear_streamlit_caches, plotly_values  # noqa: F401
from PIL import Image
from streamlit.testing.v1 import AppTest

from capsnet.readings.stages import EM_STAGE_KEYS
from dashboard import pages
from tests.test_cifar10 import make_cifar
from tests.test_smallnorb import make_norb

PAGES = [pages.DRAW.path] + [p.path for p in pages.PAGES if p is not pages.DRAW]
RUN = "20250105-000000-cifar10"
NORB_RUN = "20250106-000000-smallnorb-em"  # a matrix-capsule network of grey 32x32 crops (smallNORB)


@pytest.fixture(scope="session")
def colour_data(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder holding the real MNIST and Fashion-MNIST (linked), and a small CIFAR-10 and smallNORB in their
    official binary formats."""

    def make(root: Path) -> None:
        for name in os.listdir(data_dir):
            (root / name).symlink_to(data_dir / name)
        make_cifar(root, per_batch=60, n_test=100)
        make_norb(root, n_train=60, n_test=40)

    return made_once(tmp_path_factory, "colour-data", make)


@pytest.fixture(scope="session")
def colour_run(colour_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from capsnet.training.options import TrainOptions
    from capsnet.training.trainer import train

    def make(out: Path) -> None:
        train(TrainOptions(dataset="cifar10", preset="tiny", epochs=1, batch_size=50, device="cpu", out=str(out),
                           progress=False, data_dir=str(colour_data), compile=False))  # fmt: skip

    return made_once(tmp_path_factory, RUN, make)


@pytest.fixture(scope="session")
def norb_run(colour_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from capsnet.training.options import TrainOptions
    from capsnet.training.trainer import train

    def make(out: Path) -> None:
        train(TrainOptions(dataset="smallnorb", network="em", preset="tiny", epochs=1, batch_size=20, device="cpu",
                           out=str(out), progress=False, data_dir=str(colour_data), compile=False))  # fmt: skip

    return made_once(tmp_path_factory, NORB_RUN, make)


@pytest.fixture
def colour_app(
    colour_data: Path, colour_run: Path, norb_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    runs_root, checkpoints = tmp_path / "runs", tmp_path / "checkpoints"
    checkpoints.mkdir()
    shutil.copytree(colour_run, runs_root / RUN)
    shutil.copytree(norb_run, runs_root / NORB_RUN)
    monkeypatch.setenv("CAPSNET_RUNS_DIR", str(runs_root))
    monkeypatch.setenv("CAPSNET_CHECKPOINTS_DIR", str(checkpoints))
    monkeypatch.setenv("CAPSNET_DATA_DIR", str(colour_data))
    return runs_root


@pytest.mark.parametrize("page", PAGES)
def test_each_page_runs_clean_with_a_colour_model(colour_app: Path, page: str) -> None:
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["eval_size"] = 100
    at.query_params["checkpoint"] = RUN
    at.run()
    at.switch_page(page).run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _colour_app() -> AppTest:
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["eval_size"] = 100
    at.query_params["checkpoint"] = RUN
    return at.run()


def test_the_draw_page_reads_a_colour_test_image_and_offers_an_upload(colour_app: Path) -> None:
    """A colour model's Draw page opens on its test images (no drawing: it reads photos) and reads
    the one chosen with its prediction and redraw; the other source is an upload of a picture."""
    at = _colour_app()
    assert not at.exception, [e.stack_trace for e in at.exception]
    said = [e.value for e in at.info if "reads **32x32 colour images (CIFAR-10)**, not drawings" in e.value]
    assert len(said) == 1, [e.value for e in at.info]
    assert at.segmented_control(key="input_source").options == ["Test image", "Upload"]
    assert at.title[0].value == "Read an image"
    assert [m.value for m in at.metric if m.label == "Prediction"], "no prediction for the test image"
    at.segmented_control(key="input_source").set_value("Upload").run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert at.get("file_uploader"), "no uploader for pictures"


def test_an_upload_is_read_as_the_models_data_is() -> None:
    """A picture for a 32x32 colour model: its shorter side to 32, the centre square, in colour; a file that is not
    a picture is one line naming it."""
    import io

    from PIL import Image

    from capsnet.data.image_folder import ImageFolderError, picture_from_bytes

    photo = Image.new("RGB", (96, 64), (0, 0, 255))
    photo.paste((255, 0, 0), (0, 0, 16, 64))  # a red band at the left, outside the centre square
    data = io.BytesIO()
    photo.save(data, format="PNG")
    picture = picture_from_bytes(data.getvalue(), 32, True, "photo.png")
    assert picture.shape == (3, 32, 32) and picture.dtype.is_floating_point is False
    assert int(picture[0].max()) < 40 and int(picture[2].min()) > 215  # the band cropped away: blue throughout
    with pytest.raises(ImageFolderError, match="notes.txt cannot be read as a picture"):
        picture_from_bytes(b"hello", 32, True, "notes.txt")


def _picture(source: str) -> Image.Image:
    """The picture a PNG data URL holds."""
    return Image.open(io.BytesIO(base64.b64decode(source.split(",", 1)[1])))


def _is_colour(source: str) -> bool:
    """Whether a PNG data URL holds a picture in colour (its channels differ somewhere)."""
    pixels = np.asarray(_picture(source).convert("RGB"), dtype=np.int16)
    return bool(
        np.abs(pixels[..., 0] - pixels[..., 1]).max() > 30 or np.abs(pixels[..., 1] - pixels[..., 2]).max() > 30
    )


def test_the_pages_that_follow_one_input_read_a_colour_image(colour_app: Path) -> None:
    """The test image the Draw page chose is followed step by step on Routing, Capsule dimensions,
    the Transform lens and every stage of the Architecture page, drawn in colour where the page draws it."""
    at = _colour_app()
    at.session_state["routing_maps_open"] = True
    at.switch_page(pages.ROUTING.path).run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    overlay = chart(at, "vote_overlay")
    assert overlay["data"][0]["type"] == "image" and _is_colour(overlay["data"][0]["source"])
    votes = plotly_values(overlay["data"][1]["z"])
    assert votes.size == 32 * 32 and np.isfinite(votes).mean() > 0.5  # a photo is coloured over, not only its "ink"
    maps = plotly_values(chart(at, "coupling_maps")["data"][0]["z"])
    assert maps.size == (2 * 9 - 1) * (4 * 9 - 1)  # the tiny network's 8 types of capsules on a 8x8 grid (not 6x6)
    at.radio(key="overlay_mode").set_value("coupling").run()
    assert not at.exception, [e.stack_trace for e in at.exception]

    at.switch_page(pages.DIMENSIONS.path).run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    grid = next(c for c in at.get("plotly_chart") if "change added to the dimension" in c.proto.spec)
    assert _picture(json.loads(grid.proto.spec)["data"][0]["source"]).mode == "RGB"  # Figure 4 redrawn in colour

    at.switch_page(pages.TRANSFORM.path).run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    strip = chart(at, "lens_strip")
    assert _is_colour(strip["data"][0]["source"])  # the inputs turned, in colour, and their redraws

    at.switch_page(pages.ARCHITECTURE.path).run()
    for stage in ("input", "conv1", "primary", "votes", "routing", "decoder"):
        at.radio(key="arch_stage").set_value(stage).run()
        assert not at.exception, (stage, [e.stack_trace for e in at.exception])
        assert not at.error, (stage, [e.value for e in at.error])
    at.radio(key="arch_stage").set_value("primary").run()
    field = chart(at, "arch_field")
    assert field["data"][0]["type"] == "image" and _is_colour(field["data"][0]["source"])
    at.radio(key="arch_stage").set_value("input").run()
    assert any("One colour image, 32x32 pixels" in m.value for m in at.markdown)


def test_a_link_to_a_test_image_opens_it_in_colour_on_every_page(colour_app: Path) -> None:
    """A link's (or the Evaluate grid's) test image of a colour model is the input of every page, in colour (it
    was left out: only 28x28 grey sets were opened, and a folder's image lost two of its channels)."""
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["checkpoint"] = RUN
    at.query_params["test"] = "3"
    at.run()
    at.switch_page(pages.ROUTING.path).run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert any("Input: **test image #3**" in c.value for c in at.caption), [
        c.value[:60] for c in at.caption if "Input" in c.value
    ]
    overlay = chart(at, "vote_overlay")
    assert overlay["data"][0]["type"] == "image" and _is_colour(overlay["data"][0]["source"])


def test_the_evaluate_page_redraws_colour_images_in_colour(colour_app: Path) -> None:
    at = _colour_app()
    at.switch_page(pages.EVALUATE.path).run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    grid = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key == "reconstruction_grid")
    source = grid["data"][0]["source"]
    tiles = Image.open(io.BytesIO(base64.b64decode(source.split(",", 1)[1])))
    assert tiles.mode == "RGB"
    pixels = np.asarray(tiles, dtype=np.int16)
    assert np.abs(pixels[..., 0] - pixels[..., 1]).max() > 50  # the originals' coloured squares, not grey


def test_where_routing_matters_measures_a_colour_model(colour_app: Path) -> None:
    at = _colour_app()
    at.switch_page(pages.ROUTING_MATTERS.path).run()
    at.button(key="rm_measure_button").click().run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.dataframe or at.table, "no table of the measured rules"


def test_the_sidebar_trains_on_a_folder_of_pictures_and_says_a_bad_one_in_one_line(
    colour_app: Path, tmp_path: Path
) -> None:
    """The sidebar's form takes a folder on the server (and its side); the run it starts records
    the folder with the side, and a folder that is not a dataset is said in the form, starting nothing."""
    import json

    from PIL import Image

    from capsnet.runs import processes

    pictures = tmp_path / "my pictures"
    for k, colour in enumerate(((200, 30, 30), (30, 30, 200))):
        (pictures / f"kind {k}").mkdir(parents=True)
        for n in range(5):
            Image.new("RGB", (40, 30), tuple(c + 5 * n for c in colour)).save(pictures / f"kind {k}" / f"{n}.png")
    at = _colour_app()
    at.sidebar.text_input(key="train_folder").set_value(str(tmp_path / "nowhere"))
    at.sidebar.button(key="FormSubmitter:train_form-Start training").click().run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    said = [e.value for e in at.sidebar.error]
    assert said and "there is no folder" in said[0] and processes.active_run(colour_app) is None
    at.sidebar.text_input(key="train_folder").set_value(str(pictures)).run()  # the form shows the folder's defaults
    at.sidebar.number_input(key="train_image_size").set_value(32)
    next(s for s in at.sidebar.selectbox if s.label == "Model").set_value(("capsnet", "tiny")).run()
    next(n for n in at.sidebar.number_input if n.label == "Epochs").set_value(1)
    at.sidebar.button(key="FormSubmitter:train_form-Start training").click().run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    running = processes.active_run(colour_app)
    try:
        assert running is not None and running.run_dir.name.endswith("-my-pictures"), running
        args = json.loads((running.run_dir / "args.json").read_text())
        assert (args["dataset"], args["image_size"], args["preset"]) == (f"{pictures}@32", 32, "tiny")
    finally:
        processes.cancel_run(colour_app)
        if running is not None and running.pid in processes._CHILDREN:
            processes._CHILDREN[running.pid].wait(timeout=60)


@pytest.mark.parametrize(("dataset", "model"), [("cifar10", ("cnn", "tiny")), ("smallnorb", ("capsnet", "tiny"))])
def test_the_sidebar_trains_each_family_on_cifar10_and_smallnorb(
    colour_app: Path, dataset: str, model: tuple[str, str]
) -> None:
    """The sidebar's form trains on CIFAR-10 and smallNORB where the data folder has them, as on
    MNIST: the run it starts trains its network on that dataset (watched to its first metrics line). (The EM network
    is trained on both from the command line in test_cifar10.py and test_smallnorb.py, and on smallNORB above.)"""

    from capsnet.runs import processes

    at = _colour_app()
    at.sidebar.selectbox(key="train_dataset").set_value(dataset)
    at.sidebar.selectbox(key="train_preset").set_value(model)
    at.sidebar.number_input(key="train_epochs").set_value(1)
    at.sidebar.button(key="FormSubmitter:train_form-Start training").click().run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert not at.sidebar.error, [e.value for e in at.sidebar.error]
    running = processes.active_run(colour_app)
    assert running is not None
    args = json.loads((running.run_dir / "args.json").read_text())
    assert (args["dataset"], args["network"], args["preset"]) == (dataset, *model)
    child = processes._CHILDREN[running.pid]
    assert child.wait(timeout=300) == 0, (running.run_dir / "train.log").read_text()[-2000:]
    metrics = [json.loads(line) for line in (running.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["epoch"] == 1 and metrics[-1]["train_images"] > 0


def test_every_page_reads_a_smallnorb_matrix_capsule_model(colour_app: Path) -> None:
    """Every page with smallNORB: a matrix-capsule network of grey 32x32 crops, its test
    image followed on each page (its EM routing, every stage of its architecture), its test split measured."""
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["eval_size"] = 40
    at.query_params["checkpoint"] = NORB_RUN
    at.run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert at.title[0].value.startswith("Read"), at.title[0].value  # photos: nothing to draw
    for page in [p.path_for("em") for p in pages.PAGES if p is not pages.DRAW]:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.stack_trace for e in at.exception])
        assert not at.error, (page, [e.value for e in at.error])
        assert not [i.value for i in at.info if "No input yet" in i.value], page  # the Draw page's test image
    at.switch_page(pages.ROUTING.path_for("em")).run()
    assert {"em_fit", "em_assignments"} <= {c.key for c in at.get("plotly_chart")}  # its routing, followed
    at.switch_page(pages.ARCHITECTURE.path).run()
    for stage in EM_STAGE_KEYS[: len(at.radio(key="arch_stage").options)]:  # (no decoder: the tiny preset has none)
        at.radio(key="arch_stage").set_value(stage).run()
        assert not at.exception, (stage, [e.stack_trace for e in at.exception])
        assert not at.error, (stage, [e.value for e in at.error])
    at.switch_page(pages.ROUTING_MATTERS.path).run()
    at.button(key="rm_measure_button").click().run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert not at.error, [e.value for e in at.error]
