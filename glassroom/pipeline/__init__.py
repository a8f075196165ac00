"""Experiments as code: steps with versioned, cached outputs that run locally or on Ray.

An experiment file lists Steps; `glassroom run` reuses what is done, runs what is not (in
subprocesses or as Ray tasks), and records how each output was produced (`glassroom show`).
Layout: step.py (Step, Resources, inputs, version hash), graph.py (validation, versions, paths),
experiment.py (loading a file), status.py (files beside an output), lock.py (leases),
context.py (what a step's function receives), worker.py (the step's process), scheduler.py (the
run loop), runner_local.py and runner_ray.py (backends), provenance.py (records and `show`).
The engine knows no step kind and imports no layer of glassroom: the step kinds (data build,
atlas, ladder rungs and hero, post-training, export) are glassroom/steps/, above it.
"""

from glassroom.pipeline.context import StepContext
from glassroom.pipeline.experiment import load_recipe
from glassroom.pipeline.step import Input, Resources, Step, output_of

__all__ = ["Input", "Resources", "Step", "StepContext", "load_recipe", "output_of"]
