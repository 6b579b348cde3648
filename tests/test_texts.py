"""How the dashboard words durations and its no-model notice."""

from __future__ import annotations

import math

from dashboard import texts


def test_format_duration() -> None:
    assert texts.format_duration(0) == "0 s"
    assert texts.format_duration(5) == "5 s"
    assert texts.format_duration(59.6) == "1 min 00 s"  # rounded before splitting
    assert texts.format_duration(125) == "2 min 05 s"
    assert texts.format_duration(3720) == "1 h 02 min"
    for unknown in (None, math.inf, math.nan, -1):
        assert texts.format_duration(unknown) == "—"


def test_no_model_notice_names_the_folder_and_the_command() -> None:
    notice = texts.no_model_notice("/some/checkpoints")
    assert "`/some/checkpoints`" in notice and "python -m capsnet.train" in notice
