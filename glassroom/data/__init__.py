"""Raw text to batches: sources -> clean -> dedup -> decontaminate -> quality -> tokenizer -> shards
-> mixture (docs/data-build.md).

`glassroom data build` runs build.build_dataset over a recipe (recipe.py); the trainer reads the
result through mixture.Mixture (training batches), mixture.Dataset (validation sequences) and, for
conversation data, packing.Packer. Beside the build: the atlas of a dataset (atlas.py), chat data
(chat.py, chatset/) and the lm-eval tasks written into a dataset (tasks.py).
"""
