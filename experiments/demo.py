"""The demo as an experiment: the demo corpus, a four-rung ladder, its fit, and the hero.

`glassroom demo --out lab` runs this file (then publishes the site); so does
`glassroom run experiments/demo.py --workspace lab`. See glassroom/demo.py.
"""

from pathlib import Path

from glassroom.demo import demo_steps

steps = demo_steps(Path(__file__).resolve().parent)
