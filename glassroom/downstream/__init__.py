"""Downstream evaluation with lm-evaluation-harness: a glassroom model as an lm-eval model
(adapter.py), running tasks and storing their scores (run.py). The local tasks it runs are written
into a dataset by glassroom/data/tasks.py."""
