"""Generation speed of `glassroom sample` against transformers' `generate` on the same exported model.

A dense model (Llama shapes: vocab 8192, d_model 384, 6 layers, 6 heads of which 2 KV, SwiGLU 1024;
~16M parameters) and an MoE (the same attention, 16 experts top-2 of width 256, one shared expert,
the first layer dense, sigmoid router; ~35M total) are made with random weights, exported with
glassroom's exporter to Hugging Face folders (LlamaForCausalLM, Glm4MoeForCausalLM), and both
libraries load the same folder in fp32 on the CPU. Each round continues the same 64-token prompt
greedily for 128 new tokens (EOS ignored) with glassroom's generation (the call `glassroom sample`
makes, KV cache included) and with `model.generate(do_sample=False)`; the two take turns, the
medians are compared, and the greedy tokens are checked equal. Results are appended to
bench/results/sample.jsonl.

    python bench/sample.py [--rounds 7] [--new-tokens 128] [--threads N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path

os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})

import torch  # noqa: E402

import glassroom  # noqa: E402
from glassroom.data.tokenizer import save_tokenizer, train_tokenizer  # noqa: E402
from glassroom.generate import generate  # noqa: E402
from glassroom.hf.export import write_folder  # noqa: E402
from glassroom.model.config import ModelConfig, MoEConfig  # noqa: E402
from glassroom.model.transformer import build_model  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "sample.jsonl"
DENSE = ModelConfig(vocab_size=8192, d_model=384, n_layers=6, n_heads=6, n_kv_heads=2, d_ff=1024, max_seq_len=512)
MOE = dataclasses.replace(DENSE, moe=MoEConfig(n_experts=16, top_k=2, d_expert=256, n_shared_experts=1,
                                               first_dense_layers=1))
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def tokenizer_file(folder: Path) -> tuple[Path, str]:
    """A byte-level BPE of 8192 tokens trained on stdlib sources, and a text to prompt with."""
    texts = [p.read_text(errors="replace") for p in sorted((STDLIB / "email").glob("*.py"))]
    texts += [p.read_text(errors="replace") for p in sorted((STDLIB / "json").glob("*.py"))]
    path = folder / "tokenizer.json"
    save_tokenizer(train_tokenizer(texts, 8192), path)
    return path, texts[-1]


def export(cfg: ModelConfig, tokenizer: Path, out: Path) -> Path:
    model = build_model(cfg, seed=0)
    return write_folder(out, dataclasses.asdict(cfg), model.state_dict(), tokenizer)


def hf_generate(model, ids: list[int], new: int) -> tuple[list[int], float]:
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=False, max_new_tokens=new, eos_token_id=None, pad_token_id=0)
    inputs = torch.tensor([ids])
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), generation_config=config)
    return out[0, len(ids):].tolist(), time.perf_counter() - start


def ours_generate(model, ids: list[int], new: int) -> tuple[list[int], float]:
    start = time.perf_counter()
    [out] = generate(model, [ids], new)
    return out.new_ids, time.perf_counter() - start


def bench(name: str, cfg: ModelConfig, tokenizer: Path, text: str, tmp: Path, args) -> dict:
    from transformers import AutoModelForCausalLM

    folder = export(cfg, tokenizer, tmp / name)
    ours, tok = glassroom.load(folder)
    theirs = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True).eval()
    tok.encode_special_tokens = True
    ids = tok.encode(text, add_special_tokens=False).ids[:64]
    times: dict[str, list[float]] = {"glassroom": [], "transformers": []}
    runs = {"glassroom": lambda: ours_generate(ours, ids, args.new_tokens),
            "transformers": lambda: hf_generate(theirs, ids, args.new_tokens)}
    tokens = {key: run()[0] for key, run in runs.items()}  # warm-up, and the equality check
    for r in range(args.rounds):
        for key in (("glassroom", "transformers") if r % 2 == 0 else ("transformers", "glassroom")):
            times[key].append(runs[key]()[1])
    params = sum(p.numel() for p in ours.parameters())
    rates = {key: args.new_tokens / statistics.median(values) for key, values in times.items()}
    ratio = rates["glassroom"] / rates["transformers"]
    same = tokens["glassroom"] == tokens["transformers"]
    print(f"{name:6s} {params / 1e6:5.1f}M ({type(theirs).__name__}): glassroom {rates['glassroom']:7.1f} tokens/s   "
          f"transformers {rates['transformers']:7.1f} tokens/s   ratio {ratio:.2f}x   greedy tokens equal: {same}")
    return {"config": name, "params": params, "hf_class": type(theirs).__name__, "prompt_tokens": len(ids),
            "new_tokens": args.new_tokens, "rounds": args.rounds, "threads": torch.get_num_threads(),
            "glassroom_tokens_per_s": rates["glassroom"], "transformers_tokens_per_s": rates["transformers"],
            "ratio": ratio, "greedy_equal": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--only", choices=("dense", "moe"), help="one of the two models")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()  # no notes about max_length in generation_config.json
    transformers.utils.logging.disable_progress_bar()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads; "
          f"64-token prompt, {args.new_tokens} new tokens greedy, medians of {args.rounds} interleaved rounds")
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, text = tokenizer_file(Path(tmp))
        rows = [bench(name, cfg, tokenizer, text, Path(tmp), args)
                for name, cfg in (("dense", DENSE), ("moe", MOE)) if args.only in (None, name)]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as f:
        for row in rows:
            f.write(json.dumps({**row, "torch": torch.__version__, "transformers": transformers.__version__,
                                "machine": platform.machine(), "time": time.time()}) + "\n")


if __name__ == "__main__":
    main()
