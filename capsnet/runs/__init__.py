"""Runs: the training loop's runs as the dashboard sees them: trainers started, followed, cancelled and resumed as
background processes (`processes`), how long one will take here (`estimate`), the checkpoints a user can open, shipped
or from a run (`catalog`), and the export that ships a run's checkpoint (`export`).

This wing stands above the loop (`capsnet.training`): it starts the trainer with its options and times its step. The
run folder the trainer writes (its files, their schemas, the trainer's lock on it) is therefore the loop's own,
`capsnet.training.folder`, which this wing reads."""
