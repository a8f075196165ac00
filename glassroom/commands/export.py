"""`glassroom export RUN_DIR --out DIR`: a run's checkpoint as a Hugging Face folder (docs/export.md)."""

from __future__ import annotations

import argparse

from glassroom.commands import new_command, whole

DESCRIPTION = """\
Export a run's checkpoint as a Hugging Face folder that transformers (AutoModelForCausalLM,
AutoTokenizer), vLLM and lm-evaluation-harness load as is: config.json for the one transformers
architecture that computes exactly this model (LlamaForCausalLM, MistralForCausalLM,
Qwen3ForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM, Glm4MoeForCausalLM, Dots1ForCausalLM),
model.safetensors (sharded with model.safetensors.index.json above --max-shard-size),
tokenizer.json, tokenizer_config.json, special_tokens_map.json, generation_config.json, a model
card README.md (parameters, tokens by domain, bits per byte, downstream scores, provenance),
glassroom-export.json and .glassroom-manifest.json (every file written, with its sha256).

The checkpoint is the newest intact one (each is verified against its checksums; a damaged newer
one is named on stderr and skipped), or --step N, refused if missing or damaged. A model no
architecture expresses is refused in one line naming the option. The folder is written beside
--out and renamed into place: complete or absent. --out must be new or empty and outside the run
folder; --force replaces only an earlier glassroom export whose every file its manifest lists,
unchanged (a file of yours there, or one edited since, is refused by name, never deleted).

examples:
  glassroom export lab/runs/hero --out lab/export/hero
  glassroom export lab/runs/hero --out /tmp/hero-bf16 --step 400 --dtype bf16
"""


def register(sub) -> None:
    p = new_command(sub, "export", "a run's checkpoint as a Hugging Face folder (transformers, vLLM, lm-eval)",
                    DESCRIPTION)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to write (new or empty)")
    p.add_argument("--step", type=whole, help="the checkpoint's step (default: the newest intact one)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="tensor type on disk (default fp32)")
    p.add_argument("--max-shard-size", default="2GB", metavar="SIZE",
                   help="largest safetensors file before sharding, e.g. 2GB, 500MB (default 2GB)")
    p.add_argument("--force", action="store_true", help="replace --out if it holds an earlier glassroom export")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from glassroom.hf.export import parse_size
    from glassroom.train.run_folder import export_run

    out = export_run(args.run_dir, args.out, step=args.step, dtype=args.dtype,
                     max_shard_size=parse_size(args.max_shard_size), force=args.force)
    print(f"exported to {out}")
    return 0
