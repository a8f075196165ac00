"""The Hugging Face format only: folders written (export.py, card.py, record.py) and read (load.py) for
the architectures of architectures.py with the tensor layouts of tensors.py; never imports train
(run folders and `init: {from:}` are glassroom/train/run_folder.py and init.py)."""
