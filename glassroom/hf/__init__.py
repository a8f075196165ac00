"""The Hugging Face format: folders written (export.py, with the model card of card.py, remembered by
the run through record.py) and read (load.py), for the architectures of architectures.py with the
tensor layouts of tensors.py. A run that starts from such a folder is glassroom/train/init.py."""
