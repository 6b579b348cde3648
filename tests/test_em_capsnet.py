"""The matrix-capsule network routed by EM (capsnet.nn.em_capsnet): presets, shapes, the spread loss and its margin,
the decoder's mask, and a run of the real training CLI with it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor

from capsnet.checkpoints.checkpoint import load_checkpoint, read_checkpoint_info
from capsnet.errors import CapsNetError, InvalidArgumentError
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.em_capsnet import EM_PRESETS, EMCapsNet, EMCapsNetConfig
from capsnet.nn.losses import spread_loss
from capsnet.nn.matrix_capsules import ClassCapsules, ConvCapsules
from capsnet.training.optimizer import parameter_groups
from capsnet.training.options import TrainOptions
from capsnet.training.schedule import Schedule
from tests.cli_support import capsnet


def test_parameter_counts_match_the_papers_figures() -> None:
    """The paper gives about 310K parameters for A = B = C = D = 32 and 68K for A = 64, B = 8, C = D = 16."""
    paper, small = EMCapsNet(EM_PRESETS["paper"]), EMCapsNet(EM_PRESETS["small"])
    # conv1 5*5*32+32, primary 32*32*16+512 + 32*32+32, 2 x (9*32*32*16 + 2*32), class 32*10*16 + 2*10
    assert paper.num_parameters() == 832 + 17952 + 2 * (147456 + 64) + 5120 + 20 == 318_964
    assert small.num_parameters() == 68_444
    assert abs(paper.num_parameters() - 310_000) / 310_000 < 0.03
    assert abs(small.num_parameters() - 68_000) / 68_000 < 0.01
    # the parameter count does not depend on the input's size (W is shared by position); smallNORB's 32x32 crops
    assert EMCapsNet(EMCapsNetConfig.preset("paper", image_size=32)).num_parameters() == 318_964
    with_decoder = EMCapsNet(EM_PRESETS["small-decoder"])
    assert with_decoder.num_parameters(decoder=False) == 68_444 and with_decoder.num_parameters() > 1_000_000
    paper_decoder = EMCapsNet(EM_PRESETS["paper-decoder"])
    decoder = 160 * 512 + 512 + 512 * 1024 + 1024 + 1024 * 784 + 784  # the same: 10 x 16 masked pose entries -> 784
    assert paper_decoder.num_parameters(decoder=False) == 318_964
    assert paper_decoder.num_parameters() == 318_964 + decoder == with_decoder.num_parameters() - 68_444 + 318_964


def test_grids_follow_the_paper() -> None:
    assert [EM_PRESETS["paper"].conv1_grid, EM_PRESETS["paper"].convcaps1_grid, EM_PRESETS["paper"].convcaps2_grid] == [
        12,
        5,
        3,
    ]
    norb = EMCapsNetConfig.preset("paper", image_size=32)
    assert (norb.conv1_grid, norb.convcaps1_grid, norb.convcaps2_grid) == (14, 6, 4)  # the paper's figure 1


def test_forward_shapes_and_what_it_returns_on_request() -> None:
    torch.manual_seed(0)
    model = EMCapsNet(EM_PRESETS["tiny"]).eval()
    out = model(torch.rand(3, 1, 28, 28), return_trace=True, return_primary=True, return_features=True)
    assert out.poses.shape == (3, 10, 16) and out.activations.shape == (3, 10) and out.prediction.shape == (3,)
    assert out.reconstruction is None  # no decoder in this preset
    assert ((out.activations > 0) & (out.activations < 1)).all()
    torch.testing.assert_close(out.scores, out.activations)
    assert out.trace is not None and out.trace.assignments.shape == (3, 3, 1, 10, 4 * 3 * 3)
    assert out.primary[0].shape == (3, 4, 16, 12, 12) and out.features.shape == (3, 8, 12, 12)
    with pytest.raises(ValueError, match="expected images of shape"):
        model(torch.rand(3, 1, 32, 32))


def test_the_decoder_is_masked_by_the_label_in_training() -> None:
    torch.manual_seed(0)
    model = EMCapsNet(EMCapsNetConfig.preset("tiny", decoder_hidden=(16,))).train()
    images = torch.rand(2, 1, 28, 28)
    prediction = model.eval()(images).prediction
    labels = (prediction + 1) % 10  # never the prediction
    model.train()
    out = model(images, labels)
    torch.testing.assert_close(out.reconstruction, model.decode(out.poses, labels))
    assert not torch.allclose(out.reconstruction, model.decode(out.poses, out.prediction))
    with pytest.raises(ValueError, match="needs labels"):
        model(images)


def test_spread_loss_by_hand_and_its_margin_schedule() -> None:
    a = torch.tensor([[0.9, 0.5, 0.1], [0.2, 0.3, 0.25]])
    labels = torch.tensor([0, 1])
    # example 0, a_t = 0.9: gaps 0.4 and 0.8; m = 0.5: (0.5 - 0.4)^2 + 0; m = 0.9: (0.9 - 0.4)^2 + (0.9 - 0.8)^2
    # example 1, a_t = 0.3: gaps 0.1 and 0.05; m = 0.5: 0.4^2 + 0.45^2; m = 0.9: 0.8^2 + 0.85^2
    assert spread_loss(a, labels, 0.5).item() == pytest.approx((0.01 + 0.16 + 0.2025) / 2)
    assert spread_loss(a, labels, 0.9).item() == pytest.approx((0.25 + 0.01 + 0.64 + 0.7225) / 2)
    c = EMCapsNetConfig()
    assert [c.margin(p) for p in (0.0, 0.25, 0.5, 1.0)] == pytest.approx([0.2, 0.55, 0.9, 0.9])


def test_convolutional_capsules_see_the_right_children() -> None:
    layer = ConvCapsules(in_types=2, out_types=3, kernel=3, stride=2, in_size=7)
    assert layer.out_size == 3 and layer.child_index.shape == (9, 18)
    # position (1, 2) of the 3x3 parent grid reads rows 2-4, columns 4-6 of each child type
    cells = {int(c) for c in layer.child_index[1 * 3 + 2]}
    want = {t * 49 + y * 7 + x for t in range(2) for y in range(2, 5) for x in range(4, 7)}
    assert cells == want
    # the votes of a slot are its child's pose times that slot's W
    torch.manual_seed(0)
    poses, acts = torch.randn(1, 2, 16, 7, 7), torch.rand(1, 2, 7, 7)
    _, _, trace = layer(poses, acts, 1, trace=True)
    slot = 5  # type 0, kernel entry 5 = (1, 2)
    child = poses[0, 0, :, 2 + 1, 4 + 2].view(4, 4)
    torch.testing.assert_close(trace.votes[0, 5, :, slot], (child @ layer.weight[slot]).view(3, 16))


def test_class_capsules_add_the_coordinates_of_each_child() -> None:
    layer = ClassCapsules(in_types=1, classes=2, in_size=2)
    torch.nn.init.zeros_(layer.weight)  # votes are the offsets alone
    _, _, trace = layer(torch.zeros(1, 1, 16, 2, 2), torch.ones(1, 1, 2, 2), 1, trace=True)
    votes = trace.votes[0, 0, 0]  # (I, 16), child i = (y, x) row-major
    assert votes[:, 3].tolist() == [0.25, 0.25, 0.75, 0.75]  # row of the centre, scaled to (0, 1)
    assert votes[:, 7].tolist() == [0.25, 0.75, 0.25, 0.75]  # column
    assert votes[:, [0, 1, 2, 4, 5, 6, 8, 15]].abs().sum() == 0


def test_options_refuse_pairs_for_the_em_network() -> None:
    with pytest.raises(InvalidArgumentError, match="one digit per image"):
        TrainOptions(network="em", preset="tiny", dataset="multimnist").validate()
    with pytest.raises(InvalidArgumentError, match="no preset 'multimnist'"):
        TrainOptions(network="em", preset="multimnist").validate()
    assert isinstance(TrainOptions(network="em", preset="small").network_config(), EMCapsNetConfig)
    with pytest.raises(
        InvalidArgumentError, match=r"--beta-lr applies to the EM CapsNet only, not the CapsNet \(--network capsnet\)"
    ):
        TrainOptions(network="capsnet", preset="tiny", beta_lr=10.0).validate()
    with pytest.raises(InvalidArgumentError, match="--beta-lr must be greater than 0"):
        TrainOptions(network="em", preset="tiny", beta_lr=0.0).validate()


def test_beta_lr_gives_the_costs_their_own_rate_and_the_schedule_keeps_the_ratio() -> None:
    model = EMCapsNet(EM_PRESETS["tiny"])
    (alone,) = parameter_groups(model, 1e-3, 1.0)  # one group: a run begun before the option resumes as it was
    assert len(alone["params"]) == len(list(model.parameters()))
    groups = parameter_groups(model, 1e-3, 30.0)
    betas = {id(p) for name, p in model.named_parameters() if name.endswith(("beta_u", "beta_a"))}
    assert len(betas) == 2 * 3  # ConvCaps1, ConvCaps2 and the class capsules: beta_u and beta_a each
    assert {id(p) for p in groups[1]["params"]} == betas and not betas & {id(p) for p in groups[0]["params"]}
    assert len(groups[0]["params"]) + len(groups[1]["params"]) == len(list(model.parameters()))
    optimizer = torch.optim.Adam(groups, lr=1e-3)
    schedule = Schedule(optimizer, "cosine", lr_decay=0.96, epochs=1, batches=10, warmup=0.1)
    for _ in range(4):
        assert optimizer.param_groups[1]["lr"] == pytest.approx(30 * optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.after_batch()
    with pytest.raises(CapsNetError, match="no beta_u or beta_a"):
        parameter_groups(CapsNet(CapsNetConfig.preset("tiny")), 1e-3, 30.0)


@pytest.mark.slow
def test_the_training_cli_trains_resumes_and_evaluates_an_em_network(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "em"
    common = ["--network", "em", "--preset", "tiny", "--train-size", "256", "--test-size", "128",
              "--batch-size", "64", "--beta-lr", "10", "--out", out, "--data-dir", data_dir, "--no-progress"]  # fmt: skip
    first = capsnet("train", *common, "--epochs", "1")
    assert first.returncode == 0, first.stderr
    resumed = capsnet("train", *common, "--epochs", "2", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [1, 2] and all(0 <= e["test_accuracy"] <= 1 for e in epochs)
    assert json.loads((out / "args.json").read_text())["beta_lr"] == 10  # resumed with its two parameter groups
    loaded = load_checkpoint(out / "last.safetensors", networks=("em",))
    assert isinstance(loaded.model, EMCapsNet) and loaded.model.config == EM_PRESETS["tiny"]
    evaluated = capsnet("evaluate", out / "last.safetensors", "--data-dir", data_dir, "--limit", "128")
    assert evaluated.returncode == 0, evaluated.stderr
    assert "%" in evaluated.stdout


def _largest_allocation(run: Callable[[], object]) -> int:
    """The largest single CPU allocation `run` makes, in bytes, as the profiler records it."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    return max(event.cpu_memory_usage for event in prof.events())


def test_the_cpu_routes_the_batch_in_chunks_that_bound_its_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU without the EM kernel (`capsnet.nn.em_native`) each EM layer routes the batch in chunks of at most
    CPU_CHUNK_BYTES of votes and [V, V^2], in a reading and in training alike, with the whole batch's results and
    gradients; so no tensor grows with the batch past a chunk's (the paper's network made 29.5 MB of [V, V^2] an
    image: a batch of 500 asked for 29 GB). A trace keeps every example's votes: one routing over the whole batch."""
    from capsnet.nn import em_native, matrix_capsules

    monkeypatch.setenv(em_native.NATIVE_ENV, "0")
    torch.manual_seed(0)
    model = EMCapsNet(EM_PRESETS["small"])
    images, labels = torch.rand(12, 1, 28, 28), torch.randint(0, 10, (12,))
    per_image = model.convcaps1.routing_bytes_per_image()  # the widest layer: (P, J, I, 16 + 32) float32
    assert per_image == 25 * 16 * (8 * 9) * 48 * 4

    def train() -> None:
        spread_loss(model(images, labels).activations, labels, 0.5).backward()

    def run(chunk_bytes: int) -> tuple[Tensor, Tensor, list[Tensor], int]:
        monkeypatch.setattr(matrix_capsules, "CPU_CHUNK_BYTES", chunk_bytes)
        with torch.no_grad():
            read = model.eval()(images)
            largest = _largest_allocation(lambda: model(images))
        model.train().zero_grad()
        largest = max(largest, _largest_allocation(train))
        return read.activations, read.poses, [p.grad.clone() for p in model.parameters() if p.grad is not None], largest

    whole, chunked = run(2**62), run(2 * per_image)  # the whole batch; two images a chunk
    torch.testing.assert_close(chunked[0], whole[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(chunked[1], whole[1], rtol=1e-5, atol=1e-5)
    assert len(chunked[2]) == len(whole[2]) == len(list(model.parameters()))
    for mine, theirs in zip(chunked[2], whole[2]):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)
    assert whole[3] > 6 * per_image and chunked[3] <= 2 * per_image  # a chunk's, where the whole batch made 12 images'
    with torch.no_grad():
        traced = model.eval()(images, return_layer_traces=True)
    assert traced.layer_traces is not None and traced.layer_traces[0].assignments.shape[0] == 12


def test_the_kernel_reads_and_trains_without_a_tensor_of_the_votes_size() -> None:
    """With the EM kernel (`capsnet.nn.em_native`, `em_native_training`) each vote is remade where a pass needs it:
    a reading's largest allocation is one number a vote of the batch (the assignments), a training step's the 2r - 1
    numbers a vote its backward stacks (r = 3: 5), where the PyTorch path held 48 (V and [V, V^2]) a vote."""
    torch.manual_seed(0)
    model = EMCapsNet(EM_PRESETS["small"])
    images, labels = torch.rand(12, 1, 28, 28), torch.randint(0, 10, (12,))
    one_number = 12 * model.convcaps1.routing_bytes_per_image() // 48  # a float a vote of the widest layer, 12 images
    with torch.no_grad():
        read = _largest_allocation(lambda: model.eval()(images))
    model.train()
    trained = _largest_allocation(lambda: spread_loss(model(images, labels).activations, labels, 0.5).backward())
    assert read <= one_number and trained <= 5 * one_number, (read, trained, one_number)


@pytest.mark.parametrize("chunked", [False, True])
def test_scores_by_iterations_are_the_forward_pass_at_each_count(monkeypatch: pytest.MonkeyPatch, chunked) -> None:
    """The class activations at each r (Where routing matters) equal a whole forward pass at that r, in any order of
    r, the first layer routed once for every r (its routing in chunks of two images, or the whole batch); a count
    outside 1..20 is refused in one line."""
    from capsnet.nn import matrix_capsules

    torch.manual_seed(0)
    model = EMCapsNet(EM_PRESETS["small"]).eval()
    if chunked:
        monkeypatch.setattr(matrix_capsules, "CPU_CHUNK_BYTES", 2 * model.convcaps1.routing_bytes_per_image())
    images = torch.rand(5, 1, 28, 28)
    with torch.no_grad():
        scores = model.scores_by_iterations(images, (3, 1, 2, 5))
        want = torch.stack([model(images, routing_iterations=r).activations for r in (3, 1, 2, 5)], dim=1)
        assert scores.shape == (5, 4, 10)
        torch.testing.assert_close(scores, want, rtol=1e-5, atol=1e-6)
        first = model.convcaps1.by_iterations(*model.primary(torch.relu(model.conv1(images))), 3)
        assert first[0].shape == (3, 5, 16, 16, 5, 5) and first[1].shape == (3, 5, 16, 5, 5)
        for bad in ((0, 1), (21,)):
            with pytest.raises(InvalidArgumentError, match="routing iterations must be from 1 to 20"):
                model.scores_by_iterations(images, bad)


@pytest.mark.slow
def test_the_em_demo_recipe_learns_in_under_a_minute(data_dir: Path, tmp_path: Path) -> None:
    """`--recipe em-demo` (the tiny EM network, 8,000 images, one epoch, r = 2, Adam 1e-2) reaches
    at least 60% of its 2,000 test digits (70-74% measured, in 15-20 s of training on 2 cores), where the tiny
    network at the paper's r = 3 and lr 1e-3 on 2,000 images reached 10-18%."""
    done = capsnet("train", "--recipe", "em-demo", "--out", str(tmp_path / "run"), "--no-progress", "--device", "cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["test_accuracy"] >= 0.60, record
    _, info = read_checkpoint_info(tmp_path / "run" / "best.safetensors")
    assert info.recipe["recipe"] == "em-demo" and info.recipe["routing_iterations"] == 2
