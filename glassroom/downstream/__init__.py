"""Downstream evaluation with lm-evaluation-harness: local tasks written into a dataset (tasks.py),
a glassroom model as an lm-eval model (adapter.py), running tasks and storing their scores (run.py)."""
