"""`train.eval_tasks`: lm-eval tasks run in the training process, scores in the run's store.

At every checkpoint (or, with `train.eval_tasks_every: N`, at every N-th step) and at the last
step, the tasks run on the model being trained (in eval mode, fp32, `train.seq_len` as the
longest sequence, four training micro-batches of sequences per forward: no gradients are kept, and
the scores do not depend on the batch), then training continues where
it was: the model's mode and every random generator are restored, so a run with eval_tasks trains
exactly as one without. Scores go to the store as downstream/<task>/<metric> at that step with a
`downstream` event. Tasks are looked up in `train.eval_tasks_dir`, by default the dataset's tasks/
folder (glassroom data tasks); a folder holding Python runs only with `train.eval_tasks_trust_code`
(glassroom/downstream/run.py's check_folder), checked at the start and before every evaluation.
One process only: under torchrun with more than one process the run is refused in one line.
"""

from __future__ import annotations

import os
from pathlib import Path

from glassroom.errors import ConfigError, GlassroomError

TRUST_KEY = "set train.eval_tasks_trust_code: true if you trust it"


def _said(exc: GlassroomError, key: str = "train.eval_tasks") -> str:
    """A downstream error as the config key's: --tasks becomes the key, --trust-code its setting."""
    from glassroom.downstream.run import TRUST_HINT  # lazy: numpy loads only when this runs

    return f"{key}: {str(exc).removeprefix('--tasks: ').replace(TRUST_HINT, TRUST_KEY)}"

# Sequences per scoring forward, in training micro-batches: a forward without gradients holds far
# less than a training one, and fewer, larger forwards took the demo's evaluations from 11 s to 5 s.
EVAL_BATCH_MICRO_BATCHES = 4


class TrainingTasks:
    def __init__(self, cfg, dataset, world_size: int):
        from glassroom.downstream import run as downstream  # lazy: numpy loads only when this runs

        tc = cfg.train
        self.names = list(tc.eval_tasks)
        self.every = tc.eval_tasks_every
        if world_size > 1:
            raise ConfigError(f"train.eval_tasks: runs in a single process only, this run has {world_size}; "
                              "leave it empty and score the checkpoints with glassroom eval RUN_DIR --step N")
        self.trust_code = tc.eval_tasks_trust_code
        if tc.eval_tasks_dir is not None:
            self.tasks_dir = Path(os.path.expanduser(tc.eval_tasks_dir))
            try:
                downstream.check_folder(self.tasks_dir, self.trust_code)
            except GlassroomError as exc:  # missing, not a folder, damaged, or code not trusted
                raise ConfigError(_said(exc, "train.eval_tasks_dir")) from None
        else:
            self.tasks_dir = Path(dataset.path) / "tasks"
            if not self.tasks_dir.is_dir():
                raise ConfigError(f"train.eval_tasks: {self.tasks_dir} does not exist; write the tasks with "
                                  f"glassroom data tasks {dataset.path} --seq-len {tc.seq_len} --windows {tc.eval_sequences} "
                                  "(or give a folder of lm-eval task files as train.eval_tasks_dir)")
        try:
            self.manager = downstream.task_manager(self.tasks_dir, self.names, self.trust_code)
            # Loaded once now: a group with its own member, or a hub task whose data cannot be
            # fetched, is refused before RUN_DIR is touched, not at the first checkpoint.
            downstream.load_tasks(self.names, self.tasks_dir, self.manager, self.trust_code)
        except GlassroomError as exc:  # naming --tasks: say the config key instead
            raise ConfigError(_said(exc)) from None
        self.tokenizer = dataset.tokenizer()
        self.seq_len, self.batch = tc.seq_len, tc.micro_batch_size * EVAL_BATCH_MICRO_BATCHES

    def due(self, step: int, checkpointed: bool, last: bool) -> bool:
        if last:
            return True
        return step % self.every == 0 if self.every else checkpointed

    def run(self, model, device) -> dict:
        """{task: {metric: value}} of the model now; the model's mode and the RNGs are restored."""
        from glassroom.downstream import run as downstream  # lazy: numpy loads only when this runs
        from glassroom.train.checkpoint import rng_state, set_rng_state

        import random

        import numpy as np

        was_training = model.training
        state, py_state, np_state = rng_state(), random.getstate(), np.random.get_state()  # lm-eval seeds all three
        try:
            try:
                result = downstream.evaluate(model, self.tokenizer, self.names, self.tasks_dir, batch_size=self.batch,
                                             max_length=self.seq_len, device=str(device), manager=self.manager,
                                             trust_code=self.trust_code)
            except GlassroomError as exc:  # the tasks folder changed under the run, the hub went away, ...
                raise GlassroomError(_said(exc)) from None
        finally:
            set_rng_state(state)
            random.setstate(py_state)
            np.random.set_state(np_state)
            model.train(was_training)
        return result["scores"]
