"""Checkpoints: safetensors files that describe themselves: save (atomic), load (never runs code), the typed header.

Shipping one (`capsnet.runs.export`) and listing those a user can open (`capsnet.runs.catalog`) are the runs': an
export measures the file with `capsnet.readings` (affNIST, the novelty thresholds), which stands on this wing.
"""
