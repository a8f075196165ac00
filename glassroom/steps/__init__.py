"""The step kinds: glassroom's layers as pipeline steps, each a small function returning a Step.

data.py (`data build` and `export`), atlas.py (`data atlas`), ladder.py (a ladder's rungs, fit and
hero), posttrain.py (chat set, chat data, SFT/DPO runs). They sit above the pipeline engine
(glassroom/pipeline/, which knows no step kind) and the layers they run.
"""

from glassroom.steps.data import data_build_step, export_step

__all__ = ["data_build_step", "export_step"]
