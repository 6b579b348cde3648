"""Hostile files and careless hands: no write replaces what is not ours (a device node, a FIFO, a folder,
a link, a file of another kind), no JSON reader recurses into a deeply nested file, no reader blocks on a FIFO, and a
failed export changes nothing. The hostile files are made here, with the standard library only."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from dashboard_fixtures import app_dirs, app_run, app_with_run  # noqa: F401
from safetensors.torch import save_file

from capsnet.checkpoints import manifest
from capsnet.checkpoints.checkpoint import FORMAT, FORMAT_VERSION, CheckpointError, load_checkpoint
from capsnet.errors import CapsNetError
from capsnet.files import (
    MAX_JSON_DEPTH,
    FileReadError,
    FileWriteError,
    append_jsonl,
    read_json,
    read_jsonl,
    writable,
    write_json,
)
from capsnet.runs.export import export_checkpoint

NESTED = "[" * 100_000  # Python's parser recursed once a level: RecursionError, a traceback in every reader


@contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: a reader that opens a FIFO blocks until a writer comes."""

    def _hung(signum: int, frame: object) -> None:
        raise AssertionError(f"blocked for {seconds} s (a FIFO opened?)")

    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _not_ours(tmp_path: Path) -> dict[str, Path]:
    """A FIFO, a folder and a link, and, as root (CI), a character device like /dev/full (1, 7)."""
    places = {"a FIFO": tmp_path / "fifo.json", "a folder": tmp_path / "folder.json", "a link": tmp_path / "link.json"}
    os.mkfifo(places["a FIFO"])
    places["a folder"].mkdir()
    (tmp_path / "elsewhere.json").write_text("{}")
    places["a link"].symlink_to(tmp_path / "elsewhere.json")
    if os.geteuid() == 0:
        places["a device node"] = tmp_path / "full.json"
        os.mknod(places["a device node"], stat.S_IFCHR | 0o600, os.makedev(1, 7))
    return places


def test_no_write_replaces_a_device_node_a_fifo_a_folder_or_a_link(tmp_path: Path) -> None:
    """As root, `claims --record /dev/full` replaced the system's /dev/full with a JSON file."""
    places = _not_ours(tmp_path)
    if os.environ.get("CI"):
        assert "a device node" in places, "CI runs as root: the device node is made and tested there"
    for what, place in places.items():
        before = os.lstat(place)
        with within(5), pytest.raises(FileWriteError, match=f"it is {what}, not a file this writes"):
            write_json(place, {"claim": "x"})
        with within(5), pytest.raises(FileWriteError, match=f"it is {what}"):
            append_jsonl(place, {"epoch": 1})
        after = os.lstat(place)
        assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev), what
    assert (tmp_path / "elsewhere.json").read_text() == "{}"  # the link's target untouched too
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging file left


def test_no_write_replaces_a_file_of_another_kind(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """`claims --record some.safetensors` turned a 16 MB model into a 2 KB record, exit 0."""
    model = Path(shutil.copy(tiny_checkpoint, tmp_path / "model.safetensors"))
    data = model.read_bytes()
    with pytest.raises(FileWriteError, match="holds something other than json; choose another name"):
        write_json(model, {"version": 1}, kind="json")  # as `claims --record PATH` writes
    assert model.read_bytes() == data
    record = tmp_path / "record.json"
    write_json(record, {"version": 1}, kind="json")
    write_json(record, {"version": 2}, kind="json")  # its own kind is replaced, as before
    with pytest.raises(FileWriteError, match="holds something other than safetensors"):
        writable(record, "safetensors")  # as `export SRC PATH` checks its target
    assert read_json(record) == {"version": 2}
    (tmp_path / "empty.json").write_bytes(b"")
    write_json(tmp_path / "empty.json", [], kind="json")  # an empty file is nobody's
    damaged = tmp_path / "model.routing.json"  # a side file of our own name, damaged: replaced when measured again
    damaged.write_bytes(b"\x00\xff garbage")
    write_json(damaged, {"format": 2})
    assert read_json(damaged) == {"format": 2}


def test_json_readers_refuse_deep_nesting_and_fifos_in_one_line(tmp_path: Path) -> None:
    """Nested JSON is a ValueError naming the file (not a RecursionError); a FIFO is refused before it
    is opened; a metrics log's nested line costs that line only."""
    nested = tmp_path / "args.json"
    nested.write_text(NESTED)
    with pytest.raises(ValueError, match=f"nests deeper than {MAX_JSON_DEPTH} levels"):
        read_json(nested)
    deep_but_ours = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    nested.write_text(deep_but_ours)
    assert read_json(nested) is not None
    fifo = tmp_path / "progress.json"
    os.mkfifo(fifo)
    with within(5), pytest.raises(FileReadError, match="not a regular file"):
        read_json(fifo)
    with within(5), pytest.raises(FileReadError, match="not a regular file"):
        read_jsonl(fifo)
    assert isinstance(FileReadError("x"), OSError)  # the tolerant readers, which take OSError, take it too
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"epoch": 1}\n' + NESTED + "\n" + '{"epoch": 2}\n')
    assert read_jsonl(log) == [{"epoch": 1}, {"epoch": 2}]


def test_a_checkpoint_whose_header_nests_deeply_is_one_line(tmp_path: Path) -> None:
    """A few-KB file whose header's config is [[[... was a RecursionError traceback in every tool."""
    for field in ("config", "info"):
        path = tmp_path / f"{field}.safetensors"
        metadata = {"format": FORMAT, "format_version": FORMAT_VERSION, "network": "capsnet", "config": "{}"}
        save_file({"x": torch.zeros(1)}, str(path), metadata=metadata | {field: NESTED})
        with pytest.raises(CheckpointError) as raised:
            load_checkpoint(path)
        assert "nests deeper than" in str(raised.value) and "\n" not in str(raised.value), field


@pytest.mark.parametrize("damage", ["nested", "fifo", "link to /dev/zero", "folder", "not JSON"])
def test_a_damaged_manifest_is_one_line_and_stops_an_export_before_it_writes(
    damage: str, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a damaged manifest.json, `export` into the shipped folder wrote the target, then stopped; a nested
    one was a RecursionError, a FIFO hung, a link to /dev/zero read until MemoryError."""
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    place = shipped / manifest.MANIFEST_NAME
    if damage == "nested":
        place.write_text(NESTED)
    elif damage == "fifo":
        os.mkfifo(place)
    elif damage == "link to /dev/zero":
        place.symlink_to("/dev/zero")
    elif damage == "folder":
        place.mkdir()
    else:
        place.write_text("not JSON")
    monkeypatch.setenv("CAPSNET_CHECKPOINTS_DIR", str(shipped))
    with within(10), pytest.raises(manifest.ManifestError, match="manifest.json is damaged") as raised:
        manifest.read_manifest(shipped)
    assert "\n" not in str(raised.value)
    target = shipped / "mnist.safetensors"
    with within(10), pytest.raises(CapsNetError, match="manifest.json is damaged"):
        export_checkpoint(tiny_checkpoint, target, device="cpu", first=20)
    assert sorted(p.name for p in shipped.iterdir()) == [manifest.MANIFEST_NAME]  # nothing written beside it


def test_an_export_refuses_a_target_that_is_not_a_checkpoint_before_measuring(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """`export SRC PATH` replaced whatever was at PATH by rename."""
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    notes = tmp_path / "notes.safetensors"
    notes.write_text("my notes")
    for target, said in ((fifo, "it is a FIFO"), (notes, "holds something other than safetensors")):
        with within(10), pytest.raises(FileWriteError, match=said):
            export_checkpoint(tiny_checkpoint, target, device="cpu", first=20)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and notes.read_text() == "my notes"


def test_a_header_asking_for_20_gb_is_refused_in_one_line_within_1_s_and_500_mb(tiny_em: Path, tmp_path: Path) -> None:
    """The EM network's routing tables were built from the header's config before the weights were compared:
    `image_size: 100000` made `evaluate` allocate about 20 GB; 10^6 capsule types cost 3.8 GB and 20 s."""
    import json
    import subprocess
    import sys

    from safetensors import safe_open

    with safe_open(str(tiny_em), framework="pt") as handle:
        metadata = dict(handle.metadata())
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    probe = (
        "import resource, sys, time\n"
        "from capsnet.checkpoints.checkpoint import CheckpointError, load_checkpoint\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "start = time.perf_counter()\n"
        "try:\n    load_checkpoint(sys.argv[1])\nexcept CheckpointError as error:\n    print(error)\n"
        "print(time.perf_counter() - start)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"  # KB the load added to the peak
    )
    for change in ({"image_size": 100_000}, {"primary_types": 10**6}):
        hostile = tmp_path / "hostile.safetensors"
        config = json.loads(metadata["config"]) | change
        save_file(tensors, str(hostile), metadata=metadata | {"config": json.dumps(config)})
        done = subprocess.run([sys.executable, "-c", probe, str(hostile)], capture_output=True, text=True, timeout=120)
        said, seconds, grown_kb = done.stdout.strip().splitlines()
        assert done.returncode == 0, done.stderr[-2000:]
        assert "not a network this builds" in said and str(hostile) in said, said
        assert float(seconds) < 1.0 and int(grown_kb) < 500 * 1024, (change, seconds, grown_kb)


def _claim_row(network: str) -> dict:
    return {"network": network, "paper_error": 0.052, "error": 0.06, "test_examples": 10_000,
            "examples_seen": 600_000, "hours": 1.5, "epochs": 10, "chosen_epoch": 9, "lr": 1e-3,
            "chosen_on": "validation", "curve": [[60_000, 0.2], [120_000, 0.1]]}  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [{"error": "abc"}, {"error": 2.0}, {"test_examples": -5}, {"curve": [[60_000, 1e400]]}, {"hours": float("nan")},
     {"network": "em"}, {"epochs": 1.5}],
)  # fmt: skip
def test_a_claim_record_out_of_range_is_one_line(change: dict, tmp_path: Path) -> None:
    """A record with `test_examples: -5`, `error: 2.0`, `error: "abc"` or `curve: [[1e400, 0.1]]` crashed the
    Transform lens; each is now refused in one line, as a damaged record."""
    from capsnet.readings import claims

    record = tmp_path / "multimnist.json"
    rows = [_claim_row("capsnet"), _claim_row("cnn")]
    record.write_text(json.dumps({"version": claims.RECORD_VERSION, "claim": "multimnist", "rows": rows}))
    assert claims.read_record(record).rows[0].error == 0.06  # the well-formed record reads
    rows[0] = rows[0] | change
    record.write_text(json.dumps({"version": claims.RECORD_VERSION, "claim": "multimnist", "rows": rows}))
    with pytest.raises(CapsNetError) as raised:
        claims.read_record(record)
    assert "\n" not in str(raised.value)


def test_header_values_out_of_range_are_read_as_unsaid(tmp_path: Path) -> None:
    """`novelty.examples: Infinity` was an OverflowError in predict, `config: []` an AttributeError,
    `test_accuracy: 5.0` a complex sampling interval in claims."""
    from capsnet.checkpoints.header import CheckpointInfo
    from capsnet.readings.novelty import NoveltyThresholds

    assert CheckpointInfo.from_dict({"test_accuracy": 5.0, "test_examples": 100}).test_accuracy is None
    assert CheckpointInfo.from_dict({"test_accuracy": 0.99}).test_accuracy == 0.99
    novelty = {"reconstruction_error": 10.0, "length": 0.5}
    assert NoveltyThresholds.from_dict(novelty | {"examples": float("inf")}) is None
    assert NoveltyThresholds.from_dict(novelty | {"examples": 5}) is not None
    path = tmp_path / "list-config.safetensors"
    metadata = {"format": FORMAT, "format_version": FORMAT_VERSION, "network": "capsnet", "config": "[]"}
    save_file({"x": torch.zeros(1)}, str(path), metadata=metadata)
    with pytest.raises(CheckpointError, match="its config must be a JSON object, not list"):
        load_checkpoint(path)


def test_a_routing_summary_of_other_classes_is_not_trusted(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """A `<name>.routing.json` with the file's (computable) SHA-256 and an image labelled 19 crashed Where
    routing matters (IndexError): an entry is checked against the model's classes too."""
    import numpy as np

    from capsnet.checkpoints import measurements
    from capsnet.nn.routing import CouplingScores
    from capsnet.readings import routing_matters as rm

    model = Path(shutil.copy(tiny_checkpoint, tmp_path / "model.safetensors"))
    generator = torch.Generator().manual_seed(0)
    scores = torch.rand(40, len(rm.ITERATIONS) + 1, 20, generator=generator)  # 20 classes, for a model of 10
    summary = rm.summarise(CouplingScores(scores, torch.rand(40, 6, generator=generator)), np.full(40, 19),
                           rm.ITERATIONS, "mnist", 3, measurements.checkpoint_sha256(model))  # fmt: skip
    assert summary.changed and summary.changed[0].label == 19
    rm.keep(model, summary)
    assert rm.read_kept(model, 40, classes=20) is not None  # read as kept, for a model of its classes
    assert rm.read_kept(model, 40, classes=10) is None  # never for this one: measured again


def test_a_reader_that_goes_away_ends_predict_quietly(tiny_checkpoint: Path, data_dir: Path, tmp_path: Path) -> None:
    """`predict --json ... | head -c 1` was a BrokenPipeError traceback."""
    import subprocess
    import sys

    from PIL import Image

    from capsnet.data.tasks import read_test_set

    digits = read_test_set("mnist").first(600)  # more output than a pipe holds (64 KiB): a write after `head` fails
    images = []
    for n, digit in enumerate(digits.images):
        images.append(tmp_path / f"digit{n}.png")
        Image.fromarray((digit[0].numpy() * 255).astype("uint8")).save(images[-1])
    command = [sys.executable, "-m", "capsnet", "predict", "--json", "--checkpoint", str(tiny_checkpoint),
               *map(str, images)]  # fmt: skip
    with open(tmp_path / "stderr.txt", "w+b") as errors:  # a file: a pipe for stderr could fill and block it
        writer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors)
        assert writer.stdout is not None
        writer.stdout.read(1)
        writer.stdout.close()  # the reader goes away, as `head -c 1` does
        code = writer.wait(timeout=120)
        errors.seek(0)
        stderr = errors.read().decode()
    assert code == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


@pytest.mark.parametrize("name", ["cuda:abc", "cuda:99", "cuda:-1", "cuda:１"])
def test_a_bad_cuda_device_is_one_line_where_cuda_exists(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--device cuda:abc` or `cuda:99` reached torch as a traceback on a machine with CUDA (here CUDA is
    pretended: two GPUs)."""
    from capsnet.device import pick_device
    from capsnet.errors import InvalidArgumentError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(InvalidArgumentError) as raised:
        pick_device(name)
    said = str(raised.value)
    assert "\n" not in said and name in said
    assert ("has 2 CUDA GPUs (cuda:0 to cuda:1)" in said) == (name == "cuda:99")
    assert pick_device("cuda:1") == torch.device("cuda:1")


def _reheaded(source: Path, target: Path, part: str, **changes: object) -> Path:
    """`source` saved again at `target` with fields of its header's `part` ("config" or "info") changed."""
    from safetensors import safe_open

    with safe_open(str(source), framework="pt") as handle:
        metadata = dict(handle.metadata())
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    metadata[part] = json.dumps(json.loads(metadata[part]) | changes)
    save_file(tensors, str(target), metadata=metadata)
    return target


@pytest.mark.parametrize("dataset", ["mnist-40", "multimnist", "smallnorb"])
@pytest.mark.parametrize("command", ["routing-matters", "export", "evaluate", "predict"])
def test_a_header_naming_a_dataset_of_other_images_is_one_line_in_every_command(
    tiny_checkpoint: Path, tiny_em: Path, data_dir: Path, tmp_path: Path, command: str, dataset: str
) -> None:
    """A model of 28x28 images whose header named mnist-40 or MultiMNIST was a shape ValueError traceback in
    routing-matters and export (evaluate refused in one line); the header is now checked as it is read."""
    from PIL import Image

    from tests.cli_support import capsnet

    Image.new("L", (28, 28)).save(tmp_path / "digit.png")
    for model in (tiny_checkpoint, tiny_em):
        hostile = _reheaded(model, tmp_path / f"{model.parent.name}.safetensors", "info", dataset=dataset)
        args = {"routing-matters": [hostile], "export": [hostile, tmp_path / "exported.safetensors"],
                "evaluate": [hostile, "--limit", "10"], "predict": ["--checkpoint", hostile, tmp_path / "digit.png"]}  # fmt: skip
        done = capsnet(command, *args[command])
        said = done.stderr.strip()
        assert done.returncode == 2 and "\n" not in said and "Traceback" not in said, said
        assert f"its header says it was trained on {dataset}" in said and "28x28" in said, said
        assert not (tmp_path / "exported.safetensors").exists()


def test_a_warm_start_of_a_network_that_has_none_is_one_line(tmp_path: Path, data_dir: Path) -> None:
    """`train --network em --init mnist-em.safetensors --dataset mnist-40` died with KeyError: 'em'."""
    from tests.cli_support import capsnet

    shipped = Path(__file__).parents[1] / "checkpoints" / "mnist-em.safetensors"
    done = capsnet("train", "--network", "em", "--preset", "paper-decoder", "--routing-iterations", "2", "--init",
                   shipped, "--dataset", "mnist-40", "--epochs", "1", "--batch-size", "8", "--out", tmp_path / "run")  # fmt: skip
    said = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in said, said
    assert "a matrix-capsule network routed by EM starts from a checkpoint of its own input size only" in said


def test_a_refused_run_leaves_no_folder_and_no_args_behind(tmp_path: Path, data_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A refused `train` left args.json (and, without --out, a run the Training runs page listed as failed);
    `--resume --out <typo>` made the typo folder."""
    from tests.cli_support import capsnet

    runs = tmp_path / "runs"
    monkeypatch.setenv("CAPSNET_RUNS_DIR", str(runs))
    nowhere = ["--data-dir", tmp_path / "no-data"]  # the dataset is missing: refused as the data load
    for out in ([], ["--out", tmp_path / "new" / "deeper"]):
        done = capsnet("train", "--epochs", "1", "--train-size", "100", *nowhere, *out)
        assert done.returncode == 2 and "MNIST not found" in done.stderr, done.stderr
    assert not list(runs.glob("*")) and not (tmp_path / "new").exists()
    existing = tmp_path / "mine"
    existing.mkdir()
    (existing / "notes.txt").write_text("kept")
    assert capsnet("train", "--epochs", "1", *nowhere, "--out", existing).returncode == 2
    assert (existing / "notes.txt").read_text() == "kept" and not (existing / "args.json").exists()
    done = capsnet("train", "--resume", "--out", tmp_path / "typo")
    assert done.returncode == 2 and f"--resume: no run folder at {tmp_path / 'typo'}" in done.stderr, done.stderr
    assert not (tmp_path / "typo").exists()


def test_smallnorb_files_that_claim_too_much_are_one_line_and_read_no_further(tmp_path: Path) -> None:
    """A 6 MB `.mat.gz` that inflates to 6 GB was read whole (MemoryError after 5 GB); a header of zero
    images was a ValueError traceback; sizes whose product overflows passed the size check. And smallNORB
    absent said "(download failed: RuntimeError)", though it is never downloaded."""
    import gzip
    import tracemalloc

    import numpy as np

    from capsnet.data import smallnorb
    from capsnet.data.datasets import DatasetDamagedError, DatasetNotFoundError, load_dataset
    from tests.test_smallnorb import BYTE, make_norb, write_matrix

    with pytest.raises(DatasetNotFoundError) as absent:
        load_dataset("smallnorb", train=False, data_dir=tmp_path, download=True)
    assert "download failed" not in str(absent.value) and "this package does not download it" in str(absent.value)
    raw = make_norb(tmp_path, n_test=10, gz=True) / "smallNORB" / "raw"
    photos = raw / f"{smallnorb.SPLITS[False]}-dat.mat.gz"
    header = np.array([BYTE, 4, 10, 2, 96, 96], "<i4").tobytes()
    zeros = bytes(1 << 20)
    with gzip.open(photos, "wb", compresslevel=1) as bomb:  # ten photos as declared, then 64 MB more
        bomb.write(header + bytes(10 * 2 * 96 * 96))
        for _ in range(64):
            bomb.write(zeros)
    assert photos.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        assert smallnorb.read_matrix(photos).shape == (10, 2, 96, 96)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak  # the declared 184 KB and the decompressor's buffers, not 64 MB
    for shape in ((300_000, 2, 96, 96), (2**31 - 1, 2**31 - 1, 2**31 - 1, 2**31 - 1), (0, 2, 96, 96)):
        with gzip.open(photos, "wb") as lying:
            lying.write(np.array([BYTE, 4, *shape], "<i4").tobytes() + bytes(1000))
        if shape[0] == 0:
            write_matrix(photos, np.zeros((0, 2, 96, 96), np.uint8), BYTE)
        with pytest.raises(DatasetDamagedError) as raised:
            load_dataset("smallnorb", train=False, data_dir=tmp_path, download=False)
        said = str(raised.value)
        assert "\n" not in said and photos.name.removesuffix(".gz") in said, said
        assert ("holds no images" if shape[0] == 0 else "more than a smallNORB file does") in said, said


def test_a_kill_at_the_last_commit_is_finished_on_resume(data_dir: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """After a kill -9 at the last epoch's commit, `--resume` reconciled the folder but left progress.json
    "running" (its trainer gone), so the Training runs page showed the finished run as failed."""
    from capsnet.training import trainer
    from capsnet.training.checkpointer import Checkpointer
    from capsnet.training.folder import RunFolder
    from tests.test_run_safety import Killed, tiny

    def killed(self: Checkpointer, *args: object, **kwargs: object) -> None:
        raise Killed  # after the epoch's state was saved: what a kill -9 there leaves

    save_state = Checkpointer.save_state

    def saved_then_killed(self: Checkpointer, *args: object, **kwargs: object) -> None:
        save_state(self, *args, **kwargs)
        killed(self)

    monkeypatch.setattr(Checkpointer, "save_state", saved_then_killed)
    monkeypatch.setattr(trainer, "record_end", lambda run, status, reason: None)  # kill -9 writes no last word
    with pytest.raises(Killed):
        trainer.train(tiny(tmp_path, epochs=1))
    monkeypatch.undo()
    assert read_json(tmp_path / "progress.json")["status"] == "running"
    assert trainer.train(tiny(tmp_path, epochs=1, resume=True)) == []  # reconciled: nothing left to train
    progress = RunFolder(tmp_path).read_progress()
    assert progress is not None and progress.status == "finished" and progress.best_accuracy > 0
    # the last epoch, whole: not "epoch 2 of 1"
    assert (progress.epoch, progress.epochs, progress.batch) == (1, 1, progress.batches), progress


def test_a_resume_that_contradicts_its_run_is_one_line(data_dir: Path, tmp_path: Path) -> None:
    """`--resume` ignored an explicit `--network`, `--preset` or `--routing-iterations` without a word."""
    from tests.cli_support import capsnet

    run = ["--preset", "tiny", "--train-size", "128", "--test-size", "64", "--no-progress", "--out", tmp_path / "r"]
    assert capsnet("train", "--epochs", "1", *run).returncode == 0
    before = (tmp_path / "r" / "args.json").read_bytes()
    for other, begun in ((["--network", "em"], "--network capsnet"), (["--preset", "paper"], "--preset tiny"),
                         (["--routing-iterations", "5"], "--routing-iterations 3")):  # fmt: skip
        done = capsnet("train", "--resume", "--epochs", "2", *run, *other)
        said = done.stderr.strip()
        assert done.returncode == 2 and "\n" not in said, said
        assert f"--resume continues the run as it was begun ({begun}): leave out {' '.join(other)}" in said, said
        assert (tmp_path / "r" / "args.json").read_bytes() == before
    assert capsnet("train", "--resume", "--epochs", "2", *run, "--network", "capsnet").returncode == 0  # the same


def test_what_a_killed_export_leaves_is_removed_by_the_next(tiny_checkpoint: Path, data_dir: Path,
                                                            tmp_path: Path) -> None:  # fmt: skip
    """A killed export left hidden staging files the size of the model in the target folder for good. Each
    temporary names its writer's process; the next write beside the target removes those whose writer is gone."""
    import subprocess
    import sys

    target = tmp_path / "shipped" / "model.safetensors"
    killed_while_staging = (  # a kill -9 as the staged file is read back: deterministic, no polling
        "import os, signal, sys\n"
        "import capsnet.runs.export as export\n"
        "load = export.load_checkpoint\n"
        "def dies_on_staged(path, *args, **kwargs):\n"
        "    if str(path).endswith('.tmp'):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return load(path, *args, **kwargs)\n"
        "export.load_checkpoint = dies_on_staged\n"
        "export.export_checkpoint(sys.argv[1], sys.argv[2], device='cpu', first=100)\n"
    )
    done = subprocess.run([sys.executable, "-c", killed_while_staging, str(tiny_checkpoint), str(target)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    left = list(target.parent.glob(".*.tmp"))
    assert left and sum(f.stat().st_size for f in left) > 0 and not target.exists()
    mine = target.parent / f".{target.name}.{os.getpid()}-live.tmp"  # a live writer's is never touched
    mine.write_bytes(b"being written")
    from tests.cli_support import capsnet

    done = capsnet("export", tiny_checkpoint, target, "--test-examples", "100", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert sorted(target.parent.glob(".*.tmp")) == [mine]
    assert target.is_file()


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_an_output_that_cannot_be_written_is_one_line(tiny_checkpoint: Path, data_dir: Path, tmp_path: Path,
                                                      command: str) -> None:  # fmt: skip
    """A full stdout (`> /dev/full`) was an OSError traceback."""
    import subprocess
    import sys

    from PIL import Image, ImageDraw

    digit = Image.new("L", (28, 28))
    ImageDraw.Draw(digit).line((14, 4, 14, 24), fill=255, width=3)
    digit.save(tmp_path / "one.png")
    args = {"predict": ["--checkpoint", tiny_checkpoint, tmp_path / "one.png"],
            "evaluate": [tiny_checkpoint, "--limit", "10"]}[command]  # fmt: skip
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "capsnet", command, *map(str, args)], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    said = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in said, said
    assert said == f"python -m capsnet {command}: error: cannot write the output: no space left on device"


@pytest.mark.parametrize("args", [["--help"], ["evaluate", "--help"], ["train", "--help"]])
def test_help_that_cannot_be_written_is_one_line(args: list[str]) -> None:
    """`python -m capsnet --help > /dev/full` was an OSError traceback, and a command's --help there exited 0 with
    nothing written: each is one line and a failure."""
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "capsnet", *args], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120)  # fmt: skip
    said = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in said and "Traceback" not in said, said
    assert said.endswith("error: cannot write the output: no space left on device"), said


@pytest.mark.parametrize("command", ["--help", "predict"])
def test_a_closed_standard_output_is_one_line(tiny_checkpoint: Path, tmp_path: Path, command: str) -> None:
    """Started with its standard output closed (`>&-`), a command said nothing useful in a traceback
    ('NoneType' object has no attribute 'write'): it is one line and a failure."""
    import subprocess
    import sys

    from PIL import Image, ImageDraw

    digit = Image.new("L", (28, 28))
    ImageDraw.Draw(digit).line((14, 4, 14, 24), fill=255, width=3)
    digit.save(tmp_path / "one.png")
    args = (
        ["predict", "--checkpoint", str(tiny_checkpoint), str(tmp_path / "one.png")]
        if command == "predict"
        else [command]
    )
    line = " ".join([sys.executable, "-m", "capsnet", *args])
    done = subprocess.run(["sh", "-c", f"{line} >&-"], stderr=subprocess.PIPE, text=True, timeout=120)
    said = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in said and "Traceback" not in said, said
    assert said.endswith("cannot write the output: standard output is closed"), said


def test_a_training_state_of_random_bytes_is_one_line(data_dir: Path, tmp_path: Path) -> None:
    """A `train_state.pt` whose pickle is random bytes was an IndexError from the weights-only unpickler."""
    import pickle
    import random
    import zipfile

    from tests.cli_support import capsnet

    run = ["--preset", "tiny", "--train-size", "128", "--test-size", "64", "--no-progress", "--out", tmp_path / "r"]
    assert capsnet("train", "--epochs", "1", *run).returncode == 0
    state = tmp_path / "r" / "train_state.pt"
    good = state.read_bytes()
    failures: dict[str, bytes] = {}
    for seed in range(60):  # the archive intact, its pickle random: each way the unpickler fails, once
        rng = random.Random(seed)
        with zipfile.ZipFile(tmp_path / "good.pt", "w") as out, zipfile.ZipFile(io.BytesIO(good)) as kept:
            for name in kept.namelist():
                data = kept.read(name)
                out.writestr(name, rng.randbytes(len(data)) if name.endswith("data.pkl") else data)
        try:
            torch.load(tmp_path / "good.pt", weights_only=True)
        except Exception as error:  # noqa: BLE001  (what the unpickler raises is what is collected)
            failures.setdefault(type(error).__name__, (tmp_path / "good.pt").read_bytes())
    assert set(failures) - {pickle.UnpicklingError.__name__}, failures.keys()  # more than the one kind caught before
    for kind, damaged in failures.items():
        state.write_bytes(damaged)
        done = capsnet("train", "--resume", "--epochs", "2", *run)
        said = done.stderr.strip()
        assert done.returncode == 2 and "\n" not in said, (kind, said)
        assert f"{state} is damaged or not a training state" in said, said


def test_predict_names_what_a_smallnorb_model_reads(tmp_path: Path) -> None:
    """Predict called a smallNORB model's input "digits placed anywhere on it (mnist-40)"."""
    import dataclasses

    from PIL import Image

    from capsnet.checkpoints.checkpoint import save_checkpoint
    from capsnet.nn.capsnet import CapsNet
    from capsnet.nn.config import CapsNetConfig
    from tests.cli_support import capsnet

    config = dataclasses.replace(CapsNetConfig.preset("tiny"), image_size=32, num_classes=5)
    model = save_checkpoint(tmp_path / "norb.safetensors", CapsNet(config), {"dataset": "smallnorb"})
    Image.new("L", (28, 28), 128).save(tmp_path / "photo.png")
    done = capsnet("predict", "--checkpoint", model, tmp_path / "photo.png")
    said = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in said, said
    assert "reads 32x32 crops of smallNORB's photos" in said and "mnist-40" not in said, said


def test_claims_checks_each_file_against_its_place(tmp_path: Path) -> None:
    """`claims` believed its argument order: the CNN and the CapsNet swapped, the EM network as "the
    CapsNet", MNIST models for the MultiMNIST claim, one file twice were each a confident verdict (exit 0); absurd
    metrics lines gave absurd budgets, a NaN figure printed "nan%"."""
    from capsnet.readings import claims
    from tests.cli_support import capsnet

    shipped = Path(__file__).parents[1] / "checkpoints"
    caps, cnn = shipped / "multimnist.safetensors", shipped / "baselines" / "multimnist-cnn.safetensors"
    refused = {
        (cnn, caps): "holds a CNN baseline, where the claim's CapsNet is asked for: the CapsNet comes first",
        (shipped / "mnist-em.safetensors", cnn): "holds a matrix-capsule network routed by EM, where the claim's "
                                                 "CapsNet is asked for",
        (shipped / "mnist.safetensors", shipped / "baselines" / "mnist-cnn.safetensors"): "was trained on MNIST; the "
                                                 "multimnist claim is about models trained on multimnist",
        (caps, caps): "is given twice",
    }  # fmt: skip
    for (first, second), said in refused.items():
        done = capsnet("claims", "multimnist", first, second)
        assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert capsnet("claims", "multimnist", caps, cnn).returncode == 0
    for name, source in (("caps", caps), ("cnn", cnn)):  # copies whose logs hold absurd lines among the real ones
        shutil.copy(source, tmp_path / f"{name}.safetensors")
        lines = source.with_suffix(".metrics.jsonl").read_text().splitlines()
        absurd = [{"epoch": 2, "train_images": 10**30, "seconds": 1.0, "test_accuracy": 0.9},
                  {"epoch": 3, "train_images": -5}, {"epoch": 4, "test_accuracy": float("nan")},
                  {"epoch": 5, "seconds": float("inf")}]  # fmt: skip
        (tmp_path / f"{name}.metrics.jsonl").write_text("\n".join(lines + [json.dumps(a) for a in absurd]) + "\n")
    real = claims.verdict("multimnist", caps, cnn)
    read = claims.verdict("multimnist", tmp_path / "caps.safetensors", tmp_path / "cnn.safetensors")
    assert [r.examples_seen for r in read.rows] == [r.examples_seen for r in real.rows]
    assert [r.curve for r in read.rows] == [r.curve for r in real.rows] and "nan" not in read.statement()


def test_a_batch_that_would_not_fit_is_refused_before_the_run_and_the_batch_said_fits(
    data_dir: Path, tmp_path: Path
) -> None:
    """The memory guard: the paper EM network at the default batch of 128 died under 6 GiB with
    an allocator traceback. Its step's memory is measured before the data is read: the run is refused in one line
    that names a batch that fits, and that batch trains under the same limit. (Since the EM kernel's training passes
    keep no stack of the backward's factors, a batch of 128 fits in 6 GiB: a batch of 1,024 is the one that cannot.)"""
    import re
    import subprocess
    import sys

    within_6_gib = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"
        "from capsnet.__main__ import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    run = ["train", "--network", "em", "--preset", "paper", "--epochs", "1", "--no-progress", "--no-compile"]
    done = subprocess.run([sys.executable, "-c", within_6_gib, *run, "--batch-size", "1024", "--train-size", "1024",
                           "--out", str(tmp_path / "a")], capture_output=True, text=True, timeout=300)  # fmt: skip
    said = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in said and "Traceback" not in said, done.stderr[-3000:]
    assert said.startswith("python -m capsnet train: error: the EM CapsNet (paper preset) at a batch of 1024 needs"), (
        said
    )
    assert not (tmp_path / "a").exists()  # refused before anything: no run folder left
    fits = re.search(r"--batch-size (\d+) fits$", said)
    assert fits is not None and 4 <= int(fits.group(1)) < 1024, said
    batch = fits.group(1)
    done = subprocess.run([sys.executable, "-c", within_6_gib, *run, "--batch-size", batch, "--train-size", batch,
                           "--test-size", batch, "--out", str(tmp_path / "b")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def test_an_allocation_that_fails_is_one_line_naming_the_batch() -> None:
    """Where nothing was measured (a GPU, another system) an allocation failure is one line, not a trace."""
    from capsnet.errors import out_of_memory, said_out_of_memory

    failed = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                          "you tried to allocate 29491200 bytes. Error code 12 (Cannot allocate memory)")  # fmt: skip
    said = out_of_memory(failed, 128)
    assert said is not None and str(said) == (
        "out of memory with batches of 128 (an allocation of 28 MiB failed): try --batch-size 64"
    )
    assert out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"), 1) is not None
    assert out_of_memory(RuntimeError("shapes do not match"), 128) is None
    with pytest.raises(RuntimeError, match="shapes"), said_out_of_memory(8):
        raise RuntimeError("shapes do not match")


def test_predict_reads_its_files_a_batch_at_a_time(tiny_checkpoint: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Predict read every file into one batch (2,000 images took 4.2 GB; 6,000 failed under 8 GiB)."""
    from PIL import Image, ImageDraw

    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.cli import predict
    from capsnet.readings.novelty import NoveltyThresholds

    paths = []
    for n in range(8):
        image = Image.new("L", (28, 28))
        ImageDraw.Draw(image).line((6 + 2 * n, 4, 14, 24), fill=255, width=3)
        paths.append(str(tmp_path / f"d{n}.png"))
        image.save(paths[-1])
    paths.insert(3, str(tmp_path / "missing.png"))
    checkpoint = load_checkpoint(tiny_checkpoint)
    thresholds = NoveltyThresholds(reconstruction_error=50.0, length=0.5, examples=100)
    read: list[str] = []
    monkeypatch.setattr(
        predict, "read_regular_file", lambda path, limit: (read.append(path), open(path, "rb").read())[1]
    )
    whole = list(predict.predict_files(checkpoint, thresholds, paths, batch_size=100))
    read.clear()
    results = predict.predict_files(checkpoint, thresholds, paths, batch_size=3)
    first = next(results)
    assert read == paths[:3]  # one batch read, not every file
    rest = list(results)
    assert [first, *rest] == whole and isinstance(whole[3], str) and "missing.png" in whole[3]


def _gallery(tiny_checkpoint: Path, tiny_em: Path, folder: Path) -> dict[str, Path]:
    """Hostile checkpoint files, made with the standard library and safetensors only: each reader must refuse all."""
    from safetensors import safe_open

    folder.mkdir()
    with safe_open(str(tiny_checkpoint), framework="pt") as handle:
        metadata = dict(handle.metadata())
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    made = {
        "nested config": {"config": NESTED},
        "unknown format": {"format": "pytorch"},
        "list config": {"config": "[]"},
    }
    files: dict[str, Path] = {}
    for name, change in made.items():
        files[name] = folder / f"{name.replace(' ', '-')}.safetensors"
        save_file(tensors, str(files[name]), metadata=metadata | change)
    files["nan weights"] = folder / "nan.safetensors"
    save_file({k: v * float("nan") for k, v in tensors.items()}, str(files["nan weights"]), metadata=metadata)
    files["integer weights"] = folder / "int.safetensors"
    save_file({k: v.int() for k, v in tensors.items()}, str(files["integer weights"]), metadata=metadata)
    files["20 GB header"] = _reheaded(tiny_em, folder / "huge.safetensors", "config", image_size=100_000)
    files["other images"] = _reheaded(tiny_checkpoint, folder / "forty.safetensors", "info", dataset="mnist-40")
    whole = tiny_checkpoint.read_bytes()
    for name, content in (("truncated", whole[: len(whole) // 2]), ("random bytes", os.urandom(4096)),
                          ("empty", b""), ("text", b"not a model\n")):  # fmt: skip
        files[name] = folder / f"{name.replace(' ', '-')}.safetensors"
        files[name].write_bytes(content)
    files["a FIFO"] = folder / "fifo.safetensors"
    os.mkfifo(files["a FIFO"])
    files["a folder"] = folder / "dir.safetensors"
    files["a folder"].mkdir()
    files["a link to /dev/zero"] = folder / "zero.safetensors"
    files["a link to /dev/zero"].symlink_to("/dev/zero")
    return files


def test_every_command_and_the_catalogue_refuse_every_hostile_checkpoint_in_one_line(
    tiny_checkpoint: Path, tiny_em: Path, data_dir: Path, tmp_path: Path
) -> None:
    """The whole issue, as a walk: each hostile file through every command that reads a checkpoint and through the
    dashboard's catalogue, so that the next reader written cannot forget. Each is one line, exit 2, within seconds,
    and nothing is written."""
    from PIL import Image, ImageDraw

    from capsnet.runs import catalog
    from tests.cli_support import capsnet

    files = _gallery(tiny_checkpoint, tiny_em, tmp_path / "hostile")
    digit = Image.new("L", (28, 28))
    ImageDraw.Draw(digit).line((14, 4, 14, 24), fill=255, width=3)
    digit.save(tmp_path / "one.png")
    cnn = Path(__file__).parents[1] / "checkpoints" / "baselines" / "multimnist-cnn.safetensors"
    commands = {
        "evaluate": lambda f: ["evaluate", f, "--limit", "10"],
        "predict": lambda f: ["predict", "--checkpoint", f, tmp_path / "one.png"],
        "export": lambda f: ["export", f, tmp_path / "out" / "x.safetensors"],
        "export --calibrate": lambda f: ["export", "--calibrate", f],
        "routing-matters": lambda f: ["routing-matters", f],
        "claims": lambda f: ["claims", "multimnist", f, cnn],
        "train --init": lambda f: ["train", "--init", f, "--epochs", "1", "--out", tmp_path / "run"],
    }
    for what, path in files.items():
        for command, argv in commands.items():
            with within(20):
                done = capsnet(*argv(path))
            said = done.stderr.strip()
            assert done.returncode == 2, (what, command, said)
            assert said.count("\n") == 0 and "Traceback" not in said and said.startswith("python -m capsnet"), (
                what, command, said)  # fmt: skip
            assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists(), (what, command)
    with within(20):
        entries = catalog.list_checkpoints(tmp_path / "hostile", tmp_path / "no-runs")
    listed = {e.path.name: e for e in entries}
    assert {"fifo.safetensors", "dir.safetensors", "zero.safetensors"}.isdisjoint(listed)  # never opened
    for name in ("nested-config", "unknown-format", "list-config", "truncated", "random-bytes", "empty", "text"):
        assert listed[f"{name}.safetensors"].error, name  # named in the picker as unreadable, never chosen


def _hostile_run(run: Path, fault: str, outside: Path) -> None:
    """A run folder whose one file is hostile: a FIFO, a folder, a link to a device or outside, empty or huge."""
    import os

    names = {"best": "best.safetensors", "metrics": "metrics.jsonl", "log": "train.log"}
    kind, what = fault.split(":")
    target = run / names[kind]
    target.unlink(missing_ok=True)
    if what == "fifo":
        os.mkfifo(target)
    elif what == "folder":
        target.mkdir()
    elif what == "zero":
        target.symlink_to("/dev/zero")
    elif what == "outside":
        target.symlink_to(outside)
    elif what == "empty":
        target.write_bytes(b"")
    elif what == "huge":
        with open(target, "wb") as handle:
            handle.truncate(3 * 2**30)  # sparse: 3 GB that take no disk


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault",
    ["best:fifo", "best:empty", "best:outside", "metrics:fifo", "metrics:folder", "metrics:zero", "metrics:huge",
     "log:fifo", "log:zero"],
)  # fmt: skip
def test_one_hostile_run_folder_is_one_bad_row_not_a_broken_page(app_with_run, tmp_path: Path, fault: str) -> None:  # noqa: F811
    """The Training runs page and the sidebar read every run folder of the runs root: one folder with a hostile file
    (a FIFO, a folder, a link to /dev/zero or outside, an empty or a 3 GB file) costs its own row, never the page (it
    raised, or hung 300 s on a FIFO), and the other runs are listed."""
    import json

    from dashboard_fixtures import APP, RUN_NAME, clear_streamlit_caches
    from streamlit.testing.v1 import AppTest

    runs_root, _ = app_with_run
    bad = runs_root / "20250102-000000-mnist"
    shutil.copytree(runs_root / RUN_NAME, bad)
    (bad / "progress.json").write_text(json.dumps({"status": "failed", "pid": 0, "epochs": 1, "dataset": "mnist",
                                                   "reason": "RuntimeError: boom"}))  # fmt: skip
    outside = tmp_path / "secret.txt"
    outside.write_text("not a checkpoint")
    _hostile_run(bad, fault, outside)
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/training.py").run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    shown = " ".join(str(getattr(e, "value", "")) for e in [*at.markdown, *at.caption, *at.dataframe])
    assert RUN_NAME in shown or any(RUN_NAME in str(e.label) for e in at.expander), "the good run is listed"
