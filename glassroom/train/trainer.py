"""The training loop: the one place that orders forward, backward, step, measure, checkpoint.

One optimizer step: for each micro-batch of this rank's slice of the global batch, forward under
autocast, the objective's loss (train.task, glassroom/train/objectives.py: next-token cross-entropy
for pretraining, masked cross-entropy on packed conversations for sft) + z-loss + MoE auxiliary
losses, backward (gradient sync on the last
micro-batch only); then sum the tokens each expert received across micro-batches and ranks and move
the router biases; clip; skip the step if the loss or gradient is not finite; optimizer step at the
lr of the schedule. Then measure (loss, lr, norms, throughput, MFU, tokens per domain, router
statistics) into the run store, evaluate and checkpoint on their intervals.

Everything a resumed run needs is in the checkpoint or is a pure function of the step (the batch,
the lr), so a run killed at any point and resumed continues bit for bit on the same machine.
"""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Optional

import torch

from glassroom.downstream.run import metric_values, summary
from glassroom.errors import GlassroomError
from glassroom.model.accounting import count_params, flops_per_token
from glassroom.model.transformer import build_model
from glassroom.observe import record
from glassroom.observe.anomalies import AnomalyObserver
from glassroom.observe.prediction import BandWatcher
from glassroom.observe.store import StoreReader, StoreWriter, store_path
from glassroom.train import activation_checkpointing, checkpoint as ckpt, parallel, preflight, stopping
from glassroom.train.config import RunConfig
from glassroom.train.dpo_objective import DPO
from glassroom.train.eval_tasks import TrainingTasks
from glassroom.train.expert_parallel import check_layout
from glassroom.train.hardware import autocast_dtype_for, peak_flops, resolve_device
from glassroom.train.init import check_init_weights, load_init_weights
from glassroom.train.launch import RankNote, Restart, launched_by_ray
from glassroom.train.objectives import SFT, Objective, Pretrain
from glassroom.train.optim import build_optimizer, lr_multiplier, set_lr
from glassroom.train.probes import norms_by_group, router_metrics, snapshot
from glassroom.train.resume import ResumeMixin, TrainState
from glassroom.train.run_dir import before_start, close_run_lock, lock_run_dir, prepare_run_dir, undo_start
from glassroom.train.samples import CheckpointSamples
from glassroom.train.sinks import mirrors
from glassroom.units import model_name

# Testing aid, faults planted at logged steps: "nan@3,nan@4" makes those steps' loss NaN;
# "router_bias@500:0.5" shifts every router bias by up to +-0.5 at step 500 (as a balancer bug
# would); "bad_batch@300" replaces that step's tokens with uniform random ones (a corrupt batch);
# "lr@50:1000" multiplies that step's learning rate (a bad schedule), spiking the loss after it;
# "kill_after_checkpoint@8" SIGKILLs the process right after step 8's checkpoint is renamed into
# place (before its event and retention); "kill@7" SIGKILLs it at the end of step 7 (after its
# evaluation and checkpoint, if any): the drills for "no metric lost whatever the moment".
# "kill@7:1" kills rank 1 only (a worker lost mid-run). Kills fire on a launch's first attempt only:
# an engine's automatic restart (glassroom/train/launch.py) passes the step again unharmed.
FAULT_ENV = "GLASSROOM_FAULTS"
FAULT_KINDS = ("nan", "router_bias", "bad_batch", "lr", "kill", "kill_after_checkpoint")


def parse_faults(text: str) -> dict[int, list[tuple[str, float]]]:
    faults: dict[int, list[tuple[str, float]]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, _, rest = item.partition("@")
        step, _, amount = rest.partition(":")
        if kind not in FAULT_KINDS or not step.isdigit():
            raise GlassroomError(f"{FAULT_ENV}: cannot read {item!r} (expected e.g. nan@3, router_bias@500:0.5 or kill_after_checkpoint@8)")
        try:
            value = float(amount) if amount else (None if kind.startswith("kill") else 1.0)
        except ValueError:
            raise GlassroomError(f"{FAULT_ENV}: cannot read {item!r} (the amount after ':' is a number)") from None
        faults.setdefault(int(step), []).append((kind, value))
    return faults



# train.task -> its objective.
OBJECTIVES: dict[str, type[Objective]] = {"pretrain": Pretrain, "sft": SFT, "dpo": DPO}


def objective_for(cfg, dataset, info, device) -> Objective:
    """The objective of train.task."""
    task = cfg.train.task
    if task not in OBJECTIVES:
        raise GlassroomError(f"train.task: {task} is not available in this version (it has {', '.join(OBJECTIVES)})")
    return OBJECTIVES[task](cfg, dataset, info, device)


class Trainer(ResumeMixin):
    def __init__(self, cfg: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False,
                 restart: Optional[Restart] = None):
        self.cfg, self.run_dir, self.quiet = cfg, Path(run_dir), quiet
        self.restart = restart  # an engine's automatic restart of this launch (glassroom/train/launch.py)
        self.rank_note: Optional[RankNote] = None
        tc = cfg.train
        self.device = resolve_device(tc.device)
        self.info = parallel.setup(self.device.type)

        self.mirrors = mirrors(cfg, self.run_dir, self.info.is_main)  # a missing package fails before RUN_DIR is made
        if self.device.type == "cuda":
            self.device = torch.device("cuda", self.info.local_rank)
        per_rank, rest = divmod(tc.batch_size, self.info.world_size)
        if rest or per_rank % tc.micro_batch_size:
            raise GlassroomError(
                f"train.batch_size: {tc.batch_size} sequences do not split into {self.info.world_size} ranks "
                f"of whole micro-batches of {tc.micro_batch_size}"
            )
        if tc.expert_parallel > 1:  # the mesh fits this launch (before RUN_DIR is touched)

            check_layout(tc.expert_parallel, self.info.world_size, cfg.model.moe.n_experts if cfg.model.moe else None)
        self.local_batch = per_rank
        self.accum = per_rank // tc.micro_batch_size
        self.autocast_dtype = autocast_dtype_for(tc.precision, self.device)

        # Every input is checked before RUN_DIR is created or touched (glassroom.train.preflight).
        self.faults = parse_faults(os.environ.get(FAULT_ENV, ""))
        self.dataset = preflight.open_dataset(cfg)
        preflight.check_data(cfg, self.dataset)
        preflight.check_memory(cfg, self.device, self.info.world_size,
                               sharded=self.info.enabled and tc.parallel_strategy == "fsdp")
        # The batches, loss and evaluation of train.task (pretrain: the domain mixture of glassroom.data.mixture).
        self.objective = objective_for(cfg, self.dataset, self.info, self.device)
        self.manifest = self.dataset.manifest
        self.samples = None  # observe.sample_prompts, answered at every checkpoint (glassroom/train/samples.py)
        if cfg.observe.sample_prompts:  # every rank generates (FSDP gathers weights collectively); main records

            self.samples = CheckpointSamples(cfg, self.dataset.tokenizer(), self.manifest.get("chat_template"))
        self.downstream = None  # train.eval_tasks (glassroom/train/eval_tasks.py), checked before RUN_DIR is touched
        if tc.eval_tasks:
            self.downstream = TrainingTasks(cfg, self.dataset, self.info.world_size)
        self.start_record = before_start(self.run_dir)
        # One process trains a run folder at a time (main rank; held until run() ends).
        self._run_lock = lock_run_dir(self.run_dir) if self.info.is_main else None
        try:
            if resume:  # every check that can refuse it, before config.yaml, the journal or the status is written
                self.check_resume()
            self.state_at_start = prepare_run_dir(self.run_dir, cfg, resume, self.info.is_main,
                                                  barrier=lambda: parallel.barrier(self.info))
            if self.info.enabled or restart is not None or launched_by_ray():  # which rank fails, if one does
                self.rank_note = RankNote(self.run_dir, self.info.rank, self.info.world_size,
                                          restart.attempt if restart is not None else 0)
                self.rank_note.write()
        except BaseException:
            self._release_run_lock()
            raise
        try:
            self._start_up()
        except BaseException:
            if getattr(self, "store", None) is not None:
                self.store.close()
            self.undo_failed_start()
            self._release_run_lock()
            raise

    def note_end(self, exc: BaseException) -> None:
        """This rank ended on `exc`: said in its launch note (a rank killed outright says nothing)."""
        if self.rank_note is not None:
            self.rank_note.ended(exc)

    def _release_run_lock(self) -> None:
        close_run_lock(getattr(self, "_run_lock", None))
        self._run_lock = None

    def undo_failed_start(self) -> None:
        """Remove what this start created in RUN_DIR (a new run that failed before its first step)."""
        if self.info.is_main and self.state_at_start == "new":
            undo_start(self.start_record)

    def _start_up(self) -> None:
        """Model, optimizer, store and observers: after RUN_DIR is prepared (undone if this fails)."""
        cfg, tc = self.cfg, self.cfg.train

        torch.manual_seed(tc.seed)
        use_fsdp_bf16 = self.info.enabled and tc.parallel_strategy == "fsdp" and self.device.type == "cuda" and self.autocast_dtype == torch.bfloat16
        fresh_init = cfg.init is not None and not ckpt.list_checkpoints(self.run_dir)  # init at step 0 only
        if fresh_init:
            check_init_weights(cfg.init)  # before a model of that size is allocated
        self.model = build_model(cfg.model, seed=tc.seed, device=self.device)
        self.lineage = None
        if fresh_init:
            self.lineage = {**load_init_weights(self.model, cfg.init, cfg.model, cfg.data.path),
                            "task": tc.task, "data": str(cfg.data.path)}
        self.core = self.model
        # train.activation_checkpointing: blocks recompute in backward (train/activation_checkpointing.py);
        # before compile and before parallelize's fully_shard.
        activation_checkpointing.apply(self.core, tc.activation_checkpointing, tc.activation_checkpointing_every)
        if tc.compile:
            for block in self.core.blocks:
                block.compile()
        self.model = parallel.parallelize(self.model, self.info, tc.parallel_strategy, self.device, use_fsdp_bf16,
                                         ep=tc.expert_parallel)
        if use_fsdp_bf16:
            self.autocast_dtype = None  # FSDP2 casts parameters itself
        self.optimizer = build_optimizer(self.core, tc, distributed_fsdp=self.info.enabled and tc.parallel_strategy == "fsdp")
        self.lr_at = lr_multiplier(tc)
        self.flops_per_token = self._flops_per_token()
        self.peak = peak_flops(self.device, self.autocast_dtype) * self.info.world_size
        self.state = TrainState(tokens_by_domain={d: 0 for d in self.objective.domains})
        self.step = 0
        self.store: Optional[StoreWriter] = None
        try:
            self.store = StoreWriter(self.run_dir) if self.info.is_main else None
            if self.store is not None:
                self.store.set_stall_after(tc.stall_after)
            prediction = self._preregistered()
            if self.store is not None and self.lineage is not None:  # the base this run starts from
                self.store.set_artifact("lineage", self.lineage)
        except sqlite3.DatabaseError as exc:
            raise self._damaged_store(exc) from None

        # Objects with on_step(trainer, step, metrics), state() and load_state(state).
        self.observers = [AnomalyObserver(cfg.observe)]
        if prediction is not None:
            self.observers.append(BandWatcher(prediction, where=str(store_path(self.run_dir))))
        self.observers += self.mirrors  # wandb, TensorBoard: these also have close()

    def _damaged_store(self, exc: Exception) -> GlassroomError:
        return GlassroomError(f"{store_path(self.run_dir)}: cannot be read or written ({exc}); the run store is "
                              "damaged: move it aside (the checkpoints are kept) and --resume to continue with a new "
                              "store, or restore it from a copy")

    def _preregistered(self):
        """The prediction preregistered in this run's store before it started, if any: read by the
        main rank (the others would race its creation of the store) and sent to every rank."""
        found = None
        if self.info.is_main and store_path(self.run_dir).is_file():
            try:
                with StoreReader(self.run_dir) as reader:
                    found = reader.artifact("prediction")
            except sqlite3.DatabaseError as exc:
                found = exc
        if self.info.enabled:
            found = ckpt._broadcast(found)
        if isinstance(found, sqlite3.DatabaseError):
            raise found
        return found

    def _flops_per_token(self) -> int:
        return flops_per_token(self.cfg.model, self.cfg.train.seq_len)

    # ------------------------------------------------------------------ lifecycle

    def _start_text(self) -> str:
        counts = count_params(self.cfg.model)
        text = (f"started {model_name(counts.total, counts.active)} on {self.info.world_size} x {self.device.type}, "
                f"{self.cfg.train.steps} steps of {self.cfg.train.batch_size} x {self.cfg.train.seq_len} tokens")
        if self.lineage is not None:
            at = "" if self.lineage["base_step"] is None else f" at step {self.lineage['base_step']}"
            text += f", {self.cfg.train.task} from {self.lineage['base']}{at}"
        return text

    def record_event(self, kind: str, text: str, step: int, data=None) -> None:
        """Write an event to the run's journal (main rank) and echo it."""
        if self.store is not None:
            self._journal(kind, text, step, data)
            self.store.set_status("running", step)
        self._say(f"[{kind}] {text}")

    def _journal(self, kind: str, text: str, step: int, data=None) -> None:
        """Append to the journal, unless a killed process already journaled this (kind, step) and
        this is the resumed run redoing it (resume_if_possible)."""
        replayed = getattr(self, "_replayed", None)
        if replayed and replayed[(kind, step)] > 0:
            replayed[(kind, step)] -= 1
            return
        self.store.event(kind, text, step, data)

    def _warn(self, text: str) -> None:
        """A warning on stderr (main rank), also with --quiet."""
        if self.info.is_main:
            print(f"warning: {text}", file=sys.stderr, flush=True)

    def _planted_kill(self, step: int, kind: str) -> None:
        """The kill drills of GLASSROOM_FAULTS: SIGKILL this process, nothing flushed or closed."""
        if self.restart is not None:
            return
        if any(planted == kind and (rank is None or int(rank) == self.info.rank)
               for planted, rank in self.faults.get(step, [])):
            os.kill(os.getpid(), signal.SIGKILL)

    def _say(self, text: str) -> None:
        if self.info.is_main and not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def run(self) -> dict[str, float]:
        """Train to train.steps; returns the final evaluation."""
        tc = self.cfg.train
        try:
            self.resume_if_possible()
            self.objective.start(self)  # after the resume, before any step (dpo: its reference log-probabilities)
            if self.step == 0 and tc.steps > 0 and tc.task != "pretrain":
                self.run_eval()  # the base (init.from) measured as step 0: the curve starts where it started
                self._sample()
            final_eval: dict[str, float] = {}
            while self.step < tc.steps:
                self.train_step()
                self._beat(every=10.0)
                final_eval = self._after_step() or final_eval
                self._planted_kill(self.step, "kill")
            if tc.steps == 0 and not ckpt.list_checkpoints(self.run_dir):
                final_eval = self._after_step()  # the initial model (e.g. init.from) as step 0
            if not final_eval:
                final_eval = self.run_eval()
            if self.store is not None:
                self._journal("end", f"finished at step {self.step}", self.step,
                              {**final_eval, "record": record.close_window(self.store, self.step)})
                self.store.set_status("finished", self.step, final=final_eval)
            return final_eval
        except GlassroomError as exc:
            if self.store is not None:
                self.store.event("error", str(exc), self.step)
                self.store.set_status("failed", self.step, error=str(exc))
            raise
        except sqlite3.DatabaseError as exc:  # the store went bad under the run (disk, another program)
            raise self._damaged_store(exc) from None
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM under glassroom train
            if self.store is not None and self.step > 0:
                why = str(exc) or "interrupted"
                self.store.event("stopped", f"{why} after step {self.step}; --resume continues from the newest "
                                 "intact checkpoint", self.step)
                self.store.set_status("stopped", self.step)
            raise
        finally:
            for observer in self.observers:
                if hasattr(observer, "close"):
                    observer.close()
            if self.store is not None:
                self.store.close()
            self._release_run_lock()

    # ------------------------------------------------------------------ one step

    def train_step(self) -> None:
        tc, step = self.cfg.train, self.step
        started = time.perf_counter()
        faults = dict(self.faults.get(step + 1, []))
        lr = set_lr(self.optimizer, self.lr_at(step) * faults.get("lr", 1.0))
        batch = self.objective.batch(step)
        if "bad_batch" in faults:
            shape = batch.tensors["tokens"].shape
            batch.tensors["tokens"] = torch.randint(0, int(self.manifest["tokenizer"]["vocab_size"]), shape,
                                                    generator=torch.Generator().manual_seed(step)).to(self.device)
        if "router_bias" in faults:
            with torch.no_grad():
                for _, moe in self.core.moe_layers():
                    moe.router_bias += faults["router_bias"] * torch.linspace(-1, 1, moe.n_experts, device=self.device)
        domain_index = batch.domain_index
        n_domains = len(self.objective.domains)
        # per domain: loss numerators, their denominators, real input tokens
        domain_loss = torch.zeros(3, n_domains, dtype=torch.float64, device=self.device)
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float64)
        sums: dict[str, torch.Tensor] = {}
        self.model.train()
        self.objective.begin(batch)
        for i in range(self.accum):
            part = slice(i * tc.micro_batch_size, (i + 1) * tc.micro_batch_size)
            parallel.set_gradient_sync(self.model, i == self.accum - 1)
            micro = self.objective.micro(self.model, batch, part, self._autocast, tc.z_loss_coef > 0)
            loss = micro.loss
            with torch.no_grad():
                rows = domain_index[part]
                for k, values in enumerate((micro.row_loss, micro.row_weight, micro.row_tokens)):
                    domain_loss[k].index_add_(0, rows, values)
                for name, value in micro.sums.items():
                    sums[name] = sums.get(name, 0) + value.detach().double()
            objective = loss + micro.moe_loss
            if micro.z_loss is not None:
                objective = objective + tc.z_loss_coef * micro.z_loss
            if "nan" in faults:
                objective = objective * float("nan")
                loss = loss * float("nan")
            (objective / self.accum).backward()
            loss_sum += loss.detach().double()

        # Router-bias balancing: counts of all micro-batches, summed across ranks.
        counts = self.core.step_tokens_per_expert()
        probe = (step + 1) % self.cfg.observe.norms_every == 0 or step == 0
        before = snapshot(self.core) if probe else None
        if counts is not None:
            parallel.all_reduce_sum(counts, self.info)

        parallel.all_reduce_sum(loss_sum, self.info)
        parallel.all_reduce_sum(domain_loss, self.info)
        reduced = {}
        if sums:
            names = sorted(sums)
            stacked = torch.stack([sums[n] for n in names])
            parallel.all_reduce_sum(stacked, self.info)
            reduced = dict(zip(names, stacked.tolist()))
        mean_loss = float(loss_sum / (self.accum * self.info.world_size))
        group_grads = {}
        if probe:  # gradient norms by group, before clipping
            measured = norms_by_group(self.core, with_grads=True, rank=self.info.rank,
                                      all_reduce=self._all_reduce if self.info.enabled else None)
            group_grads = {k: v for k, v in measured.items() if k.startswith("norm/grad/")}
        grad_norm = parallel.clip_grad_norm(self.model, tc.grad_clip or float("inf"), self.info, tc.expert_parallel)

        metrics: dict[str, float] = {"train/loss": mean_loss, "train/lr": lr, "train/grad_norm": grad_norm}
        for d, domain in enumerate(self.objective.domains):
            if domain_loss[1, d] > 0:
                metrics[f"train/loss/{domain}"] = float(domain_loss[0, d] / domain_loss[1, d])
        metrics.update(self.objective.step_metrics(reduced))
        if not (math.isfinite(mean_loss) and math.isfinite(grad_norm)):
            self._skip(step, mean_loss, grad_norm)
            if counts is not None:
                self.core.update_router_biases(torch.zeros_like(counts))  # reset, do not move
        else:
            self.state.bad_steps_in_a_row = 0
            if counts is not None:
                self.core.update_router_biases(counts)
                for row, (_, moe) in enumerate(self.core.moe_layers()):  # stored: the step's, over all ranks
                    moe.last_stats["tokens_per_expert"] = counts[row]
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - started

        # Real (non-padding) input tokens of the global batch per domain, already reduced across ranks.
        step_tokens = int(domain_loss[2].sum())
        self.state.tokens_seen += step_tokens
        for d, domain in enumerate(self.objective.domains):
            self.state.tokens_by_domain[domain] = self.state.tokens_by_domain.get(domain, 0) + int(domain_loss[2, d])
        tokens_per_s = step_tokens / elapsed
        metrics["throughput/tokens_per_s"] = tokens_per_s
        metrics["throughput/mfu"] = tokens_per_s * self.flops_per_token / self.peak
        metrics["throughput/step_seconds"] = elapsed
        metrics["data/tokens_seen"] = self.state.tokens_seen
        for domain, n in self.state.tokens_by_domain.items():
            metrics[f"data/tokens/{domain}"] = n
        scalars, vectors = router_metrics(self.core, all_reduce=self._all_reduce if self.info.enabled else None)
        metrics.update(scalars)
        if probe:
            metrics.update(norms_by_group(self.core, before, with_grads=False, rank=self.info.rank,
                                          all_reduce=self._all_reduce if self.info.enabled else None))
            metrics.update(group_grads)
        self.step = step + 1
        for observer in self.observers:
            observer.on_step(self, self.step, metrics)
        if self.store is not None:
            self.store.log(self.step, metrics)
            for name, values in vectors.items():
                self.store.log_vector(self.step, name, values)
        if self.step % 10 == 0 or self.step == 1 or self.step == tc.steps:
            eta = (tc.steps - self.step) * elapsed
            self._say(f"step {self.step}/{tc.steps}  loss {mean_loss:.4f}  lr {lr:.2e}  "
                      f"grad {grad_norm:.3f}  {tokens_per_s:,.0f} tok/s  mfu {metrics['throughput/mfu']:.1%}  "
                      f"eta {eta / 60:.1f} min")

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.autocast_dtype or torch.float32,
                              enabled=self.autocast_dtype is not None)

    def _all_reduce(self, tensor: torch.Tensor) -> None:
        parallel.all_reduce_sum(tensor, self.info)

    def _skip(self, step: int, loss: float, grad_norm: float) -> None:
        self.state.bad_steps_in_a_row += 1
        self.state.skipped_steps += 1
        what = "loss" if not math.isfinite(loss) else "gradient norm"
        self.record_event("skip", f"step {step + 1} skipped: {what} is not finite (loss {loss}, grad norm {grad_norm})",
                    step + 1, {"loss": str(loss), "grad_norm": str(grad_norm)})
        if self.state.bad_steps_in_a_row >= self.cfg.train.max_bad_steps:
            last = ckpt.list_checkpoints(self.run_dir)
            where = f"the last checkpoint ({last[-1][1].name}) is intact" if last else "no checkpoint was written yet"
            raise GlassroomError(
                f"stopped at step {step + 1}: {self.state.bad_steps_in_a_row} steps in a row had a non-finite "
                f"loss or gradient (train.max_bad_steps); {where}; lower train.lr or raise train.grad_clip"
            )

    # ------------------------------------------------------------------ eval and checkpoints

    def _beat(self, every: float = 0.0) -> None:
        """The heartbeat (main rank): at every step and before each evaluation, at most every `every` s."""
        if self.store is not None:
            self.store.beat(self.step, every)

    def run_eval(self) -> dict[str, float]:
        self._beat()
        results = self.objective.evaluate(self.model, self.cfg.train.micro_batch_size, self.autocast_dtype)
        for observer in self.observers:  # mirrors get the evaluation too
            observer.on_step(self, self.step, results)
        summary = ", ".join(f"{k.split('/')[1]} {v:.3f}" for k, v in results.items() if k.endswith("/bpb"))
        text = (f"bits per byte at step {self.step}: {summary}" if summary else  # task dpo: eval/dpo/...
                f"held out at step {self.step}: " + ", ".join(f"{k[5:]} {v:.3f}" for k, v in results.items()))
        if self.store is not None and results:
            self.store.log(self.step, results)
            self._journal("eval", text, self.step, results)
        if results:
            self._say(f"eval step {self.step}: macro bpb {results.get('eval/macro/bpb', float('nan')):.4f}"
                      if summary else f"eval {text}")
        return results

    def _after_step(self) -> dict[str, float]:
        """Evaluation, downstream tasks and checkpoint due at self.step (all of them at the last
        step); returns the evaluation, or {} when none was due."""
        tc, done = self.cfg.train, self.step
        last = done == tc.steps
        results = self.run_eval() if done % tc.eval_every == 0 or last else {}
        saving = done % tc.checkpoint_every == 0 or last
        # Before the save: a run killed in between redoes the step and its tasks on resume.
        if self.downstream is not None and self.downstream.due(done, saving, last):
            self.run_downstream()
        if saving:
            self._sample()  # before the save too: a kill in between redoes it on resume
            self.save()
        return results

    def _sample(self) -> None:
        """observe.sample_prompts answered by the model now: every rank generates (FSDP gathers
        weights collectively), the main rank journals them."""
        if self.samples is not None:
            answers = self.samples.run(self.core, self.device, self.step)
            self.record_event("samples", f"{len(answers)} samples at step {self.step}", self.step, {"samples": answers})

    def run_downstream(self) -> None:
        """train.eval_tasks on the model now: downstream/<task>/<metric> at this step, one event."""
        self._beat()
        scores = self.downstream.run(self.core, self.device)
        if self.store is not None and scores:
            self.store.log(self.step, metric_values(scores))
            self._journal("downstream", f"downstream at step {self.step}: {summary(scores)}", self.step,
                          {"scores": scores})
        self._say(f"downstream step {self.step}: {summary(scores)}")

    def save(self) -> None:
        """Checkpoint the state after self.step. The store's rows up to this step are committed
        first, so a checkpoint never becomes visible with metrics of its steps still buffered."""
        self.state.extra = {type(o).__name__: o.state() for o in self.observers}
        trainer_state = {"train_state": self.state.__dict__, "config": self.cfg.to_dict()}
        if self.store is not None:
            self.store.flush()
        with stopping.hold():  # a stop waits for the checkpoint and its event (stopping.py says why)
            path = ckpt.save_checkpoint(self.run_dir, self.step, self.model, self.optimizer, trainer_state,
                                        self.cfg.train.keep_last, self.cfg.train.keep_every,
                                        on_visible=self._checkpoint_visible)
            window = record.close_window(self.store, self.step) if self.store is not None else None
            self.record_event("checkpoint", f"saved {path.name}", self.step,
                              {"path": path.name, **({"record": window} if window else {})})

    def _checkpoint_visible(self, path: Path) -> None:
        """Runs on rank 0 right after the checkpoint's rename, before its event: the
        kill_after_checkpoint drill."""
        self._planted_kill(self.step, "kill_after_checkpoint")
