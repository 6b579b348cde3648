"""Will it fit this machine's memory (`capsnet.memory`): estimated from the network's shapes before anything is built
or read, and refused in one line naming a batch that fits; where nobody chose a batch (a page, an export), a smaller
one is taken."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_support import capsnet
from conftest import REPO
from PIL import Image

from capsnet import memory
from capsnet.data.tasks import read_test_set as real_read
from capsnet.evaluation import evaluate
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNet
from capsnet.nn.registry import network


def test_an_evaluation_that_would_not_fit_is_refused_before_reading_and_the_batch_said_fits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An `evaluate` whose batch would not fit was killed by the allocator half-way (here the
    shipped CapsNet at 10,000 images a batch with 2 GiB free); its reading is measured before the data is read and
    refused in one line that names a batch, and that batch reads. (The address-space limit that `headroom` reads is
    tested with a real training run in test_hostile_files.py.)"""
    from capsnet.cli import evaluate as cli

    mnist = str(REPO / "checkpoints" / "mnist.safetensors")
    monkeypatch.setattr(memory, "headroom", lambda: 2 << 30)
    read = []
    monkeypatch.setattr(cli, "read_test_set", lambda *a, **k: read.append(a) or real_read(*a, **k))
    assert cli.main([mnist, "--batch-size", "10000"]) == 2
    said = capsys.readouterr().err.strip()
    assert "\n" not in said and not read, said  # refused before the test set was read
    assert said.startswith("python -m capsnet evaluate: error: reading with the CapsNet at a batch of 10000 needs"), (
        said
    )
    fits = re.search(r"--batch-size (\d+) fits$", said)
    assert fits is not None and 16 <= int(fits.group(1)) < 10000, said
    batch = fits.group(1)
    assert cli.main([mnist, "--batch-size", batch, "--limit", batch]) == 0
    assert "on the MNIST test set" in capsys.readouterr().out


def test_where_nobody_chose_a_batch_a_smaller_one_is_read_when_memory_is_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A page or an export reads 500 images a batch, or as many as fit: the same results in more batches."""
    torch.manual_seed(0)
    net = CapsNet(CapsNetConfig.preset("tiny")).eval()
    images, labels = torch.rand(40, 1, 28, 28), torch.randint(0, 10, (40,))
    batches: list[int] = []
    roomy = evaluate(net, images, labels, on_batch=lambda done, total: batches.append(done))
    assert batches == [40]  # one batch of up to 500
    needs = memory.reading_memory(net.config)
    assert needs is not None and needs.per_image > 0
    monkeypatch.setattr(memory, "headroom", lambda: int(needs.at(16)))  # room for 16 images a batch, not 500
    assert 1 <= memory.reading_batch(net, net.config, 500) <= 16
    batches.clear()
    tight = evaluate(net, images, labels, on_batch=lambda done, total: batches.append(done))
    assert len(batches) >= 3 and batches[-1] == 40
    assert tight.accuracy == roomy.accuracy and tight.loss == pytest.approx(roomy.loss, rel=1e-6)
    assert torch.equal(torch.as_tensor(tight.predictions), torch.as_tensor(roomy.predictions))
    monkeypatch.setattr(memory, "headroom", lambda: None)  # nothing known: the batch asked for
    assert memory.reading_batch(net, net.config, 500) == 500


KEEPING = """
import resource, torch
from capsnet import memory
def faults():  # the fewest page faults of writing a 64 MiB tensor made after one like it was freed, of three
    counts = []
    for _ in range(3):
        torch.empty(16 << 20).fill_(1.0)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        torch.empty(16 << 20).fill_(1.0)
        counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return min(counts)
plain = faults()
print(plain, memory.keep_freed_memory(), faults())
"""


def test_a_training_process_keeps_freed_memory_and_writes_its_next_step_without_page_faults() -> None:
    """A training step's large tensors are each a fresh mapping under glibc's own way, every page of which faults
    when first written; a process that keeps freed memory reuses the last step's."""
    out = subprocess.run([sys.executable, "-c", KEEPING], capture_output=True, text=True, check=True, cwd=REPO)
    plain, kept, after = out.stdout.split()
    assert int(plain) > 10_000  # 16,384 pages of 4 KiB
    assert kept == "True" and int(after) < 1_000


# ---------------------------------------------------------------- estimated from the shapes, nothing built

SHAPED = [  # (network, preset, side, channels): the shipped families at their own sizes and at others
    ("capsnet", "paper", 28, 1), ("capsnet", "tiny", 40, 3), ("capsnet", "multimnist", 36, 1),
    ("cnn", "paper", 28, 1), ("cnn", "tiny", 32, 3), ("em", "paper", 28, 1), ("em", "small", 32, 1),
    ("em", "paper-decoder", 28, 1), ("em", "tiny", 48, 3),
]  # fmt: skip


@pytest.mark.parametrize(("name", "preset", "side", "channels"), SHAPED)
def test_the_shapes_count_every_parameter_the_network_builds(name: str, preset: str, side: int, channels: int) -> None:
    config = network(name).config_type.preset(preset, image_size=side, in_channels=channels)
    built = network(name).build(config)
    assert memory.shapes(config).parameters == sum(p.numel() for p in built.parameters())


def _folder(root: Path) -> Path:
    """Two classes of three grey 32x32 pictures each: a dataset that --image-size applies to."""
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for n in range(3):
            Image.fromarray(np.full((32, 32), 40 * n, dtype=np.uint8)).save(root / name / f"{n}.png")
    return root


@pytest.mark.parametrize(
    ("name", "built", "batch"), [("em", EMCapsNet, "16"), ("capsnet", CapsNet, "512")], ids=["em", "capsnet"]
)
def test_a_network_too_large_for_memory_is_refused_before_it_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, built: type, batch: str
) -> None:
    """The paper's networks on 256x256 pictures, with 16 GiB free: the EM network (about 2 GB an image) at a batch
    of 16 and the CapsNet (a 2.4 GB weight matrix, its votes 0.3 GB an image) at 512 are each refused in one line
    naming a batch that fits, from the config alone: the network is never built, nor the data read."""
    from capsnet.training import trainer

    monkeypatch.setattr(memory, "headroom", lambda: 16 << 30)
    monkeypatch.setattr(built, "__init__", lambda *a, **k: pytest.fail("the network was built"))
    monkeypatch.setattr(trainer, "load_data", lambda *a, **k: pytest.fail("the data was read"))
    done = capsnet("train", "--dataset", _folder(tmp_path / "pictures"), "--image-size", "256", "--network", name,
                   "--preset", "paper", "--batch-size", batch, "--epochs", "1", "--no-progress", "--no-compile",
                   "--out", tmp_path / "run")  # fmt: skip
    said = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in said, said
    title = network(name).title
    assert said.startswith(f"python -m capsnet train: error: the {title} (paper preset) at a batch of {batch} needs"), (
        said
    )
    fits = re.search(r"--batch-size (\d+) fits$", said)
    assert fits is not None and 1 <= int(fits.group(1)) < int(batch), said


@pytest.mark.parametrize("name", ["capsnet", "cnn", "em"])
def test_the_usual_mnist_runs_fit(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Each family's paper network on MNIST at a batch of 128 fits in 4 GiB, and reads 500 images a batch there."""
    monkeypatch.setattr(memory, "headroom", lambda: 4 << 30)
    config = network(name).config_type.preset("paper")
    memory.check_fits(config, 128, "the network")
    assert memory.reading_memory(config).at(500) < 4 << 30
