"""Scaling ladders: a spec of rungs from one size dial (spec), their cost (plan), scaling-law fits
with intervals (fit), and the hero's preregistered loss-curve prediction (predict)."""
