"""glassroom: train language models in public.

Layers (see docs/design.md): model, data and observe are leaves; train uses them; ladder runs
training through pipeline; web reads only observe.store.
"""

from glassroom.version import __version__

__all__ = ["__version__", "load"]


def load(path, step=None):
    """(model, tokenizer) for a run folder (its newest intact checkpoint, or `step`) or a Hugging Face
    folder: a glassroom Transformer in eval mode on CPU in fp32 and a `tokenizers.Tokenizer`
    (docs/python.md). Imports torch on first call only, so `glassroom --help` stays fast."""
    from glassroom.train.run_folder import load as _load

    return _load(path, step)
