"""Checkpoints: exact round trip, float16, and one clear error for every kind of bad file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from capsnet.checkpoints.checkpoint import CheckpointError, load_checkpoint, read_checkpoint_info, save_checkpoint
from capsnet.checkpoints.header import CheckpointInfo
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig

INFO = {"dataset": "mnist", "class_names": [str(k) for k in range(10)], "test_accuracy": 0.5}


@pytest.fixture
def saved(tmp_path: Path) -> tuple[CapsNet, Path]:
    model = CapsNet(CapsNetConfig.preset("tiny", routing_iterations=2)).eval()
    return model, save_checkpoint(tmp_path / "model.safetensors", model, INFO)


def test_round_trip_gives_identical_outputs(saved: tuple[CapsNet, Path]) -> None:
    model, path = saved
    loaded = load_checkpoint(path)
    assert loaded.config == model.config and loaded.info.to_dict() == INFO and not loaded.model.training
    images = torch.rand(3, 1, 28, 28)
    a, b = model(images), loaded.model(images)
    assert torch.equal(a.poses, b.poses) and torch.equal(a.reconstruction, b.reconstruction)
    assert read_checkpoint_info(path) == (model.config, CheckpointInfo.from_dict(INFO))
    assert not list(path.parent.glob(".*.tmp")), "temporary file left behind"


def test_float16_halves_the_file_and_loads_as_float32(saved: tuple[CapsNet, Path], tmp_path: Path) -> None:
    model, path = saved
    half = save_checkpoint(tmp_path / "half.safetensors", model, INFO, dtype=torch.float16)
    assert half.stat().st_size < 0.6 * path.stat().st_size
    loaded = load_checkpoint(half)
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
    images = torch.rand(2, 1, 28, 28)
    assert torch.allclose(model(images).lengths, loaded.model(images).lengths, atol=1e-2)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "absent.safetensors")


def test_truncated_file(saved: tuple[CapsNet, Path]) -> None:
    _, path = saved
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_garbage_file(tmp_path: Path) -> None:
    path = tmp_path / "garbage.safetensors"
    path.write_bytes(b"this is not a checkpoint at all" * 10)
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        load_checkpoint(path)


def test_foreign_safetensors(tmp_path: Path) -> None:
    path = tmp_path / "foreign.safetensors"
    save_file({"x": torch.zeros(2)}, str(path))
    with pytest.raises(CheckpointError, match="not a capsnet checkpoint"):
        load_checkpoint(path)


def _rewrite_header(path: Path, **fields: str) -> None:
    """Replace header fields of a saved checkpoint, keeping its tensors."""
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118
    save_file(tensors, str(path), metadata={**metadata, **fields})


def test_weights_that_do_not_fit_the_config(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "m.safetensors", CapsNet(CapsNetConfig.preset("tiny")), INFO)
    # the header now claims the paper's model: the tiny weights no longer fit
    _rewrite_header(path, config=json.dumps(CapsNetConfig().to_dict()))
    with pytest.raises(CheckpointError, match="do not fit the stored config"):
        load_checkpoint(path)


def test_a_huge_config_in_the_header_is_refused_before_anything_is_allocated(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "m.safetensors", CapsNet(CapsNetConfig.preset("tiny")), INFO)
    # building this model for real would need 4 TB for Conv1 alone
    _rewrite_header(path, config=json.dumps({**CapsNetConfig().to_dict(), "conv1_channels": 10**11}))
    with pytest.raises(CheckpointError, match="do not fit the stored config"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"primary_stride": 0}, "primary_stride must be a whole number >= 1"),
        ({"in_channels": 1.5}, "in_channels must be a whole number >= 1"),
        ({"decoder_hidden": "ab"}, "decoder_hidden must be a sequence of widths"),
        ({"m_plus": None}, "m_plus must be a finite number"),
        ({"colour": 3}, "unknown config keys: colour"),
    ],
)
def test_a_bad_config_in_the_header_is_one_clear_error(tmp_path: Path, fields: dict, message: str) -> None:
    path = save_checkpoint(tmp_path / "m.safetensors", CapsNet(CapsNetConfig.preset("tiny")), INFO)
    _rewrite_header(path, config=json.dumps({**CapsNetConfig.preset("tiny").to_dict(), **fields}))
    for read in (load_checkpoint, read_checkpoint_info):
        with pytest.raises(CheckpointError, match=message) as error:
            read(path)
        assert str(path) in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("info", ["[1, 2]", '"text"', "{not json"])
def test_info_that_is_not_a_json_object_is_refused(tmp_path: Path, info: str) -> None:
    path = save_checkpoint(tmp_path / "m.safetensors", CapsNet(CapsNetConfig.preset("tiny")), INFO)
    _rewrite_header(path, info=info)
    with pytest.raises(CheckpointError, match="invalid (config or )?info in the header"):
        read_checkpoint_info(path)


def test_nan_weights_are_refused(tmp_path: Path) -> None:
    model = CapsNet(CapsNetConfig.preset("tiny"))
    with torch.no_grad():
        model.decoder.net[0].weight[0, 0] = float("nan")
    path = save_checkpoint(tmp_path / "nan.safetensors", model, INFO)
    with pytest.raises(CheckpointError, match="NaN"):
        load_checkpoint(path)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_weights_that_are_not_floating_point_are_refused(tmp_path: Path, dtype: torch.dtype) -> None:
    """A weight stored as integers or booleans is no trained network's: one line, not a silent cast to float."""
    path = save_checkpoint(tmp_path / "m.safetensors", CapsNet(CapsNetConfig.preset("tiny")), INFO)
    with safe_open(str(path), framework="pt") as handle:
        metadata, tensors = handle.metadata(), {name: handle.get_tensor(name) for name in handle.keys()}
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].to(dtype)
    save_file(tensors, str(path), metadata=metadata)
    with pytest.raises(CheckpointError, match=f"weight {name} is stored as {str(dtype).removeprefix('torch.')}"):
        load_checkpoint(path)


def test_loading_builds_the_network_once_and_opens_the_file_once(
    saved: tuple[CapsNet, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The network is built on the meta device (no random parameters drawn only to be overwritten), then takes the
    file's tensors; the file is opened once."""
    import capsnet.checkpoints.checkpoint as module

    opened, initialised = [], []
    real_open, real_init = module.safe_open, torch.nn.init.normal_
    monkeypatch.setattr(module, "safe_open", lambda *a, **k: opened.append(a) or real_open(*a, **k))

    def normal_(*args, **kwargs):
        initialised.append((args[0] if args else kwargs["tensor"]).device.type)
        return real_init(*args, **kwargs)

    monkeypatch.setattr(torch.nn.init, "normal_", normal_)
    loaded = load_checkpoint(saved[1])
    assert len(opened) == 1
    assert initialised and set(initialised) == {"meta"}  # W_ij's normal init ran on no memory at all
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in loaded.model.parameters())


def test_what_stands_in_a_checkpoints_place_is_named(tmp_path: Path) -> None:
    """A folder, a pipe, a link to a device or a broken link named *.safetensors: one line saying what it is."""
    import os

    (tmp_path / "folder.safetensors").mkdir()
    os.mkfifo(tmp_path / "pipe.safetensors")
    (tmp_path / "zero.safetensors").symlink_to("/dev/zero")
    (tmp_path / "broken.safetensors").symlink_to(tmp_path / "gone")
    expected = {
        "folder": "a folder, not a checkpoint file",
        "pipe": "a pipe (FIFO), not a checkpoint file",
        "zero": "a device (through a link), not a checkpoint file",
        "broken": "a broken link",
        "missing": "no such checkpoint file",
    }
    for name, message in expected.items():
        with pytest.raises(CheckpointError, match=re.escape(message)):
            load_checkpoint(tmp_path / f"{name}.safetensors")
