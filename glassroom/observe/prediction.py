"""A preregistered prediction read back during training: the deviation from its band, and a
watcher that writes to the journal when the live metric leaves the band or comes back into it.

The prediction is the run store's artifact "prediction" (glassroom.ladder.predict writes it once,
before the run starts): steps, mean, lo, hi of its metric, and the band's confidence. Numpy only.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Optional

import numpy as np


def deviation(prediction: dict, step: int, loss: float) -> Optional[float]:
    """(loss - mean) / sigma at `step`; sigma = the band's half-width on loss's side / z, with z the
    normal quantile of the confidence (1.96 at 95%), so the band's edges are +-2 sigma (1.96).
    None outside the band's steps or where the band has no width."""
    steps = prediction["steps"]
    if not steps or step < steps[0] or step > steps[-1] or not math.isfinite(loss):
        return None
    mean = float(np.interp(step, steps, prediction["mean"]))
    edge = float(np.interp(step, steps, prediction["hi"] if loss >= mean else prediction["lo"]))
    z = NormalDist().inv_cdf((1 + prediction.get("confidence", 0.95)) / 2)
    sigma = abs(edge - mean) / z
    return None if sigma <= 0 else (loss - mean) / sigma


class BandWatcher:
    """Trainer observer: logs `prediction/deviation` for the predicted metric and journals exits
    from and returns into the band."""

    def __init__(self, prediction: dict):
        self.prediction = prediction
        self.metric = prediction["metric"]
        self.z = NormalDist().inv_cdf((1 + prediction.get("confidence", 0.95)) / 2)
        self.outside = False

    def on_step(self, trainer, step: int, metrics: dict) -> None:
        if self.metric not in metrics:
            return
        value = metrics[self.metric]
        sigmas = deviation(self.prediction, step, value)
        if sigmas is None:
            return
        metrics["prediction/deviation"] = sigmas
        if trainer.store is not None:
            trainer.store.log(step, {"prediction/deviation": sigmas})
        outside = abs(sigmas) > self.z
        if outside != self.outside:
            mean = float(np.interp(step, self.prediction["steps"], self.prediction["mean"]))
            where = "left" if outside else "came back into"
            trainer.record_event(
                "prediction", f"{self.metric} {where} the predicted band at step {step}: {value:.4f} against "
                f"{mean:.4f} predicted ({sigmas:+.1f} sigma)", step, {"deviation": sigmas, "value": value})
            self.outside = outside

    def state(self) -> dict:
        return {"outside": self.outside}

    def load_state(self, state) -> None:
        self.outside = bool(state and state.get("outside"))
