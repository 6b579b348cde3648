"""The knobs: what a hand moves (routing iterations, coupling rules, pose sliders) computed in the browser.

The server reads each new input once and sends the class layer's inputs (`payload.py`); the browser routes them,
entropies and all, and redraws poses through the decoder, in plain ES modules (`js/`) served by a Streamlit
components-v2 component (`component.py`). Python stays the reference: tests/test_knobs_browser.py holds the
browser's numbers to PyTorch's.
"""
