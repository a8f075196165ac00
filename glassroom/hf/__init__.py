"""Models leave the lab: Hugging Face folders out (export.py, card.py) and in (load.py, init.py),
for the architectures of architectures.py with the tensor layouts of tensors.py."""
