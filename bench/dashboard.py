"""Dashboard speed at the scale of a real run, measured in one run against references from the same
machine and moment. Each figure is printed with its target (docs/serve.md, Speed):

1. view   A 1M-point series, whole range, 1,500 buckets: glassroom's series function (the tiles of
          observe/tiles.py) and the HTTP endpoint of `glassroom serve` (target p95 <= 50 ms), against
          the raw path (every row read from SQLite, then downsampled: what a store without tiles
          costs) and TensorBoard's EventAccumulator loading the same 1M points (size_guidance
          scalars=0, i.e. keep all; skipped with a message if tensorboard is not installed).
2. zoom   A 10M-point series: zooms into 1% of its range at random places, by the function and by
          HTTP (target p95 <= 50 ms), against the raw path on the same ranges.
3. list   The run list over 200 runs of 300 series each: GET /api/runs once the runs are listed
          (target p95 <= 200 ms; also with every
          store read again, what a cold cache costs), and the server's CPU while 20 run-list tabs are open (each tab's
          stream re-lists every second).
4. writer What keeping the tiles costs the training process: one commit of N series (one step's
          values), with the tiles and without (the same writer with its tile triggers dropped and
          its tile upkeep skipped), for N = 100 and 300.
5. live   Write-to-browser latency with 50 live clients on one run: a point committed with StoreWriter
          until it is in the chart data of a headless Chromium page (polled every 5 ms over DevTools),
          while 49 more clients follow the same run's stream (target p95 <= 1 s); and the
          commit-to-delivery latency over all 49 stream clients.

    python bench/dashboard.py [--only view,zoom,list,writer,live] [--points 1000000] [--big-points 10000000]
                              [--runs 200] [--series 300] [--clients 50] [--rounds 30]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from glassroom.observe.runs import find_runs, summarize  # noqa: E402
from glassroom.observe.store import StoreReader, StoreWriter, downsample  # noqa: E402
from glassroom.web.data import series_payload  # noqa: E402
from web_helpers import Chromium, Server, chromium_path, write_run  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs), q))


def fmt(xs: list[float], target_ms: float | None = None) -> str:
    text = f"p50 {1000 * pct(xs, 50):8.1f} ms   p95 {1000 * pct(xs, 95):8.1f} ms   (n={len(xs)})"
    if target_ms is not None:
        text += f"   target p95 <= {target_ms:g} ms: {'met' if 1000 * pct(xs, 95) <= target_ms else 'NOT met'}"
    return text


def timed(fn, rounds: int) -> list[float]:
    out = []
    for i in range(rounds):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def raw_view(run: Path, name: str, start, end, points: int):
    """What a view costs without tiles: every raw row of the range, then min/max downsampling."""
    with StoreReader(run) as reader:
        cursor = reader.conn.execute(
            "SELECT step, IFNULL(value, 'NaN') FROM metrics WHERE name_id = (SELECT id FROM names WHERE name = ?) "
            "AND step BETWEEN ? AND ? ORDER BY step", (name, -(2**62) if start is None else start,
                                                       2**62 if end is None else end))
        data = np.fromiter(cursor, dtype=[("step", np.int64), ("value", np.float64)])
        return downsample(data["step"], data["value"], points)


def make_long_run(run: Path, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, float]:
    """A loss curve of n steps, logged as a trainer does (rows committed in batches); returns the
    steps, values and the seconds the writer took."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    values = 2.0 + 5.0 * np.exp(-steps / (n / 20)) + rng.normal(0, 0.02, n)
    t0 = time.perf_counter()
    with StoreWriter(run, flush_rows=100_000, flush_seconds=3600) as w:
        for s, v in zip(steps.tolist(), values.tolist()):
            w.log(s, {"train/loss": v})
        w.set_status("finished", n)
    return steps, values, time.perf_counter() - t0


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read()


# ----------------------------------------------------------------------------------------- 1. view
def bench_view(root: Path, n: int, rounds: int, tb_rounds: int) -> None:
    run = root / "long"
    steps, values, took = make_long_run(run, n)
    print(f"wrote {n:,} points with StoreWriter in {took:.1f} s ({n / took / 1e3:.0f}k rows/s, tiles kept as it writes)")
    with StoreReader(run) as reader:
        series_payload(reader, ["train/loss"], points=1500)   # a store from before tiles is upgraded here, once
        ours = timed(lambda i: series_payload(reader, ["train/loss"], points=1500), rounds)
        payload = series_payload(reader, ["train/loss"], points=1500)
    assert payload["series"]["train/loss"]["n"] == n
    raw = timed(lambda i: raw_view(run, "train/loss", None, None, 1500), max(3, rounds // 5))
    label = f"{n / 1e6:g}M-point view"
    print(f"{label}, series function (tiles):          {fmt(ours, 50)}")
    print(f"{label}, raw rows + downsample (no tiles): {fmt(raw)}   -> tiles {pct(raw, 50) / pct(ours, 50):.0f}x faster")
    with Server(root) as server:
        url = f"{server.url}/api/series?run=long&name=train/loss&points=1500"
        get(url)
        over_http = timed(lambda i: get(url), rounds)
    print(f"{label}, HTTP /api/series:                 {fmt(over_http, 50)}")
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        print("tensorboard not installed (pip install tensorboard): TensorBoard comparison skipped")
        return
    logdir = root / "tb"
    writer = EventFileWriter(str(logdir), max_queue_size=10_000, flush_secs=3600)
    for s, v in zip(steps.tolist(), values.tolist()):
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="train/loss", simple_value=v)])
        writer.add_event(event_pb2.Event(wall_time=0.0, step=s, summary=summary))
    writer.close()

    def tensorboard(i):
        acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
        acc.Reload()
        assert len(acc.Scalars("train/loss")) == n

    tb = timed(tensorboard, tb_rounds)
    print(f"TensorBoard EventAccumulator, same points: {fmt(tb)}")
    print(f"ratio TensorBoard / glassroom (p50): function {pct(tb, 50) / pct(ours, 50):.0f}x, "
          f"HTTP {pct(tb, 50) / pct(over_http, 50):.0f}x")


# ----------------------------------------------------------------------------------------- 2. zoom
def bench_zoom(root: Path, n: int, rounds: int) -> None:
    run = root / "huge"
    _, _, took = make_long_run(run, n, seed=1)
    print(f"wrote {n:,} points with StoreWriter in {took:.1f} s ({n / took / 1e3:.0f}k rows/s)")
    rng = np.random.default_rng(2)
    width = n // 100
    ranges = [(int(a), int(a) + width - 1) for a in rng.integers(1, n - width, rounds)]
    with StoreReader(run) as reader:
        series_payload(reader, ["train/loss"], *ranges[0], points=1500)
        ours = timed(lambda i: series_payload(reader, ["train/loss"], *ranges[i], points=1500), rounds)
        got = series_payload(reader, ["train/loss"], *ranges[0], points=1500)["series"]["train/loss"]
    assert got["n"] == width, got["n"]
    raw = timed(lambda i: raw_view(run, "train/loss", *ranges[i], 1500), max(3, rounds // 5))
    print(f"zoom to 1% of {n / 1e6:g}M, series function (tiles): {fmt(ours, 50)}")
    print(f"zoom to 1% of {n / 1e6:g}M, raw rows + downsample:   {fmt(raw)}")
    with Server(root) as server:
        urls = [f"{server.url}/api/series?run=huge&name=train/loss&points=1500&start={a}&end={b}" for a, b in ranges]
        get(urls[0])
        over_http = timed(lambda i: get(urls[i]), rounds)
    print(f"zoom to 1% of {n / 1e6:g}M, HTTP /api/series:        {fmt(over_http, 50)}")


# ----------------------------------------------------------------------------------------- 3. list
def make_lab(root: Path, runs: int, series: int, steps: int = 20) -> None:
    names = [f"group_{i // 30}/metric_{i}" for i in range(series - 1)] + ["train/loss"]
    for r in range(runs):
        with StoreWriter(root / "lab" / f"run-{r:03d}", flush_rows=1_000_000) as w:
            for s in range(1, steps + 1):
                w.log(s, {name: float(r + s + i) for i, name in enumerate(names)})
            w.event("note", f"run {r} ready", step=steps)
            w.set_status("finished", steps)


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_stream(port: int, path: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path)
    return conn.getresponse()


def bench_list(root: Path, runs: int, series: int, rounds: int) -> None:
    t0 = time.perf_counter()
    make_lab(root, runs, series)
    print(f"wrote {runs} runs x {series} series in {time.perf_counter() - t0:.0f} s")
    runs_found = find_runs(root / "lab")
    every = timed(lambda i: [summarize(k, d) for k, d in sorted(runs_found.items())], max(3, rounds // 5))
    print(f"run list, {runs} runs x {series} series, every store read (a cold cache): {fmt(every, 200)}")
    with Server(root / "lab") as server:
        url = f"{server.url}/api/runs"
        assert len(json.loads(get(url))["runs"]) == runs
        warm = timed(lambda i: get(url), rounds)
        print(f"run list, {runs} runs x {series} series, GET /api/runs: {fmt(warm, 200)}")
        tabs = [open_stream(server.port, "/api/stream") for _ in range(20)]
        time.sleep(2)
        cpu0, t0 = process_cpu_seconds(server.proc.pid), time.monotonic()
        time.sleep(10)
        busy = (process_cpu_seconds(server.proc.pid) - cpu0) / (time.monotonic() - t0)
        with_tabs = timed(lambda i: get(url), rounds)
        for t in tabs:
            t.close()
        print(f"20 run-list tabs open: server CPU {100 * busy:.1f}% of a core; GET /api/runs meanwhile: {fmt(with_tabs, 200)}")


# ----------------------------------------------------------------------------------------- 4. writer
def commit_seconds(folder: Path, names: int, commits: int, tiles_kept: bool) -> float:
    from glassroom.observe import tiles

    writer = StoreWriter(folder, flush_rows=10**9, flush_seconds=1e9)
    keep = tiles.apply_dirty
    if not tiles_kept:   # the reference: no triggers marking buckets, no tile upkeep at the commit
        for trigger in ("metrics_tiles_insert", "metrics_tiles_delete", "metrics_tiles_update"):
            writer.conn.execute(f"DROP TRIGGER {trigger}")
        tiles.apply_dirty = lambda conn, removed=True: False
    try:
        values = {f"group_{i // 30}/metric_{i}": float(i) for i in range(names)}
        out = []
        for step in range(commits):
            writer.log(step, values)
            t = time.perf_counter()
            writer.flush()
            out.append(time.perf_counter() - t)
        return out
    finally:
        tiles.apply_dirty = keep
        writer.close()


def bench_writer(root: Path, rounds: int) -> None:
    for names in (100, 300):
        with_tiles, without = [], []
        for i in range(3):   # interleaved, so both see the same machine
            with_tiles += commit_seconds(root / f"t{names}-{i}", names, rounds * 5, True)
            without += commit_seconds(root / f"r{names}-{i}", names, rounds * 5, False)
        print(f"writer, one commit of {names} series: with tiles {fmt(with_tiles)}; without {fmt(without)}; "
              f"{pct(with_tiles, 50) / pct(without, 50):.1f}x")


# ----------------------------------------------------------------------------------------- 5. live
class StreamClient(threading.Thread):
    """Follows one run's stream like a page does; records when each step of `train/loss` arrived."""

    def __init__(self, port: int, run: str):
        super().__init__(daemon=True)
        self.response = open_stream(port, f"/api/stream?run={run}")
        self.arrived: dict[int, float] = {}
        self.hello = threading.Event()

    def run(self) -> None:
        event = None
        try:
            for raw in self.response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                    if event == "hello":
                        self.hello.set()
                elif line.startswith("data: ") and event == "update":
                    now = time.perf_counter()
                    loss = json.loads(line[6:]).get("series", {}).get("train/loss")
                    for step in (loss or {}).get("steps", []):
                        self.arrived.setdefault(step, now)
        except (OSError, ValueError, AttributeError):   # closed by the bench at the end
            return


def bench_live(root: Path, clients: int, rounds: int) -> None:
    if chromium_path() is None:
        print("chromium not installed (scripts/install-system.sh): live figures skipped")
        return
    run = root / "live"
    write_run(run, steps=3000)   # the standard charts of a MoE run
    with Server(root) as server, Chromium(width=1440, height=1000) as browser:
        page_load = browser.navigate(f"{server.url}/runs/live")
        print(f"page load, run page with {browser.eval('GR.charts.length')} charts: {1000 * page_load:.0f} ms")
        followers = [StreamClient(server.port, "live") for _ in range(clients - 1)]
        for f in followers:
            f.start()
        for f in followers:
            f.hello.wait(30)
        browser_latency, committed = [], {}
        with StoreWriter(run) as w:
            for i in range(rounds):
                step = 3001 + i
                time.sleep(0.2)
                w.log(step, {"train/loss": 2.0})
                w.flush()
                committed[step] = t = time.perf_counter()
                browser.wait_for(f"GR.charts[0].u.data[0].includes({step})", timeout=10, interval=0.005)
                browser_latency.append(time.perf_counter() - t)
        time.sleep(1.5)
        delivered = [f.arrived[s] - committed[s] for f in followers for s in committed if s in f.arrived]
        missing = len(followers) * len(committed) - len(delivered)
        for f in followers:
            f.response.close()
    print(f"write-to-browser latency, {clients} live clients (Chromium): {fmt(browser_latency, 1000)}")
    print(f"commit-to-delivery over {clients - 1} stream clients:        {fmt(delivered)}"
          + (f"   ({missing} deliveries missing)" if missing else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="view,zoom,list,writer,live", help="which parts, comma-separated")
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--big-points", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--series", type=int, default=300)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--tb-rounds", type=int, default=3)
    args = parser.parse_args()
    parts = set(args.only.split(","))
    known = {"view", "zoom", "list", "writer", "live"}
    if parts - known:
        parser.error(f"--only: unknown parts {sorted(parts - known)}")
    with tempfile.TemporaryDirectory(prefix="gr-bench-") as tmp:
        root = Path(tmp)
        if "view" in parts:
            bench_view(root / "view", args.points, args.rounds, args.tb_rounds)
        if "zoom" in parts:
            bench_zoom(root / "zoom", args.big_points, args.rounds)
        if "list" in parts:
            bench_list(root / "list", args.runs, args.series, args.rounds)
        if "writer" in parts:
            bench_writer(root / "writer", args.rounds)
        if "live" in parts:
            bench_live(root / "live", args.clients, args.rounds)


if __name__ == "__main__":
    main()
