"""The verdict on the paper's claims, read from the checkpoints' headers and metrics."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch

from capsnet.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from capsnet.errors import CapsNetError
from capsnet.files import read_jsonl
from capsnet.readings import claims
from capsnet.readings.claims import verdict

REPO = Path(__file__).resolve().parents[1]
SHIPPED = (
    REPO / "checkpoints" / "multimnist.safetensors",
    REPO / "checkpoints" / "baselines" / "multimnist-cnn.safetensors",
)


def test_the_shipped_multimnist_models_verdict_says_plainly_that_the_cnn_is_ahead() -> None:
    """The shipped pair was trained on equal terms: the same pairs, learning rates and epochs chosen on validation."""
    v = verdict("multimnist", *SHIPPED)
    caps, cnn = v.rows
    assert v.leader == "cnn" and v.equal_budgets and caps.examples_seen == cnn.examples_seen == 64_000
    assert caps.error == pytest.approx(1 - load_checkpoint(SHIPPED[0]).info.test_accuracy)
    assert caps.chosen_on == cnn.chosen_on == "validation" and caps.lr_candidates == cnn.lr_candidates
    # the curve is the MultiMNIST run's, epoch by epoch, after the MNIST epochs it started from
    assert [seen for seen, _ in caps.curve] == [8000 * e for e in range(1, 9)]
    records = read_jsonl(SHIPPED[0].with_name("multimnist.metrics.jsonl"))
    expected = [1 - r["test_accuracy"] for r in records if r["run"] == records[-1]["run"]]
    assert [e for _, e in caps.curve] == pytest.approx(expected)
    # epochs, the kept epoch and hours are the MultiMNIST run's own, not the MNIST runs' before it
    assert (caps.epochs, caps.chosen_epoch, cnn.epochs, cnn.chosen_epoch) == (8, 8, 8, 8)
    own = [r for r in records if r["run"] == records[-1]["run"]]
    assert caps.hours == pytest.approx(sum(r["seconds"] for r in own) / 3600)
    from dashboard.claim_texts import claim_table

    table = claim_table(v)
    assert [(row["epochs"], row["epoch kept"]) for row in table] == [
        (8, "8, chosen on validation"),
        (8, "8, chosen on validation"),
    ]
    text = v.statement()
    assert text.startswith("Here the CNN baseline is ahead, with the same budget of 64,000 training examples each")
    assert "not reproduced" in text and "on its own validation pairs" in text
    assert "The epochs kept" not in text  # both kept their last epoch: nothing to say
    assert "Not yet equal terms" not in text


def test_the_verdict_follows_the_figures(tmp_path: Path) -> None:
    """A CapsNet made to lead (its header's accuracy raised) gets the paper's order; validation is recognised."""
    checkpoint = load_checkpoint(SHIPPED[0])
    better = checkpoint.info.replace(test_accuracy=0.95, extra={"val_accuracy": 0.95})
    path = save_checkpoint(tmp_path / "multimnist.safetensors", checkpoint.model, better)
    shutil.copy(SHIPPED[0].with_name("multimnist.metrics.jsonl"), tmp_path / "multimnist.metrics.jsonl")
    v = verdict("multimnist", path, SHIPPED[1])
    assert v.leader == "capsnet" and v.rows[0].chosen_on == "validation"
    assert "That is the paper's order" in v.statement()
    with pytest.raises(ValueError, match="unknown claim"):
        verdict("cifar", path, SHIPPED[1])


def test_learning_rates_chosen_on_validation_are_equal_terms(tmp_path: Path) -> None:
    """Two networks whose learning rates differ are on equal terms when each was the best of the same candidates on
    its own validation split (export --lr-search records it); the record is refused for a run without validation."""
    from capsnet.errors import CapsNetError
    from capsnet.runs.export import record_lr_search

    caps, cnn = (load_checkpoint(p, networks=("capsnet", "cnn")) for p in SHIPPED)
    paths = []
    for checkpoint, name, lr in ((caps, "multimnist", 3e-4), (cnn, "multimnist-cnn", 1e-3)):
        info = checkpoint.info.replace(recipe={**checkpoint.info.recipe, "lr": lr}, extra={"val_accuracy": 0.5})
        path = save_checkpoint(tmp_path / name / f"{name}.safetensors", checkpoint.model, info)
        shutil.copy(SHIPPED[0].with_name("multimnist.metrics.jsonl"), path.with_name(f"{name}.metrics.jsonl"))
        paths.append(path)
    assert "learning rates differ (0.0003 and 0.001)" in verdict("multimnist", *paths).statement()
    weights = load_checkpoint(paths[0]).model.state_dict()
    for path in paths:
        record_lr_search(path, [1e-3, 3e-4])
    for name, tensor in load_checkpoint(paths[0]).model.state_dict().items():
        assert torch.equal(tensor, weights[name])  # the header changes, not the weights
    text = verdict("multimnist", *paths).statement()
    assert "learning rates differ" not in text and "Not yet equal terms" not in text
    assert (
        "the better of 0.0003 and 0.001 on its own validation pairs (0.0003 for the CapsNet, 0.001 for the CNN)" in text
    )
    with pytest.raises(CapsNetError, match="not among the candidates"):
        record_lr_search(paths[0], [1e-2])
    bare = save_checkpoint(tmp_path / "bare.safetensors", caps.model, caps.info.replace(extra={}))
    with pytest.raises(CapsNetError, match="no validation split"):
        record_lr_search(bare, [1e-3])


def test_a_warm_started_models_budget_counts_its_own_run(tmp_path: Path) -> None:
    """The metrics of a warm-started model begin with its source's runs: those count as where it started, not as
    its budget of pairs, and the verdict says how much each network had seen before."""
    import json

    paths = []
    for name, source, before in (("multimnist", "mnist", 60_000), ("multimnist-cnn", "mnist-cnn", 20_000)):
        checkpoint = load_checkpoint(SHIPPED[0] if name == "multimnist" else SHIPPED[1], networks=("capsnet", "cnn"))
        path = save_checkpoint(tmp_path / f"{name}.safetensors", checkpoint.model, checkpoint.info)
        records = [{"epoch": 1, "train_images": before, "test_accuracy": 0.98, "seconds": 9000.0, "run": source}]
        records += [
            {"epoch": 1 + e, "train_images": 8000, "test_accuracy": 0.5 + e / 10, "seconds": 1800.0, "run": "pairs"}
            for e in (1, 2)
        ]
        path.with_name(f"{name}.metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        paths.append(path)
    v = verdict("multimnist", *paths)
    assert [r.examples_seen for r in v.rows] == [16_000, 16_000] and v.equal_budgets
    assert [r.started_from for r in v.rows] == [60_000, 20_000]
    assert [seen for seen, _ in v.rows[0].curve] == [8000, 16_000]
    assert [(r.epochs, r.hours) for r in v.rows] == [(2, 1.0), (2, 1.0)]  # the source's epoch and hours not counted
    assert (  # both sources (the shipped MNIST models, by their headers) stopped improving: said with their figures
        "each warm-started from a converged MNIST model (the CapsNet's at 99.64% after 60,000 digits, the CNN's at "
        "99.59% after 20,000)" in v.statement()
    )


def test_the_shipped_affine_pairs_verdict_reads_the_affnist_like_figures() -> None:
    """The mnist-40 pair, trained on equal terms: its verdict is on the affNIST-like set, from the headers."""
    from capsnet.checkpoints.checkpoint import read_checkpoint_info

    pair = (
        REPO / "checkpoints" / "mnist-40.safetensors",
        REPO / "checkpoints" / "baselines" / "mnist-40-cnn.safetensors",
    )
    v = verdict("affnist", *pair)
    for row, path in zip(v.rows, pair):
        assert row.error == pytest.approx(1 - read_checkpoint_info(path)[1].extra["affnist_like_accuracy"])
        assert row.test_examples == 10_000 and row.chosen_on == "validation" and row.examples_seen == 36_000
    # what this pair measured from converged sources: 2.00% against 2.03%, inside the sampling interval
    assert v.equal_budgets and v.leader == "cnn" and v.converged_sources
    text = v.statement()
    assert "each warm-started from a converged MNIST model (the CapsNet's at 99.64%" in text.split(": ")[0]
    assert "neither network ahead of the other" in text and "on its own validation digits" in text
    assert "paper's order," not in text and "Not yet equal terms" not in text


def test_an_affine_pair_without_the_affnist_like_figure_says_how_to_measure_it(tmp_path: Path) -> None:
    """A run's own best.safetensors holds no affNIST-like figure (only an export measures it): no verdict, and the
    statement names the network that lacks it and the command that measures it."""
    caps = REPO / "checkpoints" / "mnist-40.safetensors"
    cnn = load_checkpoint(REPO / "checkpoints" / "baselines" / "mnist-40-cnn.safetensors", networks=("cnn",))
    extra = {k: v for k, v in cnn.info.extra.items() if not k.startswith("affnist_like")}
    bare = save_checkpoint(tmp_path / "best.safetensors", cnn.model, cnn.info.replace(extra=extra))
    v = verdict("affnist", caps, bare)
    assert v.leader is None and v.rows[0].error is not None and v.rows[1].error is None
    text = v.statement()
    assert text.startswith("No verdict yet: the CNN baseline has not been measured on the affNIST-like set")
    assert "python -m capsnet export" in text


def test_without_metrics_a_warm_started_model_counts_its_own_run_from_its_header(tmp_path: Path) -> None:
    """No metrics file beside it: examples, epochs and hours come from the header's own run (3 epochs of 12,000
    digits for the shipped mnist-40 CapsNet), not from the 110 epochs behind it with its MNIST source."""
    shipped = REPO / "checkpoints" / "mnist-40.safetensors"
    alone = tmp_path / "mnist-40.safetensors"
    shutil.copy(shipped, alone)
    info = load_checkpoint(alone).info
    assert info.trained_epochs == 110 and not alone.with_name("mnist-40.metrics.jsonl").exists()
    row = verdict("affnist", alone, REPO / "checkpoints" / "baselines" / "mnist-40-cnn.safetensors").rows[0]
    assert (row.examples_seen, row.epochs, row.chosen_epoch) == (3 * 12_000, 3, 3) and row.curve == ()
    assert row.hours == pytest.approx(info.training_seconds / 3600)


def test_the_statement_says_the_starts_the_interval_and_the_stand_in(tmp_path: Path) -> None:
    """The starts in the headline, an order only beyond the sampling interval (given), and
    the affNIST-like set named as an easier stand-in wherever it meets the paper's figures."""
    text = verdict("multimnist", *SHIPPED).statement()
    first = text.split(": ")[0]
    assert first.endswith(
        "each warm-started from a converged MNIST model (the CapsNet's at 99.64% after 6,420,000 digits, the CNN's "
        "at 99.59% after 385,000)"
    )
    assert "20.13% test error (CNN baseline) against 29.30% (CapsNet)" in text
    assert "by 9.17 points, beyond the test set's ±0.38" in text and "Both began" not in text
    pair = (
        REPO / "checkpoints" / "mnist-40.safetensors",
        REPO / "checkpoints" / "baselines" / "mnist-40-cnn.safetensors",
    )
    affine = verdict("affnist", *pair).statement()
    assert "The difference, 0.03 points, is within the test set's 95% sampling interval (±0.39)" in affine
    # the paragraph that finds them level does not open by naming one of them ahead
    assert affine.startswith("Here neither network is ahead, ") and " is ahead," not in affine.replace(
        "neither network is ahead,", ""
    )
    assert "the affNIST-like set here is a stand-in, easier than affNIST" in affine
    # a CapsNet whose error is within the interval of the CNN's: no order is read from it
    checkpoint = load_checkpoint(SHIPPED[0])
    close = checkpoint.info.replace(test_accuracy=0.7997)  # 20.03% against the CNN's 20.13%, on 100,000 pairs
    path = save_checkpoint(tmp_path / "multimnist.safetensors", checkpoint.model, close)
    shutil.copy(SHIPPED[0].with_name("multimnist.metrics.jsonl"), tmp_path / "multimnist.metrics.jsonl")
    tied = verdict("multimnist", path, SHIPPED[1]).statement()
    assert "within the test set's 95% sampling interval" in tied and "neither network ahead" in tied
    assert "paper's order," not in tied and "not reproduced" not in tied


def test_converged_sources_are_said_with_their_figures() -> None:
    """Sources of unequal length but equal accuracy are named converged, with both figures; else the
    headline says the starts were unequal, with their figures where the headers give them."""
    base = dict(paper_error=0.0, test_examples=10_000, examples_seen=36_000, hours=1.0, epochs=3, chosen_epoch=3,
                lr=3e-4, chosen_on="validation", curve=())  # fmt: skip
    caps = claims.ClaimRow("capsnet", error=0.02, started_from=6_420_000, source_accuracy=0.9964, **base)
    cnn = claims.ClaimRow("cnn", error=0.03, started_from=385_000, source_accuracy=0.9959, **base)
    text = claims.Verdict("affnist", (caps, cnn)).statement()
    assert ("each warm-started from a converged MNIST model (the CapsNet's at 99.64% after 6,420,000 digits, "
            "the CNN's at 99.59% after 385,000)") in text  # fmt: skip
    assert "unequal starts" not in text
    early = dataclasses.replace(cnn, started_from=120_000, source_accuracy=0.99)
    text = claims.Verdict("affnist", (caps, early)).statement()
    assert ("from unequal starts (the CapsNet from a model that had seen 6,420,000 MNIST digits (99.64%), "
            "the CNN from one that had seen 120,000 (99.00%))") in text  # fmt: skip


def test_a_verdict_kept_as_a_record_reads_back_the_same(tmp_path: Path) -> None:
    """The start-free pair ships as a JSON record of its verdict; it reads back row for row, says
    its starts, and a damaged record is refused in one line."""
    pair = (
        REPO / "checkpoints" / "mnist-40.safetensors",
        REPO / "checkpoints" / "baselines" / "mnist-40-cnn.safetensors",
    )
    kept = verdict("affnist", *pair)
    path = tmp_path / "claims" / claims.START_FREE.format(claim="affnist")
    claims.record_verdict(kept, path)
    again = claims.read_record(path)
    assert again == kept and again.statement() == kept.statement()
    claims.record_verdict(kept, path)  # a claim record is replaced by a new one
    other = tmp_path / "settings.json"
    other.write_text('{"theme": "dark"}')
    with pytest.raises(CapsNetError, match="exists and is not a claim record"):
        claims.record_verdict(kept, other)  # a JSON file of someone else's is left alone
    assert other.read_text() == '{"theme": "dark"}'
    scratch = dataclasses.replace(kept, rows=tuple(dataclasses.replace(r, started_from=0, source_accuracy=None)
                                                   for r in kept.rows))  # fmt: skip
    assert scratch.from_scratch and not kept.from_scratch
    assert ", both from scratch (no warm start): " in scratch.statement().split(". ")[0]
    from dashboard.claim_texts import claim_table, claim_table_by_network

    turned = claim_table_by_network(kept, scratch)  # what the pages draw: a column per network
    assert list(turned) == [
        "figure",
        "CapsNet",
        "CNN baseline",
        "CapsNet · from scratch",
        "CNN baseline · from scratch",
    ]
    assert turned["figure"][:3] == ["start", "paper's test error", "here"]
    assert turned["CapsNet"][0].startswith("warm: ") and turned["CNN baseline · from scratch"][0] == "from scratch"
    assert {len(column) for column in turned.values()} == {8}  # start, the errors, examples, hours, epochs, lr, kept
    table = claim_table(kept, scratch)
    assert [row["start"] for row in table] == [
        "warm: an MNIST model at 99.64% (6,420,000 digits)",
        "warm: an MNIST model at 99.59% (385,000 digits)",
        "from scratch",
        "from scratch",
    ]
    for damage in ("{", '{"version": 1, "claim": "affnist", "rows": [{"network": "cnn"}]}', "[]"):
        path.write_text(damage)
        with pytest.raises(CapsNetError, match="cannot read the claim record") as caught:
            claims.read_record(path)
        assert "\n" not in str(caught.value)


def test_the_claims_command_prints_the_verdict_and_keeps_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from capsnet.cli.claims import main

    pair = [
        str(REPO / "checkpoints" / "mnist-40.safetensors"),
        str(REPO / "checkpoints" / "baselines" / "mnist-40-cnn.safetensors"),
    ]
    out = tmp_path / "record.json"
    assert main(["affnist", *pair, "--record", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Here neither network is ahead, ") and f"kept in {out}" in printed
    assert claims.read_record(out).statement() in printed
    assert main(["affnist", pair[0], str(tmp_path / "missing.safetensors")]) == 2
    assert "missing.safetensors" in capsys.readouterr().err


def test_the_shipped_start_free_record_is_a_pair_from_scratch_on_the_warm_pairs_budget() -> None:
    """The start-free affNIST-like pair, shipped as a record: both networks from scratch, on the
    same budget as the warm-started pair, measured on all 10,000 affNIST-like digits; its statement says so."""
    start_free = claims.read_record(REPO / "checkpoints" / "claims" / claims.START_FREE.format(claim="affnist"))
    warm = verdict(
        "affnist",
        REPO / "checkpoints" / "mnist-40.safetensors",
        REPO / "checkpoints" / "baselines" / "mnist-40-cnn.safetensors",
    )
    assert start_free.claim == "affnist" and start_free.from_scratch and start_free.equal_budgets
    assert [r.examples_seen for r in start_free.rows] == [r.examples_seen for r in warm.rows] == [36_000, 36_000]
    assert [r.test_examples for r in start_free.rows] == [10_000, 10_000]
    assert all(r.chosen_on == "validation" and r.error is not None for r in start_free.rows)
    assert ", both from scratch (no warm start): " in start_free.statement()
