"""`glassroom sample PATH --prompt TEXT`: read what a model writes, from a run folder or a Hugging
Face folder, with the KV cache of glassroom/generate.py; greedy by default. `--chat` puts each prompt
in the model's chat template as a user message and prints the assistant's answer alone."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import glassroom
from glassroom.commands import new_command, number, seed, whole
from glassroom.errors import GlassroomError

DESCRIPTION = """\
Continue a prompt with a trained model: PATH is a run folder (its newest intact checkpoint, or
--step) or a Hugging Face folder (one written by `glassroom export`, or a published one of a
supported architecture). The model runs in fp32 on the CPU (or --device cuda) with a KV cache.

Greedy by default (--temperature 0): the same output as transformers'
`generate(do_sample=False)` on the exported folder, token for token. With --temperature T > 0 the
next token is drawn from softmax(logits / T), restricted by --top-p to the smallest set of most
likely tokens whose probability reaches P, with a generator seeded by --seed: the same command
prints the same text.

The prompt is encoded as plain text (no BOS; special-token text is ordinary text). An empty
prompt starts from the document separator <|endoftext|>, as every document in the training data
does. Generation stops at <|endoftext|> (unless --ignore-eos) or after --max-new-tokens; the
prompt and the new tokens must fit in the model's max_seq_len.

--chat: the prompt is one user message (after --system TEXT, if given) in the model's chat
template: a run folder's dataset manifest `chat_template` (or the template tokens of the run's own
tokenizer.json), a Hugging Face folder's tokenizer_config.json `chat_template`. Generation starts
after `<|im_start|>assistant` and stops at <|im_end|> or the end token; only the answer is printed.
A model without a chat template (a pretrained base) is refused.

--prompt may be given several times: each prompt runs on its own (with --chat, its own
conversation), printed in order, separated by a blank line.

Prints the prompt followed by the completion (with --chat, the answer alone), and one line of
statistics on stderr; --json prints one object per prompt instead (one per line): path, step,
prompt, completion, tokens (prompt and new ids), prompt_tokens, new_tokens (ids), stop_reason
(eos | max_new_tokens), seconds, tokens_per_s, chat, system, and the options.

examples:
  glassroom sample lab/runs/hero --prompt "def parse_args("
  glassroom sample lab/export/hero --prompt "In the beginning" --temperature 0.8 --top-p 0.95 --seed 1
  glassroom sample lab/runs/hero --step 400 --prompt "" --max-new-tokens 128 --json
  glassroom sample lab/runs/hero-sft --chat --prompt "What does ls do?" --prompt "Define: ephemeral"
"""


def register(sub) -> None:
    p = new_command(sub, "sample", "continue a prompt with a trained model (KV cache; greedy or sampled)",
                    DESCRIPTION)
    p.add_argument("path", metavar="PATH", help="a run folder or a Hugging Face folder")
    p.add_argument("--prompt", required=True, action="append",
                   help="the text to continue (empty: start a new document); with --chat, the user's message; "
                        "repeat it for several prompts, each run on its own")
    p.add_argument("--chat", action="store_true",
                   help="apply the model's chat template: the prompt is a user message, print the answer alone")
    p.add_argument("--system", metavar="TEXT", help="with --chat: a system message before the user's")
    p.add_argument("--max-new-tokens", type=whole, default=64, metavar="N", help="at most N new tokens (default 64)")
    p.add_argument("--temperature", type=number, default=0.0, metavar="T",
                   help="0 is greedy (default); above 0 samples from softmax(logits / T)")
    p.add_argument("--top-p", type=number, default=1.0, metavar="P",
                   help="sample from the most likely tokens whose probability reaches P, in (0, 1] (default 1)")
    p.add_argument("--seed", type=seed, default=0, metavar="S", help="seed of the sampling generator, 0 to 2**64 - 1 (default 0)")
    p.add_argument("--step", type=whole, metavar="N", help="a run folder's checkpoint at step N (default: newest intact)")
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at <|endoftext|>")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the model runs (default cpu)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from glassroom.generate import check_options

    check_options(args.max_new_tokens, args.temperature, args.top_p, args.seed)
    if args.system is not None and not args.chat:
        raise GlassroomError("--system: only with --chat (a system message belongs to a chat template)")
    results = sample_many(args.path, args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                          top_p=args.top_p, seed=args.seed, step=args.step, ignore_eos=args.ignore_eos,
                          device=args.device, chat=args.chat, system=args.system)
    for i, result in enumerate(results):
        if args.json:
            print(json.dumps(result), flush=True)
            continue
        if i:
            print()
        print(result["completion"] if args.chat else result["prompt"] + result["completion"], flush=True)
        print(f"{len(result['new_tokens'])} new tokens in {result['seconds']:.2f} s "
              f"({result['tokens_per_s']:.1f} tokens/s), stopped at {result['stop_reason']}", file=sys.stderr)
    return 0


def sample(path: str, prompt: str, **options) -> dict:
    """What `glassroom sample` prints with --json, as a dict (the library call the benchmark times)."""
    return sample_many(path, [prompt], **options)[0]


def _utf8(text: str, option: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # bytes that are not UTF-8 reach argv as lone surrogates
        raise GlassroomError(f"{option}: not valid UTF-8 text (position {exc.start}); "
                             f"give the {option.lstrip('-')} as UTF-8") from None


def sample_many(path: str, prompts: list[str], *, max_new_tokens: int = 64, temperature: float = 0.0,
                top_p: float = 1.0, seed: int = 0, step: int | None = None, ignore_eos: bool = False,
                device: str = "cpu", chat: bool = False, system: str | None = None) -> list[dict]:
    """One --json dict per prompt, each prompt run on its own (the model is loaded once)."""
    import torch

    from glassroom.generate import check_length

    if device == "cuda" and not torch.cuda.is_available():
        raise GlassroomError("--device cuda: no CUDA device is available here; use --device cpu")
    for prompt in prompts:
        _utf8(prompt, "--prompt")
    if system is not None:
        _utf8(system, "--system")
    model, tok = glassroom.load(path, step=step)
    model.to(device)
    tok.encode_special_tokens = True
    eos = _eos_id(path, tok)
    if chat:
        from glassroom.commands.sample_chat import chat_encoder

        encode, stops = chat_encoder(Path(path), tok, eos)
    else:
        encode, stops = None, {eos} - {None}
    results = []
    for prompt in prompts:
        if chat:
            ids = encode(([{"role": "system", "content": system}] if system is not None else [])
                         + [{"role": "user", "content": prompt}])
        else:
            ids = tok.encode(prompt, add_special_tokens=False).ids if prompt else []
        if not ids:
            if eos is None:
                raise GlassroomError(f"--prompt: empty, and {path}'s tokenizer has no end-of-text token to start from")
            ids = [eos]
        check_length(len(ids), max_new_tokens, model.cfg.max_seq_len)
        results.append(_one(path, tok, model, prompt, ids, None if ignore_eos else stops or None,
                            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed,
                            step=step, ignore_eos=ignore_eos, device=device, chat=chat, system=system))
    return results


def _one(path, tok, model, prompt, ids, stops, **options) -> dict:
    from glassroom.generate import generate

    [out] = generate(model, [ids], options["max_new_tokens"], options["temperature"], options["top_p"],
                     options["seed"], stops)
    text_ids = out.new_ids[:-1] if out.stop_reason == "eos" else out.new_ids
    step = options.pop("step")
    return {
        "path": str(path), "step": step, "prompt": prompt,
        "completion": tok.decode(text_ids, skip_special_tokens=False),
        "tokens": out.prompt_ids + out.new_ids, "prompt_tokens": out.prompt_ids, "new_tokens": out.new_ids,
        "stop_reason": out.stop_reason, "seconds": out.seconds,
        "tokens_per_s": len(out.new_ids) / out.seconds if out.seconds > 0 else 0.0,
        **options,
    }


def _eos_id(path: str, tok) -> int | None:
    """<|endoftext|> (the separator of glassroom's data), else a Hugging Face folder's eos_token_id."""
    from pathlib import Path

    from glassroom.data.tokenizer import EOS_TOKEN

    eos = tok.token_to_id(EOS_TOKEN)
    if eos is not None:
        return eos
    config = Path(path) / "generation_config.json"
    try:
        value = json.loads(config.read_text()).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return None
    value = value[0] if isinstance(value, list) and value else value
    return value if isinstance(value, int) else None
