"""The run-time choice of precision and optimizer, the schedules, and bf16 learning as float32 does."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from capsnet.files import read_jsonl
from capsnet.nn import em_native
from capsnet.training.acceleration import (
    Acceleration,
    CpuFeatures,
    choose_acceleration,
    cpu_features,
    lay_out,
    make_adam,
)
from capsnet.training.options import TrainOptions
from capsnet.training.schedule import Schedule, cosine_factor
from capsnet.training.trainer import train

AVX2 = CpuFeatures(capability="AVX2", avx512_bf16=False, amx=False, onednn_bf16=False)
AVX512 = CpuFeatures(capability="AVX512", avx512_bf16=False, amx=False, onednn_bf16=True)  # bf16 emulated
AVX512_BF16 = CpuFeatures(capability="AVX512", avx512_bf16=True, amx=False, onednn_bf16=True)
AMX = CpuFeatures(capability="AVX512", avx512_bf16=True, amx=True, onednn_bf16=True)
CPU, CUDA, MPS = torch.device("cpu"), torch.device("cuda"), torch.device("mps")


@pytest.mark.parametrize(("features", "amp"), [(AVX2, False), (AVX512, False), (AVX512_BF16, True), (AMX, True)])
def test_bf16_autocast_only_where_the_cpu_computes_bf16_natively(features: CpuFeatures, amp: bool) -> None:
    chosen = choose_acceleration(CPU, features=features)
    assert (chosen.amp, chosen.fused_adam, chosen.compile) == (amp, True, False)
    assert chosen.reason == features.describe()
    assert ("no native bf16" in chosen.reason) == (not amp)


def test_the_gpu_path_is_kept_and_every_choice_can_be_forced() -> None:
    assert choose_acceleration(CUDA) == Acceleration(amp=True, fused_adam=False, compile=True, reason="CUDA")
    assert choose_acceleration(MPS) == Acceleration(amp=False, fused_adam=False, compile=False, reason="MPS")
    forced = choose_acceleration(CPU, amp=True, fused_adam=False, compile=True, features=AVX2)
    assert (forced.amp, forced.fused_adam, forced.compile) == (True, False, True)
    assert forced.reason == "AVX2, no native bf16; amp, fused Adam, compile as asked"
    assert forced.describe().startswith("bf16 autocast, foreach Adam, channels-last convolutions, torch.compile (AVX2")


def test_a_cpu_compiles_where_the_caller_says_it_pays_unless_told_otherwise() -> None:
    chosen = choose_acceleration(CPU, features=AVX512_BF16, cpu_compile=True)
    assert (chosen.amp, chosen.fused_adam, chosen.compile) == (True, True, True)
    assert chosen.reason == "AVX512 with AVX512-BF16; compiled: this network and run length pay for it"
    assert not choose_acceleration(CPU, compile=False, features=AVX2, cpu_compile=True).compile
    assert choose_acceleration(CUDA, cpu_compile=False).compile  # a GPU compiles whatever the CPU's case


@pytest.mark.parametrize(
    ("network", "train_size", "epochs", "pays"),
    [("em", None, 1, True), ("em", 5_000, 2, True), ("em", 1_000, 1, False), ("em", 256, 30, False),
     ("capsnet", None, 50, False), ("cnn", None, 50, False)],
)  # fmt: skip
def test_a_run_compiles_on_a_cpu_for_the_em_network_when_long_enough_and_without_its_kernel(
    network: str, train_size: int | None, epochs: int, pays: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = TrainOptions(network=network, preset="tiny", train_size=train_size, epochs=epochs, device="cpu")
    # where the EM routing kernel is built, a run never compiles (`torch.compile` would route with PyTorch instead)
    assert not options.cpu_compile_pays() and not options.acceleration(CPU).compile
    monkeypatch.setattr(em_native, "kernel", lambda: None)  # no C compiler: compiling is what makes the EM network fast
    assert options.cpu_compile_pays() == pays
    assert options.acceleration(CPU).compile == pays
    assert not TrainOptions(**{**options.to_dict(), "compile": False}).acceleration(CPU).compile  # --no-compile


@pytest.mark.parametrize(
    ("stored", "given", "compiled"),
    [(None, None, True), (False, None, False), (False, True, True), (None, False, False)],
)
def test_a_resumed_run_chooses_for_its_stored_network_and_keeps_its_explicit_choices(
    tmp_path: Path, stored: bool | None, given: bool | None, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--resume --out F` names no network: the stored run's (an EM network on the whole training set, on a machine
    without its routing kernel) decides that a CPU compiles, unless the run was started with --no-compile (kept) or
    the resume says otherwise."""
    from capsnet.training.distributed import Distributed
    from capsnet.training.prepare import prepare

    monkeypatch.setattr(em_native, "kernel", lambda: None)

    run = TrainOptions(network="em", preset="tiny", epochs=3, out=str(tmp_path), device="cpu", compile=stored)
    (tmp_path / "args.json").write_text(json.dumps(run.to_dict()))
    asked = TrainOptions(out=str(tmp_path), resume=True, epochs=4, device="cpu", compile=given)
    prepared = prepare(asked, Distributed(), CPU)
    assert prepared.lock is not None
    prepared.lock.release()
    assert prepared.options.network == "em" and prepared.options.epochs == 4
    assert prepared.acceleration.compile == prepared.args["acceleration"]["compile"] == compiled
    assert prepared.args["compile"] == (stored if given is None else given)  # what a later resume keeps


@pytest.mark.parametrize("features", [AVX2, AVX512, AVX512_BF16, AMX])
def test_bf16_convolutions_on_a_cpu_are_laid_out_channels_last(features: CpuFeatures) -> None:
    """oneDNN's bf16 convolutions run 1.7x faster channels-last; float32 runs the same either way, so the layout
    follows bf16 autocast on a CPU (forced or chosen); a GPU keeps its own."""
    chosen = choose_acceleration(CPU, features=features)
    assert chosen.channels_last == chosen.amp == features.native_bf16
    assert ("channels-last convolutions" in chosen.describe()) == chosen.amp
    assert choose_acceleration(CPU, amp=True, features=AVX2).channels_last
    assert not choose_acceleration(CPU, amp=False, features=features).channels_last
    assert not choose_acceleration(CUDA).channels_last


def test_a_cpu_run_keeps_the_memory_its_steps_free_where_malloc_is_glibcs() -> None:
    glibc = dataclasses.replace(AVX512_BF16, glibc=True)
    chosen = choose_acceleration(CPU, features=glibc)
    assert chosen.keep_memory and "freed memory kept" in chosen.describe()
    assert not choose_acceleration(CPU, features=AVX512_BF16).keep_memory  # another C library
    assert not choose_acceleration(CUDA, features=glibc).keep_memory


@pytest.mark.parametrize("name", ["capsnet", "em", "cnn"])
def test_laying_out_channels_last_keeps_the_values_and_the_checkpoint(name: str, tmp_path: Path) -> None:
    """`lay_out` moves every convolution's weight to channels-last in place: the same outputs and gradients, and a
    checkpoint saved from it loads as one saved from the default layout."""
    from capsnet.checkpoints.checkpoint import load_checkpoint, save_checkpoint
    from capsnet.nn.registry import network

    torch.manual_seed(0)
    net = network(name)
    model, twin = net.build(net.preset("tiny")), net.build(net.preset("tiny"))
    twin.load_state_dict(model.state_dict())
    assert lay_out(twin, choose_acceleration(CPU, amp=False, features=AVX2)) is twin  # float32: nothing moves
    assert all(p.is_contiguous() for p in twin.parameters())
    lay_out(twin, choose_acceleration(CPU, features=AMX))
    convs = [m for m in twin.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(m.weight.is_contiguous(memory_format=torch.channels_last) for m in convs)
    # moved where the layouts differ (more than one input channel and a kernel wider than 1x1)
    assert all(not m.weight.is_contiguous() for m in convs if m.weight.shape[1] > 1 and m.weight.shape[2] > 1)
    images, labels = torch.rand(3, 1, 28, 28), torch.tensor([1, 7, 3])
    outputs = [m.eval()(images, labels) for m in (model, twin)]  # eval: the CNN's dropout draws nothing
    torch.testing.assert_close(outputs[1].scores, outputs[0].scores, rtol=1e-4, atol=1e-5)
    for out in outputs:
        out.scores.square().sum().backward()
    grads = [(mine.grad, theirs.grad) for mine, theirs in zip(twin.parameters(), model.parameters())]
    assert all((mine is None) == (theirs is None) for mine, theirs in grads)  # the decoder takes no part in the scores
    for mine, theirs in grads:
        if mine is not None and theirs is not None:
            torch.testing.assert_close(mine, theirs, rtol=1e-3, atol=1e-4)
    save_checkpoint(tmp_path / "laid.safetensors", twin, {})
    loaded = load_checkpoint(tmp_path / "laid.safetensors", networks=(name,)).model
    for mine, theirs in zip(loaded.state_dict().values(), model.state_dict().values()):
        assert torch.equal(mine, theirs)


def test_a_cpu_without_a_cpp_compiler_stays_eager_and_says_why() -> None:
    no_compiler = CpuFeatures(capability="AVX2", avx512_bf16=False, amx=False, onednn_bf16=False, compiler=False)
    chosen = choose_acceleration(CPU, features=no_compiler, cpu_compile=True)
    assert not chosen.compile and "no C++ compiler" in chosen.reason


def test_a_recorded_choice_reads_back_and_sums_up_in_a_few_words() -> None:
    chosen = choose_acceleration(CPU, features=AVX512_BF16, cpu_compile=True)
    assert Acceleration.from_dict(chosen.to_dict()) == chosen
    assert chosen.summary() == "bf16 autocast, compiled"
    assert choose_acceleration(CPU, features=AVX2).summary() == "float32"
    with pytest.raises(ValueError, match="not a recorded acceleration"):
        Acceleration.from_dict({"amp": True})
    # a run recorded before the layout was a choice reads back with the default layout
    older = {"amp": True, "fused_adam": True, "compile": False, "reason": "AVX512 with AVX512-BF16"}
    assert Acceleration.from_dict(older) == Acceleration(True, True, False, "AVX512 with AVX512-BF16")


def test_this_machines_features_are_read_from_torch() -> None:
    features = cpu_features()
    assert features.capability == torch.backends.cpu.get_cpu_capability()
    assert features.native_bf16 == ((features.avx512_bf16 or features.amx) and features.onednn_bf16)
    if features.capability in ("AVX2", "DEFAULT"):  # no AVX-512, hence no AVX512-BF16
        assert not features.native_bf16


def test_fused_adam_takes_the_same_steps_as_the_default_one() -> None:
    torch.manual_seed(0)
    a = torch.nn.Linear(8, 4)
    b = torch.nn.Linear(8, 4)
    b.load_state_dict(a.state_dict())
    opts = make_adam(a.parameters(), 1e-2, fused=False), make_adam(b.parameters(), 1e-2, fused=True)
    assert opts[1].defaults["fused"] and not opts[0].defaults.get("fused")
    for _ in range(5):
        x = torch.randn(16, 8)
        for net, opt in zip((a, b), opts):
            opt.zero_grad()
            net(x).pow(2).sum().backward()
            opt.step()
    torch.testing.assert_close(a.weight, b.weight, rtol=1e-5, atol=1e-6)


def test_the_cosine_schedule_warms_up_then_decays_to_zero() -> None:
    total, warm = 100, 10
    factors = [cosine_factor(s, total, warm) for s in range(total + 1)]
    assert factors[0] == pytest.approx(0.01) and factors[warm] == pytest.approx(1.0)
    assert all(x < y for x, y in zip(factors[:warm], factors[1 : warm + 1]))  # rising
    assert all(x >= y for x, y in zip(factors[warm:], factors[warm + 1 :]))  # then falling
    assert factors[warm + 45] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    assert factors[total] == pytest.approx(0.0, abs=1e-12)

    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=2e-3)
    schedule = Schedule(optimizer, "cosine", lr_decay=0.5, epochs=2, batches=50, warmup=0.1)
    lrs = []
    for _ in range(2):
        for _ in range(50):
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()  # as in training: the step, then the schedule (no gradient here: nothing moves)
            schedule.after_batch()
        schedule.after_epoch()  # a cosine schedule ignores epochs (and --lr-decay)
    assert lrs == pytest.approx([2e-3 * f for f in factors[:100]])

    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    schedule = Schedule(optimizer, "exponential", lr_decay=0.5, epochs=2, batches=50, warmup=0.1)
    optimizer.step()
    schedule.after_batch()
    assert optimizer.param_groups[0]["lr"] == 1e-3
    schedule.after_epoch()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)


def _short_run(out: Path, amp: bool) -> list[dict]:
    train(TrainOptions(preset="tiny", epochs=1, train_size=1024, test_size=512, device="cpu", amp=amp,
                       out=str(out), progress=False, seed=3))  # fmt: skip
    return read_jsonl(out / "metrics.jsonl")


@pytest.mark.slow
def test_a_bf16_run_learns_as_the_float32_one_does(data_dir: Path, tmp_path: Path) -> None:
    """Same seed, same data, a short real run (forced bf16 even where it is emulated and slow):
    loss within 2% and test accuracy within 2 points of float32's, and both well above chance."""
    (bf16,) = _short_run(tmp_path / "bf16", amp=True)
    (fp32,) = _short_run(tmp_path / "fp32", amp=False)
    assert bf16["train_loss"] == pytest.approx(fp32["train_loss"], rel=0.02)
    assert bf16["test_loss"] == pytest.approx(fp32["test_loss"], rel=0.02)
    assert abs(bf16["test_accuracy"] - fp32["test_accuracy"]) <= 0.02
    assert min(bf16["test_accuracy"], fp32["test_accuracy"]) > 0.3  # learned, not two runs stuck at chance
    args = json.loads((tmp_path / "bf16" / "args.json").read_text())
    assert args["acceleration"]["amp"] is True and args["acceleration"]["reason"].endswith("amp as asked")


@pytest.mark.slow
def test_the_fast_recipe_runs_and_records_its_choices(data_dir: Path, tmp_path: Path, capfd) -> None:
    options = TrainOptions.from_recipe("fast", preset="tiny", epochs=2, train_size=640, test_size=256,
                                       device="cpu", out=str(tmp_path), progress=False)  # fmt: skip
    records = train(options)
    # 10 batches of 64 an epoch, a cosine over 20 with 1 batch of warm-up: the rate after each epoch
    assert [r["lr"] for r in records] == pytest.approx([2e-3 * cosine_factor(s, 20, 1) for s in (10, 20)])
    args = json.loads((tmp_path / "args.json").read_text())
    assert (args["recipe"], args["schedule"], args["batch_size"]) == ("fast", "cosine", 64)
    chosen = choose_acceleration(CPU)
    assert args["acceleration"] == chosen.to_dict()
    assert f": {chosen.describe()}" in capfd.readouterr().out  # the run's log says what was chosen


def test_the_time_estimate_uses_a_matching_runs_measured_speed() -> None:
    from types import SimpleNamespace

    from capsnet.runs.estimate import Speed, estimate_seconds, recorded_speed

    options = TrainOptions.from_recipe("fast", device="cpu")
    mine = choose_acceleration(CPU).to_dict()
    other = {**mine, "amp": not mine["amp"]}

    def run(name: str, speeds: list, **args) -> SimpleNamespace:
        args = {"dataset": "mnist", "model": "capsnet", "preset": "paper", "acceleration": mine} | args
        return SimpleNamespace(name=name, args=args, metrics=[{"images_per_s": s} for s in speeds])

    runs = [
        run("tiny", [900.0], preset="tiny"),
        run("cnn", [500.0], model="cnn"),
        run("pairs", [10.0], dataset="multimnist"),  # 36x36: another network size
        run("other-precision", [80.0], acceleration=other),
        run("compiled", [90.0], acceleration={**mine, "compile": True}),  # compiled steps are faster
        run("old", [70.0], acceleration=None),  # from before the choice was recorded
        run("no-metrics", []),
        run("fashion", [40.0, 44.0, "abc", 42.0], dataset="fashion-mnist"),  # same 28x28 network
        run("older", [30.0]),
    ]
    assert recorded_speed(runs, options) == Speed(42.0, "run fashion")
    assert recorded_speed(runs[:7], options) is None
    seconds = estimate_seconds(options, 60_000, 10_000, Speed(40.0, "x"))
    assert seconds == pytest.approx(options.epochs * (60_000 / 40 + 10_000 / 120))


@pytest.mark.parametrize("features", [AVX2, AMX])
def test_the_trainer_and_its_estimate_lay_the_model_out_as_chosen(features: CpuFeatures) -> None:
    """The trainer's `build` lays the model out as the acceleration chose (the estimate's timed steps do the same)."""
    from capsnet.training.trainer import build

    options = TrainOptions(network="capsnet", preset="tiny", device="cpu")
    chosen = choose_acceleration(CPU, features=features)
    model, _, _ = build(options, CPU, chosen, batches=10)
    weight = model.primary.conv.weight
    assert weight.is_contiguous(memory_format=torch.channels_last) == chosen.channels_last == features.native_bf16


def test_a_run_judges_compiled_only_on_a_gpu_and_only_where_the_network_says_so() -> None:
    """A compiled pass routes the whole evaluation batch at once (about 26 GB for the paper-sized EM network at 500
    images on a CPU, 21.6 GB on an H100), where the eager EM layers route it in chunks of bounded memory (1.35 GB):
    a CPU judges each epoch with the eager model, a GPU with the compiled one only for a network that says it judges
    compiled (the CapsNet, not the EM network)."""
    from capsnet.nn.registry import network
    from capsnet.training.distributed import Distributed
    from capsnet.training.trainer import judge_of

    accel = Acceleration(amp=False, fused_adam=True, compile=True, reason="compiled")
    eager = Acceleration(amp=False, fused_adam=True, compile=False, reason="eager")
    for name, on_gpu in (("capsnet", "compiled"), ("em", "eager")):
        model = network(name).build(network(name).preset("tiny"))
        compiled = torch.compile(model)  # compiles on its first call: never called here
        assert judge_of(model, compiled, accel, Distributed(), CPU) is model
        assert judge_of(model, compiled, accel, Distributed(), CUDA) is (compiled if on_gpu == "compiled" else model)
        assert judge_of(model, model, eager, Distributed(), CUDA) is model
    assert network("capsnet").judges_compiled and not network("em").judges_compiled
