"""Training: the run config, the trainer and its objectives, checkpoints and resume, parallelism,
probes and mirrors, starting from a base (`init: {from:}`) and reading a run's checkpoints back
(`glassroom.load`, `glassroom export`). Above model, data, hf and downstream; below ladder and steps."""
