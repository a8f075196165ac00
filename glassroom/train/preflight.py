"""What `glassroom train` checks before it creates or touches RUN_DIR, so a bad input costs no step.

The config itself is validated by glassroom.train.config (types, ranges, finite numbers). Here:
the launch (torchrun's variables on one process), `train.task` against the manifest's `task`, the dataset (`data.path` is a built dataset
whose manifest, shard indexes and token files agree), the config against the dataset (every
domain in `data.weights` exists, no domain is empty, every shard trained or evaluated on holds at
least `train.seq_len + 1` tokens, `model.vocab_size` covers the tokenizer) and every token id of
those shards against the tokenizer's vocabulary (glassroom.data.shards: a full scan of small
shards, the id recorded at build time plus a sampled scan of big ones), and memory: a lower bound
of what one process needs (weights, gradients and AdamW moments at 16 bytes a parameter, sharded
under FSDP; the batch's token ids; one micro-batch's logits; the RoPE tables) against the memory available (CPU:
MemAvailable + SwapFree for all local processes together; GPU: free device memory). Each problem is
one GlassroomError naming the key, the shard or the file.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from glassroom.errors import ConfigError, GlassroomError
from glassroom.memory import available_memory
from glassroom.model.accounting import count_params
from glassroom.units import format_count

TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def check_launch(env=None) -> None:
    """One process, or a torchrun launch whose variables are all there and consistent."""
    env = os.environ if env is None else env
    if "WORLD_SIZE" not in env:
        return
    try:
        world = int(env["WORLD_SIZE"])
    except ValueError:
        raise GlassroomError(f"WORLD_SIZE={env['WORLD_SIZE']!r}: not a whole number; unset it, or launch with torchrun") from None
    if world < 1:
        raise GlassroomError(f"WORLD_SIZE={world}: must be 1 or more; unset it, or launch with torchrun")
    if world == 1:
        return
    missing = [k for k in TORCHRUN_VARS if not env.get(k)]
    if missing:
        raise GlassroomError(
            f"WORLD_SIZE={world} is set but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not: "
            f"start many processes with torchrun --nproc_per_node={world} -m glassroom train ..., or unset WORLD_SIZE"
        )
    restarts = env.get("TORCHELASTIC_MAX_RESTARTS", "0")
    if restarts.isdigit() and int(restarts) > 0 and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        raise GlassroomError(
            f"torchrun --max-restarts {restarts}: the workers would share torchrun's rendezvous store, and a restarted "
            "worker then reads the failed attempt's addresses and hangs (PyTorch issue 135712); export "
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 before torchrun (docs/train.md, Many machines)")
    for key in ("RANK", "LOCAL_RANK"):
        try:
            value = int(env[key])
        except ValueError:
            raise GlassroomError(f"{key}={env[key]!r}: not a whole number; launch with torchrun") from None
        if not 0 <= value < world:
            raise GlassroomError(f"{key}={value}: not in 0..{world - 1} (WORLD_SIZE={world}); launch with torchrun")


def open_dataset(cfg):
    """The dataset of `data.path`, its manifest checked; errors name data.path."""
    from glassroom.data.mixture import Dataset  # lazy: numpy loads only when this runs

    path = Path(cfg.data.path)
    if not path.exists():
        raise ConfigError(f"data.path: {path}: not a built dataset (no such folder); run glassroom data build first")
    if not path.is_dir():
        raise ConfigError(f"data.path: {path}: not a built dataset (a file, not a folder)")
    try:
        return Dataset(path)
    except GlassroomError as exc:
        raise ConfigError(f"data.path: {exc}") from None


def check_data(cfg, dataset) -> None:
    """The config against the dataset, and every shard it will read (see the module doc)."""
    tc, path = cfg.train, dataset.path
    domains = dataset.domains
    task = dataset.manifest.get("task", "pretrain")
    if task != tc.task:
        raise ConfigError(f"train.task: {tc.task}, but {path / 'manifest.json'} holds {task} data; set train.task: "
                          f"{task}, or point data.path at a dataset built with `task: {tc.task}` in its recipe")
    from glassroom.data.mixture import resolve_weights, weight_domain  # lazy: numpy loads only when this runs

    for name in (cfg.data.weights or {}):
        if weight_domain(name) not in domains:
            raise ConfigError(f"data.weights.{name}: the dataset {path} has no domain {weight_domain(name)!r} "
                              f"(it has {', '.join(domains)})")
    if cfg.data.weights and any(":" in name for name in cfg.data.weights):  # quality cells (docs/data-quality.md)
        try:
            _, spans = resolve_weights(dict(cfg.data.weights), dataset)
        except GlassroomError as exc:
            raise ConfigError(f"data.weights: {str(exc).removeprefix('mixture weights: ')}") from None
        for key, (_, first, end) in spans.items():
            if ":" in key and end - first < tc.seq_len + 1:
                raise ConfigError(f"data.weights.{key}: cell {key} has {end - first} train tokens, fewer than one "
                                  f"sequence (train.seq_len + 1 = {tc.seq_len + 1}); lower train.seq_len or give it weight 0")
    vocab = int(dataset.vocab_size)
    if cfg.model.vocab_size < vocab:
        raise ConfigError(f"model.vocab_size: {cfg.model.vocab_size} is smaller than the dataset's tokenizer "
                          f"({vocab}, {path / 'manifest.json'}); raise model.vocab_size to at least {vocab}")
    entries = dataset.manifest["domains"]
    for name in domains:
        if entries[name]["train"]["tokens"] == 0 and entries[name]["validation"]["tokens"] == 0:
            raise ConfigError(f"data.path: domain {name} of {path} is empty (no tokens); rebuild the dataset "
                              f"with documents for it or without it")
    if cfg.data.weights is not None:
        trained = list(dict.fromkeys(weight_domain(d) for d, w in cfg.data.weights.items() if w > 0))
    else:
        trained = [d for d in domains if entries[d]["train"]["tokens"] > 0]
    needs = [(d, "train") for d in trained] + [(d, "validation") for d in domains]
    for domain, split in needs:
        shard = dataset.shard(domain, split)
        if len(shard) == 0 and split == "train":
            raise ConfigError(f"data.weights.{domain}: domain {domain} has no train tokens "
                              f"({shard.paths['tokens']}); give it weight 0")
        if len(shard) < tc.seq_len + 1 and tc.task == "pretrain":  # conversations are packed whatever their length
            use = "trained on" if split == "train" else "evaluated on"
            raise ConfigError(
                f"train.seq_len: {tc.seq_len} is too long for {shard.paths['tokens']} ({len(shard)} tokens; one "
                f"sequence needs seq_len + 1, and domain {domain} is {use}); lower train.seq_len"
            )
        shard.check_token_ids(vocab, "the tokenizer's vocabulary size in manifest.json")


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB"


def parameter_count(model) -> int:
    """Total parameters, without a loop over layers (an absurd n_layers must not hang the check)."""
    base = count_params(dataclasses.replace(model, n_layers=0)).total
    if model.moe is None:
        return base + model.n_layers * (count_params(dataclasses.replace(model, n_layers=1)).total - base)
    dense = min(model.moe.first_dense_layers, model.n_layers)
    total = base
    if dense:
        one = dataclasses.replace(model, n_layers=1, moe=dataclasses.replace(model.moe, first_dense_layers=1))
        total += dense * (count_params(one).total - base)
    one = dataclasses.replace(model, n_layers=1, moe=dataclasses.replace(model.moe, first_dense_layers=0))
    return total + (model.n_layers - dense) * (count_params(one).total - base)


def check_memory(cfg, device, world_size: int = 1, sharded: bool = False, env=None) -> None:
    """Refuse a run whose lower-bound memory (see the module doc) exceeds what is available."""
    env = os.environ if env is None else env
    tc, model = cfg.train, cfg.model
    params = parameter_count(model)
    parts = {  # key: (bytes per process, what needs them, what to do)
        "model": (params * 16 / (world_size if sharded else 1),
                  f"{format_count(params)} parameters need {{need}} for weights, gradients and AdamW moments "
                  f"(16 bytes each{', sharded' if sharded else ''})", "shrink the model (glassroom plan shows its size)"),
        "train.batch_size": (tc.batch_size / world_size * (tc.seq_len + 1) * 16,
                             f"{tc.batch_size} sequences of {tc.seq_len + 1} token ids need {{need}}", "lower it"),
        "model.max_seq_len": (model.max_seq_len * model.dim_per_head * 12,
                              f"the RoPE tables for {model.max_seq_len} positions need {{need}}",
                              "lower it (a step uses train.seq_len positions)"),
        "train.micro_batch_size": (tc.micro_batch_size * tc.seq_len * model.vocab_size * 12,
                                   f"the logits of {tc.micro_batch_size} sequences over {model.vocab_size} tokens "
                                   f"need {{need}}", "lower it"),
    }
    local = 1
    if device.type != "cuda":  # processes on one host share its memory
        try:
            local = int(env.get("LOCAL_WORLD_SIZE", world_size))
        except ValueError:
            local = world_size
    need = sum(n for n, _, _ in parts.values()) * local
    free = available_memory(device)
    if free is None or need <= free:
        return
    key, (biggest, text, advice) = max(parts.items(), key=lambda kv: kv[1][0])
    where = "GPU memory free" if device.type == "cuda" else "memory available"
    per = f" in each of {local} processes" if local > 1 else ""
    raise ConfigError(f"{key}: {text.format(need=_gb(biggest))}{per}, more than the {_gb(free)} of {where}; {advice}")
