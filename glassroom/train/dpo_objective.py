"""`train.task: dpo` in the trainer's one loop (glassroom/train/objectives.py): pairs, loss, evaluation.

A step's batch is train.batch_size PAIRS (micro_batch_size pairs per micro-batch); each micro-batch
runs its pairs' chosen and rejected sides in one forward (2 x micro_batch_size rows, padded at the
end to the longest). The pairs are those of glassroom.train.dpo (every domain with a data.weights
weight above zero, or all; drawn uniformly in a seeded order per epoch). `start(trainer)`, after the
resume, loads or computes the reference log-probabilities (glassroom/train/dpo_reference.py),
stores the artifact `dpo_reference` and journals one `dpo_reference` event when they are computed.

train/loss is the DPO loss (mean over the step's pairs); dpo/reward_chosen, dpo/reward_rejected,
dpo/margin and dpo/accuracy at every logged step; at each evaluation eval/dpo/loss,
eval/dpo/reward_chosen, eval/dpo/reward_rejected, eval/dpo/margin and eval/dpo/accuracy over the
held-out pairs (the first eval_sequences pairs of each domain's validation split). At step 0 the
policy is the reference, so h = 0 by definition: the held-out metrics are those of h = 0 (no
forward), the same on every device and parallelism, rather than the float noise of running the
same model in other batches than the reference's (which counted some pairs as "correct").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from glassroom.errors import GlassroomError
from glassroom.train.dpo import (SUM_NAMES, logps_of, metrics_from_sums, open_pairs, pair_indices, pair_terms,
                                 term_sums)
from glassroom.train.dpo_reference import load_or_compute, pair_logps, read_cached, reference_digest
from glassroom.train.objectives import Micro, Objective, StepBatch
from glassroom.train.parallel import all_reduce_sum


class DPO(Objective):
    task = "dpo"

    def __init__(self, cfg, dataset, info, device):
        super().__init__(cfg, dataset, info, device)
        tc = cfg.train
        weights = cfg.data.weights
        self.domains = [d for d in dataset.domains if weights is None or weights.get(d, 0) > 0]
        overlong = getattr(tc, "overlong", "truncate")
        self.train_pairs = open_pairs(dataset, self.domains, "train", tc.seq_len, overlong)
        self.heldout = open_pairs(dataset, self.domains, "validation", tc.seq_len, overlong)
        if len(self.train_pairs) == 0:
            raise GlassroomError(f"data.path: {dataset.path} has no usable train pairs "
                                 f"({self._describe(self.train_pairs.counts)}); check the data or raise train.seq_len")
        first = {}  # held-out pairs evaluated: the first eval_sequences of each domain
        for i, d in enumerate(self.heldout.domain):
            first.setdefault(int(d), []).append(i)
        self.eval_index = np.asarray(sorted(i for idx in first.values() for i in idx[: tc.eval_sequences]), dtype=np.int64)
        self.ref_train = self.ref_heldout = None
        self.eos = int(dataset.eos_id)

    def _describe(self, counts: dict) -> str:
        done = "dropped" if getattr(self.cfg.train, "overlong", "truncate") == "drop" else "truncated"
        overlong = counts["dropped_overlong"] if done == "dropped" else counts["truncated"]
        return (f"{counts['used']} of {counts['pairs']} pairs used: {overlong} {done} (longer than seq_len + 1 "
                f"tokens), {counts['dropped_empty']} dropped (no trained token left)"
                + (f", {counts['dropped_identical']} dropped (chosen and rejected the same once truncated)"
                   if counts.get("dropped_identical") else ""))

    def start_notes(self) -> tuple[str, dict]:
        return ("; " + self._describe(self.train_pairs.counts),
                {"pairs": {"train": self.train_pairs.counts, "heldout": self.heldout.counts}})

    # ------------------------------------------------------------------ reference (once, before step 1)

    def check_resume(self, run_dir: Path, step: int) -> None:
        """A resume past step 0 needs the cached reference, made for this data and base."""
        read_cached(run_dir, reference_digest(self.dataset, self.cfg), step)

    def start(self, trainer) -> None:
        """After the resume: the reference log-probabilities, computed from the model as it is now
        (the starting model, at step 0) or read back from RUN_DIR."""
        tc = self.cfg.train

        def compute():
            args = (trainer.model, None, tc.micro_batch_size, self.device, trainer.autocast_dtype, self.eos)
            train, f1 = pair_logps(args[0], self.train_pairs, *args[2:])
            held, f2 = pair_logps(args[0], self.heldout, *args[2:])
            return train, held, f1 + f2

        self._trainer = trainer  # its step: at 0 the policy is the reference (evaluate)
        self.ref_train, self.ref_heldout, meta, computed = load_or_compute(
            trainer.run_dir, reference_digest(self.dataset, self.cfg), trainer.step, compute, self.info.is_main)
        store = trainer.store
        if store is None:
            return
        artifact = {k: meta[k] for k in ("pairs", "train_pairs", "heldout_pairs", "forwards", "computed_at_step")}
        store.set_artifact("dpo_reference", artifact)
        if computed or not any(kind == "dpo_reference" for kind, _ in store.journal_from(0)):
            trainer.record_event("dpo_reference", f"reference log-probabilities of {meta['pairs']} pairs "
                                 f"({meta['train_pairs']} train, {meta['heldout_pairs']} held out) computed once from "
                                 f"the starting model in {meta['forwards']} forwards", 0, artifact)

    # ------------------------------------------------------------------ training

    def batch(self, step: int) -> StepBatch:
        tc = self.cfg.train
        index = pair_indices(len(self.train_pairs), tc.seed, step, tc.batch_size, self.info.rank, self.info.world_size)
        tensors = self._pair_tensors(self.train_pairs, index, self.ref_train)
        return StepBatch(tensors, torch.from_numpy(self.train_pairs.domain[index]).to(self.device))

    def _pair_tensors(self, pairs, index, ref) -> dict[str, torch.Tensor]:
        if ref is None:
            raise GlassroomError("task dpo: the reference log-probabilities are not loaded (Objective.start not called)")
        tokens, mask = pairs.rows(index, self.eos)
        k = len(index)
        to = lambda a, dtype: torch.from_numpy(np.ascontiguousarray(a)).to(self.device, dtype)  # noqa: E731
        return {"tokens": to(tokens[:k], torch.long), "rejected": to(tokens[k:], torch.long),
                "mask": to(mask[:k], torch.float32), "rejected_mask": to(mask[k:], torch.float32),
                "ref": to(ref[index], torch.float32), "length": to(pairs.length[index], torch.float64)}

    def _terms(self, model, t: dict, rows: slice, autocast, z_loss: bool = False):
        tokens = torch.cat([t["tokens"][rows], t["rejected"][rows]])
        mask = torch.cat([t["mask"][rows], t["rejected_mask"][rows]])
        with autocast():
            out = model(tokens[:, :-1], z_loss=False)
        logps, z = logps_of(out.logits, tokens, mask, z_loss)
        chosen, rejected = logps.view(2, -1)
        ref = t["ref"][rows]
        terms = pair_terms(chosen, rejected, ref[:, 0], ref[:, 1], self.cfg.train.dpo_beta, self.cfg.train.dpo_loss)
        return terms, out, z, tokens

    def micro(self, model, batch: StepBatch, rows: slice, autocast, z_loss: bool) -> Micro:
        terms, out, z, tokens = self._terms(model, batch.tensors, rows, autocast, z_loss)
        n = len(terms["loss"])
        real = (batch.tensors["length"][rows] - 1).sum(1)  # input tokens of both sides, padding left out
        sums = dict(zip(SUM_NAMES, term_sums(terms)))
        return Micro(terms["loss"].mean(), out.moe_loss, z, terms["loss"].detach().double(),
                     torch.ones(n, dtype=torch.float64, device=tokens.device), real, sums)

    def step_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        return metrics_from_sums(torch.tensor([float(sums[k]) for k in SUM_NAMES]), "dpo")

    # ------------------------------------------------------------------ evaluation

    @torch.no_grad()
    def evaluate(self, model, micro_batch: int, autocast_dtype) -> dict[str, float]:
        if getattr(self, "_trainer", None) is not None and self._trainer.step == 0:
            ref = torch.from_numpy(self.ref_heldout[self.eval_index]).to(self.device)
            terms = pair_terms(ref[:, 0], ref[:, 1], ref[:, 0], ref[:, 1], self.cfg.train.dpo_beta,
                               self.cfg.train.dpo_loss)
            return metrics_from_sums(term_sums(terms), "eval/dpo")
        was_training = model.training
        model.eval()
        totals = torch.zeros(len(SUM_NAMES), dtype=torch.float64, device=self.device)
        usable = len(self.eval_index) - len(self.eval_index) % self.info.world_size
        mine = self.eval_index[self.info.rank: usable: self.info.world_size]
        autocast = lambda: torch.autocast(self.device.type, dtype=autocast_dtype or torch.float32,  # noqa: E731
                                          enabled=autocast_dtype is not None)
        for first in range(0, len(mine), micro_batch):
            t = self._pair_tensors(self.heldout, mine[first: first + micro_batch], self.ref_heldout)
            terms = self._terms(model, t, slice(None), autocast)[0]
            totals += term_sums(terms)
        all_reduce_sum(totals, self.info)
        if was_training:
            model.train()
        return metrics_from_sums(totals, "eval/dpo")
