"""MultiMNIST (section 6 of the paper): pairs made as the official code does, two-label loss, the paper's evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_support import capsnet

from capsnet.data import multimnist as mm
from capsnet.data.datasets import load_dataset, stored_tensors
from capsnet.data.tasks import Task
from capsnet.evaluation import evaluate_pairs
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.losses import margin_loss, reconstruction_loss


def test_the_paper_network_on_36x36_has_the_papers_parameter_count() -> None:
    model = CapsNet(CapsNetConfig.preset("multimnist"))
    assert model.config.primary_grid == 10 and model.config.num_primary == 3200
    assert model.num_parameters() == 11_361_808  # "11.36M parameters" (section 6)


def test_a_digit_is_padded_and_shifted_like_the_official_code() -> None:
    digit = torch.zeros(1, 1, 28, 28, dtype=torch.uint8)
    digit[0, 0, 0, 0] = 255
    for dy, dx in [(0, 0), (-4, 4), (3, -2)]:
        placed = mm.place(digit, torch.tensor([[dy, dx]]))
        assert placed.shape == (1, 1, 36, 36)
        ys, xs = torch.nonzero(placed[0, 0], as_tuple=True)
        assert (ys.item(), xs.item()) == (4 + dy, 4 + dx)  # padded by 4, then moved by (dy, dx)
    a = torch.full((1, 1, 2, 2), 200, dtype=torch.uint8)
    assert mm.merge(a, a).max() == 255 and mm.merge(a, torch.zeros_like(a)).max() == 200  # min(a + b, 255)


def test_the_fixed_test_set(data_dir: Path) -> None:
    digits, labels = stored_tensors(load_dataset("mnist", train=False))
    pairs = mm.test_pairs(labels)
    assert len(pairs) == 100_000 and (pairs.first.view(-1, 10) == torch.arange(10_000)[:, None]).all()
    assert (labels[pairs.first] != labels[pairs.second]).all()  # always two different classes
    assert pairs.offsets.abs().max() == 4 and len(torch.unique(pairs.offsets)) == 9
    again = mm.test_pairs(labels)
    assert torch.equal(again.second, pairs.second) and torch.equal(again.offsets, pairs.offsets)  # fixed by its seed
    share = torch.bincount(labels[pairs.second], minlength=10).float() / len(pairs)
    assert (share - 0.1).abs().max() < 0.01  # partners spread over the classes
    batch = pairs.take(digits, labels, 0, 6)
    assert batch.images.shape == (6, 1, 36, 36) and batch.parts.shape == (6, 2, 1, 36, 36)
    np.testing.assert_allclose(batch.images, (batch.parts[:, 0] + batch.parts[:, 1]).clamp(max=1), atol=1 / 255)
    assert batch.labels[:, 0].tolist() == [int(labels[0])] * 6
    first = mm.place(digits[pairs.first[:6]], pairs.offsets[:6, 0]).float() / 255  # each part is its own digit,
    second = mm.place(digits[pairs.second[:6]], pairs.offsets[:6, 1]).float() / 255  # in its own place and order
    torch.testing.assert_close(batch.parts[:, 0], first) and torch.testing.assert_close(batch.parts[:, 1], second)
    assert batch.labels[:, 1].tolist() == labels[pairs.second[:6]].tolist()


def test_training_pairs_are_new_every_epoch_and_reproducible(data_dir: Path) -> None:
    digits, labels = stored_tensors(load_dataset("mnist", train=False))
    order = list(range(200))
    first = [b.labels.clone() for b in mm.epoch_pairs(digits, labels, order, 64, seed=1)]
    again = [b.labels.clone() for b in mm.epoch_pairs(digits, labels, order, 64, seed=1)]
    other = [b.labels.clone() for b in mm.epoch_pairs(digits, labels, order, 64, seed=2)]
    assert all(torch.equal(a, b) for a, b in zip(first, again)) and not torch.equal(first[0], other[0])
    resumed = next(mm.epoch_pairs(digits, labels, order, 64, seed=1, start_batch=2))
    unbroken = list(mm.epoch_pairs(digits, labels, order, 64, seed=1))[2]
    assert torch.equal(resumed.labels, first[2]) and torch.equal(resumed.images, unbroken.images)  # same pairs, shifts


def test_two_label_margin_and_reconstruction_losses() -> None:
    lengths = torch.tensor([[0.95, 0.0, 0.92, 0.05], [0.5, 0.5, 0.5, 0.5]])
    labels = torch.tensor([[0, 2], [1, 3]])
    expected_second = 2 * 0.4**2 + 0.5 * 2 * 0.4**2  # two present short by 0.4, two absent long by 0.4
    assert margin_loss(lengths, labels).item() == pytest.approx((0.0 + expected_second) / 2)
    assert margin_loss(lengths[:1], labels[:1, :1]).item() == pytest.approx(0.5 * 0.82**2, abs=1e-6)  # 2 absent now
    parts = torch.rand(3, 2, 1, 36, 36)
    recon = parts.clone()
    recon[:, 1] += 0.1  # the second digit's redrawing is off by 0.1 on every pixel
    assert reconstruction_loss(recon, parts).item() == pytest.approx(0.0005 * 36 * 36 * 0.01, rel=1e-4)


def test_a_pair_is_right_when_its_two_longest_capsules_are_its_classes() -> None:
    lengths = torch.tensor([[0.9, 0.1, 0.8, 0.0], [0.9, 0.85, 0.1, 0.0], [0.2, 0.3, 0.9, 0.95]])
    assert Task.right(lengths, torch.tensor([[2, 0], [0, 2], [3, 2]])).tolist() == [True, False, True]
    assert Task.right(lengths, torch.tensor([0, 1, 3])).tolist() == [True, False, True]
    tied = torch.tensor([[0.9, 0.5, 0.5, 0.0]])  # the second place is a tie: neither pair can be called right
    assert Task.right(tied, torch.tensor([[0, 1]])).tolist() == [False]
    assert Task.right(tied, torch.tensor([[0, 2]])).tolist() == [False]


def test_each_digit_is_redrawn_from_its_own_capsule() -> None:
    torch.manual_seed(0)
    model = CapsNet(CapsNetConfig.preset("tiny", image_size=36)).eval()
    images, labels = torch.rand(4, 1, 36, 36), torch.tensor([[1, 7], [0, 3], [5, 2], [9, 4]])
    with torch.no_grad():
        out = model(images, labels)
        assert out.reconstruction.shape == (4, 2, 1, 36, 36)
        for k in (0, 1):
            torch.testing.assert_close(out.reconstruction[:, k], model.decode(out.poses, labels[:, k]))


def test_pair_evaluation_against_a_loop(data_dir: Path) -> None:
    torch.manual_seed(0)
    model = CapsNet(CapsNetConfig.preset("tiny", image_size=36)).eval()
    digits, labels = stored_tensors(load_dataset("mnist", train=False))
    pairs = mm.test_pairs(labels)
    pairs = mm.Pairs(pairs.first[:90], pairs.second[:90], pairs.offsets[:90])
    result = evaluate_pairs(model, digits, labels, pairs, batch_size=32)
    right = 0
    for i in range(90):  # one pair at a time: the two longest capsules against the two classes
        one = pairs.take(digits, labels, i, i + 1)
        with torch.no_grad():
            top = set(model(one.images).lengths[0].topk(2).indices.tolist())
        right += top == set(one.labels[0].tolist())
    assert result.total == 90 and result.correct == right and result.error == pytest.approx(1 - right / 90)


@pytest.mark.slow
def test_train_and_evaluate_multimnist_from_the_cli(data_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "mm"
    args = ["--dataset", "multimnist", "--preset", "tiny", "--epochs", "1", "--train-size", "2000"]
    train = capsnet("train", *args, "--test-size", "300", "--out", str(run), "--no-progress",
         "--device", "cpu")  # fmt: skip
    assert train.returncode == 0, train.stderr[-2000:]
    record = json.loads(train.stdout.strip().splitlines()[-1])
    assert record["train_images"] == 2000 and 0 <= record["test_accuracy"] <= 1
    from capsnet.checkpoints.checkpoint import load_checkpoint

    checkpoint = load_checkpoint(run / "best.safetensors")
    assert checkpoint.config.image_size == 36 and checkpoint.info.dataset == "multimnist"
    assert (
        checkpoint.info.test_accuracy == pytest.approx(record["test_accuracy"]) and checkpoint.info.test_examples == 300
    )
    report = capsnet("evaluate", str(run / "best.safetensors"), "--limit", "400", "--json")  # fmt: skip
    assert report.returncode == 0, report.stderr[-2000:]
    summary = json.loads(report.stdout)
    assert summary["dataset"] == "multimnist" and summary["total"] == 400 and 0 <= summary["error"] <= 1
    assert summary["accuracy"] > 0.05  # a trained model, far above the 1 in 45 of chance
    for command in (["-m", "capsnet", "evaluate", str(run / "best.safetensors"), "--dataset", "mnist"],
                    ["-m", "capsnet", "predict", str(run / "best.safetensors"), "--checkpoint", str(run / "best.safetensors")],
                    ["-m", "capsnet", "export", str(run / "best.safetensors"), "--calibrate"]):  # fmt: skip
        wrong = capsnet(*command[2:])
        assert wrong.returncode == 2 and len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr  # one line
    from capsnet.runs.export import export_checkpoint

    info = export_checkpoint(run / "best.safetensors", tmp_path / "out" / "multimnist.safetensors", device="cpu",
                             first=400)  # fmt: skip
    assert info.test_examples == 400 and info.weights_dtype == "float16"
    assert abs(info.test_accuracy - summary["accuracy"]) <= 0.01  # float16 weights read the same pairs alike
    assert (tmp_path / "out" / "multimnist.metrics.jsonl").is_file()


def test_one_overlay_is_made_as_the_test_pairs_are() -> None:
    from capsnet.data.multimnist import make_batch, overlay

    generator = torch.Generator().manual_seed(0)
    digits = torch.randint(0, 256, (2, 1, 28, 28), dtype=torch.uint8, generator=generator)
    moves = [[1, -3], [-4, 2]]
    expected = make_batch(digits, torch.tensor([3, 5]), torch.tensor([0]), torch.tensor([1]), torch.tensor([moves]))
    image = overlay(digits[0], digits[1], moves)
    assert image.shape == (36, 36) and image.dtype == np.float32
    np.testing.assert_array_equal(image, expected.images[0, 0].numpy())
    drawn = digits.float().div(255).numpy()  # drawings in [0, 1] are stored as the digits are
    np.testing.assert_array_equal(overlay(drawn[0], drawn[1], moves), image)
    with pytest.raises(ValueError, match="shift must lie in"):
        overlay(digits[0], digits[1], [[5, 0], [0, 0]])


def test_the_two_highest_scores_name_the_pair() -> None:
    from capsnet.data.multimnist import two_highest

    assert two_highest(np.array([0.1, 0.9, 0.3, 0.8])) == (1, 3)
    assert two_highest(torch.tensor([0.5, 0.5, 0.1])) == (0, 1)  # a tie goes to the lower class, as argmax does
