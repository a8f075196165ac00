"""A few fixed prompts answered at every checkpoint, so a watcher reads how the answers change over
training (the run page's Samples panel shows them; docs/sample.md).

`CheckpointSamples(prompts, tokenizer, template, max_tokens)` encodes the prompts once; `.run(model,
device, step)` returns [{"prompt", "text"}, ...] (plus "new_tokens" and "stop": eos | max_tokens),
greedy with the KV cache (glassroom/generate.py), so the same weights always give the same text.
The model is put back in its train/eval mode afterwards and no gradient is kept.

With a chat template (a run on conversation data: a `glassroom.data.chat.ChatTemplate`, or the
dataset manifest's `chat_template` dict) each prompt is one user message, generation starts after
`<|im_start|>assistant\\n` and stops at `<|im_end|>` or EOS; the text is the answer alone. Without one
(pretraining) the text is the plain continuation of the prompt, stopping at EOS; an empty prompt
starts a new document (from EOS alone). The trainer stores the list as the journal event `samples`
at the checkpoint's step with data {"samples": [...]}.

The first argument may also be a config (`CheckpointSamples(cfg, tokenizer, template)`): the prompts
and the token budget are then its `observe.sample_prompts` and `observe.sample_tokens`, and a prompt
that leaves no room in `model.max_seq_len` is refused at once (one line naming the prompt).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from glassroom.errors import GlassroomError

DEFAULT_TOKENS = 64
WHERE = "observe.sample_prompts"


def _from_config(cfg: Any) -> tuple[list, int, Optional[int]]:
    """(prompts, max_tokens, max_seq_len) from a run config (or its observe section)."""
    observe = getattr(cfg, "observe", cfg)
    prompts = getattr(observe, "sample_prompts", None)
    max_tokens = getattr(observe, "sample_tokens", DEFAULT_TOKENS)
    model = getattr(cfg, "model", None)
    return list(prompts or []), max_tokens, getattr(model, "max_seq_len", None)


class CheckpointSamples:
    """Greedy answers of fixed prompts at a checkpoint; see the module docstring."""

    def __init__(self, prompts: Any, tokenizer, template: Any = None, max_tokens: int = DEFAULT_TOKENS,
                 max_seq_len: Optional[int] = None):
        if not isinstance(prompts, (list, tuple)):
            prompts, max_tokens, config_len = _from_config(prompts)
            max_seq_len = max_seq_len or config_len
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise GlassroomError(f"observe.sample_tokens: must be a whole number of 1 or more, got {max_tokens!r}")
        for i, prompt in enumerate(prompts):
            if not isinstance(prompt, str):
                raise GlassroomError(f"{WHERE}[{i}]: expected text, got {type(prompt).__name__}")
        self.prompts = list(prompts)
        self.max_tokens = max_tokens
        self.tokenizer = tokenizer
        self.template = self._template(template, tokenizer)
        self.ids = [self._encode(p, i) for i, p in enumerate(self.prompts)]
        if max_seq_len is not None:
            self.check_fits(max_seq_len)

    @staticmethod
    def _template(template: Any, tokenizer):
        if template is None or not isinstance(template, dict):
            return template
        from glassroom.data.chat import ChatTemplate  # lazy: numpy loads only when this runs

        return ChatTemplate.from_dict(template, tokenizer)

    def _encode(self, prompt: str, index: int) -> list[int]:
        if self.template is not None:
            return [int(i) for i in self.template.prompt([{"role": "user", "content": prompt}])]
        from glassroom.data.tokenizer import EOS_TOKEN  # lazy: numpy loads only when this runs

        self.tokenizer.encode_special_tokens = True   # as in the training data: special-token text is text
        ids = self.tokenizer.encode(prompt, add_special_tokens=False).ids if prompt else []
        if not ids:
            eos = self.tokenizer.token_to_id(EOS_TOKEN)
            if eos is None:
                raise GlassroomError(f"{WHERE}[{index}]: empty, and the tokenizer has no {EOS_TOKEN} to start from")
            ids = [eos]
        return ids

    @property
    def stop_ids(self) -> set[int]:
        if self.template is not None:
            return set(self.template.stop_ids)
        from glassroom.data.tokenizer import EOS_TOKEN  # lazy: numpy loads only when this runs

        eos = self.tokenizer.token_to_id(EOS_TOKEN)
        return set() if eos is None else {eos}

    def check_fits(self, max_seq_len: int) -> None:
        """Every prompt leaves room for at least one new token in the model's context."""
        for i, ids in enumerate(self.ids):
            if len(ids) >= max_seq_len:
                raise GlassroomError(f"{WHERE}[{i}]: {len(ids)} tokens leave no room in model.max_seq_len "
                                     f"({max_seq_len}); give a shorter prompt")

    def run(self, model, device=None, step: Optional[int] = None) -> list[dict]:
        """[{"prompt", "text", "new_tokens", "stop"}] for each prompt, in order. `device` is where the
        model's parameters are (taken from the model when None); `step` is for the caller's record."""
        from glassroom.generate import generate  # lazy: torch loads only when this runs

        if not self.prompts:
            return []
        core = getattr(model, "module", model)   # a DDP wrapper: generate with the module itself
        limit = core.cfg.max_seq_len
        self.check_fits(limit)
        budgets: dict[int, list[int]] = {}
        for i, ids in enumerate(self.ids):
            budgets.setdefault(min(self.max_tokens, limit - len(ids)), []).append(i)
        out: list[Optional[dict]] = [None] * len(self.ids)
        stops = self.stop_ids
        for budget, indices in budgets.items():
            generations = generate(core, [self.ids[i] for i in indices], budget, eos_id=stops or None)
            for i, gen in zip(indices, generations):
                new = gen.new_ids[:-1] if gen.stop_reason == "eos" else gen.new_ids
                out[i] = {"prompt": self.prompts[i], "text": self._decode(new), "new_tokens": len(new),
                          "stop": "eos" if gen.stop_reason == "eos" else "max_tokens"}
        return out  # type: ignore[return-value]

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)
