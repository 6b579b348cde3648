"""The sidebar's form with a folder of the user's own pictures named: its counts, its defaults, its time estimate
(from a run of the same network measured here), and a folder that is not there said in the form's words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from dashboard_fixtures import APP, app_dirs, clear_streamlit_caches  # noqa: F401  (fixtures)
from streamlit.testing.v1 import AppTest

from capsnet.data.made_folders import shapes_folder
from capsnet.training.options import TrainOptions
from dashboard import texts

START = "FormSubmitter:train_form-Start training"


@pytest.fixture
def shapes(tmp_path: Path) -> Path:
    return shapes_folder(tmp_path / "shapes", per_class=10, seed=2, sizes=((32, 32),))  # 8 to train, 2 to test each


def _app() -> AppTest:
    clear_streamlit_caches()
    return AppTest.from_file(APP, default_timeout=180).run()


def _field(at: AppTest, label: str) -> object:
    (field,) = [n for n in at.sidebar.number_input if n.label == label]
    return field


def test_a_missing_folder_is_said_in_the_forms_words(app_dirs, tmp_path: Path) -> None:  # noqa: F811
    at = _app()
    at.sidebar.text_input(key="train_folder").set_value(str(tmp_path / "nowhere"))
    at.sidebar.button(key=START).click().run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    said = " ".join(e.value for e in at.sidebar.error)
    assert "there is no folder" in said and str(tmp_path / "nowhere") in said, said
    assert "--dataset" not in said and "choose from mnist" not in said


def test_a_named_folder_shows_its_own_counts_defaults_and_time(app_dirs, shapes: Path) -> None:  # noqa: F811
    runs_root, _ = app_dirs
    options = TrainOptions.parse_args(["--dataset", str(shapes)])
    # a run of the same network on the same side, measured here at 100 images/s: what the estimate reads
    measured = runs_root / "20250101-000000-shapes"
    measured.mkdir()
    acceleration = options.acceleration(torch.device("cpu")).to_dict()
    (measured / "args.json").write_text(json.dumps(options.to_dict() | {"acceleration": acceleration}))
    (measured / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "images_per_s": 100.0}) + "\n")
    at = _app()
    at.sidebar.text_input(key="train_folder").set_value(str(shapes)).run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert at.sidebar.radio(key="train_recipe").value == "folder"
    assert _field(at, "Training examples").value == 32 and _field(at, "Test examples").value == 8  # not 60,000
    assert _field(at, "Epochs").value == options.epochs and _field(at, "Batch size").value == options.batch_size
    assert at.sidebar.selectbox(key="train_dataset").disabled
    seconds = options.epochs * (32 / 100 + 8 / 300)
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert f"about {texts.format_duration(seconds)} for {options.epochs} epochs" in captions, captions


def test_the_forms_defaults_follow_the_network_chosen_for_a_folder(app_dirs, shapes: Path) -> None:  # noqa: F811
    """The EM network on a folder routes twice with its costs at 10 times the rate: the form shows its own."""
    em = TrainOptions.parse_args(["--dataset", str(shapes), "--network", "em"])
    at = _app()
    at.sidebar.text_input(key="train_folder").set_value(str(shapes)).run()
    next(s for s in at.sidebar.selectbox if s.label == "Model").set_value(("em", em.preset)).run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert _field(at, "Routing iterations").value == em.routing_iterations == 2
    assert _field(at, "β learning rate ×").value == em.beta_lr == 10.0
    assert _field(at, "Peak learning rate").value == pytest.approx(em.lr)
