"""Widgets that several pages share."""

from __future__ import annotations

from typing import Any

import streamlit as st

# The first option of the "which capsule" select boxes: follow the prediction, whatever it is. Not None: a select
# box whose value is None shows its placeholder ("Choose an option") once it is drawn again (Streamlit reads None
# as "nothing chosen"); and its label never names the class, since the browser keeps the chosen option by label.
PREDICTED = -1


def capsule_choice(choice: int | None) -> int | None:
    """The class a "which capsule" select box names, or None for the predicted one."""
    return None if choice is None or int(choice) == PREDICTED else int(choice)


def capsule_selectbox(
    label: str,
    names: list[str],
    *,
    key: str,
    predicted_label: str,
    item: str = "capsule",
    help: str | None = None,
    container: Any = st,
) -> int | None:
    """A select box over "the predicted capsule" and every class; returns the class chosen, or None for the prediction.

    The options are fixed values with fixed labels (say the current prediction in `help`): a label
    that changed with the input would make Streamlit drop the selection and show a blank box.
    """
    choice = container.selectbox(
        label,
        [PREDICTED, *range(len(names))],
        format_func=lambda j: predicted_label if j == PREDICTED else f"{item} {names[j]}",
        key=key,
        help=help,
    )
    return capsule_choice(choice)
