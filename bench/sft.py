"""Supervised fine-tuning on the conversation set: (a) the share of padding tokens with packing against
one conversation per row padded to seq_len, (b) training tokens/s of glassroom's SFT step against trl's
SFTTrainer on the same model and the same data, measured in the same run with the same thread count.

Data: `glassroom data chatset` (man pages, the standard library's docstrings, the GCIDE/WordNet
dictionaries on this machine; --max-per-source records per source) built by `glassroom data build`
with its sft.yaml recipe, or --data DIR (a built task: sft dataset).
Model: a dense Llama-shaped model (d_model 256, 4 layers, 4 heads of which 2 KV, SwiGLU 704, the
dataset's tokenizer) with random weights, written as a Hugging Face Llama folder by glassroom's
exporter (write_folder, what export_run writes). glassroom trains from it (`init: {from: FOLDER}`,
`train.task: sft`: packed rows, block-diagonal attention, loss on assistant tokens); trl loads the
same folder with transformers (fp32, sdpa) and trains on the same conversations, pre-tokenized, with
labels -100 outside glassroom's mask, so both minimise the same loss from the same weights. trl runs
without packing (its default: each batch padded to its longest conversation): trl's packing is
padding-free and keeps conversations apart only with flash attention's variable-length kernels; on
a CPU with sdpa packed conversations would attend to each other, which is not the same training.
trl's batch holds as many conversations as glassroom's rows hold real tokens, on average.

tokens/s counts real (non-padding) input tokens of a step over its wall time (data, forward,
backward, optimizer), median over the steps after the first two: glassroom's throughput/step_seconds
and data/tokens_seen from its store; trl's time between steps' ends and its non-padding
num_input_tokens_seen. glassroom's norm probes are off (observe.norms_every past the last step), as
trl has none. Results are appended to bench/results/sft.jsonl.

trl is not a glassroom dependency: install it for this bench only, `pip install trl`.

Measured 2026-11-30 on an idle 2-core machine (torch 2.13 CPU, trl 1.16, transformers 5.24), seq_len
256, 8 rows a step, the chat set at its default 600 records per source (2,244 train conversations,
mean 55 tokens): padding 4.6% packed (501 rows) against 78.7% one conversation per row (2,244 rows).
1 thread: glassroom 4,673 against trl 714 real tokens/s (6.5x); 2 threads: 8,263 against 1,272
(6.5x). trl's batches of 36 conversations are ~49% padding; first-step losses from the same weights
9.093 (glassroom) and 9.104 (trl). On the same machine loaded by other jobs the 2-thread ratio swung
between 1.6x and 17x (oversubscribed threads): measure on an idle machine.

    python bench/sft.py [--steps 12] [--rounds 2] [--seq-len 256] [--batch 8] [--threads N] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                   "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false"})

import warnings  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "sft.jsonl"
MODEL = {"d_model": 256, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "d_ff": 704}
LR = 1e-4


def build_data(tmp: Path, max_per_source: int) -> Path:
    """The chat set written and built as a task: sft dataset (the CLI, as a user runs it)."""
    for argv in (["data", "chatset", "--out", str(tmp / "chat"), "--max-per-source", str(max_per_source)],
                 ["data", "build", str(tmp / "chat" / "sft.yaml"), "--out", str(tmp / "data")]):
        done = subprocess.run([sys.executable, "-m", "glassroom", *argv], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"glassroom {' '.join(argv[:2])} failed: {done.stderr.strip()}")
    return tmp / "data"


def export_base(data: Path, seq_len: int, out: Path) -> Path:
    from glassroom.data.mixture import Dataset
    from glassroom.hf.export import write_folder
    from glassroom.model.config import model_config_from_mapping
    from glassroom.model.transformer import build_model

    mapping = {**MODEL, "vocab_size": Dataset(data).vocab_size, "max_seq_len": max(256, seq_len + 1)}
    model = build_model(model_config_from_mapping({"model": mapping}), seed=0)
    return write_folder(out, mapping, model.state_dict(), data / "tokenizer.json")


def padding(data: Path, seq_len: int) -> dict:
    from glassroom.data.mixture import Dataset
    from glassroom.data.packing import open_packed_set, padding_shares

    dataset = Dataset(data)
    packed = open_packed_set(dataset, dataset.domains, "train", seq_len)
    lengths = np.concatenate([p.length for p in packed.parts])
    return {**padding_shares(packed), "conversations": int(len(lengths)), "mean_length": float(lengths.mean()),
            "truncated": packed.counts["truncated"], "lengths": lengths}


def batch_padding(lengths: np.ndarray, per_batch: int, batches: int = 2000) -> float:
    """Padding share of random batches of `per_batch` conversations padded to their longest (trl's
    collator without packing), estimated over `batches` seeded draws."""
    rng = np.random.default_rng(0)
    draws = np.stack([rng.choice(lengths, per_batch, replace=False) for _ in range(batches)])
    return float(1 - draws.sum() / (per_batch * draws.max(axis=1)).sum())


def run_glassroom(base: Path, data: Path, tmp: Path, args, run: int = 0) -> dict:
    from glassroom.observe.store import StoreReader
    from glassroom.train.config import load_run_config
    from glassroom.train.trainer import Trainer

    config = {"init": {"from": str(base)}, "data": {"path": str(data)},
              "train": {"task": "sft", "steps": args.steps, "batch_size": args.batch, "micro_batch_size": args.batch,
                        "seq_len": args.seq_len, "lr": LR, "warmup_steps": 0, "seed": 0, "device": "cpu",
                        "checkpoint_every": args.steps, "eval_every": args.steps, "eval_sequences": 2},
              "observe": {"norms_every": args.steps + 1}}
    path = tmp / "sft.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp / f"glassroom-run-{run}"
    Trainer(load_run_config(path, []), out, quiet=True).run()
    with StoreReader(out) as reader:
        seconds = reader.series("throughput/step_seconds")[1]
        tokens = np.diff(np.concatenate([[0], reader.series("data/tokens_seen")[1]]))
        loss = reader.series("train/loss")[1]
    rates = tokens[2:] / seconds[2:]
    return {"rates": rates.tolist(), "tokens_per_step": float(tokens.mean()),
            "first_loss": float(loss[0]), "last_loss": float(loss[-1])}


def trl_rows(data: Path, seq_len: int) -> list[dict]:
    """The train split's conversations as trl's pre-tokenized records (labels -100 outside the mask)."""
    from glassroom.data.chat import Conversations
    from glassroom.data.mixture import Dataset

    rows = []
    for domain in Dataset(data).domains:
        conv = Conversations(data, domain, "train")
        for i in range(len(conv)):
            ids, mask = conv.conversation(i)
            ids, mask = ids[: seq_len + 1].tolist(), mask[: seq_len + 1]
            rows.append({"input_ids": ids, "labels": [t if m else -100 for t, m in zip(ids, mask)]})
    return rows


def run_trl(base: Path, data: Path, tmp: Path, per_batch: int, args, run: int = 0) -> dict:
    from datasets import Dataset as HFDataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class Timer(TrainerCallback):
        def __init__(self):
            self.ends, self.tokens, self.losses = [], [], []

        def on_step_end(self, targs, state, control, **kw):
            self.ends.append(time.perf_counter())
            self.tokens.append(int(state.num_input_tokens_seen))

        def on_log(self, targs, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32, attn_implementation="sdpa",
                                                 local_files_only=True)
    tok = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    config = SFTConfig(output_dir=str(tmp / f"trl-run-{run}"), max_steps=args.steps, per_device_train_batch_size=per_batch,
                       gradient_accumulation_steps=1, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
                       weight_decay=0.1, adam_beta2=0.95, max_grad_norm=1.0, logging_steps=1, save_strategy="no",
                       report_to=[], use_cpu=True, bf16=False, fp16=False, dataloader_num_workers=0, seed=0,
                       max_length=args.seq_len + 1, packing=False, include_num_input_tokens_seen="non_padding",
                       disable_tqdm=True, dataset_num_proc=None, gradient_checkpointing=False,
                       activation_checkpointing=False, pad_to_multiple_of=None)
    timer = Timer()
    trainer = SFTTrainer(model=model, args=config, train_dataset=HFDataset.from_list(trl_rows(data, args.seq_len)),
                         processing_class=tok, callbacks=[timer])
    trainer.remove_callback(PrinterCallback)   # the loss dicts on stdout: the timer keeps them
    trainer.train()
    assert not getattr(trainer.model, "is_gradient_checkpointing", False)   # trl's default recomputes activations
    seconds = np.diff(np.array(timer.ends))[1:]          # steps 3.. (each from the end of the one before)
    tokens = np.diff(np.array(timer.tokens))[1:]
    return {"rates": (tokens / seconds).tolist(), "tokens_per_step": float(np.mean(np.diff([0] + timer.tokens))),
            "first_loss": timer.losses[0] if timer.losses else None, "last_loss": timer.losses[-1] if timer.losses else None,
            "batch": per_batch}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8, help="glassroom's rows per step (default 8)")
    parser.add_argument("--max-per-source", type=int, default=600, help="chat set records per source (default 600)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each, alternating which goes first (default 2)")
    parser.add_argument("--data", type=Path, help="a built task: sft dataset instead of the chat set")
    args = parser.parse_args()
    if args.steps < 4:
        sys.exit("--steps: at least 4 (the first two steps are warm-up)")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        import transformers
        import trl
    except ImportError:
        sys.exit("this bench compares against trl: pip install trl (not a glassroom dependency)")
    warnings.filterwarnings("ignore", category=FutureWarning)   # transformers' renamed arguments
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        data = args.data or build_data(tmp, args.max_per_source)
        pad = padding(data, args.seq_len)
        print(f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}, "
              f"{torch.get_num_threads()} threads; seq_len {args.seq_len}, {args.steps} steps")
        print(f"(a) padding share over {pad['conversations']} train conversations (mean {pad['mean_length']:.0f} tokens, "
              f"{pad['truncated']} truncated): packed {pad['packed']:.1%} in {pad['rows_packed']} rows, one per row "
              f"padded to seq_len {pad['padded']:.1%} in {pad['rows_padded']} rows")
        base = export_base(data, args.seq_len, tmp / "base")
        ours = run_glassroom(base, data, tmp, args)
        per_batch = max(1, round(ours["tokens_per_step"] / pad["mean_length"]))
        theirs = run_trl(base, data, tmp, per_batch, args)
        for r in range(1, args.rounds):   # alternate which goes first: a machine getting busier hurts both
            pair = [lambda r=r: run_glassroom(base, data, tmp, args, r), lambda r=r: run_trl(base, data, tmp, per_batch, args, r)]
            more = [f() for f in (pair[::-1] if r % 2 else pair)]
            got = more[::-1] if r % 2 else more
            ours["rates"] += got[0]["rates"]
            theirs["rates"] += got[1]["rates"]
        for side in (ours, theirs):
            side["tokens_per_s"] = float(np.median(side.pop("rates")))
        lengths = pad.pop("lengths")
        theirs["padding_estimated"] = batch_padding(lengths, per_batch)
    ratio = ours["tokens_per_s"] / theirs["tokens_per_s"]
    print(f"(b) SFT tokens/s (real tokens, median of steps 3..{args.steps} of {args.rounds} runs each): glassroom {ours['tokens_per_s']:,.0f} "
          f"({args.batch} packed rows, {ours['tokens_per_step']:,.0f} tokens/step)   trl SFTTrainer "
          f"{theirs['tokens_per_s']:,.0f} ({per_batch} conversations per batch padded to the longest, about "
          f"{theirs['padding_estimated']:.0%} padding, {theirs['tokens_per_step']:,.0f} tokens/step)   ratio {ratio:.2f}x")
    print(f"    first-step loss (same weights, assistant tokens only): glassroom {ours['first_loss']:.3f}, "
          f"trl {theirs['first_loss']:.3f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as f:
        f.write(json.dumps({"seq_len": args.seq_len, "steps": args.steps, "batch": args.batch, "padding": pad,
                            "glassroom": ours, "trl_sft_trainer": theirs, "ratio": ratio, "threads": torch.get_num_threads(),
                            "model": MODEL, "torch": torch.__version__, "transformers": transformers.__version__,
                            "trl": trl.__version__, "machine": platform.machine(), "time": time.time()}) + "\n")


if __name__ == "__main__":
    main()
