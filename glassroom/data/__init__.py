"""Raw text to batches: sources -> clean -> tokenizer -> shards -> mixture (docs/data-build.md), and
what is written into a dataset (the atlas, the lm-eval tasks); knows nothing of training.

`glassroom data build` runs build.build_dataset over a recipe (recipe.py); the trainer reads the
result through mixture.Mixture (training batches) and mixture.Dataset (validation sequences).
"""
