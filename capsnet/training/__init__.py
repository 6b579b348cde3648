"""Training: options and recipes, the learning-rate schedule, what the hardware computes fast, the trainer's loop,
its run folder and what it saves after each epoch, collapse detection, torchrun and the watch. Runs as processes,
the catalogue of checkpoints and the export are `capsnet.runs`."""
