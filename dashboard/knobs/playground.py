"""The knobs' payload for the Routing playground's toy: every preset's votes and how to label them, sent once.

The browser (`js/playground_view.js`) routes the votes by both algorithms, steps through the iterations and moves
votes with no server run; the header carries what it shows beside them: the presets' names and help, the parents'
names and colours, the iteration bound, the margin loss's constants and the comparison's tolerances. Pure: no
Streamlit here (building it takes well under a millisecond).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np

from capsnet.nn.config import CapsNetConfig
from capsnet.readings import playground as pg
from dashboard import routing_texts
from dashboard.figures.style import CLASS_COLOURS, MARGIN_MINUS, MARGIN_PLUS, WINNER
from dashboard.knobs import payload

MAX_ITERATIONS = 5  # r runs over 1..5
ITERATIONS = 3  # the r the toy opens on (the paper's)
MAX_NORM = 5.0  # the squash curve's |s| runs over [0, 5]
NORM = 1.0  # the |s| it opens on


def preset_votes() -> np.ndarray:
    """Every preset's votes, in `capsnet.readings.playground.PRESETS`' order: (presets, K, N, 2) float32."""
    return np.stack([pg.preset_votes(name) for name in pg.PRESETS]).astype(np.float32)


def names() -> list[str]:
    """The toy's parents' names."""
    return [f"parent {j + 1}" for j in range(pg.PARENTS)]


def toy(helps: Mapping[str, str], lead: str, config: CapsNetConfig | None = None) -> bytes:
    """The toy's payload: `helps` says what to look for in each preset, `lead` what to do; the margin loss's m+, m-
    and lambda are `config`'s (the paper's by default)."""
    config = config or CapsNetConfig()
    votes = preset_votes()
    header = {
        "view": "playground",
        # the presets' votes and the bound: a rerun that sends the same keeps where the hand left the toy
        "identity": hashlib.sha1(votes.tobytes() + f"{MAX_ITERATIONS}".encode()).hexdigest()[:16],
        "lead": lead,
        "presets": list(pg.PRESETS),
        "help": [helps[name] for name in pg.PRESETS],
        "parents": names(),
        "colours": [CLASS_COLOURS[j % len(CLASS_COLOURS)] for j in range(pg.PARENTS)],
        "accent": WINNER,
        "colour_present": MARGIN_PLUS,
        "colour_absent": MARGIN_MINUS,
        "r": ITERATIONS,
        "max_r": MAX_ITERATIONS,
        "bound": pg.MAX_COORDINATE,
        "norm": NORM,
        "max_norm": MAX_NORM,
        "m_plus": config.m_plus,
        "m_minus": config.m_minus,
        "down_weight": config.down_weight,
        "present": routing_texts.PRESENT,
        "length_tie": routing_texts.LENGTH_TIE,
        "activation_tie": routing_texts.ACTIVATION_TIE,
        "contrast": routing_texts.CONTRAST,
    }
    return payload.pack(header, {"votes": votes})
