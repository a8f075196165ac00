"""The run config: `model:`, `data:`, `train:`, `observe:` and `init:` sections of a `glassroom train` file.

Fixed keys (users' files rely on them): data.path, data.weights, train.steps, train.batch_size
(sequences per optimizer step, global), train.micro_batch_size, train.seq_len, train.lr,
train.seed, train.checkpoint_every, train.eval_every, train.device. The others have documented
defaults (docs/train.md). `load_run_config` applies `--set` overrides, validates everything and
names the key path of any mistake. Reading files (an `init:` base's model section and tokenizer) is
`resolve_init`'s and `check_tokenizer`'s; `parse_run_config` itself reads none. Every number must be finite (NaN and infinity are refused with
the key's path), except data.max_epochs, where `.inf` switches the warning off.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from glassroom.config import (
    ALLOW_INF, apply_overrides, build_section, load_yaml, require_non_negative, require_positive)
from glassroom.errors import ConfigError, GlassroomError
from glassroom.model.config import ModelConfig, model_config_from_mapping
from glassroom.train.init import check_tokenizer, grow_vocab, model_for_init, resume_model


@dataclass(frozen=True)
class DataSection:
    path: str
    # Domain -> weight (normalised); null trains on every domain in proportion to its tokens.
    weights: Optional[dict[str, float]] = None
    # Warn when a domain would be repeated more than this many times over the run (.inf: never).
    max_epochs: float = field(default=4.0, metadata=ALLOW_INF)

    def check(self, path: str) -> None:
        require_positive(path, max_epochs=self.max_epochs)
        if self.weights is not None:
            for domain, weight in self.weights.items():
                if weight < 0:
                    raise ConfigError(f"{path}.weights.{domain}: must be zero or more, got {weight}")
            if not any(w > 0 for w in self.weights.values()):
                raise ConfigError(f"{path}.weights: at least one weight must be above zero")


@dataclass(frozen=True)
class TrainSection:
    steps: int
    batch_size: int
    micro_batch_size: int
    seq_len: int
    lr: float
    seed: int = 0
    checkpoint_every: int = 100
    eval_every: int = 100
    device: Literal["cpu", "cuda", "auto"] = "auto"
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    compile: bool = False
    optimizer: Literal["adamw", "muon"] = "adamw"
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    muon_lr: Optional[float] = None  # Muon's lr for hidden matrices (default: 0.02)
    schedule: Literal["constant", "cosine", "linear", "wsd"] = "cosine"
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1  # final lr / peak lr for cosine, linear and wsd
    decay_fraction: float = 0.2  # wsd: share of steps in the final decay
    decay_shape: Literal["linear", "cosine", "sqrt"] = "linear"  # wsd decay shape
    grad_clip: Optional[float] = 1.0
    # The token embedding's lr as a multiple of lr (AdamW, also beside muon); with a large
    # model.embedding_init_std, about that std / 0.02 / 3 keeps its relative pace (docs/train.md).
    embedding_lr_multiplier: float = 1.0
    z_loss_coef: float = 0.0
    keep_last: int = 2  # newest checkpoints kept
    keep_every: Optional[int] = None  # also keep every K-th step's checkpoint for good
    eval_sequences: int = 32  # held-out sequences per domain at each evaluation
    # lm-eval tasks (DATASET/tasks, `glassroom data tasks`) run in-process: at every checkpoint, or
    # every eval_tasks_every steps, and at the last step; scores as downstream/<task>/<metric>.
    eval_tasks: list[str] = field(default_factory=list)
    eval_tasks_every: Optional[int] = None
    # the folder eval_tasks are looked up in (default: DATASET/tasks): any folder of lm-eval task
    # files; one holding Python (.py, !function) runs only with eval_tasks_trust_code (docs/eval.md)
    eval_tasks_dir: Optional[str] = None
    eval_tasks_trust_code: bool = False
    max_bad_steps: int = 5  # NaN/Inf steps in a row before the run stops
    # under torchrun: fsdp, ddp, or {ep: N} (FSDP2 with N-way expert parallelism, docs/train.md)
    parallel: Any = "fsdp"
    # pretrain, or post-training from init.from: sft (packed conversations, loss on assistant
    # tokens) or dpo; must match the dataset's manifest `task` (docs/post-training.md).
    task: Literal["pretrain", "sft", "dpo"] = "pretrain"
    # sft/dpo: a conversation longer than seq_len + 1 tokens is cut to its start, or left out (counted)
    overlong: Literal["truncate", "drop"] = "truncate"
    dpo_beta: float = 0.1  # task dpo: strength of the pull towards the reference model (docs/post-training.md)
    dpo_loss: Literal["sigmoid", "ipo"] = "sigmoid"  # task dpo: the DPO paper's loss, or IPO's squared one
    # recompute in backward instead of keeping activations (glassroom/train/activation_checkpointing.py):
    # none, full (whole blocks) or selective (matmul and attention outputs kept); on blocks 0, k, 2k, ...
    activation_checkpointing: Literal["none", "full", "selective"] = "none"
    activation_checkpointing_every: int = 1
    # automatic restarts of every worker from the newest intact checkpoint when one fails: the count
    # `glassroom train --ray` gives Ray Train (FailureConfig) and a pipeline step gives torchrun
    # (--max-restarts); a torchrun launched by hand takes its own --max-restarts (docs/train.md)
    max_restarts: int = 0
    # seconds without a heartbeat (written at every step and during evaluations) after which a
    # run still marked running reads "stalled since step S" on the dashboard and in `glassroom runs`
    stall_after: float = 300.0

    def check(self, path: str) -> None:
        require_non_negative(path, steps=self.steps)  # 0: evaluate and checkpoint the initial model (init.from)
        require_positive(
            path, batch_size=self.batch_size, micro_batch_size=self.micro_batch_size,
            seq_len=self.seq_len, lr=self.lr, checkpoint_every=self.checkpoint_every,
            eval_every=self.eval_every, keep_last=self.keep_last, keep_every=self.keep_every,
            eval_sequences=self.eval_sequences, max_bad_steps=self.max_bad_steps, eval_tasks_every=self.eval_tasks_every,
            grad_clip=self.grad_clip, muon_lr=self.muon_lr, eps=self.eps, dpo_beta=self.dpo_beta,
            embedding_lr_multiplier=self.embedding_lr_multiplier,
            activation_checkpointing_every=self.activation_checkpointing_every, stall_after=self.stall_after,
        )
        require_non_negative(path, max_restarts=self.max_restarts)
        if self.batch_size % self.micro_batch_size:
            raise ConfigError(
                f"{path}.micro_batch_size: {self.micro_batch_size} does not divide batch_size ({self.batch_size})"
            )
        if self.warmup_steps < 0 or (self.steps and self.warmup_steps > self.steps):
            raise ConfigError(f"{path}.warmup_steps: must be between 0 and steps ({self.steps}), got {self.warmup_steps}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"{path}.min_lr_ratio: must be between 0 and 1, got {self.min_lr_ratio}")
        if not 0 < self.decay_fraction <= 1:
            raise ConfigError(f"{path}.decay_fraction: must be above 0 and at most 1, got {self.decay_fraction}")
        for key in ("beta1", "beta2"):
            if not 0 <= getattr(self, key) < 1:
                raise ConfigError(f"{path}.{key}: must be in [0, 1), got {getattr(self, key)}")
        require_non_negative(path, weight_decay=self.weight_decay, z_loss_coef=self.z_loss_coef)
        for i, name in enumerate(self.eval_tasks):
            if not name.strip() or name in self.eval_tasks[:i]:
                raise ConfigError(f"{path}.eval_tasks[{i}]: {'empty' if not name.strip() else f'{name!r} is named twice'}; "
                                  "give each task name once")
        if self.eval_tasks_dir is not None and not self.eval_tasks_dir.strip():
            raise ConfigError(f"{path}.eval_tasks_dir: empty; give a folder of lm-eval task files, or null for the "
                              "dataset's tasks/")
        for key in ("eval_tasks_dir", "eval_tasks_trust_code"):
            if getattr(self, key) not in (None, False) and not self.eval_tasks:
                raise ConfigError(f"{path}.{key}: set, but train.eval_tasks is empty; name the tasks to run "
                                  f"(e.g. eval_tasks: [my_task]) or leave {key} out")
        if not 0 <= self.seed < 2**63:
            raise ConfigError(f"{path}.seed: must be between 0 and 2**63 - 1, got {self.seed}")
        check_parallel(self.parallel, f"{path}.parallel")
        if self.expert_parallel > 1 and self.optimizer == "muon":
            raise ConfigError(f"{path}.parallel.ep: FSDP2 shards the matrices muon needs whole; "
                              "use train.optimizer: adamw with ep (or parallel: ddp with muon)")
        if self.expert_parallel > 1 and self.compile:  # dynamo hands the experts' ep DTensors to grouped_mm whole
            raise ConfigError(f"{path}.compile: torch.compile does not run expert parallelism's experts (their "
                              "DTensor shards); set train.compile: false with ep, or parallel: fsdp to compile")

    @property
    def parallel_strategy(self) -> str:
        """fsdp or ddp (`{ep: N}` is FSDP2)."""
        return "fsdp" if isinstance(self.parallel, dict) else self.parallel

    @property
    def expert_parallel(self) -> int:
        """Ranks each MoE layer's experts are spread over (1: none)."""
        return self.parallel["ep"] if isinstance(self.parallel, dict) else 1


def check_parallel(value: Any, path: str) -> None:
    """train.parallel: fsdp, ddp, or a mapping {ep: N} (optionally with strategy: fsdp)."""
    if isinstance(value, str):
        if value not in ("fsdp", "ddp"):
            raise ConfigError(f"{path}: {value!r} is not one of fsdp, ddp, {{ep: N}}")
        return
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected fsdp, ddp or a mapping such as {{ep: 2}}, got {value!r}")
    for key in value:
        if key not in ("ep", "strategy"):
            hint = (f"; YAML reads {{{key}}} as one key: put a space after the colon, e.g. {{ep: 2}}"
                    if isinstance(key, str) and ":" in key else "")
            raise ConfigError(f"{path}.{key}: unknown key (expected ep, strategy){hint}")
    if "ep" not in value:
        raise ConfigError(f"{path}.ep: missing; give the expert-parallel degree, e.g. {{ep: 2}}")
    ep = value["ep"]
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise ConfigError(f"{path}.ep: expected a whole number of 1 or more, got {ep!r}")
    strategy = value.get("strategy", "fsdp")
    if strategy == "ddp":
        raise ConfigError(f"{path}.strategy: expert parallelism runs with FSDP2 only, not ddp; "
                          "drop strategy or set it to fsdp")
    if strategy != "fsdp":
        raise ConfigError(f"{path}.strategy: {strategy!r} is not fsdp (the only strategy with ep)")


@dataclass(frozen=True)
class ObserveSection:
    norms_every: int = 10  # parameter, gradient and update norms by group
    log_every: int = 1  # scalar training metrics
    anomaly_window: int = 100  # rolling window W of the spike test
    anomaly_sigma: float = 6.0  # a value above mean + k * std of the last W steps is a spike
    anomaly_min_history: int = 20  # steps of history before the test runs
    loss_spike_ratio: float = 1.5  # loss above this multiple of its running minimum is a spike
    wandb: bool = False  # mirror metrics to Weights & Biases
    wandb_project: str = "glassroom"
    tensorboard: bool = False  # mirror metrics to TensorBoard event files in RUN_DIR/tensorboard
    # prompts sampled greedily at every checkpoint (event `samples`), up to sample_tokens new tokens
    sample_prompts: list[str] = field(default_factory=list)
    sample_tokens: int = 64

    def check(self, path: str) -> None:
        for i, prompt in enumerate(self.sample_prompts):
            if not prompt.strip():
                raise ConfigError(f"{path}.sample_prompts[{i}]: empty; give the prompt's text or remove it")
        require_positive(
            path, sample_tokens=self.sample_tokens, norms_every=self.norms_every, log_every=self.log_every, anomaly_window=self.anomaly_window,
            anomaly_sigma=self.anomaly_sigma, loss_spike_ratio=self.loss_spike_ratio,
            anomaly_min_history=self.anomaly_min_history,
        )


@dataclass(frozen=True)
class InitSection:
    """`init: {from: DIR, step: N}`: start from a Hugging Face folder or a run's checkpoint (docs/train.md)."""

    source: str  # `from:` in the file (a Python keyword)
    step: Optional[int] = None  # a run folder's checkpoint; default its newest intact one

    @classmethod
    def from_mapping(cls, data: Any) -> "InitSection":
        if not isinstance(data, dict):
            raise ConfigError("init: expected a mapping such as {from: DIR} or {from: RUN_DIR, step: 400}")
        for key in data:
            if key not in ("from", "step"):
                raise ConfigError(f"init.{key}: unknown key (expected from, step)")
        source = data.get("from")
        if not isinstance(source, str) or not source.strip():
            raise ConfigError("init.from: missing or not a path (a Hugging Face folder or a run folder)")
        step = data.get("step")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            raise ConfigError(f"init.step: expected a whole number of 0 or more, got {step!r}")
        return cls(source=source, step=step)

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.source, "step": self.step}


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig
    data: DataSection
    train: TrainSection
    observe: ObserveSection = field(default_factory=ObserveSection)
    init: Optional[InitSection] = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("init")
        if self.init is not None:
            out["init"] = self.init.to_dict()
        return out


def check_sections(raw: dict[str, Any]) -> None:
    for key in raw:
        if key not in ("model", "data", "train", "observe", "init"):
            raise ConfigError(f"{key}: unknown section (expected model, data, train, observe, init)")
    for key in ("data", "train"):
        if key not in raw:
            raise ConfigError(f"missing the {key}: section")


def parse_run_config(raw: dict[str, Any], source: str = "config") -> RunConfig:
    """A RunConfig from a mapping whose init: base, if any, is already resolved (its model: section is
    the base's, by `resolve_init`): parsing and validation only, no file is read."""
    check_sections(raw)
    init = InitSection.from_mapping(raw["init"]) if raw.get("init") is not None else None
    cfg = RunConfig(
        model=model_config_from_mapping(raw, source),
        data=build_section(DataSection, raw["data"], "data"),
        train=build_section(TrainSection, raw["train"], "train"),
        observe=build_section(ObserveSection, raw.get("observe"), "observe"),
        init=init,
    )
    if init is None and cfg.train.task != "pretrain":
        raise ConfigError(f"init.from: train.task {cfg.train.task} starts from a model; add `init: {{from: RUN_DIR}}` "
                          "(a run folder, optionally with step) or a Hugging Face folder")
    ep = cfg.train.expert_parallel
    if ep > 1 and (cfg.model.moe is None or cfg.model.moe.n_experts % ep):
        from glassroom.train.expert_parallel import check_layout  # lazy: torch loads only when this runs

        check_layout(ep, ep, cfg.model.moe.n_experts if cfg.model.moe is not None else None)
    if cfg.train.seq_len > cfg.model.max_seq_len:
        raise ConfigError(
            f"train.seq_len: {cfg.train.seq_len} is longer than model.max_seq_len ({cfg.model.max_seq_len})"
        )
    return cfg


def resolve_init(raw: dict[str, Any]) -> dict[str, Any]:
    """The mapping with an init: base's model: section read from the base folder (the keys the
    mapping's own model: sets must agree with it; vocab_size may grow to the data's tokenizer).
    This is where a config reads files; `parse_run_config` then reads none."""
    check_sections(raw)
    if raw.get("init") is None:
        return raw
    init = InitSection.from_mapping(raw["init"])
    return {**raw, "model": grow_vocab(model_for_init(init, raw.get("model")), raw.get("data"))}


def run_config_from_mapping(raw: dict[str, Any], source: str = "config") -> RunConfig:
    """The door from a mapping to a RunConfig: the init: base resolved (files read), then parsed, then
    the data's tokenizer checked against the base's."""
    cfg = parse_run_config(resolve_init(raw), source)
    if cfg.init is not None:
        check_tokenizer(cfg.init, cfg.data.path)
    return cfg


def load_run_config(path: str | Path, overrides: list[str] | None = None, resume_dir: Path | None = None) -> RunConfig:
    raw = apply_overrides(load_yaml(path), overrides or [])
    if resume_dir is not None:  # an init folder deleted since the start: the run's own model: section

        raw = resume_model(raw, resume_dir)
    try:
        return run_config_from_mapping(raw, str(path))
    except GlassroomError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(str(path)) else f"{path}: {message}") from None
