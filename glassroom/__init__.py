"""glassroom: train language models in public.

Layers (see docs/design.md): model, data and observe are leaves; train uses them; ladder runs
training through pipeline; web reads only observe.store.
"""

__version__ = "0.1.0"
