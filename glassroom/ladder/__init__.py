"""Scaling ladders: a spec of rungs from one size dial (spec), their cost (plan), scaling-law fits with
intervals (fit, laws, curve), and the hero's preregistered loss-curve prediction (predict). fit.py and
rungs.py (with what they import) are torch-free and train-free: the web's ladder page reads them.
Running a ladder as pipeline steps is glassroom/steps/ladder.py."""

# The keys of the laws in laws.py (simplest first): here, so that `glassroom ladder --help` lists
# them without loading numpy and scipy.
LAW_KEYS = ("C", "ND", "NtD", "NeffD")
