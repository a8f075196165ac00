"""The model card (README.md) of an exported folder: what the model is and where it came from.

Parameters (total and active), training tokens by domain at the exported step, per-domain bits per
byte of the last evaluation at or before that step (`eval/<domain>/bpb`), downstream scores
(`downstream/<task>/<metric>`) if the store has any, and provenance: run name, step, the dataset's
manifest digest, the git commit and the preregistered prediction's seal digest when recorded, and
the run's config. Everything that comes from the run passes through glassroom.observe.redact.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from pathlib import Path
from typing import Any, Optional

import yaml

from glassroom.config import build_section
from glassroom.model.accounting import count_params
from glassroom.model.config import ModelConfig
from glassroom.observe.redact import redact, redact_text
from glassroom.units import format_count, model_name


Value = tuple[int, float]  # (the step it was measured at, the value)


def _store_values(run_dir: Path, step: int) -> tuple[dict[str, Value], dict[str, Value], Optional[dict]]:
    """(eval/<domain>/bpb, downstream/* (step, value) last at or before `step`, the prediction artifact)."""
    from glassroom.observe.store import store_path  # lazy: numpy loads only when this runs

    if not store_path(run_dir).is_file():
        return {}, {}, None
    try:
        return _read_store(run_dir, step)
    except (sqlite3.DatabaseError, OSError):  # a damaged store: the card says less, the export goes on
        return {}, {}, None


def _read_store(run_dir: Path, step: int) -> tuple[dict[str, Value], dict[str, Value], Optional[dict]]:
    from glassroom.observe.store import StoreReader  # lazy: numpy loads only when this runs

    bpb, downstream = {}, {}
    with StoreReader(run_dir) as reader:
        for name in reader.names():
            is_bpb = name.startswith("eval/") and name.endswith("/bpb")
            if not (is_bpb or name.startswith("downstream/")):
                continue
            steps, values = reader.series(name, end=step)
            if len(steps):
                (bpb if is_bpb else downstream)[name] = (int(steps[-1]), float(values[-1]))
        prediction = reader.artifact("prediction")
    return bpb, downstream, prediction


def md(text: str) -> str:
    """`text` (a run name, a path, a domain) redacted and safe to show inside a line of Markdown: control
    characters (a newline in a folder name) shown as \\xNN, and the characters that make HTML, entities,
    links, emphasis, code or table cells backslash-escaped, so it reads as the same text and nothing else."""
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in redact_text(text))
    return re.sub(r"([\\`*\[\]<>|&~])", r"\\\1", text)  # `_` inside a word (paths, names) is left as is


def _digest(path: Path) -> Optional[str]:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _commit(run_dir: Path, prediction: Optional[dict]) -> Optional[str]:
    try:
        return json.loads((run_dir / "provenance.json").read_text())["commit"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    seal = (prediction or {}).get("seal") if isinstance(prediction, dict) else None
    return seal.get("commit") if isinstance(seal, dict) else None


def model_card(run_dir: Path, config: dict[str, Any], step: int, arch_class: str, train_state: dict) -> str:
    cfg = build_section(ModelConfig, config["model"], "model")
    counts = count_params(cfg)
    bpb, downstream, prediction = _store_values(run_dir, step)
    name = md(run_dir.name)
    lines = ["---", "library_name: transformers", "pipeline_tag: text-generation", "tags: [glassroom]", "---", "",
             f"# {name} ({model_name(counts.total, counts.active)})", "",
             f"A {'Mixture-of-Experts' if cfg.moe else 'dense'} decoder trained with glassroom, exported at step "
             f"{step} as `{arch_class}` for Hugging Face `transformers`.", "",
             "## Parameters", "", f"- total: {counts.total:,} ({format_count(counts.total)})",
             # "active: N per token", not "per token: N": a value after "token:" reads as a secret to redact
             f"- active: {counts.active:,} ({format_count(counts.active)}) per token", ""]
    tokens = train_state.get("tokens_by_domain") or {}
    lines += ["## Training tokens by domain", "", "| domain | tokens |", "|---|---|"]
    lines += [f"| {md(str(d))} | {int(n):,} |" for d, n in sorted(tokens.items())]
    lines += [f"| total | {int(train_state.get('tokens_seen', sum(tokens.values()))):,} |", ""]
    if bpb:  # the step of each value is shown: the last evaluation need not be at the exported step
        lines += [f"## Bits per byte (held-out, last evaluation at or before step {step})", "",
                  "| domain | bpb | at step |", "|---|---|---|"]
        lines += [f"| {md(n[len('eval/'):-len('/bpb')])} | {v:.4f} | {at} |" for n, (at, v) in sorted(bpb.items())]
        lines.append("")
    if downstream:
        lines += [f"## Downstream scores (last at or before step {step})", "", "| metric | value | at step |",
                  "|---|---|---|"]
        lines += [f"| {md(n[len('downstream/'):])} | {v:.4f} | {at} |" for n, (at, v) in sorted(downstream.items())]
        lines.append("")
    data_path = Path(str((config.get("data") or {}).get("path", "")))
    seal = prediction.get("seal") if isinstance(prediction, dict) else None
    lines += ["## Provenance", "", f"- run: {name}", f"- step: {step}",
              f"- dataset manifest sha256 (data.path at export): "
              f"{_digest(data_path / 'manifest.json') or 'unknown (dataset not found)'}"]
    init = config.get("init")
    if isinstance(init, dict) and init.get("from"):
        at = f" (step {init['step']})" if init.get("step") is not None else ""
        lines.append(f"- initialised from: {md(str(init['from']))}{md(at)}")
    commit = _commit(run_dir, prediction)
    if commit:
        lines.append(f"- git commit: {md(str(commit))}")
    if isinstance(seal, dict) and seal.get("digest"):
        lines.append(f"- preregistered prediction seal (sha256): {md(str(seal['digest']))}")
    shown = yaml.safe_dump(redact(config), sort_keys=False).rstrip()
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", shown)), default=0))  # longer than any inside
    lines += ["", "## Config", "", f"{fence}yaml", shown, fence, ""]
    return "\n".join(lines)
