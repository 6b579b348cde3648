"""The knobs' payloads for each page's view: what the browser needs of one input, read once and cached.

A payload's header names its view (`js/main.js`) and its `identity`: the model and the input. A rerun that changes
neither keeps the browser's state (where the sliders are, the iteration shown); reading a new input is one server
run, cached by the image's hash. The large arrays go once per browser session (`js/store.js`): a model's decoder
(float16 where that is exact) and an input's votes are sent the first time and named after that, so a stroke or an
r step sends kilobytes, not megabytes.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import streamlit as st

from capsnet.readings import decoding
from capsnet.readings import routing_inputs as ri
from capsnet.readings.coupling_rules import DRAWS, SEED
from dashboard import state, texts
from dashboard.knobs import payload
from dashboard.models import Model


@st.cache_data(max_entries=4, show_spinner=False)
def _decoder(model_key: str, _model: Any) -> dict[str, np.ndarray]:
    return payload.decoder_arrays(_model.decoder)


@st.cache_data(max_entries=16, show_spinner=False)
def _inputs(model_key: str, image: np.ndarray, most: int, _model: Any) -> ri.RoutingInputs:
    return ri.routing_inputs(_model, image, most)


HELD_BY_SERVER = 8  # groups the session remembers sending; the browser keeps 16 (`js/store.js`)


def _pack(header: dict[str, Any], arrays: dict[str, np.ndarray], groups: dict[str, dict[str, np.ndarray]]) -> bytes:
    """The payload, with each group of large arrays carried only if this browser session was not sent it before."""
    held = set(state.knobs_held())
    sent = [key for key in groups if key not in held]
    carried = {f"{key}/{name}": array for key in sent for name, array in groups[key].items()}
    state.note_knobs_held(list(groups), HELD_BY_SERVER)
    return payload.pack({**header, "held": {key: list(group) for key, group in groups.items()}}, {**arrays, **carried})


def _identity(model: Model, image: np.ndarray) -> str:
    """The model and the input, as a hash (the model's key names a server path the browser has no need of)."""
    return hashlib.sha1(f"{model.key}#{state.input_digest(image)}".encode()).hexdigest()[:16]


def _decoder_key(model: Model) -> str:
    return "decoder:" + hashlib.sha1(model.key.encode()).hexdigest()[:16]


def _side_and_channels(image: np.ndarray) -> tuple[int, int]:
    return int(image.shape[0]), (3 if image.ndim == 3 else 1)


def dimensions(model: Model, image: np.ndarray, capsule: int | None, lead: str, mode: str = "sliders") -> bytes:
    """The Capsule dimensions view: every class capsule's pose, the sliders' ranges, the input, the decoder. With
    `mode` "redraw", the Draw page's what-if: a capsule chosen and redrawn, no sliders."""
    reading = model.reading(image)
    poses = reading.poses.astype(np.float32)  # (K, D)
    k, d = poses.shape
    ranges = [decoding.dimension_ranges(model.info, j, poses[j], d) for j in range(k)]
    side, channels = _side_and_channels(reading.image)
    header = {
        "view": "dimensions",
        "identity": _identity(model, image),
        "names": model.class_names,
        "prediction": reading.prediction,
        "capsule": reading.prediction if capsule is None else capsule,
        "labels": [texts.pose_label(model.routing)(j) for j in range(d)],
        "mode": mode,
        "caption": texts.REDRAWN_FROM.get(model.routing, texts.REDRAWN_FROM["dynamic"]),
        "side": side,
        "channels": channels,
        "lead": lead,
    }
    arrays = {
        "poses": poses,
        "low": np.stack([r.low for r in ranges]).astype(np.float32),
        "high": np.stack([r.high for r in ranges]).astype(np.float32),
        "image": np.asarray(reading.image, dtype=np.float32),
    }
    return _pack(header, arrays, {_decoder_key(model): _decoder(model.key, model.net)})


def routing(model: Model, image: np.ndarray, iterations: int, capsule: int | None, lead: str) -> bytes:
    """The Routing view: the class layer's inputs (`capsnet.readings.routing_inputs`) and how to label them."""
    config = model.config
    most = max(state.PAGE_ITERATIONS, config.routing_iterations)
    inputs = _inputs(model.key, image, most, model.net)
    header = {
        "view": "routing",
        "kind": inputs.kind,
        "identity": _identity(model, image),
        "names": model.class_names,
        "trained": config.routing_iterations,
        "r": iterations,
        "max_r": most,
        "capsule": -1 if capsule is None else capsule,
        "symbol": model.network.score_symbol,
        "score_axis": texts.SCORE_AXES[model.network.score_symbol],
        "m_plus": getattr(config, "m_plus", None),
        "m_minus": getattr(config, "m_minus", None),
        "types": getattr(config, "primary_types", 0),
        "leak": inputs.leak,
        "seed": SEED,
        "draws": DRAWS,
        "lead": lead,
    }
    return _pack(header, {}, {f"votes:{header['identity']}:{most}": payload.routing_arrays(inputs)})


def attention(model: Model, image: np.ndarray, lead: str) -> bytes:
    """The Routing view of self-attention: the class layer's votes, the primary capsules' lengths and the learned
    bias, which the browser attends over at any sharpness, uniformly or with random couplings."""
    inputs = _inputs(model.key, image, 1, model.net)
    config = model.config
    header = {
        "view": "attention",
        "identity": _identity(model, image),
        "names": model.class_names,
        "symbol": model.network.score_symbol,
        "score_axis": texts.SCORE_AXES[model.network.score_symbol],
        "m_plus": getattr(config, "m_plus", None),
        "m_minus": getattr(config, "m_minus", None),
        "seed": SEED,
        "draws": DRAWS,
        "lead": lead,
    }
    return _pack(header, {}, {f"votes:{header['identity']}:attention": payload.routing_arrays(inputs)})
