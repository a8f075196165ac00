"""Training-step tokens/s and MFU on one GPU for a ~1B dense and an MoE config (bench/gpu.sh runs it).

Each config: build the model in fp32 on the GPU, AdamW (fused), bf16 autocast, optional
torch.compile of every block, a few warm-up steps, then timed steps on random tokens (speed does
not depend on the text). MFU uses glassroom's FLOPs per token (docs/plan.md) over the data-sheet
dense bf16 peak of the GPU (glassroom.model.accounting.GPU_PEAK_BF16).

    python bench/gpu_throughput.py [--steps 10] [--compile]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from glassroom.model.accounting import count_params, flops_per_token
from glassroom.model.config import ModelConfig, MoEConfig
from glassroom.model.transformer import build_model
from glassroom.train.hardware import peak_flops
from glassroom.units import model_name

SEQ = 2048
CONFIGS = {
    # ~1.2B dense: Llama-like proportions.
    "dense-1b": (ModelConfig(vocab_size=32768, d_model=2048, n_layers=20, n_heads=16, n_kv_heads=8, d_ff=5632,
                             max_seq_len=SEQ), 8),
    # MoE with ~0.3B active of ~2.3B: 64 experts top-8 + 1 shared, the first layer dense.
    "moe-64e": (ModelConfig(vocab_size=32768, d_model=1024, n_layers=16, n_heads=16, n_kv_heads=8, d_ff=2816,
                            max_seq_len=SEQ, qk_norm=True,
                            moe=MoEConfig(n_experts=64, top_k=8, d_expert=512, n_shared_experts=1,
                                          first_dense_layers=1)), 8),
}


def measure(name: str, cfg: ModelConfig, batch: int, steps: int, compile_blocks: bool) -> dict:
    device = torch.device("cuda")
    model = build_model(cfg, seed=0, device=device)
    if compile_blocks:
        for block in model.blocks:
            block.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, cfg.vocab_size, (batch, SEQ + 1), device=device)
    times = []
    for i in range(steps + 3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(tokens[:, :-1])
            loss = F.cross_entropy(out.logits.float().flatten(0, 1), tokens[:, 1:].flatten()) + out.moe_loss
        loss.backward()
        model.update_router_biases()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - start)
    times.sort()
    median = times[len(times) // 2]
    tok_s = batch * SEQ / median
    counts = count_params(cfg)
    peak = peak_flops(device, torch.bfloat16)
    result = {"config": name, "model": model_name(counts.total, counts.active), "batch": batch, "seq": SEQ,
              "compile": compile_blocks, "step_ms": median * 1e3, "tokens_per_s": tok_s,
              "mfu": tok_s * flops_per_token(cfg, SEQ) / peak, "peak_tflops": peak / 1e12,
              "max_memory_gb": torch.cuda.max_memory_allocated() / 1e9}
    del model, opt
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, (cfg, batch) in CONFIGS.items():
        print(json.dumps(measure(name, cfg, batch, args.steps, args.compile)), flush=True)


if __name__ == "__main__":
    main()
