"""Checkpoints: safetensors files that describe themselves: save (atomic), load (never runs code), the typed header.

Shipping one (`capsnet.training.export`) and listing those a user can open (`capsnet.training.catalog`) are training's.
"""
