"""Experiments as code: steps with versioned, cached outputs that run locally or on Ray.

An experiment file lists Steps; `glassroom run` reuses what is done, runs what is not (in
subprocesses or as Ray tasks), and records how each output was produced (`glassroom show`).
Layout: step.py (Step, Resources, inputs, version hash), graph.py (validation, versions, paths),
experiment.py (loading a file), status.py (files beside an output), lock.py (leases),
context.py (what a step's function receives), steps.py (step kinds:
data build; training and ladder steps go there), worker.py (the step's process), scheduler.py (the
run loop), runner_local.py and runner_ray.py (backends), provenance.py (records and `show`).
"""

from glassroom.pipeline.context import StepContext
from glassroom.pipeline.experiment import load_recipe
from glassroom.pipeline.step import Input, Resources, Step, output_of
from glassroom.pipeline.steps import data_build_step

__all__ = ["Input", "Resources", "Step", "StepContext", "data_build_step", "load_recipe", "output_of"]
