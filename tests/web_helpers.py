"""Helpers for the dashboard tests and bench/dashboard.py: a realistic run store written with the real
StoreWriter, a `glassroom serve` subprocess on a free loopback port, and a small headless-Chromium
driver over the DevTools protocol (one websocket, flat sessions)."""

from __future__ import annotations

import base64
import itertools
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from glassroom.observe.store import StoreWriter

REPO = Path(__file__).resolve().parents[1]
DOMAINS = ["code", "math", "prose", "web"]
GROUPS = ["embedding", "attention", "mlp", "experts", "shared_experts", "router", "router_bias", "norms", "head"]


def write_run(run_dir: Path, steps: int = 3000, layers: int = 4, moe_layers=(1, 3), experts: int = 8,
              every: int = 10, eval_every: int = 250, spike_at: int | None = None, seed: int = 0,
              config: dict | None = None, state: str = "running") -> Path:
    """A run store like the trainer writes: noisy decaying loss, lr schedule, norms by group and
    layer, MoE stats and vectors, per-domain evals and tokens, and journal events."""
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    cfg = config or {"model": {"d_model": 256, "n_layers": layers, "moe": {"n_experts": experts, "top_k": 2}},
                     "train": {"lr": 3e-3, "steps": steps, "batch_tokens": 65536}}
    import yaml
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    tokens = {d: 0.0 for d in DOMAINS}
    share = {"code": 0.2, "math": 0.1, "prose": 0.3, "web": 0.4}
    bias = np.zeros((max(moe_layers) + 1 if moe_layers else 0, experts))
    with StoreWriter(run_dir, flush_rows=50_000, flush_seconds=3600) as w:
        w.event("start", f"training started ({steps} steps)", 0, {"steps": steps})
        for s in range(1, steps + 1):
            loss = 2.1 + 6.0 * math.exp(-s / 300) + 1.2 * s ** -0.25 + rng.normal(0, 0.03)
            if spike_at is not None and s == spike_at:
                loss += 5.0
            lr = 3e-3 * min(1.0, s / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / steps)))
            row = {"train/loss": loss, "train/lr": lr, "train/grad_norm": 0.6 + 2 * math.exp(-s / 200) + abs(rng.normal(0, 0.05)),
                   "throughput/tokens_per_s": 41000 + rng.normal(0, 800), "throughput/mfu": 0.38 + rng.normal(0, 0.01)}
            if s % every == 0:
                for d in DOMAINS:
                    tokens[d] += 65536 * every * share[d]
                    row[f"data/tokens/{d}"] = tokens[d]
                for kind, scale in (("param", 40.0), ("grad", 1.0), ("update", 0.02)):
                    growth = 1 + s / steps if kind == "param" else math.exp(-s / 1500)
                    for g in GROUPS:
                        row[f"norm/{kind}/{g}"] = scale * growth * (1 + GROUPS.index(g) / 4) * (1 + rng.normal(0, 0.01))
                    for i in range(layers):
                        row[f"norm/{kind}/layer_{i}"] = scale * growth * (1 + i / 8) * (1 + rng.normal(0, 0.01))
                    row[f"norm/{kind}/total"] = scale * growth * 4
                for li in moe_layers:
                    skew = np.exp(rng.normal(0, 0.25, experts) + np.linspace(0.6, -0.6, experts) * math.exp(-s / 800))
                    load = skew / skew.sum() * 65536 * 2
                    bias[li] += 1e-3 * np.sign(load.mean() - load)
                    w.log_vector(s, f"moe/layer_{li}/tokens_per_expert", load.tolist())
                    w.log_vector(s, f"moe/layer_{li}/bias", bias[li].tolist())
                    row.update({f"moe/layer_{li}/imbalance": float(load.max() / load.mean()),
                                f"moe/layer_{li}/entropy": float(-(load / load.sum() * np.log(load / load.sum())).sum()),
                                f"moe/layer_{li}/bias_norm": float(np.linalg.norm(bias[li])),
                                f"moe/layer_{li}/bias_min": float(bias[li].min()), f"moe/layer_{li}/bias_max": float(bias[li].max()),
                                f"moe/layer_{li}/aux_loss": 0.01 * float(load.max() / load.mean()),
                                f"moe/layer_{li}/z_loss": 1e-3 * math.exp(-s / 1000)})
            if s % eval_every == 0:
                losses = {d: loss - 0.05 + 0.15 * i for i, d in enumerate(DOMAINS)}
                for d in DOMAINS:
                    row[f"eval/{d}/loss"] = losses[d]
                    row[f"eval/{d}/bpb"] = losses[d] / math.log(2) / 4.2
                row["eval/macro/bpb"] = sum(losses.values()) / len(losses) / math.log(2) / 4.2
            w.log(s, row)
            if s % eval_every == 0:
                w.event("eval", f"eval at step {s}: macro bpb {row['eval/macro/bpb']:.3f}", s)
            if s % 1000 == 0:
                w.event("checkpoint", f"checkpoint step {s} saved", s, {"path": f"checkpoints/step-{s}"})
            if spike_at is not None and s == spike_at:
                w.event("anomaly", f"loss +{5.0 / 0.03:.0f} sigma at step {s}", s, {"metric": "train/loss", "step": s, "size": 166.0, "attribution": {}})
        w.event("note", "switched the data mixture to more code", steps // 2)
        w.set_status(state, steps)
    return run_dir


def write_prediction(run_dir: Path, steps: int = 3000, **extra) -> dict:
    """The ladder's `prediction` artifact (written once); `extra` adds fields such as metric or seal."""
    xs = list(range(0, steps + 1, 50))
    mean = [2.1 + 6.0 * math.exp(-max(x, 1) / 300) + 1.2 * max(x, 1) ** -0.25 for x in xs]
    pred = {"steps": xs, "mean": mean, "lo": [m - 0.08 for m in mean], "hi": [m + 0.08 for m in mean], **extra}
    with StoreWriter(run_dir) as w:
        w.set_artifact("prediction", pred)
    return pred


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StaticSiteServer:
    """A published site served by Python's plain http.server on 127.0.0.1 (as any static host would),
    ready once site.json answers. `with StaticSiteServer(site) as url: ...`"""

    def __init__(self, site: Path):
        self.site = Path(site)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> str:
        self.proc = subprocess.Popen([sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1",
                                      "-d", str(self.site)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while True:
            try:
                urllib.request.urlopen(self.url + "/site.json", timeout=2).read()
                return self.url
            except OSError:
                if time.time() > deadline:
                    self.__exit__()
                    raise
                time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class Server:
    """`glassroom serve DIR` in a subprocess on 127.0.0.1 and a free port; stops on exit."""

    def __init__(self, root: Path, extra_env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(REPO), **(extra_env or {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "glassroom", "serve", str(root), "--port", str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stdout.read()}")
            try:
                urllib.request.urlopen(self.url + "/api/runs", timeout=2).read()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not start in 30 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


class Chromium:
    """Headless Chromium driven over the DevTools protocol: navigate, evaluate JS, screenshot."""

    def __init__(self, width: int = 1440, height: int = 1000):
        from websockets.sync.client import connect

        exe = chromium_path()
        if exe is None:
            raise RuntimeError("chromium not installed (scripts/install-system.sh installs it)")
        self.profile = tempfile.mkdtemp(prefix="gr-chromium-")
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--hide-scrollbars", f"--window-size={width},{height}",
             f"--user-data-dir={self.profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.time() + 30
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if time.time() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not start")
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self.ws = connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=20).__enter__()
        self.ids = itertools.count(1)
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable", session=True)
        self.send("Runtime.enable", session=True)
        self.send("Log.enable", session=True)   # Content-Security-Policy violations arrive as Log entries
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=True)
        self.console: list[str] = []

    def send(self, method: str, params: dict | None = None, session: bool = False, timeout: float = 60) -> dict:
        msg_id = next(self.ids)
        msg = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        deadline = time.time() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.time())))
            if reply.get("method") in ("Runtime.exceptionThrown", "Runtime.consoleAPICalled", "Log.entryAdded"):
                self.console.append(json.dumps(reply.get("params"))[:500])
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def eval(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True}, session=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JS error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str, ready: str = "window.GR && GR.ready === true", timeout: float = 30) -> float:
        """Open `url` and wait until `ready` is true; returns the seconds it took."""
        t0 = time.perf_counter()
        self.send("Page.navigate", {"url": url}, session=True)
        self.wait_for(ready, timeout)
        return time.perf_counter() - t0

    def wait_for(self, expression: str, timeout: float = 10, interval: float = 0.02) -> float:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            try:
                if self.eval(f"!!({expression})"):
                    return time.perf_counter() - t0
            except RuntimeError:
                pass
            time.sleep(interval)
        raise TimeoutError(f"not true after {timeout} s: {expression}; console: {self.console[-5:]}")

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        params = {"format": "png", "captureBeyondViewport": full_page}
        data = self.send("Page.captureScreenshot", params, session=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
