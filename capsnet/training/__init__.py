"""Training: options and recipes, the learning-rate schedule, what the hardware computes fast, the trainer's loop,
its run folder and what it saves after each epoch, collapse detection, torchrun, the watch, runs as processes, the
export that ships a run's checkpoint, and the catalogue of checkpoints a user can open."""
