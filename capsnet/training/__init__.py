"""Training: options and recipes, the learning-rate schedule, what the hardware computes fast, the trainer's loop,
its run folder and what it saves after each epoch, collapse detection, torchrun, the watch, and runs as processes."""
