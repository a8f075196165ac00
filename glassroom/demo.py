"""`glassroom demo`: the whole story end to end on one small machine.

Build the demo corpus (five real domains), train a ladder of small Mixture-of-Experts models (the
story's routing: sigmoid router balanced by its bias, a shared expert), fit it and preregister
the hero's predicted loss curve, train the hero while `glassroom serve` shows it live, publish the
static site, and print where everything is with the hero's predicted and achieved loss. The work is
the experiment experiments/demo.py run through the pipeline, so running the demo again reuses
every finished step.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from glassroom.config import load_yaml
from glassroom.errors import GlassroomError
from glassroom.ladder.rungs import NO_PREDICTION_FILE, PREDICTION_FILE
from glassroom.ladder.spec import read_spec
from glassroom.observe.store import StoreReader
from glassroom.pipeline.experiment import load_experiment
from glassroom.pipeline.runner_local import thread_share
from glassroom.pipeline.status import DONE, read_status
from glassroom.steps.atlas import atlas_step
from glassroom.steps.data import data_build_step, export_step
from glassroom.steps.ladder import ladder_steps, run_experiment
from glassroom.steps.posttrain import chat_data_step, chatset_step, finetune_step
from glassroom.web.publish import publish

# The demo's experiment files: in a checkout glassroom/experiments links to experiments/; a wheel
# carries a copy (pyproject's package data), so `glassroom demo` runs from an installed package too.
EXPERIMENTS = Path(__file__).resolve().parent / "experiments"
DEMO_TASK_ITEMS = 100  # multiple-choice items per domain (the hero scores them at its checkpoints)
TRAIN_CPUS = 1  # CPUs (threads) each rung declares; the pipeline runs as many steps at once as fit
SOLO_CPUS = 2   # CPUs (threads) of the trainings that run alone (hero, SFT, DPO); fewer on a 1-core machine


def demo_steps(experiments: Path = EXPERIMENTS) -> list:
    """The demo's steps: the corpus and its atlas, the ladder's rungs, the fit and prediction, the hero."""
    spec_path = experiments / "ladder-demo.yaml"
    spec, spec_raw = read_spec(spec_path)
    # The downstream tasks' bits-per-byte windows are the hero's own evaluation windows.
    train = spec_raw["base"]["train"]
    tasks = {"seq_len": train["seq_len"], "windows": train["eval_sequences"], "items": DEMO_TASK_ITEMS}
    data = data_build_step("demo-data", experiments / "data-demo.yaml", tasks=tasks)
    # Every rung trains on one thread (TRAIN_CPUS): on two cores two rungs at once train 1.9x faster
    # than one on two threads (too small for a second thread to help; bench/demo_threads.py). The
    # hero, SFT and DPO train alone, on two threads (SOLO_CPUS: 1.25x faster than one). A fixed count,
    # not "every core", keeps the demo's numbers the same on any machine with two cores or more.
    rungs, later = ladder_steps(spec, spec_raw, data / "dataset", with_hero=True, cpus=TRAIN_CPUS,
                                hero_cpus=SOLO_CPUS)
    hero = later[-1]
    # the story's composition page: 40 topics, published with the runs (alongside the first rungs)
    atlas = atlas_step("demo-atlas", data, k=40, cpus=1)
    return [data, atlas, *rungs, *later, export_step("hero-model", hero),
            *posttrain_steps(experiments, hero, data / "dataset" / "tokenizer.json")]


def posttrain_steps(experiments: Path, hero, tokenizer=None) -> list:
    """The hero made an assistant: the chat set, its SFT and DPO data (`tokenizer` plus the template
    tokens: the demo passes its dataset's, the file the hero copies, so they build while the hero
    trains; default the hero's own), SFT from the hero, DPO from the SFT run
    (experiments/posttrain-demo.yaml)."""
    tokenizer = hero / "tokenizer.json" if tokenizer is None else tokenizer
    where = experiments / "posttrain-demo.yaml"
    spec = load_yaml(where)
    for key in ("chatset", "sft", "dpo"):   # an edited file: one line naming it, not a KeyError
        if not isinstance(spec, dict) or not isinstance(spec.get(key), dict):
            raise GlassroomError(f"{where}: `{key}:` is missing or not a mapping; restore it from the checkout")
    try:
        chat = chatset_step("chatset", **spec["chatset"])
        sft_data = chat_data_step("chat-sft-data", chat, "sft", tokenizer=tokenizer, cpus=1)
        dpo_data = chat_data_step("chat-dpo-data", chat, "dpo", tokenizer=tokenizer, cpus=1)
        sft = finetune_step("hero-sft", spec["sft"], sft_data, base=hero, cpus=SOLO_CPUS)
        dpo = finetune_step("hero-dpo", spec["dpo"], dpo_data, base=sft, cpus=SOLO_CPUS)
    except (TypeError, ValueError) as exc:   # chatset: {max_per_source: lots}, a stray key, a wrong task
        raise GlassroomError(f"{where}: {str(exc).splitlines()[0]}") from exc
    return [chat, sft_data, sft, dpo_data, dpo]


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise GlassroomError("no free port for the dashboard")


def _start_dashboard(out: Path, port: int) -> tuple[subprocess.Popen, int]:
    port = _free_port(port)
    server = subprocess.Popen([sys.executable, "-m", "glassroom", "serve", str(out), "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return server, port


def _final(run_dir: Path, metric: str) -> Optional[float]:
    with StoreReader(run_dir) as reader:
        latest = reader.latest(metric)
    return None if latest is None else latest[1]


def _sealed(run_dir: Path) -> dict:
    """The hero's sealed prediction as its store holds it: {digest, created_iso} (empty if none)."""
    with StoreReader(run_dir) as reader:
        stored = reader.artifact("prediction") or {}
    seal = stored.get("seal") if isinstance(stored.get("seal"), dict) else {}
    return {"digest": seal.get("digest"), "created_iso": seal.get("created_iso")}


def _watch(run_dir: Path) -> dict:
    """What an outside watcher would look at first: the hero's anomalies (count, and the first one's
    step and text), for the summary's `watch:` line."""
    with StoreReader(run_dir) as reader:
        anomalies = reader.events(kinds=["anomaly"])
    first = anomalies[0] if anomalies else None
    return {"anomalies": len(anomalies), "first": None if first is None else {"id": first["id"], "step": first["step"],
                                                                             "text": first["text"]}}


def _downstream(run_dir: Path) -> dict:
    """The hero's final downstream scores of the two task groups: {name: (step, value)}."""
    out = {}
    with StoreReader(run_dir) as reader:
        for name in ("downstream/glassroom_mc/acc", "downstream/glassroom_mc/acc_norm",
                     "downstream/glassroom_bpb/bits_per_byte"):
            latest = reader.latest(name)
            if latest is not None:
                out[name] = latest
    return out


def _experts(run_dir: Path) -> dict:
    """The hero's routing at its last step, per MoE layer: load imbalance (max / mean tokens per
    expert, 1 = even) and the router bias's range; empty for a dense hero or a store without them."""
    import math
    import re

    with StoreReader(run_dir) as reader:
        layers = sorted({int(m.group(1)) for n in reader.names() if (m := re.fullmatch(r"moe/layer_(\d+)/imbalance", n))})
        rows = {}
        for layer in layers:
            latest = {k: reader.latest(f"moe/layer_{layer}/{k}") for k in ("imbalance", "bias_min", "bias_max")}
            if all(v is not None and math.isfinite(v[1]) for v in latest.values()):
                rows[layer] = latest
    if not rows:
        return {}
    return {"step": max(int(v["imbalance"][0]) for v in rows.values()),
            "imbalance": [float(rows[layer]["imbalance"][1]) for layer in sorted(rows)],
            "bias_range": [min(float(v["bias_min"][1]) for v in rows.values()),
                           max(float(v["bias_max"][1]) for v in rows.values())]}


def _first_sample(event: dict) -> Optional[dict]:
    """A samples event's first {prompt, text} when it has the trainer's shape (an old or foreign
    store may hold another: the summary leaves such an event out rather than failing at the end)."""
    data = event.get("data")
    samples = data.get("samples") if isinstance(data, dict) else None
    first = samples[0] if isinstance(samples, list) and samples else None
    if (isinstance(event.get("step"), int) and isinstance(first, dict)
            and isinstance(first.get("prompt"), str) and isinstance(first.get("text"), str)):
        return first
    return None


def _posttrain(sft_dir: Path, dpo_dir: Path) -> dict:
    """The SFT run's held-out assistant loss at step 0 (the hero) and at its end, its first sample
    then and now; the DPO run's held-out accuracy and margin at its end."""
    out: dict = {"sft": str(sft_dir), "dpo": str(dpo_dir)}
    with StoreReader(sft_dir) as reader:
        steps, values = reader.series("eval/macro/loss")
        if len(steps):
            out["sft_loss"] = {"base": [int(steps[0]), float(values[0])], "tuned": [int(steps[-1]), float(values[-1])]}
        samples = [e for e in reader.events(kinds=["samples"]) if _first_sample(e) is not None]
        if samples:
            first, last = samples[0]["data"]["samples"][0], samples[-1]["data"]["samples"][0]
            out["sample"] = {"prompt": first["prompt"], "base": [samples[0]["step"], first["text"]],
                             "tuned": [samples[-1]["step"], last["text"]]}
    with StoreReader(dpo_dir) as reader:
        out["dpo_eval"] = {k: reader.latest(f"eval/dpo/{k}") for k in ("accuracy", "margin")}
    return out


def run_demo(out: Path, port: int = 8080, serve: bool = True, log=print) -> dict:
    experiment = EXPERIMENTS / "demo.py"
    if not experiment.is_file():
        raise GlassroomError(f"{experiment}: missing; run the demo from a glassroom checkout")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    graph = load_experiment(experiment).graph(out)  # load errors (e.g. corpora not installed) come first
    hero_dir = graph.nodes["hero"].output
    rung_dirs = [n.output for n in graph if n.step.kind == "rungs"]
    server = None
    if serve:
        server, port = _start_dashboard(out, port)
        base = f"http://127.0.0.1:{port}"
        log(f"dashboard: {base}/  (the hero: {base}/runs/{hero_dir.relative_to(out)}, the rungs together: "
            f"{base}/compare?" + "&".join(f"run={d.relative_to(out)}" for d in rung_dirs + [hero_dir]) + ")")
    try:
        graph, result = run_experiment(experiment, out, jobs=os.cpu_count() or 1)
        if not result.ok:
            raise GlassroomError(f"demo: {', '.join(result.failed) or 'some steps'} failed; see their log.txt "
                                 "under " + str(out) + ", then run the demo again (finished steps are reused)")
        trained = time.time()
        site = out / "site"
        publish(out, site)
        published = time.time()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)

    fit_dir = graph.nodes["demo-fit"].output
    summary = {
        "dataset": str(graph.nodes["demo-data"].output / "dataset"),
        "rungs": [str(d) for d in rung_dirs], "ladder": str(fit_dir), "hero": str(hero_dir), "site": str(site),
        "seconds": {"train": trained - started, "publish": published - trained}, "settings": run_settings(graph),
        "stages": stage_times(graph, started, published - trained),
        **_prediction_summary(fit_dir, hero_dir),
    }
    model = graph.nodes["hero-model"].output / "model"
    summary["model"] = str(model) if model.is_dir() else None
    if "demo-atlas" in graph.nodes:
        atlas_result = graph.nodes["demo-atlas"].output / "result.json"
        info = json.loads(atlas_result.read_text()) if atlas_result.is_file() else {}
        summary["atlas"] = {"site": str(site / "atlas" / "index.html"), "k": info.get("k"),
                            "domain_purity": info.get("domain_purity")}
    summary["downstream"] = _downstream(hero_dir)
    summary["experts"] = _experts(hero_dir)
    summary["watch"] = _watch(hero_dir)
    summary["posttrain"] = _posttrain(graph.nodes["hero-sft"].output, graph.nodes["hero-dpo"].output)
    backtest = fit_dir / "backtest.json"
    if backtest.is_file():
        check = json.loads(backtest.read_text())
        summary["backtest"] = {k: check[k] for k in ("held_out", "predicted_loss", "actual_loss", "relative_error", "covered")}
        # With seeds (the spec's `seeds: K`): every seed of the held-out size, its own final and
        # error, and the seed-to-seed noise the fit measured on the other sizes.
        runs = check.get("held_out_runs") if isinstance(check.get("held_out_runs"), list) else []
        summary["backtest"]["runs"] = [{"seed": r.get("seed"), "actual_loss": r.get("actual_loss"),
                                        "relative_error": r.get("relative_error")} for r in runs if isinstance(r, dict)]
        if isinstance(check.get("noise"), dict):
            summary["backtest"]["noise"] = {k: check["noise"].get(k) for k in ("sigma", "source", "dof")}
    return summary


def _prediction_summary(fit_dir: Path, hero_dir: Path) -> dict:
    """The hero's prediction against what it reached, or (the fit failed) why there is none."""
    if not (fit_dir / PREDICTION_FILE).is_file():
        missing = json.loads((fit_dir / NO_PREDICTION_FILE).read_text())
        achieved = _final(hero_dir, missing["metric"])
        return {"metric": missing["metric"], "predicted": None, "achieved": achieved,
                "no_prediction": {"reason": missing["reason"], "way_forward": missing["way_forward"]}}
    prediction = json.loads((fit_dir / PREDICTION_FILE).read_text())
    achieved = _final(hero_dir, prediction["metric"])
    sealed = _sealed(hero_dir)
    lo, hi = prediction["final_interval"]
    return {"metric": prediction["metric"], "predicted": prediction["final_loss"], "interval": [lo, hi],
            "achieved": achieved,
            "relative_error": None if achieved is None else (prediction["final_loss"] - achieved) / achieved,
            "inside": None if achieved is None else bool(lo <= achieved <= hi),
            "preregistered": sealed["created_iso"] or prediction["created_iso"], "seal": sealed["digest"]}


def run_settings(graph) -> dict:
    """What a user needs to rerun the demo's training as it ran: each rung's and the hero's train.seed,
    the threads each training used, the user's OMP_NUM_THREADS, the CPU and the torch version (trained
    numbers differ in their last digits across thread counts and CPUs; the seeds' spread is what the
    ladder measures)."""
    import platform

    import torch  # lazy: torch loads only when this runs

    seeds = {node.step.name: node.step.config["run"]["train"].get("seed", 0) for node in graph
             if node.step.kind in ("rungs", "runs") and isinstance(node.step.config, dict)
             and isinstance(node.step.config.get("run"), dict)}
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo", encoding="utf-8")
                    if line.startswith("model name")), cpu)
    except OSError:
        pass
    solo = min(SOLO_CPUS, os.cpu_count() or 1)   # the pipeline caps a step's CPUs at the machine's
    return {"seeds": seeds, "torch_threads": int(thread_share(TRAIN_CPUS)), "solo_threads": int(thread_share(solo)),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "cpu": cpu, "torch": torch.__version__}


def _stage(node) -> str:
    """The demo stage a step belongs to (the summary's per-stage times)."""
    if node.step.kind == "rungs":
        return "rungs"
    return {"demo-data": "corpus", "demo-atlas": "atlas", "demo-fit": "fit", "hero": "hero",
            "hero-model": "export"}.get(node.step.name, "post-training")


def stage_times(graph, started: float, publish_s: float) -> list[dict]:
    """Per stage, in the demo's order: its wall-clock seconds in this invocation (from the start of its
    first step that ran to the end of its last, from each step's status.json; stages that ran side by
    side overlap), the seconds its steps ran added up (`step_seconds`), how many steps ran and how many
    were reused from an earlier invocation."""
    stages: dict[str, dict] = {}
    spans: dict[str, list[tuple[float, float]]] = {}
    for node in graph:
        status = read_status(node.output) or {}
        stage = _stage(node)
        entry = stages.setdefault(stage, {"stage": stage, "seconds": 0.0, "step_seconds": 0.0, "ran": 0, "reused": 0})
        finished = status.get("finished")
        if status.get("state") == DONE and isinstance(finished, (int, float)) and finished < started:
            entry["reused"] += 1
            continue
        entry["ran"] += 1
        took = float(status.get("duration_s") or 0.0)
        entry["step_seconds"] += took
        if isinstance(finished, (int, float)):
            spans.setdefault(stage, []).append((finished - took, finished))
    for stage, pairs in spans.items():
        stages[stage]["seconds"] = max(end for _, end in pairs) - min(start for start, _ in pairs)
    return [*stages.values(), {"stage": "publish", "seconds": publish_s, "step_seconds": publish_s, "ran": 1, "reused": 0}]


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


def format_summary(s: dict) -> str:
    lines = [
        f"dataset:  {s['dataset']}",
        f"ladder:   {len(s['rungs'])} rung runs (every seed of every rung), fit and prediction in {s['ladder']}",
    ]
    if "backtest" in s:
        b = s["backtest"]
        runs = [r for r in b.get("runs") or [] if isinstance(r.get("actual_loss"), (int, float))]
        reached = (f"the mean of its {len(runs)} seeds reached" if len(runs) > 1 else "it reached")
        lines.append(f"backtest: fitted without {b['held_out']}, predicted {b['predicted_loss']:.4f}, {reached} "
                     f"{b['actual_loss']:.4f} ({b['relative_error']:+.2%}, {'inside' if b['covered'] else 'outside'} the interval)")
        if len(runs) > 1:
            seeds = ", ".join(f"seed {r['seed']} {r['actual_loss']:.4f}" for r in runs)
            noise = b.get("noise") or {}
            measured = (f"; seed-to-seed noise {noise['sigma']:.2%} of the loss, {noise['source']} ({noise['dof']} dof)"
                        if isinstance(noise.get("sigma"), (int, float)) else "")
            lines.append(f"          its seeds: {seeds}{measured}")
    lines.append(f"hero:     {s['hero']}")
    missing = s.get("no_prediction")
    if missing:
        reached = "" if s["achieved"] is None else f"; it reached {s['metric']} {s['achieved']:.4f}"
        lines.append(f"hero {s['metric']}: no prediction (the ladder's fit failed: {missing['reason']}){reached}")
        lines.append(f"way forward: {missing['way_forward']}")
    elif s["achieved"] is not None:
        lines.append(f"hero {s['metric']}: predicted {s['predicted']:.4f} [{s['interval'][0]:.4f}, {s['interval'][1]:.4f}] "
                     f"(preregistered {s['preregistered']}), achieved {s['achieved']:.4f} "
                     f"({s['relative_error']:+.2%} off, {'inside' if s['inside'] else 'outside'} the interval)")
    scores = s.get("downstream") or {}
    if scores:
        step = max(step for step, _ in scores.values())
        shown = ", ".join(f"{name.split('/', 1)[1]} {value:.4f}" for name, (_, value) in scores.items())
        lines.append(f"downstream (step {step}): {shown}")
    experts = s.get("experts") or {}
    if experts.get("imbalance"):
        lo, hi = experts["bias_range"]
        lines.append(f"experts:  load imbalance (max / mean tokens per expert, 1 = even) by layer at step "
                     f"{experts['step']}: " + ", ".join(f"{v:.2f}" for v in experts["imbalance"])
                     + f"; router bias in [{lo:+.3f}, {hi:+.3f}] (the hero's page: expert load and router bias)")
    if s.get("model"):
        lines.append(f"model:    {s['model']} (Hugging Face folder with its card; `glassroom sample "
                     f"{s['model']} --prompt ...` writes with it)")
    post = s.get("posttrain") or {}
    if post.get("sft_loss"):
        (b_step, base), (t_step, tuned) = post["sft_loss"]["base"], post["sft_loss"]["tuned"]
        lines.append(f"sft:      {post['sft']}: held-out assistant loss {base:.4f} at step {b_step} (the hero) -> "
                     f"{tuned:.4f} at step {t_step}")
    if post.get("sample"):
        sample = post["sample"]
        lines.append(f"          {sample['prompt']!r}: step {sample['base'][0]} {sample['base'][1]!r}; "
                     f"step {sample['tuned'][0]} {sample['tuned'][1]!r}")
    accuracy, margin = ((post.get("dpo_eval") or {}).get(k) for k in ("accuracy", "margin"))
    if accuracy is not None:
        shown = "" if margin is None else f", margin {margin[1]:+.4f}"
        lines.append(f"dpo:      {post['dpo']}: held-out accuracy {accuracy[1]:.3f}{shown} at step {accuracy[0]}")
    if s.get("seal"):
        lines.append(f"sealed:   sha256 {s['seal']} (keep a copy; `glassroom ladder verify {s['hero']}` checks "
                     "that the prediction is unchanged and was made before the hero's first step)")
    atlas = s.get("atlas") or {}
    if atlas.get("k"):
        lines.append(f"atlas:    {atlas['site']} (what the corpus holds: {atlas['k']} topics, their documents and "
                     f"shares; domain purity {atlas['domain_purity']:.3f})")
    lines.append(f"site:     {s['site']}/index.html (serve it with any static file server); "
                 f"`glassroom serve {Path(s['site']).parent}` to watch again")
    lines.append(f"watch:    {s['site']}/feed.atom (Atom: anomalies, notes, the prediction leaving or entering its "
                 f"band, checkpoints, incidents), {s['site']}/ladders/index.html (the rungs, the law and the hero's "
                 f"band on a compute axis), {s['site']}/incidents.html")
    first = (s.get("watch") or {}).get("first")
    if first and first.get("step") is not None:
        lines.append(f"          the hero's first anomaly (step {first['step']}): {first['text'][:90]}; open it as an "
                     f"incident: glassroom incident open {s['hero']} --step {first['step']} --anomaly {first['id']} \"what it looks like\"")
    lines.append(f"time:     {s['seconds']['train'] / 60:.1f} min to build, train and fit; "
                 f"{s['seconds']['publish']:.0f} s to publish")
    if s.get("stages"):
        lines.append("stages:   " + ", ".join(
            f"{t['stage']} " + (f"{_clock(t['seconds'])}" if t["ran"] else "reused")
            + (f" ({t['ran']} ran, {t['reused']} reused)" if t["ran"] and t["reused"] else "")
            for t in s["stages"]))
    settings = s.get("settings") or {}
    if settings.get("seeds"):
        solo = settings.get("solo_threads", settings["torch_threads"])
        lines.append(f"settings: torch threads {settings['torch_threads']} per rung, {solo} for the hero, SFT and DPO "
                     "(your OMP_NUM_THREADS "
                     f"{settings['OMP_NUM_THREADS'] or 'unset'}), {settings['cpu']}, torch {settings['torch']}; train.seed "
                     "of each run in its config.yaml (the rungs: 0 and 1)")
    return "\n".join(lines)
