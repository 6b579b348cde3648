"""The per-epoch log that ships beside a model: one run's, or a lineage of --init runs numbered on."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from cli_support import capsnet

from capsnet.checkpoints.checkpoint import save_checkpoint
from capsnet.files import read_jsonl
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.runs.export import export_checkpoint, read_lineage


def write_log(path: Path, epochs: range | list[int], **extra: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"epoch": e, "test_accuracy": e / 100, **extra}) + "\n" for e in epochs))


def origin_at(path: Path, **facts: object) -> dict:
    """A checkpoint at `path` with header `facts` (a tiny CapsNet), and the `started_from` record a run begun from it
    keeps: a lineage is followed only to the checkpoint its record names."""
    from capsnet.checkpoints.header import CheckpointInfo

    save_checkpoint(path, CapsNet(CapsNetConfig.preset("tiny")), facts)
    return CheckpointInfo.from_dict(facts).as_origin(path)


def epochs_and_runs(records: list[dict]) -> list[tuple[int, str, float]]:
    return [(r["epoch"], r["run"], r["test_accuracy"]) for r in records]


def test_a_single_run_keeps_its_whole_log(tmp_path: Path) -> None:
    write_log(tmp_path / "a" / "metrics.jsonl", range(1, 4))
    records = read_lineage(tmp_path / "a" / "best.safetensors", {"epochs": 2, "total_epochs": 2}).records
    assert epochs_and_runs(records) == [(1, "a", 0.01), (2, "a", 0.02), (3, "a", 0.03)]


def test_an_init_run_follows_the_epochs_of_the_run_it_started_from(tmp_path: Path) -> None:
    write_log(tmp_path / "a" / "metrics.jsonl", range(1, 7))  # run a went on past the checkpoint taken at epoch 5
    write_log(tmp_path / "b" / "metrics.jsonl", range(1, 4))
    origin = origin_at(tmp_path / "a" / "last.safetensors", epochs=5, total_epochs=5)
    info = {"epochs": 2, "total_epochs": 7, "started_from": origin}
    records = read_lineage(tmp_path / "b" / "best.safetensors", info).records
    assert [r[:2] for r in epochs_and_runs(records)] == [(e, "a") for e in range(1, 6)] + [(e, "b") for e in (6, 7, 8)]
    assert records[5]["test_accuracy"] == 0.01  # b's first epoch, numbered on

    assert read_lineage(tmp_path / "b" / "best.safetensors", info).missing == []

    # the origin's log is gone: its epochs still count, and the export can say whose log it missed
    (tmp_path / "a" / "metrics.jsonl").unlink()
    lineage = read_lineage(tmp_path / "b" / "best.safetensors", info)
    assert [r["epoch"] for r in lineage.records] == [6, 7, 8]
    assert lineage.missing == [tmp_path / "a" / "last.safetensors"]


def test_a_lineage_is_followed_only_to_the_checkpoint_its_record_names(tmp_path: Path) -> None:
    """`export` copies into the exported log only the lines of the run its record names, never those of a
    `metrics.jsonl` found wherever a header's `started_from` path points."""
    write_log(tmp_path / "elsewhere" / "metrics.jsonl", range(1, 4), secret="not this run's")
    write_log(tmp_path / "b" / "metrics.jsonl", [1])
    real = origin_at(tmp_path / "elsewhere" / "best.safetensors", epochs=3, total_epochs=3, test_accuracy=0.9)
    for path, facts in (
        (tmp_path / "elsewhere" / "metrics.jsonl", real),  # a file that is no checkpoint
        (tmp_path / "elsewhere" / "best.safetensors", real | {"test_accuracy": 0.5}),  # another checkpoint's record
        (tmp_path / "elsewhere" / "gone.safetensors", real),  # nothing there
    ):
        info = {"epochs": 1, "total_epochs": 4, "started_from": facts | {"checkpoint": str(path)}}
        lineage = read_lineage(tmp_path / "b" / "best.safetensors", info)
        assert [r["epoch"] for r in lineage.records] == [4] and lineage.unmatched == [path]
        assert not any("secret" in r for r in lineage.records)
    info = {"epochs": 1, "total_epochs": 4, "started_from": real}  # the checkpoint it names: followed
    assert [r["epoch"] for r in read_lineage(tmp_path / "b" / "best.safetensors", info).records] == [1, 2, 3, 4]


def test_a_shipped_origin_brings_its_whole_lineage(tmp_path: Path) -> None:
    shipped = tmp_path / "checkpoints" / "mnist.safetensors"
    write_log(shipped.with_suffix(".metrics.jsonl"), range(1, 10), run="old")  # 9 epochs, the last after the shipped 8
    write_log(tmp_path / "c" / "metrics.jsonl", range(1, 3))
    origin = origin_at(shipped, epochs=3, total_epochs=8, started_from={"checkpoint": "gone/x"})
    info = {"epochs": 2, "total_epochs": 10, "started_from": origin}
    records = read_lineage(tmp_path / "c" / "last.safetensors", info).records
    assert [r[:2] for r in epochs_and_runs(records)] == [(e, "old") for e in range(1, 9)] + [(9, "c"), (10, "c")]
    assert read_lineage(tmp_path / "c" / "last.safetensors", info).missing == []  # "gone/x" is in the shipped log


def test_an_export_never_writes_over_its_source(tmp_path: Path) -> None:
    """`export run/best.safetensors run/best.safetensors` would replace the float32 source with float16: refused."""
    source = save_checkpoint(tmp_path / "run" / "best.safetensors", CapsNet(CapsNetConfig.preset("tiny")), {})
    before = source.read_bytes()
    for target in (source, tmp_path / "run" / "." / "best.safetensors"):
        result = capsnet("export", str(source), str(target))
        assert result.returncode == 2 and "is the source itself" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert source.read_bytes() == before


def test_weights_beyond_float16_are_named_with_the_way_out(tmp_path: Path) -> None:
    model = CapsNet(CapsNetConfig.preset("tiny"))
    with torch.no_grad():
        model.decoder.net[0].weight[0, 0] = 1e6  # finite in float32, infinite in float16
    source = save_checkpoint(tmp_path / "run" / "best.safetensors", model, {"dataset": "mnist"})
    result = capsnet("export", str(source), str(tmp_path / "shipped.safetensors"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert str(source) in result.stderr and "decoder.net.0.weight" in result.stderr
    assert "beyond float16" in result.stderr and "--float32" in result.stderr
    assert not (tmp_path / "shipped.safetensors").exists()


def test_an_export_says_whose_log_it_did_not_find(tmp_path: Path, data_dir: Path) -> None:
    """A run started from a checkpoint whose run folder is elsewhere (another machine's path): one line says so."""
    origin = origin_at(tmp_path / "elsewhere" / "best.safetensors", epochs=3, total_epochs=3)
    info = {"dataset": "mnist", "epochs": 1, "total_epochs": 4, "started_from": origin}
    source = save_checkpoint(tmp_path / "run" / "best.safetensors", CapsNet(CapsNetConfig.preset("tiny")), info)
    write_log(tmp_path / "run" / "metrics.jsonl", [1])
    notes: list[str] = []
    target = tmp_path / "out" / "m.safetensors"
    export_checkpoint(source, target, data_dir=str(data_dir), device="cpu", first=50, on_note=notes.append)
    assert len(notes) == 1 and str(tmp_path / "elsewhere" / "metrics.jsonl") in notes[0] and "\n" not in notes[0]
    assert [r["epoch"] for r in read_jsonl(target.with_suffix(".metrics.jsonl"))] == [4]  # numbered on all the same
