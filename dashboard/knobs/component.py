"""The knobs' Streamlit component (components v2): plain ES modules from `js/`, mounted with a payload's bytes.

Streamlit serves a component's files from an asset folder it knows from a package manifest; this package's folder
is declared here, on the runtime that mounts it, so the files
are served at /_stcore/bidi-components/capsnet-explorer.knobs/ and `main.js` imports its siblings by relative URL,
with no bundler. What a view does with the payload is `js/main.js`'s to say.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st
from streamlit.components.v2.get_bidi_component_manager import get_bidi_component_manager
from streamlit.components.v2.manifest_scanner import ComponentConfig, ComponentManifest

from dashboard import state

PROJECT = "capsnet-explorer"
NAME = f"{PROJECT}.knobs"
ASSETS = Path(__file__).resolve().parent / "js"


def _renderer() -> Any:
    """The component on the running Streamlit, its files declared there first (each runtime, AppTest's too, has a
    registry of its own; without a runtime every call gets a fresh one, so nothing is registered at import)."""
    manager = get_bidi_component_manager()
    if manager.get_component_asset_root(NAME) is None:
        manifest = ComponentManifest(PROJECT, "1", [ComponentConfig(name="knobs", asset_dir=ASSETS.name)])
        manager.register_from_manifest(manifest, ASSETS.parent)
    return st.components.v2.component(NAME, js="main.js", css="knobs.css", html='<div class="knobs"></div>')


def _missing(key: str) -> None:
    """The browser lacks groups of arrays it was thought to hold: forget them, so that this run sends them."""
    asked = str((st.session_state.get(key) or {}).get("missing") or "")
    state.forget_knobs_held(asked.split("#")[0].split())


def knobs(
    payload: bytes, *, key: str, reports: tuple[str, ...] = (), on_change: Callable[[], None] | None = None
) -> Any:
    """Mount the knobs on `payload` (`dashboard.knobs.views`, whose header names the view). The component reports
    back only the state named in `reports` (what a link or another page needs), calling `on_change` when one of them
    changes, and any array it was thought to hold and does not; its result holds that state."""
    callback = on_change or (lambda: None)
    callbacks = {f"on_{name}_change": callback for name in reports}
    return _renderer()(key=key, data=payload, on_missing_change=lambda: _missing(key), **callbacks)
