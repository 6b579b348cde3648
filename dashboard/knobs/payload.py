"""The bytes the knobs' component receives: a JSON header and typed arrays, packed once per input or per model.

Layout (read by `js/pack.js`): b"CKN1", a little-endian uint32 header length, the header as UTF-8 JSON, then each
array at its offset from the end of the header (`arrays`: name -> dtype, shape, offset; the header is padded
with spaces to a multiple of 8 bytes, and every array to one, so each is aligned). Weights go as
float16 where float16 holds them exactly (the shipped checkpoints are stored so: half the bytes, the same numbers),
else as float32. Pure functions: no Streamlit here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
from torch import nn

from capsnet.readings.routing_inputs import RoutingInputs

MAGIC = b"CKN1"
ALIGN = 8
DTYPES: dict[str, np.dtype[Any]] = {"f32": np.dtype("<f4"), "f16": np.dtype("<f2"), "i32": np.dtype("<i4")}


def _code(array: np.ndarray) -> str:
    for code, dtype in DTYPES.items():
        if array.dtype == dtype:
            return code
    raise ValueError(f"arrays are float32, float16 or int32, got {array.dtype}")


def pack(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> bytes:
    """`header` (JSON-serialisable) and `arrays` as one payload; "arrays" is a reserved header key."""
    if "arrays" in header:
        raise ValueError("'arrays' is the payload's own header key")
    entries: dict[str, dict[str, Any]] = {}
    offset = 0
    blobs = []
    for name, array in arrays.items():
        data = np.ascontiguousarray(array)
        entries[name] = {"dtype": _code(data), "shape": list(data.shape), "offset": offset}
        blob = data.tobytes()
        blobs.append(blob + b"\0" * (-len(blob) % ALIGN))
        offset += len(blobs[-1])
    text = json.dumps({**header, "arrays": entries}, separators=(",", ":")).encode()
    text = text + b" " * (-(8 + len(text)) % ALIGN)  # the arrays start aligned, right after the header
    return MAGIC + struct.pack("<I", len(text)) + text + b"".join(blobs)


def unpack(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and arrays of a payload (the tests' reader, as js/pack.js reads it); ValueError if malformed."""
    if len(data) < 8 or data[:4] != MAGIC:
        raise ValueError("not a knobs payload")
    (length,) = struct.unpack("<I", data[4:8])
    header = json.loads(data[8 : 8 + length])
    arrays = {}
    for name, entry in header.pop("arrays").items():
        dtype = DTYPES[entry["dtype"]]
        count = int(np.prod(entry["shape"], dtype=np.int64))
        start = 8 + length + entry["offset"]
        if entry["offset"] < 0 or start + count * dtype.itemsize > len(data):
            raise ValueError(f"array {name!r} lies outside the payload")
        arrays[name] = np.frombuffer(data, dtype, count, start).reshape(entry["shape"])
    return header, arrays


def compact(weights: np.ndarray) -> np.ndarray:
    """Weights as float16 where that holds every value exactly, else float32."""
    weights = np.asarray(weights, dtype=np.float32)
    half = weights.astype(np.float16)
    return half if np.array_equal(half.astype(np.float32), weights) else weights


def decoder_arrays(decoder: nn.Module) -> dict[str, np.ndarray]:
    """A `capsnet.nn.decoder.Decoder`'s linear layers, in order: w0, b0, w1, b1, ... ((out, in) and (out,))."""
    layers = [m for m in decoder.modules() if isinstance(m, nn.Linear)]
    arrays: dict[str, np.ndarray] = {}
    for n, layer in enumerate(layers):
        arrays[f"w{n}"] = compact(layer.weight.detach().float().cpu().numpy())
        arrays[f"b{n}"] = compact(layer.bias.detach().float().cpu().numpy())
    return arrays


def routing_arrays(inputs: RoutingInputs) -> dict[str, np.ndarray]:
    """The class layer's inputs as arrays: votes, weights (|u_i| or a_i), for self-attention the learned bias and, for
    EM, the class types' costs."""
    arrays = {"votes": inputs.votes.astype(np.float32), "weights": inputs.weights.astype(np.float32)}
    if inputs.bias is not None:
        arrays["bias"] = inputs.bias.astype(np.float32)
    if inputs.beta_u is not None and inputs.beta_a is not None:
        arrays["beta_u"] = inputs.beta_u.astype(np.float32)
        arrays["beta_a"] = inputs.beta_a.astype(np.float32)
    return arrays
