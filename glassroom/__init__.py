"""glassroom: train language models in public.

Layers, bottom first: the ```layers block of docs/design.md (tests/test_layers.py checks every
import against it). A module imports only from its own level or below, and observe, web and
pipeline never reach torch. `glassroom.load` is the notebook entry point (docs/python.md).
"""

from glassroom.version import __version__

__all__ = ["__version__", "load"]


def load(path, step=None):
    """(model, tokenizer) for a run folder (its newest intact checkpoint, or `step`) or a Hugging Face
    folder: a glassroom Transformer in eval mode on CPU in fp32 and a `tokenizers.Tokenizer`
    (docs/python.md). Imports torch on first call only, so `glassroom --help` stays fast."""
    from glassroom.train.run_folder import load as _load

    return _load(path, step)
