"""Downstream evaluation with lm-evaluation-harness: a glassroom model as an lm-eval model (adapter.py),
running the tasks of a dataset (glassroom/data/tasks.py) and storing their scores (run.py); below train."""
