"""Resuming a run from its newest intact checkpoint, with its store made to read as if it never stopped.

`ResumeMixin.resume_if_possible` is the Trainer's first act in run(): it verifies the checkpoints
newest first, sets damaged ones aside (journaled), loads the chosen one (after checking it was
written with this run's fixed settings), and prepares the store: metric rows after the checkpoint's
step are deleted (the steps are redone deterministically and logged again), and events of the kinds
a redone step records (REPLAYABLE_EVENTS) that a killed process already journaled are not recorded
a second time. `TrainState` is what a checkpoint carries besides model and optimizer.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from glassroom.errors import GlassroomError
from glassroom.observe import record
from glassroom.observe.run_folder import checkpoints_path, config_path, store_path
from glassroom.train import checkpoint as ckpt, stopping
from glassroom.train.run_dir import config_differences

# Events a resumed run would record again when it redoes steps a killed process already journaled
# (see Trainer.resume_if_possible): recorded once. start, resume, error, note, checkpoint_damaged
# are never held back.
REPLAYABLE_EVENTS = ("checkpoint", "eval", "skip", "anomaly", "prediction", "end", "downstream", "samples")

SQLITE_HEADER = b"SQLite format 3\x00"   # the first bytes of every SQLite database file (an empty one is new)


@dataclass
class TrainState:
    """Counters carried across checkpoints besides model and optimizer."""

    tokens_seen: int = 0
    tokens_by_domain: dict[str, int] = field(default_factory=dict)
    bad_steps_in_a_row: int = 0
    skipped_steps: int = 0
    extra: dict = field(default_factory=dict)  # state of observers (anomaly detector, ...)


class ResumeMixin:
    """The Trainer's resume (glassroom/train/trainer.py): uses its run_dir, store, model, optimizer,
    observers, objective and record_event."""

    def resume_if_possible(self) -> None:
        """Continue from the newest intact checkpoint, if any (docs/train.md, "Checkpoints and resume").

        Checkpoints are verified newest first (checkpoint.choose_for_resume: rank 0 checks, every
        rank loads the same one); each damaged one is journaled as `checkpoint_damaged`, said on
        stderr and moved to checkpoints/damaged/. None intact: exit 2 naming what is damaged.
        Resuming from step S (0 without a checkpoint), the store is made to read as if the run had
        never stopped: metric and vector rows after S are deleted (the steps are redone
        deterministically and logged again), events already journaled at S or later of the kinds
        a redone step records (REPLAYABLE_EVENTS) are not recorded a second time, and a checkpoint
        whose own event was lost (killed between its rename and its event) gets that event now."""
        self._replayed: Counter = Counter()
        choice = getattr(self, "_resume_choice", None) or ckpt.choose_for_resume(self.run_dir)
        self._resume_choice = None
        for step, path, problem in choice.damaged:
            if choice.path is not None:  # with none intact, the error below is the one line
                self._warn(f"{problem}; {path.name} is damaged: moved to checkpoints/{ckpt.DAMAGED_DIR}/, "
                           f"resuming from {choice.path.name}")
            if self.store is not None:
                self.store.event("checkpoint_damaged", f"{problem}; not resumed from", step,
                                 {"checkpoint": path.name, "problem": problem})
        if choice.path is None and choice.damaged:
            raise self._none_intact(choice)
        if choice.path is None and (self.state_at_start != "resumed" or not self._journaled_start()):
            # a new run, or a resumed one killed before its start was journaled: this is its start
            notes, data = self.objective.start_notes()
            if self.lineage is not None:
                data["lineage"] = self.lineage
            # the record's format and what the loss is measured with (observe/record.py): chained from the start
            data["record"] = {"format": record.FORMAT, "measure": self._measure()}
            self.record_event("start", self._start_text() + notes, 0, data)
            return
        text, data = "no checkpoint yet; starting from step 0", {"checkpoint": None}
        if choice.path is not None:
            text, data = self._load(choice)
            if self.info.is_main:  # a run killed between a save and its pruning keeps no checkpoint too many
                ckpt.apply_retention(self.run_dir, self.cfg.train.keep_last, self.cfg.train.keep_every)
        if self.store is not None:
            data["discarded_rows"] = self._store_from(self.step, choice)
            if data["discarded_rows"]:
                text += f"; steps after {self.step} are redone ({data['discarded_rows']} metric rows replaced)"
        data["record"] = {"measure": self._measure()}
        restart = getattr(self, "restart", None)
        if restart is not None:  # an engine restarted every worker after one failed (train/launch.py)
            self.record_event("restarted", f"{restart.text()}; attempt {restart.attempt} continues from step "
                              f"{self.step}", self.step, {**restart.data(), "step": self.step,
                                                           "checkpoint": data.get("checkpoint")})
        self.record_event("resume", text, self.step, data)

    def _measure(self) -> dict:
        """The settings that change the measured loss, and the dataset's digest (observe/record.py)."""
        return record.measure_settings(self.cfg.to_dict(), getattr(self, "manifest", None))

    def check_resume(self) -> None:
        """Every check that can refuse this --resume, run before RUN_DIR is written (config.yaml, the
        journal, the status), so a refused resume changes nothing in the run folder: a checkpoint to
        resume from (none intact: refused), written with this run's fixed settings, and what the
        task needs to continue from its step (sft: the same tokenizer; dpo: the cached reference).
        Every rank calls this; the choice is kept for resume_if_possible."""
        choice = ckpt.choose_for_resume(self.run_dir)
        if choice.path is None and choice.damaged:
            raise self._none_intact(choice)
        if choice.path is not None:
            self._check_checkpoint_config(choice.path)
            self._check_trainer_state(choice.path)
            self.objective.check_resume(self.run_dir, choice.step)
        store = store_path(self.run_dir)
        try:  # a store that is no database at all (its first bytes); one damaged deeper fails when opened
            with open(store, "rb") as handle:
                header = handle.read(len(SQLITE_HEADER))
        except FileNotFoundError:
            header = SQLITE_HEADER
        except OSError as exc:
            raise self._damaged_store(exc) from None
        if header and header != SQLITE_HEADER:
            raise self._damaged_store("file is not a database")
        self._resume_choice = choice

    def _check_trainer_state(self, path: Path) -> None:
        """The checkpoint's trainer.json holds the training state this version reads (observers' states
        are checked when they load)."""
        try:
            saved = json.loads((path / ckpt.TRAINER_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # checked by the verification; the load names what is wrong
        try:
            int(saved["step"])
            TrainState(**saved["train_state"])
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise self._foreign_state(path, exc) from None

    @staticmethod
    def _foreign_state(path: Path, exc: Exception) -> GlassroomError:
        return GlassroomError(f"{path}/trainer.json: not the training state this version writes "
                              f"({type(exc).__name__}: {str(exc)[:120]}); resume with the version that wrote it")

    def _none_intact(self, choice: ckpt.ResumeChoice) -> GlassroomError:
        problems = [problem for _, _, problem in choice.damaged]
        listed = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        return GlassroomError(f"{self.run_dir}: {listed}; no intact checkpoint to resume from "
                              f"(move {checkpoints_path(self.run_dir)} aside to start again from step 0)")

    def _journaled_start(self) -> bool:
        """Whether the journal holds this run's start (main rank; other ranks assume it does)."""
        return self.store is None or any(kind == "start" for kind, _ in self.store.journal_from(0))

    def _load(self, choice: ckpt.ResumeChoice) -> tuple[str, dict]:
        """Load the chosen checkpoint and set the damaged ones aside; the resume event's text and data."""
        path = choice.path
        self._check_checkpoint_config(path)
        with stopping.hold():  # DCP would turn a stop inside its read into a CheckpointException
            saved = ckpt.load_checkpoint(path, self.model, self.optimizer)
        try:
            self.step = int(saved["step"])
            self.state = TrainState(**saved["train_state"])
            for observer in self.observers:
                observer.load_state(self.state.extra.get(type(observer).__name__))
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise self._foreign_state(path, exc) from None
        data = {"checkpoint": path.name, "verified": choice.verified}
        text = f"resumed from {path.name} at step {self.step}"
        if not choice.verified:
            text += " (written without a checksum manifest: checked against its own index only)"
        if self.info.is_main and choice.damaged:
            data["set_aside"] = [ckpt.set_aside(self.run_dir, damaged).relative_to(self.run_dir).as_posix()
                                 for _, damaged, _ in choice.damaged]
            text += f"; damaged checkpoints moved to {', '.join(data['set_aside'])}"
        return text, data

    def _check_checkpoint_config(self, path: Path) -> None:
        """The checkpoint was written with the settings this run resumes with (RUN_DIR/config.yaml may
        have been edited since): a difference in a fixed setting is one line, not a failed load."""
        try:
            written = json.loads((path / ckpt.TRAINER_FILE).read_text(encoding="utf-8")).get("config")
        except (OSError, ValueError, AttributeError):
            return  # checked by the verification; the load below names what is wrong
        if not isinstance(written, dict):
            return
        diffs = config_differences(written, self.cfg.to_dict())
        if diffs:
            listed = ", ".join(diffs[:3]) + (f" and {len(diffs) - 3} more" if len(diffs) > 3 else "")
            raise GlassroomError(f"{path}: written with another {listed} than this run's config (was "
                                 f"{config_path(self.run_dir)} edited?); resume with the settings "
                                 "the checkpoint was written with, or train into a new --out")

    def _store_from(self, step: int, choice: ckpt.ResumeChoice) -> int:
        """Prepare the store for a run continuing after `step`: which journaled events not to repeat,
        the lost checkpoint event, the rows to redo deleted (returns how many)."""
        already = [(kind, at) for kind, at in self.store.journal_from(step) if kind in REPLAYABLE_EVENTS]
        self._replayed = Counter(already)
        for damaged_step, _, _ in choice.damaged:  # a damaged checkpoint written again is journaled again
            self._replayed.pop(("checkpoint", damaged_step), None)
        if choice.path is not None and self._replayed[("checkpoint", step)] == 0:
            self.store.event("checkpoint", f"saved {choice.path.name} (journaled on resume: the run was stopped "
                             "between the checkpoint and its event)", step,
                             {"path": choice.path.name, "journaled_on_resume": True,
                              "record": record.close_window(self.store, step)})
        return self.store.discard_after(step)
