"""Self-describing checkpoints: safetensors weights with the config and facts in the header.

Loading never runs code (safetensors holds only tensors and strings). The header's
metadata holds "format" = "capsnet", the "network" ("capsnet", or "cnn" for the baseline;
files written before it was named so say "architecture", and those before there were two networks
say neither: a CapsNet), its config as JSON and an "info"
JSON object (`CheckpointInfo`): dataset, class names, epochs, accuracies, training
time, hardware, versions and per-class DigitCaps dimension statistics.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from capsnet.checkpoints.header import CheckpointInfo
from capsnet.data.datasets import DATASETS
from capsnet.errors import CapsNetError
from capsnet.files import atomic_path, loads_json, write_failure
from capsnet.nn.registry import AnyConfig, AnyModel, network, network_of

FORMAT = "capsnet"
FORMAT_VERSION = "1"


class CheckpointError(CapsNetError):
    """A checkpoint is missing, damaged or not one of ours."""


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (in eval mode) and what its header says."""

    path: Path
    model: AnyModel  # a CapsNet unless the loader was asked for the CNN baseline too
    config: AnyConfig
    info: CheckpointInfo = field(default_factory=CheckpointInfo)

    @property
    def network(self) -> str:
        """The network's name: "capsnet" or "cnn"."""
        return network_of(self.config).name

    @property
    def class_names(self) -> list[str]:
        """The header's class names, or the class numbers when it has none that fit."""
        names = self.info.class_names
        if len(names) == self.config.num_classes and all(isinstance(n, str) for n in names):
            return list(names)
        return [str(k) for k in range(self.config.num_classes)]

    def unlike(self, title: str, side: int, channels: int, classes: tuple[str, ...] | list[str]) -> str | None:
        """How this model differs from the data named (`title`: its pictures' side and channels, its classes), in
        one sentence, or None when it reads that data: a model read against the wrong data is said, not a traceback
        from its first batch or a silent measure of renamed classes."""
        c = self.config
        if c.image_size != side:
            return f"{self.path} reads {c.image_size}x{c.image_size} images and {title} is {side}x{side}"
        own = getattr(c, "in_channels", 1)
        if own != channels:
            kinds = {1: "grey", 3: "colour"}
            return f"{self.path} reads {kinds.get(own, own)} images and {title} is {kinds.get(channels, channels)}"
        if c.num_classes != len(classes):
            return f"{self.path} knows {c.num_classes} classes and {title} has {len(classes)}"
        named = self.info.class_names
        if len(named) == len(classes) and list(named) != list(classes):
            differ = next(f"{a!r} where it has {b!r}" for a, b in zip(named, classes) if a != b)
            return f"{self.path} knows other classes than {title}: {differ}"
        return None


def save_checkpoint(
    path: str | os.PathLike,
    model: AnyModel,
    info: CheckpointInfo | Mapping[str, Any],
    dtype: torch.dtype | None = None,
) -> Path:
    """Write `model`'s weights and `info` to `path` atomically (temporary file, then rename).

    `dtype=torch.float16` halves the file; `load_checkpoint` returns float32 weights.
    """
    path = Path(path)
    model = getattr(model, "module", model)  # unwrap DistributedDataParallel
    tensors = {}
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().to("cpu")
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        tensors[name] = tensor.contiguous()
    metadata = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "network": network_of(model.config).name,
        "config": json.dumps(model.config.to_dict()),
        "info": json.dumps(info.to_dict() if isinstance(info, CheckpointInfo) else dict(info)),
    }
    try:
        with atomic_path(path) as tmp:  # the export checks a target the user named (`writable`)
            save_file(tensors, str(tmp), metadata=metadata)
    except SafetensorError as error:  # a full disk, among others: one line naming the file and the cause
        raise write_failure(path, error) from None
    return path


def _check_header(path: Path, metadata: Mapping[str, str]) -> tuple[AnyConfig, CheckpointInfo]:
    if metadata.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a capsnet checkpoint (no 'format: {FORMAT}' in its header)")
    if metadata.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {metadata.get('format_version')!r}, "
            f"this capsnet reads {FORMAT_VERSION!r}"
        )
    try:
        name = metadata.get("network") or metadata.get("architecture") or "capsnet"  # older files: see above
        fields = loads_json(metadata["config"], "its config")  # hostile: nested [[[...
        if not isinstance(fields, dict):
            raise ValueError(f"its config must be a JSON object, not {type(fields).__name__}")
        config = network(name).from_dict(fields)
        info = loads_json(metadata.get("info") or "{}", "its info")
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: invalid config or info in the header ({error})") from None
    if not isinstance(info, dict):
        raise CheckpointError(
            f"{path}: invalid info in the header (a JSON object is needed, not {type(info).__name__})"
        )
    read = CheckpointInfo.from_dict(info)
    _check_dataset(path, config, read)
    return config, read


def _check_dataset(path: Path, config: AnyConfig, info: CheckpointInfo) -> None:
    """A header whose dataset is one this package knows must read that dataset's images and classes: a model of
    28x28 images said to be of mnist-40 was a shape ValueError deep in routing-matters and export.
    A dataset this package does not know is left to the reader that needs it."""
    known = DATASETS.get(info.dataset_name)
    if known is None:
        return
    said = (known.image_size, known.channels, known.num_classes)
    if (config.image_size, config.in_channels, config.num_classes) != said:
        raise CheckpointError(
            f"{path}: its header says it was trained on {known.name} ({_images(*said)}), but its config reads "
            f"{_images(config.image_size, config.in_channels, config.num_classes)}"
        )


def _images(side: int, channels: int, classes: int) -> str:
    """ "28x28 images, 10 classes", or "32x32 colour images, 10 classes"."""
    return f"{side}x{side} {'colour ' if channels == 3 else ''}images{'' if channels in (1, 3) else f' of {channels} channels'}, {classes} classes"


def _open(path: Path) -> Any:
    """The file opened for reading (its header parsed, no weights read); CheckpointError naming what is wrong."""
    if not path.is_file():
        raise CheckpointError(f"{path}: {_not_a_file(path)}")
    try:
        return safe_open(str(path), framework="pt")
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from None


def _not_a_file(path: Path) -> str:
    """What stands at `path` instead of a checkpoint file, in a few words."""
    if path.is_symlink() and not path.exists():
        return f"a broken link (to {os.readlink(path)}), not a checkpoint file"
    if not path.exists():
        return "no such checkpoint file"
    if path.is_dir():
        return "a folder, not a checkpoint file"
    what = (
        "a pipe (FIFO)"
        if path.is_fifo()
        else "a device"
        if path.is_char_device() or path.is_block_device()
        else "not a regular file"
    )
    return f"{what}{' (through a link)' if path.is_symlink() else ''}, not a checkpoint file"


def _read_header(path: Path) -> tuple[AnyConfig, CheckpointInfo]:
    with _open(path) as handle:
        return _check_header(path, handle.metadata() or {})


def _misfit(expected: Mapping[str, tuple[int, ...]], stored: Mapping[str, tuple[int, ...]]) -> str:
    """What keeps the stored weights from fitting the config's ("" when they fit)."""
    missing = sorted(set(expected) - set(stored))
    unexpected = sorted(set(stored) - set(expected))
    wrong = [k for k in expected if k in stored and stored[k] != expected[k]]
    parts = (
        f"missing {', '.join(missing)}" if missing else "",
        f"unexpected {', '.join(unexpected)}" if unexpected else "",
        f"wrong shape for {', '.join(wrong)}" if wrong else "",
    )
    return "; ".join(part for part in parts if part)


def read_checkpoint_info(path: str | os.PathLike) -> tuple[AnyConfig, CheckpointInfo]:
    """The config and info of a checkpoint, from its header alone (cheap: no weights read)."""
    return _read_header(Path(path))


def load_checkpoint(
    path: str | os.PathLike, device: str | torch.device = "cpu", networks: Sequence[str] | None = None
) -> Checkpoint:
    """Rebuild the model from the stored config and load its weights (as float32, eval mode).

    Any registered network is read, or only the `networks` a caller can use (`("capsnet",)`). Raises
    CheckpointError naming the file and what is wrong if it is missing, truncated, corrupted, of a
    network not asked for, or does not fit the stored config.
    """
    path = Path(path)
    with _open(path) as handle:  # the file is opened once: header, shapes, then the weights
        config, info = _check_header(path, handle.metadata() or {})
        found = network_of(config)
        if networks is not None and found.name not in networks:
            wanted = " or ".join(network(a).described for a in networks)
            raise CheckpointError(f"{path}: {found.described}, where {wanted} is needed")
        with torch.device("meta"):  # the network's structure, no memory: its weights are the file's
            model = found.build(config)
        try:
            stored = {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
            # the shapes in the file's header against the config's, before reading or allocating anything
            misfit = _misfit({name: tuple(t.shape) for name, t in model.state_dict().items()}, stored)
            if misfit:
                raise CheckpointError(f"{path}: weights do not fit the stored config ({misfit})")
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(f"{path}: damaged weights ({error})") from None
    not_float = next((name for name, v in tensors.items() if not v.is_floating_point()), None)
    if not_float is not None:
        raise CheckpointError(
            f"{path}: weight {not_float} is stored as {str(tensors[not_float].dtype).removeprefix('torch.')}, "
            "not as floating-point numbers: not a checkpoint of a trained network"
        )
    tensors = {k: v.float() for k, v in tensors.items()}
    if not all(torch.isfinite(v).all() for v in tensors.values()):
        raise CheckpointError(f"{path}: weights hold NaN or infinite values")
    model.load_state_dict(tensors, assign=True)  # the meta network takes the loaded tensors as its own
    model.eval().to(device)
    return Checkpoint(path=path, model=model, config=config, info=info)
