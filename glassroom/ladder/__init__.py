"""Scaling ladders: a spec of rungs from one size dial (spec), their cost (plan), scaling-law fits
with intervals (fit), and the hero's preregistered loss-curve prediction (predict). Also: fits of any
ladder's final losses (foresight, laws), which ladder to run (design), downstream scores predicted
from the rungs (downstream_link), and synthetic ladders to check the fitter against (synthetic)."""
