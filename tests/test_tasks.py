"""One way to read a labelled set, whatever an example is: single images, digits placed on 40x40, or pairs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from capsnet.data import multimnist, tasks
from capsnet.data.datasets import as_tensors, load_dataset, stored_tensors
from capsnet.data.tasks import read_test_set
from capsnet.evaluation import Evaluation, PairEvaluation, evaluate, evaluate_pairs, evaluate_set
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.cnn import BaselineCNN, CNNConfig
from capsnet.nn.config import CapsNetConfig


def test_single_images_and_their_first_n(data_dir: Path) -> None:
    test = read_test_set("mnist")
    images, labels = as_tensors(load_dataset("mnist", train=False))
    assert len(test) == 10_000 and test.pairs is None
    assert torch.equal(test.images, images) and torch.equal(test.labels, labels)
    first = test.first(50)
    assert len(first) == 50 and torch.equal(first.images, images[:50]) and test.first(None) is test
    sample = test.sample(30, seed=3)
    assert len(sample) == 30 and torch.equal(sample.images, test.sample(30, seed=3).images)  # seeded
    torch.manual_seed(0)
    model = CapsNet(CapsNetConfig.preset("tiny")).eval()
    result = evaluate_set(model, first, batch_size=16)
    expected = evaluate(model, images[:50], labels[:50], batch_size=16)
    assert isinstance(result, Evaluation) and result.correct == expected.correct and result.redrawn
    torch.testing.assert_close(result.lengths, expected.lengths)


def test_digits_placed_on_a_larger_canvas(data_dir: Path) -> None:
    test = read_test_set("mnist-40").first(8)
    assert test.images.shape == (8, 1, 40, 40) and test.pairs is None
    small = read_test_set("mnist").first(8).images
    torch.testing.assert_close(test.images.sum(dim=(1, 2, 3)), small.sum(dim=(1, 2, 3)))  # each digit whole, moved


def test_pairs_are_the_fixed_test_pairs_and_keep_their_digits(data_dir: Path) -> None:
    test = read_test_set("multimnist")
    digits, labels = stored_tensors(load_dataset("multimnist", train=False))
    pairs = multimnist.test_pairs(labels)
    assert len(test) == len(pairs.first) == 100_000 and torch.equal(test.images, digits)
    first = test.first(40)
    assert len(first) == 40 and torch.equal(first.pairs.second, pairs.second[:40])
    assert torch.equal(first.images, digits)  # the pairs name digits of the whole set
    torch.manual_seed(0)
    cnn = BaselineCNN(CNNConfig.preset("tiny", image_size=36, multi_label=True)).eval()
    result = evaluate_set(cnn, first)
    expected = evaluate_pairs(cnn, digits, labels, first.pairs)
    assert isinstance(result, PairEvaluation) and (result.correct, result.total) == (expected.correct, 40)


@pytest.mark.parametrize(
    ("name", "kind", "size", "present", "drawings"),
    [("mnist", "image", 28, 1, True), ("fashion-mnist", "image", 28, 1, True), ("mnist-40", "placed", 40, 1, False),
     ("multimnist", "pair", 36, 2, False)],
)  # fmt: skip
def test_the_task_answers_what_the_code_would_branch_on(
    name: str, kind: str, size: int, present: int, drawings: bool
) -> None:
    task = tasks.task(name)
    assert (task.kind, task.input_size, task.present, task.takes_drawings) == (kind, size, present, drawings)
    assert task.pairs == (kind == "pair") and task.eval_batch == (250 if task.pairs else 500)
    with pytest.raises(ValueError, match="cifar"):
        tasks.task("cifar")


def test_the_rule_for_a_right_answer() -> None:
    scores = torch.tensor([[0.9, 0.1, 0.8, 0.0], [0.1, 0.2, 0.3, 0.9]])
    assert tasks.Task.right(scores, torch.tensor([0, 3])).tolist() == [True, True]
    assert tasks.Task.right(scores, torch.tensor([[2, 0], [3, 1]])).tolist() == [True, False]  # the two highest
    tied = torch.tensor([[0.9, 0.5, 0.5, 0.0]])
    assert tasks.Task.right(tied, torch.tensor([[0, 1]])).tolist() == [False]  # a tie at the cut is not right
