"""Text generation with the model's KV cache: greedy or sampled (temperature, top-p), seeded.

`generate(model, prompts, ...)` takes token ids (one list per prompt), prefills each prompt in one
forward, then adds one token at a time against the cache. Temperature 0 is greedy (the first
highest logit, as `torch.argmax` and `transformers` pick). With a temperature the logits are
divided by it (in float64, so that any positive temperature, however small, is a valid
distribution), top-p keeps the smallest set of most likely tokens whose probability reaches p (the
most likely token always stays), and one token is drawn with a generator seeded by `seed`
(0 to 2**64 - 1), so the same call gives the same text.
A prompt stops at `eos_id` (one id, or several: a chat model stops at `<|im_end|>` or EOS; the stop
id is kept as its last new token) or after `max_new_tokens`.
Prompts of equal length run as one batch; a finished prompt of a batch waits for the others.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch

from glassroom.errors import GlassroomError


@dataclass
class Generation:
    prompt_ids: list[int]
    new_ids: list[int]            # ends with the EOS id when stop_reason is "eos"
    stop_reason: str              # "eos" or "max_new_tokens"
    seconds: float                # wall time of this prompt's batch: prefill and every step


SEED_LIMIT = 2**64  # torch.Generator.manual_seed takes 0 .. 2**64 - 1


def check_options(max_new_tokens: int, temperature: float, top_p: float, seed: int = 0) -> None:
    """One line naming the option for a value generation cannot use."""
    if max_new_tokens < 1:
        raise GlassroomError(f"--max-new-tokens: must be 1 or more, got {max_new_tokens}")
    if not math.isfinite(temperature) or temperature < 0:
        raise GlassroomError(f"--temperature: must be 0 (greedy) or positive, got {temperature}")
    if not (0 < top_p <= 1):
        raise GlassroomError(f"--top-p: must be in (0, 1], got {top_p}")
    if not 0 <= seed < SEED_LIMIT:
        raise GlassroomError(f"--seed: must be between 0 and 2**64 - 1, got {seed}")


def check_length(prompt_len: int, max_new_tokens: int, max_seq_len: int) -> None:
    """The prompt and the new tokens must fit in the model's context; one line saying what fits."""
    if prompt_len >= max_seq_len:
        raise GlassroomError(
            f"--prompt: {prompt_len} tokens leave no room in the model's max_seq_len of {max_seq_len}; "
            "give a shorter prompt"
        )
    if prompt_len + max_new_tokens > max_seq_len:
        raise GlassroomError(
            f"--max-new-tokens: {prompt_len} prompt tokens + {max_new_tokens} new tokens are more than the "
            f"model's max_seq_len of {max_seq_len}; ask for at most {max_seq_len - prompt_len}"
        )


def pick_next(
    logits: torch.Tensor, temperature: float, top_p: float, generator: Optional[torch.Generator]
) -> torch.Tensor:
    """Next token ids (batch,) from last-position logits (batch, vocab)."""
    if temperature == 0:
        return torch.argmax(logits, dim=-1)
    # float64: a temperature below float32's smallest number (1e-46) or a top_p that rounds to 0 in
    # float32 would otherwise give 0/0 or drop every token.
    logits = logits.double()
    scaled = (logits - logits.max(dim=-1, keepdim=True).values) / temperature
    probs = torch.softmax(scaled, dim=-1)
    if top_p < 1:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        # Drop a token when the tokens more likely than it already reach top_p (the first always stays).
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop = before >= top_p
        drop[..., 0] = False
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        choice = torch.multinomial(sorted_probs, 1, generator=generator)
        return order.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def generate(
    model,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    eos_id: Union[int, Sequence[int], None] = None,
) -> list[Generation]:
    """One Generation per prompt, in the order given. The model runs in eval mode (its mode is
    restored after)."""
    check_options(max_new_tokens, temperature, top_p, seed)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise GlassroomError("generate: every prompt needs at least one token (start from the EOS id)")
    for prompt in prompts:
        check_length(len(prompt), max_new_tokens, model.cfg.max_seq_len)
    stops = _stop_set(eos_id)
    by_length: dict[int, list[int]] = {}
    for index, prompt in enumerate(prompts):
        by_length.setdefault(len(prompt), []).append(index)
    results: list[Optional[Generation]] = [None] * len(prompts)
    was_training = model.training
    model.eval()
    try:
        for indices in by_length.values():
            batch = [list(map(int, prompts[i])) for i in indices]
            for i, generation in zip(indices, _generate_batch(model, batch, max_new_tokens, temperature,
                                                              top_p, seed, stops)):
                results[i] = generation
    finally:
        model.train(was_training)
    return results  # type: ignore[return-value]


def _stop_set(eos_id) -> frozenset[int]:
    """The stop ids as a set: none, one id, or several."""
    if eos_id is None:
        return frozenset()
    if hasattr(eos_id, "__iter__"):
        return frozenset(int(i) for i in eos_id)
    return frozenset((int(eos_id),))


def _generate_batch(model, prompts, max_new_tokens, temperature, top_p, seed, stops) -> list[Generation]:
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if temperature > 0 else None
    start = time.perf_counter()
    steps = []
    with torch.inference_mode():
        ids = torch.tensor(prompts, dtype=torch.long, device=device)
        cache = model.new_cache(len(prompts), ids.shape[1] + max_new_tokens)
        logits = model(ids, cache=cache).logits[:, -1]
        done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
        stop_ids = torch.tensor(sorted(stops), dtype=torch.long, device=device)
        for step in range(max_new_tokens):
            token = pick_next(logits, temperature, top_p, generator)
            steps.append(token)
            if stops:
                done |= torch.isin(token, stop_ids)
                if bool(done.all()):
                    break
            if step + 1 < max_new_tokens:
                logits = model(token[:, None], cache=cache).logits[:, -1]
        new = torch.stack(steps, dim=1).tolist()
    seconds = time.perf_counter() - start
    results = []
    for prompt, row in zip(prompts, new):
        end = next((i for i, t in enumerate(row) if t in stops), None)
        if end is not None:
            results.append(Generation(prompt, row[: end + 1], "eos", seconds))
        else:
            results.append(Generation(prompt, row, "max_new_tokens", seconds))
    return results
