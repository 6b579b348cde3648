"""Will it fit this machine's memory (`capsnet.memory`): an evaluation's batch measured before the data is read and
refused in one line naming one that fits; where nobody chose a batch (a page, an export), a smaller one is taken."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from conftest import REPO

from capsnet import memory
from capsnet.data.tasks import read_test_set as real_read
from capsnet.evaluation import evaluate
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig


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
    needs = memory.reading_memory(net, net.config)
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
def mib(batch):  # what the probe measures: `batch` tensors of 1 MiB, written, held together
    held = [torch.ones(1 << 18) for _ in range(batch)]
probe = lambda: round(memory._probe(mib, (4, 20))[1] / (1 << 20), 2)
plain, measured = faults(), probe()
kept = memory.keep_freed_memory()
print(plain, measured, kept, faults(), probe(), faults())
"""


def test_a_training_process_keeps_freed_memory_and_writes_its_next_step_without_page_faults() -> None:
    """A training step's large tensors are each a fresh mapping under glibc's own way, every page of which faults
    when first written; a process that keeps freed memory reuses the last step's, and the memory probe still
    measures a step's bytes in it, and leaves it keeping."""
    out = subprocess.run([sys.executable, "-c", KEEPING], capture_output=True, text=True, check=True, cwd=REPO)
    plain, measured, kept, after, measured_kept, after_probe = out.stdout.split()
    assert int(plain) > 10_000  # 16,384 pages of 4 KiB
    assert kept == "True" and int(after) < 1_000 and int(after_probe) < 1_000
    assert float(measured) == pytest.approx(1.0, abs=0.1) and float(measured_kept) == pytest.approx(1.0, abs=0.1)
