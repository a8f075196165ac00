"""The data recipe: which sources make up each domain, and how they are cleaned, split and tokenized.

A recipe is a YAML file validated into frozen dataclasses by glassroom.config.build_section, so an
unknown key, a wrong type or an impossible value is a one-line error naming its key path
(`domains.prose.sources[1].max_bytes`). docs/data-build.md describes every key.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from glassroom import yaml_io
from glassroom.config import apply_overrides, as_dict, build_section, require_positive
from glassroom.errors import ConfigError, GlassroomError

SOURCE_KINDS = (
    "files", "archive", "jsonl", "parquet", "python-stdlib", "bible", "shakespeare", "austen",
    "brown", "fortunes", "dictd", "man", "conversations", "preferences",
)
CHAT_KINDS = ("conversations", "preferences")  # the kinds of task: sft (conversations) and task: dpo
TASK_KINDS = {"sft": "conversations", "dpo": "preferences"}

# Which optional keys each kind takes (beyond kind, name, max_bytes, max_docs, chunk_bytes).
_KIND_KEYS = {
    "files": {"path", "exclude", "format"},
    "archive": {"path", "members", "exclude", "format"},
    "jsonl": {"path", "text_field", "id_field"},
    "parquet": {"path", "text_field", "id_field"},
    "python-stdlib": {"exclude"},
    "bible": set(),
    "shakespeare": set(),
    "austen": set(),
    "brown": set(),
    "fortunes": {"path", "exclude"},
    "dictd": {"names"},
    "man": {"lang", "sections", "exclude"},
    "conversations": {"path", "exclude", "messages_field", "id_field"},
    "preferences": {"path", "exclude", "id_field"},
}
_REQUIRED = {"files": {"path"}, "archive": {"path"}, "jsonl": {"path"}, "parquet": {"path"}, "dictd": {"names"},
             "conversations": {"path"}, "preferences": {"path"}}
_DEFAULTS = {"text_field": "text", "format": "text", "sections": "1-8"}


@dataclass(frozen=True)
class SourceConfig:
    """One source of documents for a domain; `kind` says which extractor reads it."""

    kind: Literal[
        "files", "archive", "jsonl", "parquet", "python-stdlib", "bible", "shakespeare", "austen",
        "brown", "fortunes", "dictd", "man", "conversations", "preferences",
    ]
    name: Optional[str] = None  # label in stats and the manifest; default derived from kind/path
    path: Optional[str] = None  # a file, folder or glob pattern (`**` recurses); ~ and $VARS expand
    members: Optional[str] = None  # archive: glob of member names to read
    exclude: list[str] = field(default_factory=list)  # glob patterns (on the path) to skip
    format: Optional[Literal["text", "html", "gutenberg"]] = None  # how files are turned into text
    text_field: Optional[str] = None  # jsonl/parquet: the field with the document text
    id_field: Optional[str] = None  # jsonl/parquet: a field with a stable document id
    names: list[str] = field(default_factory=list)  # dictd: database names (gcide, wn, ...)
    lang: Optional[str] = None  # man: a language folder (de, fr, ...); default English
    sections: Optional[str] = None  # man: section numbers, e.g. "1-8" or "1,5,8"
    max_bytes: Optional[int] = None  # cap on raw bytes taken from this source
    max_docs: Optional[int] = None  # cap on documents taken from this source
    chunk_bytes: Optional[int] = None  # split longer documents (and pack short entries) to this size
    messages_field: Optional[str] = None  # conversations: the field with the messages list
    split: Optional[Literal["train", "validation"]] = None  # every document of this source goes to this split

    def check(self, path: str) -> None:
        allowed = _KIND_KEYS[self.kind]
        for key in ("path", "members", "format", "text_field", "id_field", "lang", "sections", "messages_field"):
            if getattr(self, key) is not None and key not in allowed:
                raise ConfigError(f"{path}.{key}: not used by a {self.kind} source")
        for key in ("exclude", "names"):
            if getattr(self, key) and key not in allowed:
                raise ConfigError(f"{path}.{key}: not used by a {self.kind} source")
        for key in _REQUIRED.get(self.kind, ()):
            if not getattr(self, key):
                raise ConfigError(f"{path}.{key}: a {self.kind} source needs it")
        require_positive(path, max_bytes=self.max_bytes, max_docs=self.max_docs, chunk_bytes=self.chunk_bytes)
        if self.path is not None and not self.path.strip():
            raise ConfigError(f"{path}.path: is empty; give a file, folder or glob")
        if self.path is not None and "\x00" in self.path:
            raise ConfigError(f"{path}.path: contains a NUL character")
        if self.sections is not None:
            _check_sections(f"{path}.sections", self.sections)
        for i, name in enumerate(self.names):
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", name):
                raise ConfigError(f"{path}.names[{i}]: {name!r} is not a dictd database name (gcide, wn, foldoc, ...)")
        if self.lang is not None and not re.fullmatch(r"[A-Za-z]{2,3}([_.@][A-Za-z0-9-]+)*", self.lang):
            raise ConfigError(f"{path}.lang: {self.lang!r} is not a language folder name (de, fr, pt_BR, ...)")
        if self.kind in CHAT_KINDS and self.chunk_bytes is not None:
            raise ConfigError(f"{path}.chunk_bytes: a {self.kind} source is not cut into chunks; remove it")
        if self.chunk_bytes is not None and self.chunk_bytes < 256:
            raise ConfigError(f"{path}.chunk_bytes: must be at least 256, got {self.chunk_bytes}")

    def option(self, key: str):
        """The value of `key`, or its default for kinds that use it."""
        value = getattr(self, key)
        return _DEFAULTS.get(key) if value is None else value

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.kind == "dictd":
            return "dictd:" + "+".join(self.names)
        if self.kind == "man":
            return f"man:{self.lang or 'en'}"
        if self.path:
            return f"{self.kind}:{self.path}"
        return self.kind


@dataclass(frozen=True)
class DomainConfig:
    sources: list[SourceConfig]

    def check(self, path: str) -> None:
        if not self.sources:
            raise ConfigError(f"{path}.sources: a domain needs at least one source")
        labels = [s.label for s in self.sources]
        for label in labels:
            if labels.count(label) > 1:
                raise ConfigError(f"{path}.sources: two sources are both named {label!r}; give one a name:")


@dataclass(frozen=True)
class CleanConfig:
    """Quality filters; a document failing any is removed and counted under that reason."""

    min_bytes: int = 64  # too_short: fewer UTF-8 bytes than this
    max_bytes: int = 1_000_000  # too_long: more UTF-8 bytes than this
    min_letter_fraction: float = 0.25  # few_letters: letters / characters below this
    max_garbage_fraction: float = 0.01  # garbled: control characters and U+FFFD above this share
    max_duplicate_line_fraction: float = 0.5  # repetitive: bytes in repeated lines above this share
    max_line_bytes: int = 20_000  # long_lines: a line longer than this (minified code, encoded data)

    def check(self, path: str) -> None:
        require_positive(path, min_bytes=self.min_bytes, max_bytes=self.max_bytes, max_line_bytes=self.max_line_bytes)
        if self.min_bytes >= self.max_bytes:
            raise ConfigError(f"{path}.min_bytes: must be below max_bytes ({self.max_bytes})")
        for key in ("min_letter_fraction", "max_garbage_fraction", "max_duplicate_line_fraction"):
            value = getattr(self, key)
            if not 0 <= value <= 1:
                raise ConfigError(f"{path}.{key}: must be between 0 and 1, got {value}")


@dataclass(frozen=True)
class DedupConfig:
    """Exact and near-duplicate removal (docs/data-dedup.md)."""

    exact: bool = True  # drop documents whose normalised text hashes the same as an earlier one
    fuzzy: bool = True  # drop near duplicates: MinHash LSH candidates, verified, clustered
    threshold: float = 0.8  # Jaccard similarity of word-shingle sets at or above which documents are duplicates
    num_perm: int = 128  # MinHash permutations (bands x rows are derived from threshold and recall)
    shingle_words: int = 5  # words per shingle
    recall: float = 0.95  # the least probability that LSH makes a pair at exactly the threshold a candidate
    examples: int = 1000  # duplicate clusters kept (with their texts) in removed/duplicates.jsonl for the browser

    def check(self, path: str) -> None:
        if not 0 < self.threshold < 1:
            raise ConfigError(f"{path}.threshold: must be between 0 and 1 (exclusive), got {self.threshold}")
        if not 16 <= self.num_perm <= 1024:
            raise ConfigError(f"{path}.num_perm: must be between 16 and 1024, got {self.num_perm}")
        if not 0.5 <= self.recall < 1:
            raise ConfigError(f"{path}.recall: must be at least 0.5 and below 1, got {self.recall}")
        require_positive(path, shingle_words=self.shingle_words)
        if self.examples < 0:
            raise ConfigError(f"{path}.examples: must be 0 or more, got {self.examples}")
        if self.fuzzy:  # bands x rows must reach `recall` at the threshold (names num_perm when not)
            from glassroom.data.dedup import choose_bands  # lazy: numpy loads only when this runs

            choose_bands(self.threshold, self.num_perm, self.recall, path=path)


@dataclass(frozen=True)
class SplitConfig:
    validation_fraction: float = 0.02  # share of documents held out, chosen by a hash of the id
    seed: int = 0  # changes which documents are held out

    def check(self, path: str) -> None:
        if not 0 < self.validation_fraction < 0.5:
            raise ConfigError(f"{path}.validation_fraction: must be above 0 and below 0.5, got {self.validation_fraction}")


@dataclass(frozen=True)
class TokenizerConfig:
    vocab_size: int = 8192  # including the EOS token and the 256 byte tokens
    sample_bytes: int = 20_000_000  # training sample, split evenly over domains (train split only)
    path: Optional[str] = None  # an existing tokenizer.json to use instead of training one
    min_frequency: int = 2

    def check(self, path: str) -> None:
        if not 300 <= self.vocab_size <= 1_000_000:
            raise ConfigError(f"{path}.vocab_size: must be between 300 and 1M, got {self.vocab_size}")
        require_positive(path, sample_bytes=self.sample_bytes, min_frequency=self.min_frequency)


@dataclass(frozen=True)
class QualityConfig:
    """The quality classifier and its buckets (docs/data-quality.md)."""

    enabled: bool = True  # train the classifier, score every document, bucket each domain
    buckets: int = 5  # quality levels per domain: equal-count quantiles of the score, q0 lowest
    sample_docs: int = 4000  # at most this many kept train documents feed the classifier's training set
    positive_domains: list[str] = field(default_factory=list)  # domains whose text is the positive class; empty: all
    seed: int = 0

    def check(self, path: str) -> None:
        if not 2 <= self.buckets <= 10:
            raise ConfigError(f"{path}.buckets: must be between 2 and 10, got {self.buckets}")
        require_positive(path, sample_docs=self.sample_docs)
        if self.sample_docs < 20:
            raise ConfigError(f"{path}.sample_docs: must be at least 20, got {self.sample_docs}")


@dataclass(frozen=True)
class DecontaminateConfig:
    """Removal of training documents that share long n-grams with evaluation text (docs/data-decontamination.md)."""

    enabled: bool = True
    ngram: int = 13  # words per n-gram (lowercased words, as the dedup shingles count them)
    action: Literal["remove", "flag"] = "remove"  # flag: keep the document, mark it in the shard index
    validation: bool = True  # the build's own validation split (and so the downstream tasks made from it) is evaluation text
    files: list[str] = field(default_factory=list)  # more evaluation text: .txt, .jsonl, .json or a folder of them
    common_docs: int = 10  # an n-gram in more train documents than this is a common phrase, not a leak
    # contaminated (docs/data-decontamination.md): one passage copied whole spans eval_passage of an evaluation
    # text's words, or all shared n-grams cover eval_coverage of them, or train_coverage of the document's own
    eval_passage: float = 0.3
    eval_coverage: float = 0.5
    train_coverage: float = 0.5
    examples: int = 1000  # contaminated documents kept (with their texts) in removed/contaminated.jsonl

    def check(self, path: str) -> None:
        if not 8 <= self.ngram <= 50:
            raise ConfigError(f"{path}.ngram: must be between 8 and 50 words, got {self.ngram}")
        require_positive(path, common_docs=self.common_docs)
        for key in ("eval_passage", "eval_coverage", "train_coverage"):
            value = getattr(self, key)
            if not 0 < value <= 1:
                raise ConfigError(f"{path}.{key}: must be a share above 0 and at most 1 (0.3 is 30%), got {value!r}")
        if self.examples < 0:
            raise ConfigError(f"{path}.examples: must be 0 or more, got {self.examples}")
        for i, f in enumerate(self.files):
            if not f.strip() or "\x00" in f:
                raise ConfigError(f"{path}.files[{i}]: give a file or folder path")


@dataclass(frozen=True)
class Recipe:
    name: str
    domains: dict[str, DomainConfig]
    task: Literal["pretrain", "sft", "dpo"] = "pretrain"  # sft: conversations; dpo: preference pairs
    clean: CleanConfig = field(default_factory=CleanConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    decontaminate: DecontaminateConfig = field(default_factory=DecontaminateConfig)

    def check(self, path: str) -> None:
        if not self.domains:
            raise ConfigError(f"{path}.domains: a recipe needs at least one domain")
        for name in self.domains:
            if not name or not all(c.isalnum() or c in "-_" for c in name):
                raise ConfigError(f"{path}.domains.{name}: domain names use letters, digits, - and _ only")
        want = TASK_KINDS.get(self.task)
        for name, domain in self.domains.items():
            for i, src in enumerate(domain.sources):
                where = f"{path}.domains.{name}.sources[{i}].kind"
                if want and src.kind != want:
                    raise ConfigError(f"{where}: a task: {self.task} recipe takes {want} sources, not {src.kind}; "
                                      f"use kind: {want} or set task: to match the data")
                if not want and src.kind in CHAT_KINDS:
                    raise ConfigError(f"{where}: a {src.kind} source needs task: "
                                      f"{'sft' if src.kind == 'conversations' else 'dpo'} at the top of the recipe "
                                      "(this recipe builds pretraining data)")
        for i, name in enumerate(self.quality.positive_domains):
            if name not in self.domains:
                raise ConfigError(f"{path}.quality.positive_domains[{i}]: no domain {name!r} "
                                  f"(the recipe has {', '.join(self.domains)})")


def _check_sections(path: str, text: str) -> None:
    """man sections: "1-8" or "1,5,8": numbers 1 to 9, ranges low-high."""
    for part in str(text).split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ConfigError(f"{path}: {text!r} is not a list of man sections like 1-8 or 1,5,8")
        if not 1 <= int(lo) <= int(hi or lo) <= 9:
            raise ConfigError(f"{path}: {text!r}: sections run from 1 to 9, low before high")


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """A validated recipe from a YAML file, with `key.path=value` overrides applied first. Read with
    glassroom.yaml_io (size, depth and alias-expansion limits); every problem is one ConfigError."""
    try:
        raw = yaml_io.read_user_file(path, "a recipe YAML file")
    except GlassroomError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a YAML mapping with name: and domains: (see experiments/data-*.yaml)")
    raw = apply_overrides(raw, overrides or [])
    return build_section(Recipe, raw, "recipe")


def recipe_dict(recipe: Recipe) -> dict:
    """The resolved recipe; keys added for conversation data are left out at their defaults, so a
    pretraining recipe resolves (and hashes) as it did before they existed."""
    out = as_dict(recipe)
    if out.get("task") == "pretrain":
        del out["task"]
    for domain in out["domains"].values():
        for src in domain["sources"]:
            for key in ("messages_field", "split"):
                if src.get(key) is None:
                    src.pop(key, None)
    return out


def recipe_hash(recipe: Recipe) -> str:
    """sha256 of the resolved recipe as canonical JSON: equal recipes build equal datasets."""
    text = json.dumps(recipe_dict(recipe), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
