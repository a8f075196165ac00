"""Training objectives: what a step trains on and which loss it minimises (`train.task`).

The trainer runs one loop for every task (glassroom/train/trainer.py). Per step it asks the
objective for this rank's batch (`batch(step)`), calls `begin(batch)` once, then for each
micro-batch `micro(model, batch, rows, autocast, z_loss)`, which runs the model and returns the
loss terms (`Micro`). The trainer backpropagates (Micro.loss + auxiliary losses) / accum and sums
the reports. The contract of `Micro.loss`: summed over the step's micro-batches and ranks and
divided by (accum * world_size) it is `train/loss`, and its gradient, averaged over ranks by data
parallelism and over micro-batches by the trainer, is that loss's gradient.

- pretrain: next-token cross-entropy averaged over every target (the code path pretraining always had).
- sft: packed conversations (glassroom/data/packing.py); cross-entropy summed over mask-1 targets
  and divided by the number of mask-1 targets in the GLOBAL batch (every micro-batch and rank), so
  a token outside the mask contributes nothing and the batch's loss is the mean over its trained
  tokens whatever the split into micro-batches and ranks.
- dpo: glassroom/train/dpo_objective.py (DPO), its losses in dpo.py; trainer.OBJECTIVES maps train.task to its objective.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F

from glassroom.data.mixture import Mixture
from glassroom.data.packing import Packer, describe_counts, open_packed_set
from glassroom.errors import GlassroomError
from glassroom.train.evaluate import evaluate, evaluate_masked, load_masked_validation, load_validation
from glassroom.train.init import same_tokenizer
from glassroom.train.parallel import all_reduce_sum


@dataclass
class StepBatch:
    """One rank's batch of one step: tensors on the device ("tokens" always, (rows, seq_len + 1)),
    and each row's domain (index into the objective's `domains`)."""

    tensors: dict[str, torch.Tensor]
    domain_index: torch.Tensor

    @property
    def rows(self) -> int:
        return len(self.domain_index)


@dataclass
class Micro:
    """The loss terms of one micro-batch (see the module doc for `loss`)."""

    loss: torch.Tensor
    moe_loss: torch.Tensor
    z_loss: Optional[torch.Tensor]  # scaled like `loss`; the trainer multiplies by train.z_loss_coef
    row_loss: torch.Tensor  # (rows,) float64: numerators of train/loss/<domain>
    row_weight: torch.Tensor  # (rows,) float64: their denominators
    row_tokens: torch.Tensor  # (rows,) float64: real (non-padding) input tokens
    sums: dict[str, torch.Tensor] = field(default_factory=dict)  # summed over micros and ranks -> step_metrics


class Objective(ABC):
    """Base: the data, loss and evaluation of one task (subclasses: Pretrain, SFT, dpo_objective.DPO)."""

    task = "pretrain"

    def __init__(self, cfg, dataset, info, device):
        self.cfg, self.dataset, self.info, self.device = cfg, dataset, info, device
        self.domains: list[str] = []

    def start_notes(self) -> tuple[str, dict]:
        """Text appended to the start event and data stored with it."""
        return "", {}

    @abstractmethod
    def batch(self, step: int) -> StepBatch:
        """See the module doc."""

    def start(self, trainer) -> None:  # noqa: B027 - an optional hook, a no-op unless a task needs it
        """Once per process, after the resume and before any step or evaluation (dpo: the reference)."""

    def check_resume(self, run_dir: Path, step: int) -> None:  # noqa: B027 - an optional hook
        """Refuse a --resume from the checkpoint at `step` that this task cannot continue; reads only,
        before RUN_DIR is written (glassroom/train/resume.py, ResumeMixin.check_resume)."""

    def begin(self, batch: StepBatch) -> None:  # noqa: B027 - an optional hook, a no-op unless a task needs it
        """Before the micro-batches of a step (e.g. global counts)."""

    @abstractmethod
    def micro(self, model, batch: StepBatch, rows: slice, autocast, z_loss: bool) -> Micro:
        """See the module doc."""

    def step_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        return {}

    @abstractmethod
    def evaluate(self, model, micro_batch: int, autocast_dtype) -> dict[str, float]:
        """See the module doc."""


class Pretrain(Objective):
    task = "pretrain"

    def __init__(self, cfg, dataset, info, device):
        super().__init__(cfg, dataset, info, device)

        tc = cfg.train
        weights = cfg.data.weights or {
            d: float(info_["train"]["tokens"]) for d, info_ in dataset.manifest["domains"].items()
        }
        self.mixture = Mixture(dataset, weights, tc.seq_len, tc.batch_size, tc.seed, cfg.data.max_epochs)
        self.domains = self.mixture.domains
        self.validation = load_validation(dataset, dataset.domains, tc.seq_len, tc.eval_sequences)

    def batch(self, step: int) -> StepBatch:
        batch = self.mixture.batch(step, self.info.rank, self.info.world_size)
        return StepBatch({"tokens": torch.from_numpy(batch.tokens).to(self.device, torch.long)},
                         torch.from_numpy(batch.domain_index).to(self.device))

    def micro(self, model, batch: StepBatch, rows: slice, autocast, z_loss: bool) -> Micro:
        micro = batch.tensors["tokens"][rows]
        with autocast():
            out = model(micro[:, :-1], z_loss=z_loss)
        per_token = F.cross_entropy(out.logits.float().flatten(0, 1), micro[:, 1:].flatten(), reduction="none")
        n = len(micro)
        with torch.no_grad():
            row_loss = per_token.view(n, -1).mean(1).double()
        ones = torch.ones(n, dtype=torch.float64, device=micro.device)
        return Micro(per_token.mean(), out.moe_loss, out.logit_z_loss, row_loss, ones, ones * (micro.shape[1] - 1))

    def evaluate(self, model, micro_batch: int, autocast_dtype) -> dict[str, float]:
        return evaluate(model, self.validation, micro_batch, self.device, autocast_dtype, self.info)


class SFT(Objective):
    """Supervised fine-tuning on packed conversations, loss on mask-1 targets only."""

    task = "sft"

    def __init__(self, cfg, dataset, info, device):
        super().__init__(cfg, dataset, info, device)

        tc = cfg.train
        self.train_set = open_packed_set(dataset, dataset.domains, "train", tc.seq_len, tc.overlong)
        if not any(len(p.length) for p in self.train_set.parts):
            c = self.train_set.counts
            raise GlassroomError(f"train.seq_len: {tc.seq_len} leaves no conversation of {cfg.data.path} to train "
                                 f"({c['dropped']} dropped as longer, {c['dropped_empty']} with no assistant token "
                                 "within seq_len + 1 tokens); raise train.seq_len or use train.overlong: truncate")
        weights = cfg.data.weights or {
            d: float(len(p.length)) for d, p in zip(dataset.domains, self.train_set.parts) if len(p.length)
        }
        self.packer = Packer(self.train_set, weights, tc.batch_size, tc.seed)
        self.domains = self.packer.domains
        self.validation = load_masked_validation(dataset, tc.seq_len, tc.eval_sequences, tc.overlong)
        self.accum = tc.batch_size // info.world_size // tc.micro_batch_size
        self._scale = 1.0
        self._global = {"mask": 0.0, "targets": 0.0, "real": 0.0}

    def start(self, trainer) -> None:
        self.check_resume(trainer.run_dir, trainer.step)

    def check_resume(self, run_dir: Path, step: int) -> None:
        """A resumed run's data still has the tokenizer the run started with (RUN_DIR/tokenizer.json):
        data rebuilt with another one would feed the model other ids under the same numbers."""
        kept = Path(run_dir) / "tokenizer.json"
        data = Path(self.cfg.data.path).expanduser() / "tokenizer.json"
        if step > 0 and kept.is_file() and not same_tokenizer(kept, data):
            raise GlassroomError(f"data.path: {data} is not the tokenizer {run_dir} started with ({kept}); "
                                 "the data was rebuilt with another tokenizer: point data.path at data built with "
                                 "that one, or start a new run")

    def start_notes(self) -> tuple[str, dict]:
        counts = self.train_set.counts
        return "; " + describe_counts(counts, self.cfg.train.overlong), {"conversations": counts}

    def batch(self, step: int) -> StepBatch:
        rows = self.packer.batch(step, self.info.rank, self.info.world_size)
        to = lambda a, dtype: torch.from_numpy(a).to(self.device, dtype)  # noqa: E731
        return StepBatch({"tokens": to(rows.tokens, torch.long), "mask": to(rows.mask, torch.float32),
                          "segments": to(rows.segments, torch.long), "positions": to(rows.positions, torch.long)},
                         to(rows.domain_index, torch.long))

    def begin(self, batch: StepBatch) -> None:
        t = batch.tensors
        counts = torch.stack([t["mask"].sum().double(), torch.tensor(float(t["mask"].numel()), dtype=torch.float64,
                              device=self.device), (t["segments"] >= 0).sum().double()])
        all_reduce_sum(counts, self.info)
        self._global = dict(zip(("mask", "targets", "real"), counts.tolist()))
        # Each micro's sum of masked losses, times this, sums (over micros and ranks, / accum * world) to the mean.
        self._scale = self.accum * self.info.world_size / max(self._global["mask"], 1.0)

    def micro(self, model, batch: StepBatch, rows: slice, autocast, z_loss: bool) -> Micro:
        t = batch.tensors
        tokens, mask = t["tokens"][rows], t["mask"][rows]
        with autocast():
            out = model(tokens[:, :-1], segments=t["segments"][rows], positions=t["positions"][rows])
        logits = out.logits.float()
        per_token = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none").view(mask.shape)
        trained = mask > 0
        row_loss = torch.where(trained, per_token, 0.0).sum(1)  # where, not *: a NaN outside the mask stays out
        z = None
        if z_loss:
            z = torch.where(trained, torch.logsumexp(logits, dim=-1).pow(2), 0.0).sum() * self._scale
        return Micro(row_loss.sum() * self._scale, out.moe_loss, z, row_loss.detach().double(),
                     mask.sum(1).double(), (t["segments"][rows] >= 0).sum(1).double())

    def step_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        g = self._global
        return {"data/mask_share": g["mask"] / max(g["targets"], 1.0)}

    def evaluate(self, model, micro_batch: int, autocast_dtype) -> dict[str, float]:
        return evaluate_masked(model, self.validation, micro_batch, self.device, autocast_dtype, self.info)
