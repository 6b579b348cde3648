"""Checkpoints: safetensors files that describe themselves (save, load, the typed header), the export that ships
one, and the catalogue of those a user can open."""
