"""affNIST-style robustness: digits moved on 40x40 for training, the seeded affNIST-like test set, the sweeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_support import capsnet

from capsnet.checkpoints.checkpoint import load_checkpoint, read_checkpoint_info
from capsnet.cli import affnist as affnist_cli
from capsnet.data.datasets import as_tensors, load_dataset, placed, stored_tensors
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.cnn import BaselineCNN, CNNConfig
from capsnet.nn.config import CapsNetConfig
from capsnet.readings import affnist
from capsnet.readings.equivariance import Transform, transform


def _centre_of_mass(images: torch.Tensor) -> torch.Tensor:
    """(N, 2) (y, x) of each image's ink."""
    n, _, h, w = images.shape
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    mass = images[:, 0].double()
    total = mass.sum(dim=(1, 2))
    return torch.stack([(mass * ys).sum(dim=(1, 2)) / total, (mass * xs).sum(dim=(1, 2)) / total], dim=1)


def test_digits_are_placed_whole_on_the_larger_canvas() -> None:
    digits = torch.randint(0, 256, (50, 1, 28, 28), dtype=torch.uint8)
    centred = placed(digits, 40)
    assert centred.shape == (50, 1, 40, 40) and torch.equal(centred[:, :, 6:34, 6:34], digits)
    moved = placed(digits, 40, seed=3)
    assert torch.equal(moved.sum(dim=(1, 2, 3)), centred.sum(dim=(1, 2, 3)))  # nothing falls off
    assert torch.equal(moved, placed(digits, 40, seed=3)) and not torch.equal(moved, placed(digits, 40, seed=4))
    shifts = _centre_of_mass(moved.float()) - _centre_of_mass(centred.float())
    assert shifts.abs().max() <= 6 + 1e-9 and shifts.abs().max() > 3  # anywhere the digit fits, and used
    with pytest.raises(ValueError, match="cannot place 28x28 images on a 20x20 canvas"):
        placed(digits, 20)


def test_the_affnist_like_set_is_seeded_and_in_its_ranges() -> None:
    transforms = affnist.random_transforms(2000)
    assert transforms == affnist.random_transforms(2000) and transforms != affnist.random_transforms(2000, seed=1)
    rotation = torch.tensor([t.rotation for t in transforms])
    shear = torch.tan(torch.deg2rad(torch.tensor([t.shear for t in transforms])))
    scale = torch.tensor([t.scale for t in transforms])
    assert rotation.abs().max() <= 20 and rotation.abs().max() > 19 and rotation.mean().abs() < 1
    assert shear.abs().max() <= 0.2 + 1e-9 and shear.abs().max() > 0.19
    assert scale.min() >= 0.8 and scale.max() <= 1.2 and scale.min() < 0.81 and scale.max() > 1.19
    assert all(t.dx == t.dy == 0 and t.thickness == 0 for t in transforms)


def test_affine_digits_stay_where_the_transform_leaves_them(data_dir: Path) -> None:
    digits, _ = stored_tensors(load_dataset("mnist", train=False))
    images, transforms = affnist.affnist_like(digits[:200])
    assert images.shape == (200, 1, 40, 40) and images.min() >= 0 and images.max() <= 1
    again, _ = affnist.affnist_like(digits[:200])
    assert torch.equal(images, again)
    canvas = placed(digits[:200], 40).float() / 255
    # the same as transforming one digit at a time (the batch is not mixed up)
    for i in (0, 57, 199):
        torch.testing.assert_close(images[i : i + 1], transform(canvas[i : i + 1], [transforms[i]]))
    # no re-centring: each centre of mass is the original's, moved by the linear map about the canvas centre
    centre = torch.tensor([19.5, 19.5], dtype=torch.float64)
    before, after = _centre_of_mass(canvas) - centre, _centre_of_mass(images) - centre
    for i in range(0, 200, 20):
        t = transforms[i]
        expected_ink = t.scale**2 * canvas[i].sum()
        assert abs(images[i].sum() - expected_ink) < 0.1 * expected_ink  # area grows as scale^2
        angle, lean = torch.deg2rad(torch.tensor(t.rotation)), -torch.tan(torch.deg2rad(torch.tensor(t.shear)))
        rotate = torch.tensor([[torch.cos(angle), -torch.sin(angle)], [torch.sin(angle), torch.cos(angle)]])
        shear = torch.tensor([[1.0, 0.0], [lean, 1.0]])  # (y, x) order
        moved = (t.scale * rotate @ shear).double() @ before[i]
        assert torch.dist(moved, after[i]) < 0.6, (i, moved, after[i])


def test_a_sweep_is_the_accuracy_under_each_transform(data_dir: Path) -> None:
    model = CapsNet(CapsNetConfig.preset("tiny")).eval()
    images, labels = as_tensors(load_dataset("mnist", train=False))
    images, labels = images[:60], labels[:60]
    steps = []
    sweep = affnist.accuracy_sweep(
        model, images, labels, "rotation", [-30, 0, 30], on_step=lambda k, n: steps.append(k)
    )
    assert sweep.values == (-30.0, 0.0, 30.0) and sweep.examples == 60 and steps == [1, 2, 3]
    for value, acc in zip(sweep.values, sweep.accuracy):
        moved = transform(images, [Transform(rotation=value)] * 60)
        with torch.no_grad():
            right = (model(moved).lengths.argmax(1) == labels).float().mean().item()
        assert acc == pytest.approx(right)
    assert sweep.accuracy[1] == pytest.approx(affnist.accuracy(model, images, labels))
    cnn = BaselineCNN(CNNConfig.preset("tiny")).eval()
    scales = affnist.accuracy_sweep(cnn, images, labels, "scale")
    assert scales.values == tuple(float(v) for v in affnist.SCALES) and len(scales.accuracy) == len(affnist.SCALES)
    with pytest.raises(ValueError, match="kind must be"):
        affnist.accuracy_sweep(cnn, images, labels, "shear")


def test_one_affine_test_set_measures_several_models(data_dir: Path) -> None:
    """`affine_test_set` is the moved test digits and their affNIST-like stand-ins; a model read on it (as the
    CLI does, one set for all its checkpoints) scores what `measure` finds when it builds the set itself."""
    test = affnist.affine_test_set(limit=50)
    digits, labels = stored_tensors(load_dataset("mnist", train=False))
    moved, _ = as_tensors(load_dataset("mnist", train=False), 40)
    assert test.moved.shape == test.affine.shape == (50, 1, 40, 40) and torch.equal(test.labels, labels[:50])
    assert torch.equal(test.moved, moved[:50]) and torch.equal(test.affine, affnist.affnist_like(digits[:50])[0])
    torch.manual_seed(0)
    for model in (
        CapsNet(CapsNetConfig.preset("tiny", image_size=40)),
        BaselineCNN(CNNConfig.preset("tiny", image_size=40)),
    ):
        shared = affnist.measure(model.eval(), test=test)
        assert shared == affnist.measure(model, limit=50) and shared.examples == 50
        assert shared.affnist_like_accuracy == affnist.accuracy(model, test.affine, test.labels)
    with pytest.raises(affnist.CapsNetError, match="train on --dataset mnist-40"):
        affnist.measure(CapsNet(CapsNetConfig.preset("tiny")), test=test)


@pytest.mark.slow
def test_train_on_mnist_40_and_measure_on_the_affnist_like_set(data_dir: Path, tmp_path: Path) -> None:
    runs = {}
    for model, size in (("capsnet", 3000), ("cnn", 3000)):  # the same budget for both (the verdict compares them)
        runs[model] = tmp_path / model
        train = capsnet("train", "--dataset", "mnist-40", "--network", model, "--preset", "tiny",
             "--epochs", "1", "--train-size", size, "--batch-size", "32", "--lr", "0.003", "--test-size", "200", "--out", str(runs[model]),
             "--no-progress", "--device", "cpu")  # fmt: skip
        assert train.returncode == 0, train.stderr[-2000:]
    report = capsnet("affnist", *(str(r / "best.safetensors") for r in runs.values()),
         "--limit", "200", "--json")  # fmt: skip
    assert report.returncode == 0, report.stderr[-2000:]
    lines = [json.loads(line) for line in report.stdout.strip().splitlines()]
    assert [line["network"] for line in lines] == ["capsnet", "cnn"]
    for line in lines:
        assert line["examples"] == 200 and 0 <= line["affnist_like_accuracy"] <= 1
        assert line["moved_mnist_accuracy"] > 0.2, lines  # twice chance: both learned from digits anywhere on 40x40
    # an export keeps the affNIST-like figure in the header, and the affine verdict reads it from there
    from capsnet.readings.claims import verdict
    from capsnet.runs.export import export_checkpoint

    # the CNN is measured on the whole sets; the CapsNet (10x slower here) on the first 1,000 digits of each, which
    # its header says: both paths of the export are taken
    exported, first = {}, {"capsnet": 1000, "cnn": None}
    for model, run in runs.items():
        exported[model] = tmp_path / "shipped" / f"{model}.safetensors"
        info = export_checkpoint(run / "best.safetensors", exported[model], device="cpu", first=first[model])
        test = affnist.affine_test_set(limit=first[model])
        shipped = load_checkpoint(exported[model], networks=(model,)).model
        # the header's figures are the shipped file's, on the sets measured (the moved digits: the mnist-40 test set)
        assert info.extra["affnist_like_accuracy"] == affnist.accuracy(shipped, test.affine, test.labels)
        assert info.extra["moved_mnist_accuracy"] == info.test_accuracy and info.test_examples == len(test.moved)
        assert info.extra["affnist_like_examples"] == len(test.labels) == (first[model] or 10_000)
    v = verdict("affnist", exported["capsnet"], exported["cnn"])
    assert [r.error for r in v.rows] == [1 - read_checkpoint_info(p)[1].extra["affnist_like_accuracy"]
                                         for p in exported.values()]  # fmt: skip
    assert [r.test_examples for r in v.rows] == [1000, 10_000] and v.equal_budgets
    assert [r.paper_error for r in v.rows] == [0.21, 0.34]
    assert [seen for seen, _ in v.rows[0].curve] == [3000]  # the run's own test error after its one epoch
    # a 28x28 checkpoint among them is refused by its path before anything is measured or printed
    mnist = REPO / "checkpoints" / "mnist.safetensors"
    wrong = capsnet("affnist", str(exported["capsnet"]), str(mnist))  # fmt: skip
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert f"{mnist} reads 28x28 images" in wrong.stderr and "train on --dataset mnist-40" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1


REPO = Path(__file__).resolve().parents[1]


def test_the_sweep_cli_reads_each_checkpoints_own_test_set(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from capsnet.checkpoints.checkpoint import save_checkpoint

    paths = [
        save_checkpoint(tmp_path / "caps.safetensors", CapsNet(CapsNetConfig.preset("tiny")), {"dataset": "mnist"}),
        save_checkpoint(tmp_path / "cnn.safetensors", BaselineCNN(CNNConfig.preset("tiny")), {"dataset": "mnist"}),
    ]
    assert affnist_cli.main(["--sweep", *map(str, paths), "--limit", "30", "--json", "--device", "cpu"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [line["network"] for line in lines] == ["capsnet", "cnn"]
    for line in lines:
        assert line["rotation"]["values"] == [float(v) for v in affnist.ANGLES] and line["scale"]["examples"] == 30
        assert all(0 <= a <= 1 for a in line["rotation"]["accuracy"])
    assert affnist_cli.main(["--sweep", str(paths[1]), "--limit", "30", "--device", "cpu"]) == 0
    assert "rotation: -60° " in capsys.readouterr().out


def test_the_affnist_like_digits_come_on_the_canvas_each_network_reads(data_dir: Path) -> None:
    """MNIST's networks read them in the digits' own 28x28 frame, mnist-40's on 40x40; other pictures have none."""
    assert (affnist.digit_canvas("mnist"), affnist.digit_canvas("mnist-40")) == (28, 40)
    assert affnist.digit_canvas("fashion-mnist") is None and affnist.digit_canvas("multimnist") is None
    small = affnist.affine_images("mnist", limit=6)
    assert small is not None and small[0].shape == (6, 1, 28, 28) and small[1].shape == (6,)
    large = affnist.affine_images("mnist-40", limit=6)
    assert large is not None and torch.equal(large[0], affnist.affine_test_set(limit=6).affine)  # the same set
    # the same transforms at either size: as much ink on either canvas (at 28 a corner of a stroke may leave it)
    assert torch.allclose(small[0].sum(dim=(1, 2, 3)), large[0].sum(dim=(1, 2, 3)), rtol=0.05)
    assert affnist.affine_images("fashion-mnist") is None
