"""Spike detection with attribution: what jumped, and which parameter groups or domains did it.

Tests (defaults in ObserveSection; docs/anomalies.md):
- rolling window: a value above mean + k * std of the previous W values of its metric (k = 6,
  W = 100, after at least 20 values) is a spike. It runs on the training loss, the gradient norm
  and the update norm, and on the step-to-step change of the parameter norm (the norm itself
  drifts upward all run; a jump in it is the event).
- ratio: a training loss above `loss_spike_ratio` (1.5) times its running minimum is a spike.

Attribution: for a norm, each group's share of the change in the global squared norm between the
previous measurement and this one (groups by kind, then the layers of the top kind); a top
contributor that is not trained by gradients (the router bias) is named as such. For the loss, the
domains whose training loss rose most above their own running mean. The detector's state is
saved in checkpoints, so a resumed run keeps its history.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Optional

# The parameter groups whose norms glassroom/train/probes.py measures (kept here: the watchers are torch-free).
KINDS = ("embedding", "attention", "mlp", "experts", "shared_experts", "router", "router_bias", "norms", "head")
NOT_TRAINED_BY_GRADIENT = {"router_bias": "the MoE router bias, which the load balancer sets, not the gradient"}

WATCHED = {
    "train/loss": ("loss", "level"),
    "train/grad_norm": ("grad norm", "level"),
    "norm/update/total": ("update norm", "level"),
    "norm/param/total": ("param norm", "change"),
}
KIND_WORDS = {
    "embedding": "the embedding", "attention": "attention", "mlp": "the dense MLPs", "experts": "the routed experts",
    "shared_experts": "the shared experts", "router": "the router weights", "router_bias": "the MoE router bias",
    "norms": "the norm weights", "head": "the output head",
}


def _layers_text(layers: list[int]) -> str:
    if not layers:
        return ""
    layers = sorted(layers)
    if len(layers) > 1 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"layers {layers[0]}-{layers[-1]}"
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(map(str, layers))


class AnomalyDetector:
    def __init__(self, window: int = 100, sigma: float = 6.0, min_history: int = 20, loss_ratio: float = 1.5):
        self.window, self.sigma, self.min_history, self.loss_ratio = window, sigma, min_history, loss_ratio
        self.history: dict[str, deque] = {m: deque(maxlen=window) for m in WATCHED}
        self.loss_min = math.inf
        self.previous: dict[str, float] = {}  # last value of every norm/* and train/loss/* metric
        self.domain_history: dict[str, deque] = {}
        self.active: set[str] = set()  # metrics currently in a reported spike (report its start once)

    # ------------------------------------------------------------------ state for checkpoints

    def state(self) -> dict:
        return {"history": {m: list(h) for m, h in self.history.items()}, "loss_min": self.loss_min,
                "previous": self.previous, "domain_history": {d: list(h) for d, h in self.domain_history.items()},
                "active": sorted(self.active)}

    def load_state(self, state: Optional[dict]) -> None:
        if not state:
            return
        for m, values in state["history"].items():
            self.history[m] = deque(values, maxlen=self.window)
        self.loss_min = state["loss_min"]
        self.previous = dict(state["previous"])
        self.domain_history = {d: deque(v, maxlen=self.window) for d, v in state["domain_history"].items()}
        self.active = set(state["active"])

    # ------------------------------------------------------------------ detection

    def observe(self, step: int, metrics: dict[str, float]) -> list[dict]:
        """Feed one step's metrics; returns the anomaly events (text + data) it found."""
        events = []
        for metric, (label, mode) in WATCHED.items():
            if metric not in metrics or not math.isfinite(metrics[metric]):
                continue
            value = metrics[metric]
            tested = value - self.previous[metric] if mode == "change" and metric in self.previous else None
            if mode == "level":
                tested = value
            found = None
            if tested is not None:
                found = self._rolling_test(metric, tested)
                if metric == "train/loss" and found is None and self.loss_min < math.inf and len(self.history[metric]) >= self.min_history \
                        and value > self.loss_ratio * self.loss_min:
                    found = {"test": "ratio", "ratio": value / self.loss_min, "running_min": self.loss_min}
                self.history[metric].append(tested)
            if found is None:
                self.active.discard(metric)
            elif metric not in self.active:
                self.active.add(metric)
                events.append(self._explain(step, metric, label, value, found, metrics))
        if "train/loss" in metrics and math.isfinite(metrics["train/loss"]):
            self.loss_min = min(self.loss_min, metrics["train/loss"])
        for name, value in metrics.items():
            if name.startswith("train/loss/") and math.isfinite(value):
                self.domain_history.setdefault(name, deque(maxlen=self.window)).append(value)
        self.previous.update({k: v for k, v in metrics.items()
                              if (k.startswith("norm/") or k.startswith("train/loss")) and math.isfinite(v)})
        return events

    def _rolling_test(self, metric: str, value: float) -> Optional[dict]:
        history = self.history[metric]
        if len(history) < self.min_history:
            return None
        mean = sum(history) / len(history)
        std = math.sqrt(sum((v - mean) ** 2 for v in history) / len(history))
        floor = 1e-12 + 1e-6 * abs(mean)  # a flat history still needs a real jump
        sigmas = (value - mean) / max(std, floor)
        if sigmas > self.sigma:
            return {"test": "rolling", "sigmas": sigmas, "mean": mean, "std": std, "window": len(history)}
        return None

    # ------------------------------------------------------------------ attribution

    def _explain(self, step: int, metric: str, label: str, value: float, found: dict, metrics: dict) -> dict:
        size = f"{found['sigmas']:+.1f} sigma" if found["test"] == "rolling" else f"{found['ratio']:.2f}x its running minimum"
        data = {"metric": metric, "step": step, "value": value, **found}
        if metric == "train/loss":
            reason = self._loss_attribution(metrics, data)
        else:
            reason = self._norm_attribution(metric.split("/")[1], metrics, data)
        text = f"{label} {size} at step {step}" + (f": {reason}" if reason else "")
        return {"text": text, "data": data}

    def _norm_attribution(self, kind: str, metrics: dict, data: dict) -> str:
        def delta(group: str) -> Optional[float]:
            name = f"norm/{kind}/{group}"
            if name not in metrics or name not in self.previous:
                return None
            return metrics[name] ** 2 - self.previous[name] ** 2

        total = delta("total")
        if not total:
            return ""
        shares = {g: d / total for g in KINDS if (d := delta(g)) is not None}
        if not shares:
            return ""
        ranked = sorted(shares.items(), key=lambda kv: -kv[1])
        data["attribution"] = {g: round(s, 4) for g, s in ranked}
        top, share = ranked[0]
        layer_deltas = {}
        for name in metrics:
            prefix = f"norm/{kind}/{top}/layer_"
            if name.startswith(prefix) and name in self.previous:
                layer_deltas[int(name[len(prefix):])] = metrics[name] ** 2 - self.previous[name] ** 2
        top_delta = sum(v for v in layer_deltas.values() if v > 0)
        layers = [i for i, v in layer_deltas.items() if top_delta and v > 0.1 * top_delta / max(1, len(layer_deltas))]
        data["layers"] = sorted(layers)
        where = f" ({_layers_text(layers)})" if layers else ""
        text = f"{share:.0%} from {KIND_WORDS.get(top, top)}{where}"
        if top in NOT_TRAINED_BY_GRADIENT:
            text += ", which the load balancer sets, not the gradient"
            data["not_trained_by_gradient"] = top
        return text

    def _loss_attribution(self, metrics: dict, data: dict) -> str:
        rises = {}
        for name, value in metrics.items():
            history = self.domain_history.get(name)
            if name.startswith("train/loss/") and history and math.isfinite(value):
                rises[name.split("/", 2)[2]] = value - sum(history) / len(history)
        if not rises:
            return ""
        ranked = sorted(rises.items(), key=lambda kv: -kv[1])
        data["domains"] = {d: round(r, 4) for d, r in ranked}
        named = [f"{d} +{r:.2f}" for d, r in ranked[:3] if r > 0]
        return "training loss rose most in " + ", ".join(named) if named else ""


class AnomalyObserver:
    """Hooks the detector into the trainer: writes each anomaly to the run's journal."""

    def __init__(self, observe_cfg):
        self.detector = AnomalyDetector(observe_cfg.anomaly_window, observe_cfg.anomaly_sigma,
                                        observe_cfg.anomaly_min_history, observe_cfg.loss_spike_ratio)

    def on_step(self, trainer, step: int, metrics: dict) -> None:
        for event in self.detector.observe(step, metrics):
            trainer.record_event("anomaly", event["text"], step, event["data"])

    def state(self) -> dict:
        return self.detector.state()

    def load_state(self, state: Optional[dict]) -> None:
        self.detector.load_state(state)
