"""glassroom: train language models in public.

Layers (docs/design.md; tests/core/test_package_layers.py enforces them): core modules, then observe (the run
record) and pipeline (the engine), model, data, hf, downstream, train, ladder, steps (the step
kinds), web, and the commands on top; each imports only its own layer and those below. observe,
pipeline and web never import torch or glassroom.train; web reads observe, data, model accounting
and the ladder's torch-free modules.
"""

from glassroom.version import __version__

__all__ = ["__version__", "load"]


def load(path, step=None):
    """(model, tokenizer) for a run folder (its newest intact checkpoint, or `step`) or a Hugging Face
    folder: a glassroom Transformer in eval mode on CPU in fp32 and a `tokenizers.Tokenizer`
    (docs/python.md). Imports torch on first call only, so `glassroom --help` stays fast."""
    from glassroom.train.run_folder import load as _load

    return _load(path, step)
