"""Warm starts onto a larger canvas: the convolutions carried, the position-dependent weights re-laid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from capsnet.nn.capsnet import CapsNet
from capsnet.nn.cnn import BaselineCNN, CNNConfig
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.warm_start import grid_sources, lay_on_grid, warm_config, warm_start


def test_grid_cells_are_laid_in_image_coordinates() -> None:
    cells = grid_sources(6, 10).view(10, 10)
    assert cells[2:8, 2:8].flatten().tolist() == list(range(36))  # the 28x28 digit's cells, centred on 36x36
    assert (cells[:2] == -1).all() and (cells[8:] == -1).all() and (cells[:, :2] == -1).all()  # beyond the source
    assert (cells >= 0).sum() == 36
    assert grid_sources(6, 6).tolist() == list(range(36))
    assert grid_sources(6, 12).view(12, 12)[3:9, 3:9].flatten().tolist() == list(range(36))  # 40x40
    with pytest.raises(ValueError, match="larger one"):
        grid_sources(10, 6)


def test_lay_on_grid_against_a_loop() -> None:
    weight = torch.randn(3 * 4 * 4, 2, 5)  # 3 channels (types) on a 4x4 grid
    laid = lay_on_grid(weight, 3, 4, 7)
    offset = (7 - 4) // 2
    for t in range(3):
        for y in range(7):
            for x in range(7):
                sy, sx = y - offset, x - offset
                if 0 <= sy < 4 and 0 <= sx < 4:
                    assert torch.equal(laid[t * 49 + y * 7 + x], weight[t * 16 + sy * 4 + sx])
                else:  # beyond the source grid: no votes until it learns some
                    assert not laid[t * 49 + y * 7 + x].any()


def test_a_capsnet_warm_started_on_36x36_votes_as_the_28x28_one_on_a_centred_digit() -> None:
    torch.manual_seed(0)
    source = CapsNet(CapsNetConfig.preset("tiny")).eval()
    config = warm_config(source.config, CapsNetConfig.preset("tiny", image_size=36, primary_scale=1 / 32))
    assert config.image_size == 36 and config.primary_scale == 1.0  # the source's own scales are kept
    model = CapsNet(config).eval()
    report = warm_start(model, source)
    assert "laid from the 6x6 grid onto the 10x10" in report[0] and "decoder" in report[1]
    torch.testing.assert_close(model.conv1.weight, source.conv1.weight)
    torch.testing.assert_close(model.primary.conv.weight, source.primary.conv.weight)
    digit = torch.zeros(1, 1, 28, 28)
    digit[0, 0, 6:22, 12:16] = 1.0  # a bar
    big = torch.nn.functional.pad(digit, (4, 4, 4, 4))  # centred on 36x36
    with torch.no_grad():
        u_small = source.digits.predictions(source.primary(torch.relu(source.conv1(digit))))  # (1, K, 8*36, D)
        u_big = model.digits.predictions(model.primary(torch.relu(model.conv1(big))))  # (1, K, 8*100, D)
    k, d = u_small.shape[1], u_small.shape[-1]
    inner = u_big.view(1, k, 8, 10, 10, d)[:, :, :, 2:8, 2:8].reshape(1, k, 8 * 36, d)
    torch.testing.assert_close(inner, u_small)  # the same votes wherever the digit's pixels are
    outer = u_big.view(1, k, 8, 10, 10, d).clone()
    outer[:, :, :, 2:8, 2:8] = 0
    assert not outer.any()  # the margin casts no votes, so it cannot saturate the digit capsules
    with torch.no_grad():
        torch.testing.assert_close(model(big).lengths, source(digit).lengths)  # the same reading as the source


def test_a_cnn_warm_start_lays_its_first_dense_layer() -> None:
    torch.manual_seed(0)
    source = BaselineCNN(CNNConfig.preset("tiny")).eval()
    config = warm_config(source.config, CNNConfig.preset("tiny", image_size=36, multi_label=True))
    model = BaselineCNN(config)
    warm_start(model, source)
    for a, b in zip(model.features.parameters(), source.features.parameters()):
        torch.testing.assert_close(a, b)
    s, t = source.config.feature_size, config.feature_size
    c = source.config.channels[-1]
    big = model.classifier[0].weight.view(-1, c, t, t)
    small = source.classifier[0].weight.view(-1, c, s, s)
    off = (t - s) // 2
    torch.testing.assert_close(big[:, :, off : off + s, off : off + s], small)
    margin = big.clone()
    margin[:, :, off : off + s, off : off + s] = 0
    assert not margin.any()  # the feature map's margin starts with no say
    torch.testing.assert_close(model.classifier[-1].weight, source.classifier[-1].weight)


def test_a_warm_start_refuses_another_network() -> None:
    with pytest.raises(ValueError, match="conv1_channels"):
        warm_config(CapsNetConfig.preset("tiny"), CapsNetConfig.preset("paper", image_size=36))
    with pytest.raises(ValueError, match="same network"):
        warm_config(CapsNetConfig.preset("tiny"), CNNConfig.preset("tiny", image_size=36))


@pytest.mark.slow
def test_the_trainer_warm_starts_multimnist_from_a_28x28_checkpoint(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.training.options import TrainOptions
    from capsnet.training.trainer import train

    out = tmp_path / "warm"
    train(TrainOptions(dataset="multimnist", preset="tiny", epochs=1, train_size=300, test_size=100, device="cpu",
                       init=str(tiny_checkpoint), out=str(out), progress=False))  # fmt: skip
    warm = load_checkpoint(out / "last.safetensors")
    assert warm.config.image_size == 36 and warm.info.started_from["checkpoint"] == str(tiny_checkpoint)
    assert json.loads((out / "args.json").read_text())["started_from"]["checkpoint"] == str(tiny_checkpoint)


@pytest.mark.slow
def test_a_warm_started_run_resumes_with_the_network_it_was_built_with(data_dir: Path, tmp_path: Path) -> None:
    """A warm start keeps its source's primary scale, which its preset may not have: a resume must rebuild the
    network as it was built (a resume from the preset's config read every capsule wrongly and lost the run)."""
    from capsnet.checkpoints.checkpoint import load_checkpoint, save_checkpoint
    from capsnet.training.options import TrainOptions
    from capsnet.training.trainer import train

    torch.manual_seed(0)
    source = save_checkpoint(tmp_path / "source.safetensors",
                             CapsNet(CapsNetConfig.preset("tiny", primary_scale=0.5)), {"dataset": "mnist"})  # fmt: skip
    out = tmp_path / "warm"
    run = dict(dataset="multimnist", preset="tiny", train_size=200, test_size=50, device="cpu", progress=False)
    train(TrainOptions(**run, epochs=1, init=str(source), out=str(out)))
    built = load_checkpoint(out / "last.safetensors").config
    assert built.primary_scale == 0.5 != CapsNetConfig.preset("tiny").primary_scale
    assert json.loads((out / "args.json").read_text())["network_config"]["primary_scale"] == 0.5

    records = train(TrainOptions(**run, epochs=2, resume=True, out=str(out)))
    assert [r["epoch"] for r in records] == [2]
    assert load_checkpoint(out / "last.safetensors").config == built

    # a run begun before args.json kept the network: its checkpoint's header says how it was built
    args = json.loads((out / "args.json").read_text())
    del args["network_config"]
    (out / "args.json").write_text(json.dumps(args))
    train(TrainOptions(**run, epochs=3, resume=True, out=str(out)))
    assert load_checkpoint(out / "last.safetensors").config == built


@pytest.mark.slow
def test_a_warm_started_em_run_trains_at_the_final_spread_margin(
    tiny_em: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The margin's ramp is for a fresh network: a run from --init (and its resume) trains at 0.9 from its first batch,
    where a fresh run's margin still grows."""
    from capsnet.training import epoch, trainer
    from capsnet.training.options import TrainOptions

    seen: list[float] = []
    step = epoch.training_step

    def spy(*args: object) -> object:
        seen.append(args[-1])  # the progress the loss reads
        return step(*args)

    monkeypatch.setattr(epoch, "training_step", spy)
    run = dict(dataset="mnist", network="em", preset="tiny", train_size=32, test_size=16, batch_size=8, device="cpu",
               progress=False)  # fmt: skip
    trainer.train(TrainOptions(**{**run, "train_size": 16}, epochs=1, out=str(tmp_path / "fresh")))
    assert seen == [0.0, 0.5]  # a fresh run: the ramp, batch by batch
    seen.clear()
    out = tmp_path / "warm"
    trainer.train(TrainOptions(**run, epochs=1, init=str(tiny_em), out=str(out)))
    trainer.train(TrainOptions(**run, epochs=2, resume=True, out=str(out)))
    assert seen == [1.0] * 8  # both epochs at the schedule's end
