"""Dashboard speed, measured in one run against references from the same machine and moment.

1. Series query for one 1M-point metric: glassroom's series function (SQLite read + min/max
   downsampling to 1,500 buckets) and the same through the HTTP endpoint of `glassroom serve`,
   against TensorBoard's EventAccumulator loading the same 1M points from an event file
   (size_guidance scalars=0, i.e. keep all; skipped with a message if tensorboard is not installed).
2. Write-to-browser latency: a point committed with StoreWriter until it is in the run page's chart
   data in headless Chromium (polled every 5 ms over DevTools).
3. Page load with 40 charts: navigation until every chart has drawn its data.

    python bench/dashboard.py [--points 1000000] [--rounds 15] [--tb-rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from glassroom.observe.store import StoreReader, StoreWriter  # noqa: E402
from glassroom.web.data import series_payload  # noqa: E402
from web_helpers import Chromium, Server, chromium_path, write_run  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs), q))


def fmt(xs: list[float]) -> str:
    return f"p50 {1000 * pct(xs, 50):8.1f} ms   p95 {1000 * pct(xs, 95):8.1f} ms   (n={len(xs)})"


def make_big_run(run: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    steps = np.arange(1, n + 1)
    values = 2.0 + 5.0 * np.exp(-steps / (n / 20)) + rng.normal(0, 0.02, n)
    with StoreWriter(run, flush_rows=200_000, flush_seconds=3600) as w:
        for s, v in zip(steps.tolist(), values.tolist()):
            w.log(s, {"train/loss": v})
        w.set_status("finished", n)
    return steps, values


def write_tensorboard(logdir: Path, steps: np.ndarray, values: np.ndarray) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(logdir), max_queue_size=10_000, flush_secs=3600)
    now = time.time()
    for s, v in zip(steps.tolist(), values.tolist()):
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="train/loss", simple_value=v)])
        writer.add_event(event_pb2.Event(wall_time=now, step=s, summary=summary))
    writer.close()


def bench_queries(root: Path, n: int, rounds: int, tb_rounds: int) -> None:
    run = root / "big"
    t0 = time.perf_counter()
    steps, values = make_big_run(run, n)
    print(f"wrote {n:,} points to the run store in {time.perf_counter() - t0:.1f} s")

    ours = []
    with StoreReader(run) as reader:
        for _ in range(rounds):
            t = time.perf_counter()
            payload = series_payload(reader, ["train/loss"], points=1500)
            ours.append(time.perf_counter() - t)
    assert payload["series"]["train/loss"]["n"] == n
    print(f"glassroom series function, {n:,} points -> 1,500 buckets:  {fmt(ours)}")

    http = []
    with Server(root) as server:
        url = f"{server.url}/api/series?run=big&name=train/loss&points=1500"
        urllib.request.urlopen(url).read()
        for _ in range(rounds):
            t = time.perf_counter()
            urllib.request.urlopen(url).read()
            http.append(time.perf_counter() - t)
    print(f"glassroom HTTP /api/series (same query):                {fmt(http)}")

    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        print("tensorboard not installed (pip install tensorboard): TensorBoard comparison skipped")
        return
    logdir = root / "tb"
    t0 = time.perf_counter()
    write_tensorboard(logdir, steps, values)
    print(f"wrote the same {n:,} points as a TensorBoard event file in {time.perf_counter() - t0:.1f} s")
    tb = []
    for _ in range(tb_rounds):
        t = time.perf_counter()
        acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
        acc.Reload()
        loaded = acc.Scalars("train/loss")
        tb.append(time.perf_counter() - t)
    assert len(loaded) == n
    print(f"TensorBoard EventAccumulator.Reload + Scalars (all points): {fmt(tb)}")
    print(f"ratio TensorBoard / glassroom (p50): function {pct(tb, 50) / pct(ours, 50):.1f}x, "
          f"HTTP {pct(tb, 50) / pct(http, 50):.1f}x")


def forty_chart_run(run: Path) -> None:
    write_run(run, steps=3000)   # the standard charts of a MoE run (24)
    with StoreWriter(run, flush_rows=100_000) as w:   # plus 16 more, one chart per parent path
        for s in range(1, 3001):
            w.log(s, {f"extra/probe_{i}/value": float(np.sin(s / (50 + i))) for i in range(16)})


def bench_browser(root: Path, rounds: int) -> None:
    if chromium_path() is None:
        print("chromium not installed (scripts/install-system.sh): browser figures skipped")
        return
    run = root / "forty"
    forty_chart_run(run)
    with Server(root) as server, Chromium(width=1440, height=1000) as browser:
        url = f"{server.url}/runs/forty"
        browser.navigate(url)
        charts = browser.eval("GR.charts.length")
        loads = [browser.navigate(url) for _ in range(max(3, rounds // 3))]
        print(f"page load, run page with {charts} charts (navigate -> all drawn): {fmt(loads)}")
        latencies = []
        with StoreWriter(run) as w:
            for i in range(rounds):
                step = 3001 + i
                time.sleep(0.15)
                w.log(step, {"train/loss": 2.0})
                w.flush()
                t = time.perf_counter()
                browser.wait_for(f"GR.charts[0].u.data[0].includes({step})", timeout=5, interval=0.005)
                latencies.append(time.perf_counter() - t)
        print(f"write-to-browser latency (commit -> in chart data):     {fmt(latencies)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tb-rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gr-bench-") as tmp:
        root = Path(tmp)
        bench_queries(root, args.points, args.rounds, args.tb_rounds)
        bench_browser(root, args.rounds)


if __name__ == "__main__":
    main()
