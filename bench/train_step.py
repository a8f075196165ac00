"""Training-step throughput of glassroom against Hugging Face transformers, measured in one run.

Dense: glassroom's Transformer against `LlamaForCausalLM` with identical shapes (vocab 8192, d_model
256, 6 layers, 4 heads, SwiGLU 688, untied head, sequence 256, batch 8). MoE: glassroom's MoE
against `Qwen3MoeForCausalLM` with identical shapes (16 experts top-2 of width 344, softmax router
with normalised top-k, QK-norm). Each step is forward, cross-entropy, backward, AdamW step, in
fp32 and under bf16 autocast. Variants take turns inside this process; medians are compared. Also
prints the fraction of the CPU matmul peak (measured here) that each step reaches, and what
logging one step's metrics to the run store costs relative to the step.

    pip install transformers   # bench-only dependency
    python bench/train_step.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from glassroom.model.accounting import flops_per_token
from glassroom.model.config import ModelConfig, MoEConfig
from glassroom.model.transformer import build_model
from glassroom.train.hardware import measured_cpu_peak

VOCAB, D, LAYERS, HEADS, FF, SEQ, BATCH = 8192, 256, 6, 4, 688, 256, 8
DENSE = ModelConfig(vocab_size=VOCAB, d_model=D, n_layers=LAYERS, n_heads=HEADS, d_ff=FF, max_seq_len=SEQ)
MOE = ModelConfig(vocab_size=VOCAB, d_model=D, n_layers=LAYERS, n_heads=HEADS, max_seq_len=SEQ, qk_norm=True,
                  moe=MoEConfig(n_experts=16, top_k=2, d_expert=344, router="softmax", bias_update_rate=0.0))


def hf_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=FF, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=SEQ,
                      tie_word_embeddings=False, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg)


def hf_qwen3_moe():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=FF, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=HEADS, head_dim=D // HEADS,
                         max_position_embeddings=SEQ, num_experts=16, num_experts_per_tok=2,
                         moe_intermediate_size=344, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                         tie_word_embeddings=False, attn_implementation="sdpa", router_aux_loss_coef=0.0)
    model = Qwen3MoeForCausalLM(cfg)
    with torch.no_grad():  # HF leaves some expert tensors uninitialised and the router at zero
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0, 0.02)
    return model


class Runner:
    def __init__(self, name, model, hf: bool):
        self.name, self.model, self.hf = name, model, hf
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
        self.params = sum(p.numel() for p in model.parameters())

    def step(self, tokens, autocast: bool) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            if self.hf:
                loss = self.model(input_ids=tokens[:, :-1], labels=tokens[:, :-1]).loss
            else:
                out = self.model(tokens[:, :-1])
                loss = F.cross_entropy(out.logits.float().flatten(0, 1), tokens[:, 1:].flatten()) + out.moe_loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return time.perf_counter() - start


def compare(pair: list[Runner], tokens, autocast: bool, rounds: int, flops: float, peak: float) -> None:
    times = {r.name: [] for r in pair}
    for r in pair:
        r.step(tokens, autocast), r.step(tokens, autocast)
    for i in range(rounds):
        for r in (pair if i % 2 == 0 else pair[::-1]):
            times[r.name].append(r.step(tokens, autocast))
    label = "bf16 autocast" if autocast else "fp32"
    n_tokens = tokens.shape[0] * (tokens.shape[1] - 1)
    rates = {}
    for r in pair:
        rates[r.name] = n_tokens / statistics.median(times[r.name])
        print(f"  {label:13s} {r.name:28s} {rates[r.name]:8,.0f} tok/s   {rates[r.name] * flops / peak:5.1%} of the "
              f"{'bf16' if autocast else 'fp32'} matmul peak")
    a, b = pair
    print(f"  {label:13s} {a.name} / {b.name}: {rates[a.name] / rates[b.name]:.2f}x tokens/s")


def store_overhead(step_seconds: float) -> None:
    """What logging ~100 metrics (a rich step of a 6-layer MoE) costs, against one training step."""
    from glassroom.observe.store import StoreWriter

    with tempfile.TemporaryDirectory() as folder:
        writer = StoreWriter(folder)
        values = {f"metric/{i}": float(i) for i in range(100)}
        start = time.perf_counter()
        steps = 2000
        for s in range(steps):
            writer.log(s, values)
            writer.log_vector(s, "moe/layer_1/tokens_per_expert", list(range(16)))
        writer.close()
        per_step = (time.perf_counter() - start) / steps
    print(f"run store: logging 100 scalars + 1 vector costs {per_step * 1e3:.3f} ms per step = "
          f"{per_step / step_seconds:.3%} of a {step_seconds * 1e3:.0f} ms training step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
    peaks = {False: measured_cpu_peak(None), True: measured_cpu_peak(torch.bfloat16)}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; batch {BATCH} x {SEQ} tokens; "
          f"measured matmul peak fp32 {peaks[False] / 1e9:.0f} GFLOP/s, bf16 {peaks[True] / 1e9:.0f} GFLOP/s")
    for title, cfg, hf_factory, hf_name in (("dense", DENSE, hf_llama, "transformers LlamaForCausalLM"),
                                            ("MoE", MOE, hf_qwen3_moe, "transformers Qwen3MoeForCausalLM")):
        ours = Runner(f"glassroom {title}", build_model(cfg, seed=0), hf=False)
        theirs = Runner(hf_name, hf_factory(), hf=True)
        print(f"{title}: glassroom {ours.params:,} parameters, {hf_name} {theirs.params:,}")
        flops = flops_per_token(cfg, SEQ)
        for autocast in (False, True):
            compare([ours, theirs], tokens, autocast, args.rounds, flops, peaks[autocast])
    step_seconds = statistics.median(Runner("dense", build_model(DENSE), False).step(tokens, True) for _ in range(3))
    store_overhead(step_seconds)


if __name__ == "__main__":
    main()
