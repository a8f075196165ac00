"""A glassroom model as an lm-eval language model (lm_eval.api.model.TemplateLM).

Tokenization follows lm-eval's Hugging Face model (HFLM) on an exported folder, so both give the
same numbers: special-token text (`<|endoftext|>`) is the special token, as `transformers`
encodes it (glassroom's own document encoding treats it as text; `encode` below does not), no BOS
is added, and a (context, continuation) pair is encoded whole and split after the context's tokens
(TemplateLM._encode_pair). Sequences longer than max_length + 1 lose their left end.

- loglikelihood: pairs sorted by length, right-padded, one forward per batch of `batch_size`.
- loglikelihood_rolling: lm_eval.utils.get_rolling_token_windows with EOS as the prefix token
  and context_len 1, made disjoint, scored as loglikelihood pairs and summed per document.
- generate_until: greedy, one request at a time, with the model's KV cache when it has one
  (`model.new_cache`), else a full forward per token; stops at EOS, at a stop string (the text is
  cut before it) or after max_gen_toks tokens.

Every request's text arguments are checked to be text first (check_text): a task record whose field
a template reads as a number is one line naming the task and the document.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from glassroom.data.tokenizer import EOS_TOKEN, encode, hf_encoder  # noqa: F401  (encode: re-exported)
from glassroom.errors import GlassroomError


def check_text(requests, parts: tuple[str, ...]) -> None:
    """Each request's first len(parts) arguments are text: a record whose field a task's template
    reads as a number, a list or nothing is one line naming the task and the document, not an
    error inside the tokenizer."""
    for req in requests:
        for part, value in zip(parts, req.args):
            if not isinstance(value, str):
                raise GlassroomError(f"task {req.task_name!r}, document {req.doc_id}: its {part} is "
                                     f"{type(value).__name__} {value!r:.60}, not text; check the task's "
                                     "doc_to_text, doc_to_choice and doc_to_target against its records")


def special_ids(folder, tokenizer) -> tuple[int | None, int | None]:
    """(eos, prefix) of a Hugging Face folder as lm-eval's HFLM takes them: EOS is <|endoftext|>, else
    config.json's eos_token_id; the prefix is tokenizer_config.json's bos_token when it has one."""
    import json
    from pathlib import Path

    def read(name: str) -> dict:
        try:
            value = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    eos = tokenizer.token_to_id(EOS_TOKEN)
    if eos is None:
        value = read("config.json").get("eos_token_id")
        value = value[0] if isinstance(value, list) and value else value
        eos = value if isinstance(value, int) and not isinstance(value, bool) else None
    bos = read("tokenizer_config.json").get("bos_token")
    bos = bos.get("content") if isinstance(bos, dict) else bos
    return eos, tokenizer.token_to_id(bos) if isinstance(bos, str) else None


class GlassroomLM(TemplateLM):
    """lm-eval's model interface over (model, tokenizer) from glassroom.load."""

    def __init__(self, model, tokenizer, batch_size: int = 8, max_length: int | None = None,
                 max_gen_toks: int = 256, device: str | torch.device = "cpu", eos_id: int | None = None,
                 prefix_id: int | None = None):
        super().__init__()
        self.model = model.eval()
        self.tokenizer = tokenizer
        self._encoder = hf_encoder(tokenizer)
        self.batch_size = int(batch_size)
        self._device = torch.device(device)
        limit = int(model.cfg.max_seq_len)
        self._max_length = min(int(max_length or limit), limit)
        self.max_gen_toks = int(max_gen_toks)
        # EOS ends generation; the prefix token conditions the first token of a rolling window and an
        # empty context (HFLM: the tokenizer's BOS if it has one, else EOS). special_ids() reads them
        # from a Hugging Face folder; glassroom's data uses <|endoftext|> for both.
        self._eos = eos_id if eos_id is not None else tokenizer.token_to_id(EOS_TOKEN)
        if self._eos is None:
            raise GlassroomError(f"the tokenizer has no {EOS_TOKEN} token and no eos_token_id was given "
                                 "(a Hugging Face folder's config.json names it)")
        self._prefix = self._eos if prefix_id is None else int(prefix_id)

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def eot_token_id(self) -> int:
        return self._eos

    @property
    def prefix_token_id(self) -> int:
        return self._prefix

    def tok_encode(self, string: str, add_special_tokens=None, **kwargs) -> list[int]:
        return self._encoder.encode(string, add_special_tokens=False).ids

    def tok_decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    # ------------------------------------------------------------------ scoring

    @torch.no_grad()
    def _continuation_logprobs(self, rows: list[tuple[list[int], list[int]]]) -> list[torch.Tensor]:
        """For right-padded (inputs, continuation) rows: each continuation's log-softmax rows over the
        vocabulary, (len(continuation), vocab) fp32. Only the continuation's positions are normalised
        (log-softmax is row-wise, so the values are those of the whole sequence's)."""
        longest = max(len(inputs) for inputs, _ in rows)
        batch = torch.full((len(rows), longest), self._eos, dtype=torch.long)
        for i, (inputs, _) in enumerate(rows):
            batch[i, : len(inputs)] = torch.tensor(inputs, dtype=torch.long)
        logits = self.model(batch.to(self._device)).logits
        picked = [logits[i, len(inputs) - len(cont): len(inputs)] for i, (inputs, cont) in enumerate(rows)]
        return list(F.log_softmax(torch.cat(picked).float(), dim=-1).cpu().split([len(c) for _, c in rows]))

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        check_text(requests, ("context", "continuation"))
        # lm-eval's "Tokenizing inputs" bar would fill stderr (and a training run's log) with progress
        return super().loglikelihood(requests, disable_tqdm=True)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        """(sum of log-probabilities of the continuation, whether it is the greedy one) per request."""
        prepared = []
        for _, context_enc, continuation_enc in requests:
            whole = (list(context_enc) + list(continuation_enc))[-(self.max_length + 1):]
            # A continuation longer than max_length is scored on its last max_length tokens.
            prepared.append((whole[:-1], list(continuation_enc)[-(len(whole) - 1):]))
        order = sorted(range(len(prepared)), key=lambda i: -len(prepared[i][0]))
        results: list[tuple[float, bool]] = [(0.0, False)] * len(prepared)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start: start + self.batch_size]
            scored = self._continuation_logprobs([prepared[i] for i in chunk])
            for picked, i in zip(scored, chunk):
                target = torch.tensor(prepared[i][1], dtype=torch.long)
                ll = float(picked.gather(1, target[:, None]).sum())
                results[i] = (ll, bool((picked.argmax(-1) == target).all()))
                self.cache_hook.add_partial("loglikelihood", requests[i][0], results[i])
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        check_text(requests, ("text",))
        pieces, owners = [], []
        for index, (string,) in enumerate(req.args for req in requests):
            windows = get_rolling_token_windows(token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                                                max_seq_len=self.max_length, context_len=1)
            for context, continuation in map(make_disjoint_window, windows):
                pieces.append((None, context, continuation))
                owners.append(index)
        totals = [0.0] * len(requests)
        for owner, (ll, _) in zip(owners, self._loglikelihood_tokens(pieces)):
            totals[owner] += ll
        return totals

    # ------------------------------------------------------------------ generation

    @torch.no_grad()
    def _greedy(self, ids: list[int], max_new: int, until: list[str]) -> str:
        out: list[int] = []
        use_cache = hasattr(self.model, "new_cache")
        cache = self.model.new_cache(1, len(ids) + max_new) if use_cache else None
        step_input = ids
        for _ in range(max_new):
            x = torch.tensor([step_input], dtype=torch.long, device=self._device)
            logits = self.model(x, cache=cache).logits if use_cache else self.model(x).logits
            token = int(logits[0, -1].float().argmax())
            if token == self._eos:
                break
            out.append(token)
            text = self.tok_decode(out)
            if any(stop in text for stop in until):
                break
            step_input = [token] if use_cache else step_input + [token]
        text = self.tok_decode(out)
        for stop in until:
            text = text.split(stop)[0]
        return text

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        check_text(requests, ("context",))
        outputs = []
        for context, gen_kwargs in (req.args for req in requests):
            kwargs = dict(gen_kwargs or {})
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kwargs.get("max_gen_toks", self.max_gen_toks))
            max_new = max(1, min(max_new, self.max_length - 1))
            ids = self.tok_encode(context)[-(self.max_length - max_new):] or [self.prefix_token_id]
            text = self._greedy(ids, max_new, [s for s in until if s])
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
            outputs.append(text)
        return outputs
