"""The ladder spec (YAML) and its expansion into one concrete run config per rung and for the hero.

A ladder is one recipe at several sizes. The spec names a base recipe (`base:` holds `model:`,
`data:`, `train:`, `observe:` templates), one size dial (d_model) and written rules that derive
everything else from it:

  shape (ShapeRules)      n_layers = max(1, round(d_model / aspect))
                          n_heads = d_model / head_dim (head_dim fixed)
                          n_kv_heads = n_heads / kv_group (at least 1)
                          d_ff = ffn_ratio * d_model, d_expert = expert_ratio * d_model,
                          each rounded up to a multiple of multiple_of
  tokens                  tokens_per_param * N (N = active or non-embedding active parameters,
                          `param_count`), or a list of tokens per rung
  lr, batch (ScaleRule)   value = scale * base * (x / ref) ** exponent, x the compute C (training
                          FLOPs = flops_per_token * tokens), N or d_model; presets below
  warmup                  a fraction of the steps, or tokens_per_param * N tokens (OLMo)
  evaluation              every eval_fraction of each run (Marin: every 5%)
  seeds                   K runs of each rung (or a list, one K per rung): seed k trains with
                          train.seed = base seed + k and is named `<rung>-s<k>` (seed 0 keeps the
                          rung's own name); the fits measure the seed-to-seed noise from them

steps = round(tokens / (batch_size * seq_len)); the tokens a rung trains on are steps * batch_size *
seq_len (printed). docs/ladder.md lists the sources of the presets.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

from glassroom.config import build_section, load_yaml, require_positive
from glassroom.errors import ConfigError, GlassroomError
from glassroom.ladder.rungs import FitSection
from glassroom.model.accounting import count_params, flops_per_token
from glassroom.model.config import ModelConfig
from glassroom.pipeline.step import NAME_RE
from glassroom.train.config import run_config_from_mapping
from glassroom.units import model_name, parse_count

# Presets of the scaling rules: (base, of, ref, exponent, scale).
PRESETS = {
    # DeepSeek LLM (Bi et al. 2024, arXiv 2401.02954, sec. 3.1): eta_opt = 0.3118 * C^-0.1250 and
    # B_opt = 0.2920 * C^0.3271 tokens, C the compute budget in FLOPs.
    ("lr", "deepseek"): (0.3118, "compute", 1.0, -0.1250, 1.0),
    ("batch_tokens", "deepseek"): (0.2920, "compute", 1.0, 0.3271, 1.0),
    # OLMo-core WSDSChinchillaRunConfigurator: lr = 0.0047 * (N / 108M)^(-1/3), then halved;
    # batch = 2048 * 160 * (N / 108M)^(2/3) tokens; warmup of N tokens.
    ("lr", "olmo"): (0.0047, "params", 108e6, -1.0 / 3.0, 0.5),
    ("batch_tokens", "olmo"): (2048 * 160, "params", 108e6, 2.0 / 3.0, 1.0),
}
MAX_SEEDS = 1000  # runs of one rung; a ladder repeats each size a handful of times
MAX_SEED = 2**63 - 1  # train.seed's range (glassroom.train.config)
MAX_LAYERS = 10_000  # layers a dial value may give (shape.aspect); parameter counting walks each layer
MAX_FLOPS = 1e40  # a rung's or hero's training compute; far beyond any run (the story hero: ~1e25)
DERIVED_MODEL_KEYS = ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff")


@dataclass(frozen=True)
class ShapeRules:
    aspect: float  # d_model / n_layers
    head_dim: int
    kv_group: int = 1  # query heads per KV head (GQA); 1 = full multi-head attention
    ffn_ratio: float = 4.0  # dense feed-forward width / d_model
    expert_ratio: Optional[float] = None  # routed (and shared) expert width / d_model; MoE only
    multiple_of: int = 8

    def check(self, path: str) -> None:
        require_positive(path, aspect=self.aspect, head_dim=self.head_dim, kv_group=self.kv_group,
                         ffn_ratio=self.ffn_ratio, expert_ratio=self.expert_ratio, multiple_of=self.multiple_of)


@dataclass(frozen=True)
class ScaleRule:
    preset: Optional[Literal["deepseek", "olmo"]] = None
    base: Optional[float] = None
    of: Literal["compute", "params", "d_model"] = "compute"
    ref: Union[float, str] = 1.0  # accepts counts such as 108M
    exponent: float = 0.0
    scale: float = 1.0  # a multiplier on the rule (or preset), e.g. 0.5
    min: Optional[float] = None
    max: Optional[float] = None

    def check(self, path: str) -> None:
        if (self.preset is None) == (self.base is None):
            raise ConfigError(f"{path}: set exactly one of preset (deepseek, olmo) or base")
        try:
            ref = parse_count(self.ref)
        except ValueError as exc:
            raise ConfigError(f"{path}.ref: {exc}") from None
        require_positive(path, base=self.base, ref=ref, scale=self.scale, min=self.min, max=self.max)

    def resolved(self, quantity: str) -> tuple[float, str, float, float, float]:
        if self.preset is not None:
            base, of, ref, exponent, scale = PRESETS[(quantity, self.preset)]
            return base, of, ref, exponent, scale * self.scale
        return self.base, self.of, parse_count(self.ref), self.exponent, self.scale

    def value(self, quantity: str, x: dict[str, float]) -> float:
        base, of, ref, exponent, scale = self.resolved(quantity)
        try:
            out = scale * base * (x[of] / ref) ** exponent
        except OverflowError:
            out = math.inf
        if isinstance(out, complex) or not math.isfinite(out):
            raise ConfigError(f"scaling.{quantity}: gives {out} at {of} {x[of]:.4g}; the rule's exponent or "
                              "scale is out of range for this ladder")
        if self.min is not None:
            out = max(out, self.min)
        if self.max is not None:
            out = min(out, self.max)
        return out

    def describe(self, quantity: str) -> str:
        base, of, ref, exponent, scale = self.resolved(quantity)
        x = {"compute": "C", "params": "N", "d_model": "d_model"}[of]
        term = f"{x}^{exponent:.4g}" if ref == 1 else f"({x}/{ref:.3g})^{exponent:.4g}"
        return f"{scale * base:.4g} * {term}" + (f" [{self.preset}]" if self.preset else "")


@dataclass(frozen=True)
class ScalingRules:
    lr: ScaleRule
    batch_tokens: ScaleRule
    warmup_fraction: Optional[float] = None  # of each run's steps
    warmup_tokens_per_param: Optional[float] = None  # OLMo: N tokens of warmup

    def check(self, path: str) -> None:
        if self.warmup_fraction is not None and self.warmup_tokens_per_param is not None:
            raise ConfigError(f"{path}: set warmup_fraction or warmup_tokens_per_param, not both")
        if self.warmup_fraction is not None and not 0 <= self.warmup_fraction < 1:
            raise ConfigError(f"{path}.warmup_fraction: must be in [0, 1), got {self.warmup_fraction}")
        require_positive(path, warmup_tokens_per_param=self.warmup_tokens_per_param)


@dataclass(frozen=True)
class HeroSection:
    d_model: int
    tokens: Optional[int] = None  # total training tokens, e.g. 18T; default tokens_per_param * N
    tokens_per_param: Optional[float] = None  # default: the ladder's
    model: Optional[dict[str, Any]] = None  # documented departures from the shape rules
    train: Optional[dict[str, Any]] = None  # e.g. the hero's own schedule: {schedule: wsd, ...}

    def check(self, path: str) -> None:
        require_positive(path, d_model=self.d_model, tokens=self.tokens, tokens_per_param=self.tokens_per_param)


@dataclass(frozen=True)
class LadderSpec:
    name: str
    dial: Literal["d_model"]
    base: dict[str, Any]
    shape: ShapeRules
    scaling: ScalingRules
    hero: HeroSection
    rungs: Optional[list[int]] = None  # dial values, increasing
    rung_budgets: Optional[list[float]] = None  # or compute budgets in FLOPs: nearest dial value
    tokens_per_param: Optional[float] = None
    tokens: Optional[list[int]] = None  # or tokens per rung
    param_count: Literal["active", "non_embedding_active"] = "active"
    eval_fraction: float = 0.05
    fit: FitSection = field(default_factory=FitSection)
    seeds: Any = 1  # runs per rung (train.seed = base + k), or a list: one count per rung (checked below)

    def check(self, path: str) -> None:
        if (self.rungs is None) == (self.rung_budgets is None):
            raise ConfigError(f"{path}.rungs: set exactly one of rungs (dial values) or rung_budgets (FLOPs)")
        values = self.rungs if self.rungs is not None else self.rung_budgets
        key = "rungs" if self.rungs is not None else "rung_budgets"
        if not values:
            raise ConfigError(f"{path}.{key}: needs at least two rungs, got none")
        if len(values) < 2:
            raise ConfigError(f"{path}.{key}: needs at least two rungs to fit anything, got {len(values)}")
        for i, (a, b) in enumerate(zip(values, values[1:])):
            if not b > a:
                raise ConfigError(f"{path}.{key}[{i + 1}]: rungs must increase, got {a} then {b}")
        if values[0] <= 0:
            raise ConfigError(f"{path}.{key}[0]: must be positive, got {values[0]}")
        if not NAME_RE.match(self.name):
            raise ConfigError(f"{path}.name: {self.name!r}: use letters, digits, '-', '_' and '.', starting with a "
                              "letter or digit (it names the ladder's pipeline steps and folders)")
        if not 0 < self.eval_fraction <= 1:
            raise ConfigError(f"{path}.eval_fraction: must be above 0 and at most 1, got {self.eval_fraction}")
        for i, tokens in enumerate(self.tokens or []):
            if not (math.isfinite(tokens) and tokens > 0):
                raise ConfigError(f"{path}.tokens[{i}]: must be a positive number of tokens, got {tokens}")
        if (self.tokens_per_param is None) == (self.tokens is None):
            raise ConfigError(f"{path}.tokens_per_param: set exactly one of tokens_per_param or tokens (per rung)")
        if self.tokens is not None and len(self.tokens) != len(values):
            raise ConfigError(f"{path}.tokens: {len(self.tokens)} values for {len(values)} rungs")
        if self.tokens is None and self.hero.tokens is None and self.hero.tokens_per_param is None:
            pass  # the hero takes the ladder's tokens_per_param
        elif self.tokens is not None and self.hero.tokens is None and self.hero.tokens_per_param is None:
            raise ConfigError(f"{path}.hero.tokens: needed when the rungs give tokens per rung")
        require_positive(path, tokens_per_param=self.tokens_per_param, eval_fraction=self.eval_fraction)
        for key in ("model", "data", "train"):
            if not isinstance(self.base.get(key), dict):
                raise ConfigError(f"{path}.base.{key}: missing the {key}: template")
        for key in self.base:
            if key not in ("model", "data", "train", "observe"):
                raise ConfigError(f"{path}.base.{key}: unknown section (expected model, data, train, observe)")
        for key in DERIVED_MODEL_KEYS:
            if key in self.base["model"]:
                raise ConfigError(f"{path}.base.model.{key}: set by the dial and shape rules; remove it")
        if "moe" in self.base["model"] and self.shape.expert_ratio is None:
            raise ConfigError(f"{path}.shape.expert_ratio: needed for a MoE base model (d_expert = ratio * d_model)")
        for key in ("steps", "batch_size", "lr", "warmup_steps", "eval_every"):
            if key in self.base["train"]:
                raise ConfigError(f"{path}.base.train.{key}: set by the scaling rules; remove it")
        listed = isinstance(self.seeds, (list, tuple))
        counts = list(self.seeds) if listed else [self.seeds]
        if listed and len(counts) != len(values):
            raise ConfigError(f"{path}.seeds: {len(counts)} counts for {len(values)} rungs (give one number "
                              "for every rung, or one count per rung)")
        for i, k in enumerate(counts):
            where = f"{path}.seeds" + (f"[{i}]" if listed else "")
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SEEDS:
                raise ConfigError(f"{where}: runs per rung must be a whole number from 1 to {MAX_SEEDS} (or a list "
                                  f"of those, one per rung), got {repr(k)[:40]}")


@dataclass(frozen=True)
class PlannedRun:
    """One rung (or the hero) with everything the scaling rules chose."""

    role: str  # "rung" or "hero"
    name: str  # model_name, e.g. 27.7B-A1.2B
    dial: int
    config: dict[str, Any]  # a RunConfig mapping, ready for `glassroom train`
    total_params: int
    active_params: int
    params: int  # N as the spec counts it (param_count)
    tokens: int  # steps * batch_size * seq_len
    flops: float  # flops_per_token * tokens
    flops_per_token: int
    steps: int
    batch_size: int
    lr: float
    warmup_steps: int
    seed: int = 0  # k: the k-th run of this rung (train.seed = base seed + k); name gets -s<k> for k >= 1
    size: str = ""  # the rung's own name (model_name), shared by all its seeds; "" = name


def load_spec(path: str | Path) -> LadderSpec:
    """The validated spec of a YAML file; errors name the file and the key path."""
    return read_spec(path)[0]


def read_spec(path: str | Path) -> tuple[LadderSpec, dict[str, Any]]:
    """(the validated spec, the mapping it was read from) with one read of the file: callers that
    need both (to run the ladder and to record its spec) pass these along instead of reading again."""
    raw = load_yaml(path)
    return spec_from_file_mapping(raw, path), raw


def spec_from_file_mapping(raw: dict[str, Any], path: str | Path) -> LadderSpec:
    try:
        spec = build_section(LadderSpec, raw, "ladder")
        expand_seeds(spec)  # every rung, each of its seeds, and the hero must be a valid run config
    except GlassroomError as exc:
        raise ConfigError(f"{path}: {str(exc).removeprefix('ladder.')}") from None
    return spec


def spec_from_mapping(raw: dict[str, Any]) -> LadderSpec:
    return build_section(LadderSpec, raw, "ladder")


def _round_up(x: float, multiple: int) -> int:
    return max(multiple, int(math.ceil(x / multiple - 1e-9)) * multiple)


def model_mapping(spec: LadderSpec, d_model: int, overrides: Optional[dict] = None) -> dict[str, Any]:
    """The `model:` mapping of the dial value `d_model`, by the shape rules."""
    rules, where = spec.shape, f"dial {d_model}"
    if d_model % rules.head_dim:
        raise ConfigError(f"{where}: d_model must be a multiple of shape.head_dim ({rules.head_dim})")
    n_heads = d_model // rules.head_dim
    if n_heads % rules.kv_group:
        raise ConfigError(f"{where}: {n_heads} heads are not a multiple of shape.kv_group ({rules.kv_group})")
    n_layers = max(1, round(d_model / rules.aspect))
    if n_layers > MAX_LAYERS:
        raise ConfigError(f"{where}: {n_layers} layers (d_model / shape.aspect {rules.aspect:g}); at most {MAX_LAYERS}")
    model = copy.deepcopy(spec.base["model"])
    model.update(d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                 n_kv_heads=max(1, n_heads // rules.kv_group), head_dim=rules.head_dim,
                 d_ff=_round_up(rules.ffn_ratio * d_model, rules.multiple_of))
    if isinstance(model.get("moe"), dict):
        model["moe"] = {**model["moe"], "d_expert": _round_up(rules.expert_ratio * d_model, rules.multiple_of)}
    for key, value in (overrides or {}).items():
        model[key] = {**model[key], **value} if isinstance(value, dict) and isinstance(model.get(key), dict) else value
    return model


def plan_run(spec: LadderSpec, role: str, d_model: int, tokens: Optional[float], tokens_per_param: Optional[float],
              model_overrides: Optional[dict] = None, train_overrides: Optional[dict] = None) -> PlannedRun:
    model = model_mapping(spec, d_model, model_overrides)
    where = f"{role} d_model {d_model}"
    try:
        model_cfg = build_section(ModelConfig, model, "model")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    counts = count_params(model_cfg)
    n = counts.active if spec.param_count == "active" else counts.non_embedding_active
    train = {**spec.base["train"], **(train_overrides or {})}
    seq_len = int(parse_count(train.get("seq_len", model_cfg.max_seq_len)))
    micro = int(parse_count(train.get("micro_batch_size", 1)))
    target_tokens = tokens if tokens is not None else tokens_per_param * n
    per_token = flops_per_token(model_cfg, seq_len)
    x = {"compute": per_token * target_tokens, "params": float(n), "d_model": float(d_model)}
    if not x["compute"] < MAX_FLOPS:
        raise ConfigError(f"{where}: {target_tokens:.3g} tokens make {x['compute']:.3g} FLOPs, beyond any plan "
                          f"(at most {MAX_FLOPS:g}); check tokens / tokens_per_param")
    try:
        batch_tokens = spec.scaling.batch_tokens.value("batch_tokens", x)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    batch_size = max(micro, int(round(batch_tokens / seq_len / micro)) * micro)
    steps = max(1, int(round(target_tokens / (batch_size * seq_len))))
    try:
        lr = spec.scaling.lr.value("lr", x)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if spec.scaling.warmup_tokens_per_param is not None:
        warmup = int(round(spec.scaling.warmup_tokens_per_param * n / (batch_size * seq_len)))
    else:
        warmup = int(round((spec.scaling.warmup_fraction or 0.0) * steps))
    warmup = min(warmup, steps)
    train.update(steps=steps, batch_size=batch_size, seq_len=seq_len, lr=float(f"{lr:.4g}"), warmup_steps=warmup,
                 eval_every=max(1, int(round(spec.eval_fraction * steps))))
    config = {"model": model, "data": copy.deepcopy(spec.base["data"]), "train": train}
    if "observe" in spec.base:
        config["observe"] = copy.deepcopy(spec.base["observe"])
    try:
        run_config_from_mapping(copy.deepcopy(config), where)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    real_tokens = steps * batch_size * seq_len
    return PlannedRun(role=role, name=model_name(counts.total, counts.active), dial=d_model, config=config,
                      total_params=counts.total, active_params=counts.active, params=n, tokens=real_tokens,
                      flops=float(per_token) * real_tokens, flops_per_token=per_token, steps=steps,
                      batch_size=batch_size, lr=train["lr"], warmup_steps=warmup)


def _dial_for_budget(spec: LadderSpec, budget: float, i: int) -> int:
    """The dial value (a multiple of head_dim) whose planned compute is nearest `budget` in log."""
    step, best = spec.shape.head_dim, None
    for k in range(1, 4097):
        d = k * step
        tokens = None if spec.tokens is None else spec.tokens[i]
        run = plan_run(spec, "rung", d, tokens, spec.tokens_per_param)
        gap = abs(math.log(run.flops / budget))
        if best is None or gap < best[0]:
            best = (gap, d)
        if run.flops > budget:
            break
    return best[1]


def dial_values(spec: LadderSpec) -> list[int]:
    if spec.rungs is not None:
        return list(spec.rungs)
    values = [_dial_for_budget(spec, b, i) for i, b in enumerate(spec.rung_budgets)]
    for i, (a, b) in enumerate(zip(values, values[1:])):
        if b <= a:
            raise ConfigError(f"rung_budgets[{i + 1}]: budgets too close, both give d_model {a}; spread them out")
    return values


def expand(spec: LadderSpec) -> tuple[list[PlannedRun], PlannedRun]:
    """(rungs, hero): every run of the ladder as a validated RunConfig mapping, smallest first."""
    rungs = []
    for i, d in enumerate(dial_values(spec)):
        tokens = None if spec.tokens is None else float(spec.tokens[i])
        rungs.append(plan_run(spec, "rung", d, tokens, spec.tokens_per_param))
    names = [r.name for r in rungs]
    for i, name in enumerate(names):
        if names.index(name) != i:
            raise ConfigError(f"rungs: two rungs are both named {name}; spread the dial values further apart")
    h = spec.hero
    hero = plan_run(spec, "hero", h.d_model, None if h.tokens is None else float(h.tokens),
                     h.tokens_per_param or spec.tokens_per_param, h.model, h.train)
    if hero.flops <= rungs[-1].flops:
        raise ConfigError(f"hero: {hero.flops:.3g} FLOPs is not more than the largest rung's ({rungs[-1].flops:.3g})")
    return rungs, hero


def seed_counts(spec: LadderSpec) -> list[int]:
    """K, the runs of each rung (the spec's `seeds`), smallest rung first."""
    n = len(spec.rungs if spec.rungs is not None else spec.rung_budgets)
    return list(spec.seeds) if isinstance(spec.seeds, list) else [int(spec.seeds)] * n


def base_seed(spec: LadderSpec, rungs: Optional[list[PlannedRun]] = None) -> int:
    """train.seed of the base recipe as the rungs' validated configs hold it (0 when it sets none):
    seed k of a rung trains with base + k."""
    rungs = rungs if rungs is not None else expand(spec)[0]
    return run_config_from_mapping(copy.deepcopy(rungs[0].config), "rung").train.seed


def with_seed(run: PlannedRun, k: int, seed: int) -> PlannedRun:
    """Run k of a rung: its config with train.seed = `seed`, named `<rung>-s<k>` (k = 0: the rung as is)."""
    if k == 0:
        return dataclasses.replace(run, size=run.name)
    config = copy.deepcopy(run.config)
    config["train"]["seed"] = seed
    return dataclasses.replace(run, name=f"{run.name}-s{k}", config=config, seed=k, size=run.name)


def expand_seeds(spec: LadderSpec) -> tuple[list[PlannedRun], PlannedRun]:
    """(runs, hero): every run the ladder trains, each rung followed by its seeds 1..K-1 (expand gives
    one run per rung). Seed 0 is the rung exactly as `expand` plans it (its config and name unchanged);
    seed k >= 1 sets train.seed = base seed + k and is named `<rung>-s<k>`."""
    rungs, hero = expand(spec)
    base = base_seed(spec, rungs)
    runs = []
    for run, k_total in zip(rungs, seed_counts(spec)):
        if base + k_total - 1 > MAX_SEED:
            raise ConfigError(f"seeds: base.train.seed {base} + {k_total - 1} is beyond train.seed's range "
                              f"(at most {MAX_SEED})")
        runs.extend(with_seed(run, k, base + k) for k in range(k_total))
    return runs, hero
