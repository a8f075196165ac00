"""Task items/s of `glassroom eval` against `lm_eval --model hf` on the same exported model and tasks.

The tiny dataset (experiments/data-tiny.yaml) is built into a temporary folder with its local tasks
(`glassroom data tasks`: multiple choice with 4 choices, and the rolling bits-per-byte task). A
dense model with random weights (Llama shapes: d_model 384, 6 layers, 6 heads of which 2 KV,
SwiGLU 1024, the dataset's 2048-token vocabulary) is exported with glassroom's exporter; glassroom's
adapter (the code `glassroom eval` runs) and lm-eval's own Hugging Face model (HFLM, what
`lm_eval --model hf` builds) load that folder in fp32 on the CPU. Each round runs the same tasks
through lm_eval.simple_evaluate with each model, taking turns; items/s is task items over the
median seconds, and the scores are checked equal. Results are appended to bench/results/eval.jsonl.

    python bench/eval.py [--rounds 3] [--items 100] [--batch-size 8] [--max-length 256]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})

import torch  # noqa: E402

import glassroom  # noqa: E402
from glassroom.model.config import ModelConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "eval.jsonl"
MODEL = ModelConfig(vocab_size=2048, d_model=384, n_layers=6, n_heads=6, n_kv_heads=2, d_ff=1024, max_seq_len=512)
TASKS = {"multiple choice": ["glassroom_mc_prose", "glassroom_mc_code"], "rolling bpb": ["glassroom_bpb"]}


def prepare(tmp: Path, args) -> tuple[Path, Path]:
    from glassroom.data.build import build_dataset
    from glassroom.data.recipe import load_recipe
    from glassroom.data.tasks import write_tasks
    from glassroom.hf.export import write_folder
    from glassroom.model.transformer import build_model

    data = tmp / "tiny"
    build_dataset(load_recipe(ROOT / "experiments" / "data-tiny.yaml"), data, workers=1, log=io.StringIO())
    write_tasks(data, seq_len=args.max_length, windows=args.windows, items=args.items, seed=0)
    folder = write_folder(tmp / "hf", dataclasses.asdict(MODEL), build_model(MODEL, seed=0).state_dict(),
                          data / "tokenizer.json")
    return data / "tasks", folder


def timed(lm, tasks: list[str], manager) -> tuple[float, dict, int]:
    import lm_eval

    from glassroom.downstream.run import flatten

    start = time.perf_counter()
    out = lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=manager, bootstrap_iters=0, log_samples=False)
    seconds = time.perf_counter() - start
    items = sum(int(v["effective"]) for v in out["n-samples"].values())
    return seconds, flatten(out), items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=100, help="multiple-choice items per domain")
    parser.add_argument("--windows", type=int, default=16, help="windows of the bpb tasks per domain")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import logging

    import lm_eval
    import transformers
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from glassroom.downstream.adapter import GlassroomLM

    transformers.logging.set_verbosity_error()
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, lm-eval {lm_eval.__version__}, "
          f"{torch.get_num_threads()} threads; batch {args.batch_size}, max_length {args.max_length}, "
          f"medians of {args.rounds} interleaved rounds")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tasks_dir, folder = prepare(Path(tmp), args)
        manager = TaskManager(include_path=str(tasks_dir))
        model, tok = glassroom.load(folder)
        models = {"glassroom": GlassroomLM(model, tok, batch_size=args.batch_size, max_length=args.max_length),
                  "lm_eval hf": HFLM(pretrained=str(folder), dtype="float32", device="cpu",
                                     batch_size=args.batch_size, max_length=args.max_length)}
        params = sum(p.numel() for p in model.parameters())
        for kind, tasks in TASKS.items():
            times: dict[str, list[float]] = {k: [] for k in models}
            scores, items = {}, 0
            for k, lm in models.items():  # warm-up, and the scores compared
                _, scores[k], items = timed(lm, tasks, manager)
            for r in range(args.rounds):
                for k in (list(models) if r % 2 == 0 else list(models)[::-1]):
                    times[k].append(timed(models[k], tasks, manager)[0])
            rates = {k: items / statistics.median(v) for k, v in times.items()}
            ratio = rates["glassroom"] / rates["lm_eval hf"]
            diff = max(abs(scores["glassroom"][t][m] - v) for t, ms in scores["lm_eval hf"].items() for m, v in ms.items())
            print(f"{kind:16s} {items:4d} items: glassroom {rates['glassroom']:7.1f} items/s   lm_eval hf "
                  f"{rates['lm_eval hf']:7.1f} items/s   ratio {ratio:.2f}x   largest score difference {diff:.1e}")
            rows.append({"tasks": tasks, "kind": kind, "items": items, "params": params, "rounds": args.rounds,
                         "batch_size": args.batch_size, "max_length": args.max_length, "threads": torch.get_num_threads(),
                         "glassroom_items_per_s": rates["glassroom"], "lm_eval_hf_items_per_s": rates["lm_eval hf"],
                         "ratio": ratio, "max_score_difference": diff})
    stamp = {"torch": torch.__version__, "transformers": transformers.__version__, "lm_eval": lm_eval.__version__,
             "machine": platform.machine(), "time": time.time()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as fh:
        for row in rows:
            fh.write(json.dumps({**row, **stamp}) + "\n")
    print(f"appended to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
