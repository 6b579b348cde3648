"""The CNN baseline: the paper's design, its size, its loss, its checkpoints, and the same CLIs as the CapsNet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from cli_support import capsnet

from capsnet.checkpoints.checkpoint import CheckpointError, load_checkpoint, read_checkpoint_info, save_checkpoint
from capsnet.data.tasks import Task
from capsnet.evaluation import evaluate
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.cnn import CNN_PRESETS, BaselineCNN, CNNConfig, cnn_loss
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.registry import network
from capsnet.runs import catalog
from capsnet.training.options import TrainOptions


def test_the_paper_baseline_and_ours_to_the_parameter() -> None:
    # section 5: three 5x5 convolutions (256, 256, 128), FC 328 and 192, 10-way softmax: "35.4M parameters"
    paper = BaselineCNN(CNNConfig(pool_after=()))
    assert paper.num_parameters() == 35_445_522 and round(paper.num_parameters() / 1e6, 1) == 35.4
    shipped = BaselineCNN(CNN_PRESETS["paper"])
    assert shipped.num_parameters() == 4_587_282
    pairs = BaselineCNN(CNN_PRESETS["multimnist"])
    assert pairs.num_parameters() == 5_930_770
    for model in (shipped, pairs):  # each shipped file stays under 17 MB in float16
        assert 2 * model.num_parameters() < 17e6
    widths = [m.out_channels for m in shipped.features if isinstance(m, torch.nn.Conv2d)]
    assert widths == [256, 256, 128] and [m.out_features for m in shipped.classifier if hasattr(m, "out_features")] == [
        328,
        192,
        10,
    ]


def test_forward_gives_probabilities_and_checks_its_input() -> None:
    model = BaselineCNN(CNN_PRESETS["tiny"]).eval()
    out = model(torch.rand(5, 1, 28, 28))
    assert out.logits.shape == out.scores.shape == (5, 10) and out.prediction.shape == (5,)
    torch.testing.assert_close(out.scores.sum(dim=1), torch.ones(5))
    assert torch.equal(out.prediction, out.scores.argmax(dim=1))
    multi = BaselineCNN(CNNConfig.preset("tiny", image_size=36, multi_label=True)).eval()
    scores = multi(torch.rand(3, 1, 36, 36)).scores
    assert ((scores > 0) & (scores < 1)).all() and not torch.allclose(scores.sum(dim=1), torch.ones(3))
    with pytest.raises(ValueError, match=r"expected images of shape \(B, 1, 28, 28\)"):
        model(torch.rand(2, 1, 36, 36))
    with pytest.raises(ValueError, match="pool_after"):
        CNNConfig(pool_after=(4,))
    with pytest.raises(ValueError, match="dropout"):
        CNNConfig(dropout=1.0)


def test_dropout_only_in_training() -> None:
    model = BaselineCNN(CNN_PRESETS["tiny"])
    x = torch.rand(4, 1, 28, 28)
    model.eval()
    torch.testing.assert_close(model(x).logits, model(x).logits)
    model.train()
    assert not torch.allclose(model(x).logits, model(x).logits)


def test_losses_are_cross_entropy_and_two_hot_binary_cross_entropy() -> None:
    logits = torch.randn(6, 10)
    labels = torch.tensor([0, 1, 2, 3, 4, 5])
    torch.testing.assert_close(cnn_loss(logits, labels, CNNConfig()).total, F.cross_entropy(logits, labels))
    pairs = torch.tensor([[0, 1], [2, 7], [9, 3], [4, 5], [6, 8], [1, 2]])
    loss = cnn_loss(logits, pairs, CNNConfig(multi_label=True)).total
    slow = 0.0
    for b in range(6):  # per example and class, summed over classes, averaged over examples
        for k in range(10):
            target = float(k in pairs[b].tolist())
            p = torch.sigmoid(logits[b, k])
            slow += -(target * torch.log(p) + (1 - target) * torch.log(1 - p))
    torch.testing.assert_close(loss, slow / 6)
    with pytest.raises(ValueError, match="one label per image"):
        cnn_loss(logits, pairs, CNNConfig())


def test_checkpoints_name_their_architecture(tmp_path: Path) -> None:
    cnn = BaselineCNN(CNN_PRESETS["tiny"]).eval()
    path = save_checkpoint(tmp_path / "cnn.safetensors", cnn, {"dataset": "mnist"}, dtype=torch.float16)
    config, info = read_checkpoint_info(path)
    assert config == CNN_PRESETS["tiny"] and info.dataset == "mnist"
    with pytest.raises(CheckpointError, match="a CNN baseline, where a Capsule Network is needed"):
        load_checkpoint(path, networks=("capsnet",))  # a caller that needs capsules: one line, not a crash later
    loaded = load_checkpoint(path)  # any network by default
    assert loaded.network == "cnn" and isinstance(loaded.model, BaselineCNN)
    x = torch.rand(3, 1, 28, 28)
    torch.testing.assert_close(loaded.model(x).scores, cnn.half().float()(x).scores)
    capsnet = save_checkpoint(tmp_path / "caps.safetensors", CapsNet(CapsNetConfig.preset("tiny")), {})
    with pytest.raises(CheckpointError, match="a Capsule Network, where a CNN baseline is needed"):
        load_checkpoint(capsnet, networks=("cnn",))
    with pytest.raises(ValueError, match="unknown network 'rnn'"):
        network("rnn")


def test_evaluation_of_a_cnn_against_a_loop() -> None:
    model = BaselineCNN(CNN_PRESETS["tiny"]).eval()
    images, labels = torch.rand(37, 1, 28, 28), torch.randint(0, 10, (37,))
    result = evaluate(model, images, labels, batch_size=8)
    with torch.no_grad():
        logits = torch.cat([model(images[i : i + 1]).logits for i in range(37)])
    assert result.correct == int((logits.argmax(1) == labels).sum()) and result.total == 37
    assert result.loss == pytest.approx(F.cross_entropy(logits, labels).item(), rel=1e-5)
    assert not result.redrawn and result.dimension_mean is None and result.reconstruction_errors is None
    assert Task.right(result.lengths, labels).sum() == result.correct


def test_the_trainer_and_form_offer_the_cnn() -> None:
    assert "--network" in TrainOptions.parser().format_help()
    options = TrainOptions.parse_args(["--network", "cnn", "--preset", "tiny"])
    assert options.network == "cnn" and options.to_argv() == ["--network", "cnn", "--preset", "tiny"]
    assert "network" in TrainOptions.run_fields()  # a resumed run keeps its network


def test_the_catalogue_lists_the_baselines_apart(tmp_path: Path) -> None:
    shipped = tmp_path / "checkpoints"
    (shipped / "baselines").mkdir(parents=True)
    save_checkpoint(shipped / "mnist.safetensors", CapsNet(CapsNetConfig.preset("tiny")), {"dataset": "mnist"})
    cnn = BaselineCNN(CNN_PRESETS["tiny"])
    save_checkpoint(shipped / "baselines" / "mnist-cnn.safetensors", cnn, {"dataset": "mnist"})
    run = tmp_path / "runs" / "20260101-000000-mnist"
    run.mkdir(parents=True)
    (run / "args.json").write_text(json.dumps({"dataset": "multimnist", "model": "cnn"}))
    save_checkpoint(run / "best.safetensors", BaselineCNN(CNNConfig.preset("tiny", image_size=36)),
                    {"dataset": "multimnist"})  # fmt: skip
    capsnets = catalog.list_checkpoints(shipped, tmp_path / "runs")
    assert [e.path.name for e in capsnets] == ["mnist.safetensors"]
    baselines = catalog.list_checkpoints(shipped, tmp_path / "runs", network="cnn")
    assert [(e.source, e.dataset) for e in baselines] == [("shipped", "mnist"), ("run", "multimnist")]
    assert catalog.baseline_for("mnist", baselines).path.name == "mnist-cnn.safetensors"
    assert catalog.baseline_for("multimnist", baselines).source == "run"
    assert catalog.baseline_for("fashion-mnist", baselines) is None


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["mnist", "multimnist"])
def test_train_evaluate_and_export_a_cnn_from_the_cli(data_dir: Path, tmp_path: Path, dataset: str) -> None:
    run = tmp_path / "cnn"
    train = capsnet("train", "--network", "cnn", "--preset", "tiny", "--dataset", dataset,
         "--epochs", "1", "--train-size", "3000", "--test-size", "300", "--batch-size", "64", "--out", str(run),
         "--no-progress", "--device", "cpu")  # fmt: skip
    assert train.returncode == 0, train.stderr[-2000:]
    record = json.loads(train.stdout.strip().splitlines()[-1])
    checkpoint = load_checkpoint(run / "best.safetensors", networks=("cnn",))
    assert checkpoint.info.recipe["network"] == "cnn" and checkpoint.config.multi_label == (dataset == "multimnist")
    assert checkpoint.config.image_size == (36 if dataset == "multimnist" else 28)
    if dataset == "mnist":
        assert record["test_accuracy"] > 0.2  # twice chance: it learns (3,000 pairs teach a tiny CNN too little)
    assert record["train_loss"] < (2.3 if dataset == "mnist" else 10 * 0.6932)  # below a guess's loss
    report = capsnet("evaluate", str(run / "best.safetensors"), "--limit", "300", "--json")  # fmt: skip
    assert report.returncode == 0, report.stderr[-2000:]
    assert json.loads(report.stdout)["total"] == 300
    # an option the CNN does not read is refused in one line, not dropped
    routed = capsnet("evaluate", str(run / "best.safetensors"), "--routing-iterations", "5")
    assert routed.returncode != 0 and "--routing-iterations does not apply to it" in routed.stderr
    assert len(routed.stderr.strip().splitlines()) == 1
    # the capsule-only CLIs refuse it in one line
    explain = capsnet("predict", str(run / "best.safetensors"), "--checkpoint", str(run / "best.safetensors"))
    assert explain.returncode == 2 and "a CNN baseline" in explain.stderr
    assert len(explain.stderr.strip().splitlines()) == 1
    if dataset == "mnist":
        from capsnet.runs.export import export_checkpoint

        info = export_checkpoint(run / "best.safetensors", tmp_path / "out" / "mnist-cnn.safetensors", device="cpu")
        assert info.weights_dtype == "float16" and info.novelty is None and info.dimension_mean is None
        assert abs(info.test_accuracy - checkpoint.info.test_accuracy) < 0.05  # 10,000 images against 300
        assert len(info.per_class_accuracy) == 10


def test_a_colour_baseline_reads_a_colour_picture_beside_the_capsnet(tmp_path: Path) -> None:
    """The Transform lens asks the CNN beside a colour CapsNet for its scores: a colour picture (H, W, 3) is read as
    the CNN's three channels, not viewed as one grey plane (a shape error for every colour pair)."""
    import numpy as np

    from dashboard import baselines

    torch.manual_seed(0)
    net = BaselineCNN(CNNConfig.preset("tiny", in_channels=3, image_size=32)).eval()
    path = save_checkpoint(tmp_path / "cnn.safetensors", net, {"dataset": "pictures@32"})
    handle = baselines.Baseline(checkpoint=load_checkpoint(path, networks=("cnn",)), key="colour-cnn")
    picture = np.random.default_rng(0).random((32, 32, 3)).astype(np.float32)
    with torch.no_grad():
        expected = net(torch.from_numpy(picture).permute(2, 0, 1)[None]).scores[0].numpy()
    np.testing.assert_allclose(handle.scores(picture), expected, atol=1e-6)
