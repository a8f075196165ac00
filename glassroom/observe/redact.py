"""Redaction: what every path that shows a run to the outside passes its text through.

Used by `glassroom serve` (run meta, events, the live stream), `glassroom publish` (meta.json,
config, events, notes, atlas excerpts) and the mirrors' config uploads (wandb). Three entry points:

- `redact(tree)`: a copy of a config-like tree (dicts, lists, scalars). A value under a key that
  looks secret (`api_key`, `hf_token`, `db-password`, `auth`, ...) becomes `<redacted>`, and so does a
  whole dict or list under such a key (`auth: {user: .., pass: ..}`) or under an environment section
  (`env`, `environment`, `env_vars`, ...); every other string goes through `redact_text`.
- `redact_text(text)`: a copy of a string with, anywhere inside it, credentials in URLs
  (`https://user:pass@host` -> `https://<redacted>@host`), PEM and PuTTY private keys, token shapes,
  `Bearer ...` credentials, XML elements with a secret name (`<password>..</password>`), and the
  values of `KEY=VALUE`, `KEY: VALUE`, `--key=value` and `--key value` pairs whose key looks secret,
  replaced by `<redacted>` (a value after `KEY:` runs to the end of the line or the next comma,
  semicolon or bracket; after `=` to the next space).
- `public_name(name)`: a name that stands in URLs and file names (a run's folder path) with each
  secret replaced by `redacted-<8 hex>`, stable per name (glassroom.observe.runs.find_runs).

Token rules, from three sources: Kingfisher's rule set (glassroom.observe.secret_rules: the
Betterleaks (gitleaks') and Veles rules, about 490 shapes, read from the installed kingfisher-bin);
the regex rules of detect-secrets' plugins (LIBRARY_RULES, read from its plugin registry when this
module loads), less the ones listed in _LIBRARY_SKIP; and OWN_RULES for the shapes both lack, with
one class rule (_PREFIXED_RE: a service's short prefix and a random mixed-case body) for services
no rule names. OWN_RULES were written when detect-secrets was the only source (Slack workflow and
trigger webhooks, Discord webhooks, `hf_`, `api_org_`, `sk-proj-`, `ghp_` of other lengths, Mailgun,
Shopify, Doppler, age, GOCSPX-, Linear, Databricks, Groq, Replicate, GitHub App `v1.` tokens, AWS
session tokens, ...); several overlap Kingfisher's now and are kept because they are wider. A token is found wherever it starts except inside a run of letters and digits, so one
right after `-`, `_`, `/` (`exp-hf_...`, `sweep_ghp_...`) is found too. detect-secrets' keyword and
entropy plugins are not used: bench/redaction_rules.py measured them (the entropy plugins flag every
quoted commit sha and sha256 digest, the keyword plugin found none of the planted shapes).

Key rule (`key_is_secret`): the key is split into words on `_`, `-`, `.`, spaces and camelCase; it is
secret when a word is one of SECRET_WORDS or the joined words contain `password`, `apikey`,
`accesskey`, `secretkey` or `privatekey`. Words that also name model and metric things are judged
by their neighbours: `token` next to a count word is a count (`max_token`, `token_budget`,
`eos_token_id`; `tokens`, `tokenizer` never hold the word `token`); `key`, `pass`, `pat`, `sig` are
secret alone or next to a word saying whose or what kind (`api_key`, `db_pass`, `github_pat`), `key`
and `pass` also next to any word but those that make them something else (`num_key_value_heads`,
`cache_key`, `pass_at_k` stay), `pat` and `sig` with other neighbours never (`tokenizer_pat`,
`sig_figs`). Ordinary values survive: plain URLs, hex digests (commit shas, sha256), UUIDs, model
names, paths, numbers. The limits (a 40-hex wandb key under an innocent name, a password inside
free prose, a token of an unknown service) are listed in docs/publish.md.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Any

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import RegexBasedDetector

from glassroom.observe import secret_rules

REDACTED = "<redacted>"

SECRET_WORDS = {
    "token", "secret", "secrets", "password", "passwd", "pwd", "pass", "passphrase", "apikey", "credential",
    "credentials", "creds", "auth", "oauth", "authorization", "cookie", "cookies", "key", "keys", "privatekey",
    "accesskey", "secretkey", "bearer", "signature", "sig", "dsn", "sessionid", "pat", "webhook", "webhooks",
}
_SECRET_JOINED = ("apikey", "accesskey", "secretkey", "privatekey", "password", "passwd")
# Words that make `token` a count or a vocabulary entry rather than a credential.
_COUNT_WORDS = {
    "max", "min", "num", "n", "count", "counts", "total", "budget", "limit", "per", "len", "length", "size",
    "rate", "step", "steps", "batch", "seq", "window", "seen", "id", "ids", "index", "share", "frac",
    "fraction", "bos", "eos", "pad", "unk", "sep", "cls", "mask", "special", "end", "start",
}
# Words that also name things in models and metrics (`num_key_value_heads`, `pass_at_k`,
# `tokenizer_pat`, `sig_figs`): a credential only alone (`key`, `pass`), next to a word that says
# whose or what kind (`api_key`, `db_pass`, `github_pat`), or, for `key` and `pass`, with no
# neighbour that says it is something else (`openai_key` is a credential, `cache_key` is not).
_QUALIFIERS = {
    "api", "access", "secret", "private", "auth", "client", "service", "account", "signing", "sign",
    "encryption", "enc", "ssh", "gpg", "pgp", "license", "licence", "master", "session", "deploy", "aws", "gcp",
    "azure", "ado", "devops", "wandb", "hf", "huggingface", "openai", "anthropic", "github", "gh", "gitlab", "gl",
    "bitbucket", "docker", "slack", "stripe", "db", "database", "admin", "root", "user", "login", "smtp", "mail",
    "email", "ftp", "proxy", "basic", "bearer", "webhook", "hmac", "jwt", "personal", "bot", "consumer", "s3",
    "storage", "shared", "url", "request", "app", "oauth", "git", "sas", "x",
}
_WEAK_WORDS = {"key", "keys", "pass", "pat", "sig"}
_INNOCENT = {
    "key": {
        "value", "values", "val", "query", "queries", "head", "heads", "kv", "num", "n", "dim", "dims", "size",
        "rng", "prng", "seed", "random", "sort", "group", "primary", "foreign", "partition", "cache", "lookup",
        "dict", "map", "mapping", "column", "columns", "col", "field", "fields", "name", "names", "id", "ids",
        "index", "metric", "metrics", "frame", "frames", "join", "text", "label", "labels", "input", "inputs",
        "output", "outputs", "prompt", "prompts", "answer", "answers", "target", "targets", "image", "images",
        "feature", "features", "content", "message", "messages", "response", "responses", "chosen", "rejected",
        "dataset", "data", "split", "layer", "layers", "proj", "projection", "norm", "weight", "weights", "bias",
        "attention", "attn", "state", "states", "step", "steps", "tensor", "tensors", "param", "params", "module",
        "hot", "press", "point", "points", "event", "events", "lora", "hash", "order", "by", "path", "file",
    },
    "pass": {
        "at", "k", "rate", "rates", "forward", "backward", "fwd", "bwd", "first", "second", "single", "two",
        "multi", "one", "n", "num", "count", "counts", "through", "fail", "eval", "test", "tests", "score",
        "scores", "ratio", "mean", "avg", "top", "max", "min", "total", "frac", "fraction", "pct", "percent",
        "metric", "metrics", "filter", "band", "low", "high",
    },
}
_INNOCENT["keys"] = _INNOCENT["key"]
# Whole sections that hold the machine's environment are never shown.
ENV_WORDS = {"env", "environ", "environment", "envvars"}

# Token shapes found anywhere inside a string, whatever their key: the regex rules of detect-secrets'
# plugins (read from the installed package when this module loads, LIBRARY_RULES), then the shapes
# it lacks (OWN_RULES; where both have a shape, its rule is narrower: AWS ids with AGPA, AIDA, ..;
# GitHub tokens of other than 36 characters; Stripe test keys and keys longer than 24; Slack
# `xoxe-` and tokens without digit groups; Discord bot tokens with a 38-character last part). A token starts anywhere but inside a run of letters and digits, so one right
# after `-`, `_`, `/` or `.` (`exp-hf_...`, `sweep_ghp_...`, `run-sk-proj-...`) is found too.
_S = r"(?<![A-Za-z0-9])"
# detect-secrets plugins not used: a public IP address is no credential; URL credentials, private
# key blocks and JWTs are found by OWN_RULES below (its private key rule matches only the BEGIN line;
# its JWT regex takes quadratic time on a long run of `eyJ`); its keyword and entropy plugins are
# not regex rules, and were measured and left out (bench/redaction_rules.py: the entropy plugins
# flag commit shas and sha256 digests, the keyword plugin misses most shapes).
# Its rules that read a keyword before the value (Cloudant, IBM, SoftLayer) do what the key rule
# (`key_is_secret` on KEY=VALUE and KEY: VALUE) does for every key, at a quarter of the whole cost.
_LIBRARY_SKIP = {"IPPublicDetector", "BasicAuthDetector", "PrivateKeyDetector", "JwtTokenDetector",
                 "CloudantDetector", "IbmCloudIamDetector", "IbmCosHmacDetector", "SoftlayerDetector"}


def _library_rules() -> list[re.Pattern]:
    """The compiled regexes of detect-secrets' regex-based plugins, as its plugin registry lists them."""
    rules = []
    for _, plugin in sorted(get_mapping_from_secret_type_to_class().items()):
        if issubclass(plugin, RegexBasedDetector) and plugin.__name__ not in _LIBRARY_SKIP:
            rules += list(plugin().denylist)
    return rules


LIBRARY_RULES = _library_rules()
# (pattern, group holding the secret (0: the whole match), text every match holds or None).
OWN_RULES = [
    (_S + r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Za-z0-9])", 0, None),   # AWS access key ids
    (_S + r"(?:F[wQ]oGZXIvYXdz|[A-Z][A-Za-z0-9]oJb3JpZ2lu)[A-Za-z0-9/+=]{40,}", 0, None),   # AWS session tokens
    (_S + r"hf_(?![a-z]+(?![A-Za-z0-9]))[A-Za-z0-9]{16,}", 0, 'hf_'),   # Hugging Face (not one lower-case word)
    (_S + r"api_org_[A-Za-z0-9]{20,}", 0, 'api_org_'),   # Hugging Face organisation
    (_S + r"sk-(?:proj|svcacct|admin|ant-[a-z]+[0-9]*|or-v[0-9]+)-[A-Za-z0-9_\-]{16,}", 0, 'sk-'),   # OpenAI, Anthropic..
    (_S + r"sk-(?![a-z]+(?![A-Za-z0-9]))[A-Za-z0-9]{20,}[A-Za-z0-9_\-]*", 0, 'sk-'),   # OpenAI (legacy), not a word
    (_S + r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}", 0, 'k_'),   # Stripe
    (_S + r"gh[pousr]_[A-Za-z0-9]{20,}", 0, 'gh'),   # GitHub tokens
    (_S + r"github_pat_[A-Za-z0-9_]{20,}", 0, 'github_pat_'),
    (_S + r"v1\.[0-9a-f]{40,}(?![0-9a-f])", 0, 'v1.'),   # GitHub App installation tokens
    (_S + r"pypi-AgE[A-Za-z0-9_\-]{16,}", 0, 'pypi-'),   # PyPI: the macaroon's fixed start, any length after
    (_S + r"xox[abeoprs]-[A-Za-z0-9\-]{10,}", 0, 'xox'),   # Slack
    (r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9/_\-]{8,})", 1, 'hooks.slack.com/'),   # Slack webhooks: the path
    (r"discord(?:app)?\.com/api(?:/v[0-9]+)?/webhooks/([0-9]+/[A-Za-z0-9_\-]{20,})", 1, 'discord'),   # Discord webhooks
    (r"(?<![A-Za-z0-9_\-])[MNO][A-Za-z0-9_\-]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}", 0, None),   # Discord bot
    (_S + r"npm_[A-Za-z0-9]{30,}", 0, 'npm_'),
    (_S + r"AIza[0-9A-Za-z_\-]{35}", 0, 'AIza'),   # Google API keys
    (_S + r"GOCSPX-[A-Za-z0-9_\-]{20,}", 0, 'GOCSPX-'),   # Google OAuth client secrets
    (_S + r"ya29\.[0-9A-Za-z_\-]{20,}", 0, 'ya29.'),   # Google OAuth access tokens
    (_S + r"eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*", 0, 'eyJ'),   # JWTs
    (_S + r"key-[0-9a-f]{32}(?![A-Za-z0-9])", 0, 'key-'),   # Mailgun
    (_S + r"shp(?:at|ss|ca|pa)_[0-9a-fA-F]{32}", 0, 'shp'),   # Shopify
    (_S + r"dp\.(?:st|pt|sa|ct|scim|audit)\.(?:[A-Za-z0-9_\-]{1,40}\.)?[A-Za-z0-9]{40,}", 0, 'dp.'),   # Doppler
    (_S + r"AGE-SECRET-KEY-1[0-9A-Z]{50,}", 0, 'AGE-SECRET-KEY-1'),   # age
    (_S + r"lin_api_[A-Za-z0-9]{32,}", 0, 'lin_api_'),   # Linear
    (_S + r"dapi[0-9a-f]{32}(?:-[0-9]+)?(?![A-Za-z0-9])", 0, 'dapi'),   # Databricks
    (_S + r"gsk_[A-Za-z0-9]{40,}", 0, 'gsk_'),   # Groq
    (_S + r"r8_[A-Za-z0-9]{30,}", 0, 'r8_'),   # Replicate
    # PuTTY private key files: from the header to the MAC (or the end), and a Private-Lines body alone.
    (r"PuTTY-User-Key-File-[0-9]+:.*?(?:Private-MAC:[^\n]*|\Z)", 0, 'PuTTY-User-Key-File-'),
    (r"Private-Lines:[ \t]*[0-9]+[ \t]*\r?\n(?:[A-Za-z0-9+/=]+\r?\n?)+", 0, 'Private-Lines:'),
]
_OWN = [(re.compile(p, re.S), g, needle) for p, g, needle in OWN_RULES]
# The class the named rules stand for: a service's short prefix (one to three parts joined by `_`,
# `-` or `.`: `aio_`, `CFPAT-`, `pat-na1-`, `dt0c01.`) and then a random body, a run of 20 or more
# letters and digits holding upper case, lower case and digits. Names (`Llama-3.1-8B-Instruct`,
# `vivid-sunset-42`), hex digests and UUIDs (no upper case) and words stay; digests written as
# `sha256-<base64>` stay too. The body is redacted with what continues it (_body_end): parts after
# `_`, `-` or `.` of 8 or more characters or in mixed case, and `=` padding; a `/` or a short part
# (`-seed1`) ends it.
_PREFIXED_RE = re.compile(
    r"(?<![A-Za-z0-9])([A-Za-z][A-Za-z0-9]{0,11}(?:[_\-.][A-Za-z0-9]{1,11}){0,2}[_\-.])"
    r"([A-Za-z0-9]{20,})")
_TAIL_RE = re.compile(r"[_\-.]([A-Za-z0-9]+)|=+")
_DIGEST_PREFIX = re.compile(r"(?i)(?:sha|md|blake|xxh|crc|git|commit|rev|hash|digest|uuid|id)[0-9]*[_\-.]")


def _body_end(text: str, pos: int) -> int:
    while (part := _TAIL_RE.match(text, pos)) is not None:
        word = part.group(1)
        if word is not None and not (len(word) >= 8 or (re.search(r"[a-z]", word) and re.search(r"[A-Z]", word))):
            break
        pos = part.end()
    return pos


def _looks_random(body: str) -> bool:
    """A run of letters and digits that holds all three kinds and no long dictionary-like stretch."""
    if not (re.search(r"[a-z]", body) and re.search(r"[A-Z]", body) and re.search(r"[0-9]", body)):
        return False
    return max(len(w) for w in re.findall(r"[a-z]+|[A-Z][a-z]+|[A-Z]+", body)) < 12 and len(set(body)) >= 12
# <password>...</password>, <apiKey>..</apiKey>: the text between tags whose name looks secret.
_XML_RE = re.compile(r"<([A-Za-z_][A-Za-z0-9_.\-]{0,60})>([^<]{1,4096})</\1>")
_PEM_RE = re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[A-Z0-9 ]*-----|\Z)", re.S)
# An AWS secret access key: 40 base64-ish characters (not all lowercase hex, so a commit sha is
# kept) within 60 characters after the word aws or secret.
_AWS_SECRET_RE = re.compile(
    r"(?i:aws|secret)[^\n]{0,60}?(?<![A-Za-z0-9/+])(?![0-9a-f]{40}(?![A-Za-z0-9/+]))([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")
# Up to the last `@` before the path, so a password holding `@` (`user:p@ss@host`) goes whole.
# (A scheme starts where a run of scheme characters starts, and is read in one go: a long run of
# `a-a-a-...` costs linear time, not quadratic.)
_URL_CREDS_RE = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]*+://)([^\s/?#\"'<>]+)@")
_BEARER_RE = re.compile(r"\b(Bearer|bearer|BEARER|Basic)\s+([A-Za-z0-9._~+/\-]{8,}=*)")
# KEY=VALUE and KEY: VALUE (the key optionally quoted), and --key=value / --key value. Only the key
# and separator are matched first, so a harmless pair never swallows a secret that follows it.
_VALUE_RE = re.compile(r"\\\"[^\"]*?\\\"|\"[^\"]*\"|'[^']*'|[^\s,;&\"'{}\[\]()<>]+")
# After `KEY:` (a header or a YAML-like line: `X-Api-Key: abc def`, `password: two words`) an
# unquoted value runs to the end of the line, or to a comma, semicolon or bracket.
_LINE_VALUE_RE = re.compile(r"[^\s,;&\"'{}\[\]()<>][^\n\r,;{}\[\]]*")
# A key is a whole run of key characters with a letter or `_` in it (`api_key`, `db.password`,
# `2fa-token`), read in one go from where the run starts: a long word with no separator after it
# costs linear time (reading a key from every position inside it was quadratic: seconds for 20 KB).
_PAIR_RE = re.compile(
    r"(?:(?<![A-Za-z0-9_\-])--(?P<flag>[A-Za-z][A-Za-z0-9_\-]*+)(?P<fsep>=|\s+(?=[^\s\-]))"
    r"|(?P<q>\\?[\"']?)(?<![A-Za-z0-9_.\-])(?=[0-9.\-]*+[A-Za-z_])(?P<key>[A-Za-z0-9_.\-]++)(?P=q)"
    r"(?P<sep>\s*(?:=|:(?!//))\s*))")
# `curl -u user:password`, `--user user:password`: the part after the colon.
_USER_PASS_RE = re.compile(r"(?<![A-Za-z0-9_\-])(-u|--user)(\s+|=)([^\s:'\"]+):([^\s'\"]+)")

_AFTER_MARKER_RE = re.compile(re.escape(REDACTED) + r"[^\s,;&\"'{}\[\]()<>]*")
_INNER_PAIR_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*)=(?!=)")
_ARGV_FLAG_RE = re.compile(r"^--?[A-Za-z][A-Za-z0-9_\-]*$")


_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_ACRONYM_RE = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])")


def _words(key: Any) -> list[str]:
    # camelCase and HTTPServer split by lookarounds alone: linear in the key's length (a capture of
    # `[A-Z]+` retried from every position was quadratic: seconds for a 20,000-letter upper-case word)
    text = _CAMEL_RE.sub("_", str(key))
    text = _ACRONYM_RE.sub("_", text).lower()
    return [p for p in re.split(r"[^a-z0-9]+", text) if p]


def _weak_word_is_secret(word: str, parts: list[str]) -> bool:
    others = [p for p in parts if p != word]
    if not others or any(p in _QUALIFIERS for p in others):
        return True
    if word in ("pat", "sig"):
        return False
    return not any(p in _INNOCENT[word] or p.isdigit() for p in others)


def key_is_secret(key: Any) -> bool:
    """True for keys like `api_key`, `hf_token`, `wandbApiKey`, `db-password`, `secret`, `auth`,
    `github_pat`; False for `tokens`, `tokenizer`, `max_tokens`, `tokens_per_step`, `token_budget`,
    `lr`, `num_key_value_heads`, `pass_at_k`, `tokenizer_pat`, `sig_figs`."""
    parts = _words(key)
    hits = {p for p in parts if p in SECRET_WORDS}
    if "token" in hits and any(p in _COUNT_WORDS for p in parts):
        hits.discard("token")
    hits = {w for w in hits if w not in _WEAK_WORDS or _weak_word_is_secret(w, parts)}
    if hits:
        return True
    joined = "".join(parts)
    return any(w in joined for w in _SECRET_JOINED)


def key_is_environment(key: Any) -> bool:
    """`env`, `environment`, `env_vars`, `extra_env`: a section holding the machine's environment."""
    parts = _words(key)
    return any(p in ENV_WORDS for p in parts) or "".join(parts) in {"envvars", "environmentvariables"}


def _bearer(match: re.Match) -> str:
    cred = match.group(2)
    if match.group(1) == "Basic" and not re.search(r"[A-Z0-9+/=]", cred):
        return match.group(0)   # "Basic authentication": a word, not a credential
    if match.group(1) != "Bearer" and cred.isalpha() and cred.islower() and len(cred) < 20:
        return match.group(0)   # "the bearer instrument": a word
    return f"{match.group(1)} {REDACTED}"


def _token_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every token found by LIBRARY_RULES and OWN_RULES, overlaps merged."""
    spans = []
    for rule in LIBRARY_RULES:
        for m in rule.finditer(text):
            # the secret is the first group of 8 or more characters, else the whole match; the
            # separators some rules take around it (space, quote, `=`, `:`) stay
            start, end = next(((m.start(i), m.end(i)) for i in range(1, (rule.groups or 0) + 1)
                               if m.group(i) and len(m.group(i)) >= 8), m.span())
            while start < end and text[start] in _EDGE_CHARS:
                start += 1
            while end > start and text[end - 1] in _EDGE_CHARS:
                end -= 1
            url = _URL_HEAD_RE.match(text, start, end)   # a whole URL: its scheme and host stay
            start = url.end() if url else start
            if end > start:
                spans.append((start, end))
    for start, end in secret_rules.spans(text):   # the maintained rule set (Betterleaks and Veles rules)
        while start < end and text[start] in _EDGE_CHARS:
            start += 1
        while end > start and text[end - 1] in _EDGE_CHARS:
            end -= 1
        if end > start:
            spans.append((start, end))
    for rule, group, needle in _OWN:
        if needle is None or needle in text:   # a rule's fixed start first: most texts hold none
            spans += [m.span(group) for m in rule.finditer(text)]
    for m in _PREFIXED_RE.finditer(text):
        if _looks_random(m.group(2)) and not _DIGEST_PREFIX.fullmatch(m.group(1)):
            spans.append((m.start(2), _body_end(text, m.end())))   # the prefix names the service, not the secret
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


_EDGE_CHARS = " \t\r\n\"'=:"
_URL_HEAD_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s]+/(?:[a-z]+/)*")


def _redact_tokens(text: str) -> str:
    spans = _token_spans(text)
    if not spans:
        return text
    out, pos = [], 0
    for start, end in spans:
        out.append(text[pos:start] + REDACTED)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _xml(match: re.Match) -> str:
    if not key_is_secret(match.group(1)) or _is_marker(match.group(2)):
        return match.group(0)
    return f"<{match.group(1)}>{REDACTED}</{match.group(1)}>"


# What a name holds where its secret was: `redacted-` and 8 hex digits (public_name).
_MARKER_RE = re.compile(r"redacted-[0-9a-f]{8}")


def _is_marker(value: str) -> bool:
    return value == REDACTED or _MARKER_RE.fullmatch(value) is not None


def _redact_pairs(text: str) -> str:
    out, pos = [], 0
    for m in _PAIR_RE.finditer(text):
        if m.start() < pos:
            continue
        key = m.group("flag") or m.group("key")
        if not key_is_secret(key):
            continue
        inner = _INNER_PAIR_RE.match(text, m.end())
        if inner and key_is_secret(inner.group(1)):
            continue   # "key: HF_TOKEN=...": the inner pair is redacted on its own
        value = _VALUE_RE.match(text, m.end()) or _AFTER_MARKER_RE.match(text, m.end())
        if value is None or value.group(0) in ('""', "''") or _is_marker(value.group(0)):
            continue   # (a token rule's marker followed by more of the value: the whole value goes)
        quote = value.group(0)[:2] if value.group(0).startswith('\\"') else (
            value.group(0)[0] if value.group(0)[0] in "\"'" else "")
        end = value.end()
        if not quote and not m.group("flag") and ":" in (m.group("sep") or ""):
            line = _LINE_VALUE_RE.match(text, m.end())
            end = m.end() + len(line.group(0).rstrip())
        out.append(text[pos:m.end()] + f"{quote}{REDACTED}{quote}")
        pos = end
    out.append(text[pos:])
    return "".join(out)


# What a reader does not see: terminal colour codes, control characters, zero-width and soft-hyphen
# characters. A token with one inside (`gh\x01p_...`, `\x1b[31mghp_...`) looks whole on a page or
# in a feed (which drops control characters), so the text is also read without them.
_INVISIBLE_RE = re.compile("\x1b\\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u200b-\u200f"
                           "\u2060-\u2064\ufeff]")


def redact_text(text: str, pairs: bool = True) -> str:
    """`text` with secrets found anywhere inside it replaced by `<redacted>` (see the module's
    docstring). `pairs=False` leaves `key: value` pairs alone (for corpus excerpts, which are prose
    and code rather than configs) but still removes token shapes, URL credentials and PEM blocks.
    A text that holds a secret only once its invisible characters are dropped comes back without
    them, redacted; any other text keeps them."""
    if not isinstance(text, str) or not text:
        return text
    if len(text) <= _CACHED_CHARS:   # names and event texts come back in every part of a page or a site
        return _redact_short(str(text), pairs)
    return _redact_any(text, pairs)


_CACHED_CHARS = 2048


@lru_cache(maxsize=65536)
def _redact_short(text: str, pairs: bool) -> str:
    return _redact_any(text, pairs)


def _redact_any(text: str, pairs: bool) -> str:
    if _INVISIBLE_RE.search(text):
        seen = _INVISIBLE_RE.sub("", text)
        hidden = _redact_visible(seen, pairs)
        if hidden != seen:
            return hidden
    return _redact_visible(text, pairs)


def _redact_visible(text: str, pairs: bool) -> str:
    out = _PEM_RE.sub(REDACTED, text)
    out = _URL_CREDS_RE.sub(lambda m: f"{m.group(1)}{REDACTED}@", out)
    out = _redact_tokens(out)
    out = _AWS_SECRET_RE.sub(lambda m: m.group(0)[: m.start(1) - m.start(0)] + REDACTED, out)
    out = _BEARER_RE.sub(_bearer, out)
    out = _XML_RE.sub(_xml, out)
    if not pairs:
        return out
    out = _USER_PASS_RE.sub(lambda m: m.group(0) if m.group(4).isdigit()   # docker -u 1000:1000
                            else f"{m.group(1)}{m.group(2)}{m.group(3)}:{REDACTED}", out)
    return _redact_pairs(out)


def public_name(name: str) -> str:
    """`name` as it may stand in a URL, a file name and an id (a run's folder path): the name itself
    when it holds no secret, else the name with each secret replaced by `redacted-` and 8 hex digits
    of a SHA-256 of the whole name (the same folder always gets the same public name, two folders
    get different ones, and nothing of the secret can be read back from it)."""
    if not isinstance(name, str):
        return name
    shown = redact_text(name)
    if shown == name:
        return name
    pieces = shown.split(REDACTED)
    out = pieces[0]
    for i, piece in enumerate(pieces[1:]):
        out += "redacted-" + hashlib.sha256(f"{i}\0{name}".encode()).hexdigest()[:8] + piece
    if redact_text(out) != out:   # the rest still reads as a secret: nothing of the name is kept
        out = "redacted-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return out


def _scalar_under_secret(value: Any) -> Any:
    """A value under a secret key: gone, except None, "" and booleans, which hold no secret."""
    if value is None or value == "" or isinstance(value, bool):
        return value
    return REDACTED


def redact(value: Any, key: Any = None) -> Any:
    """A copy of a config-like tree with secret-looking values replaced by `<redacted>`; strings
    everywhere (dict keys too) go through redact_text; in a list, the element after a secret flag
    (`["--api-key", "abc"]`) is redacted. Tuples come back as lists."""
    if key is not None:
        if key_is_environment(key) and value not in (None, "", {}, []):
            return REDACTED
        if key_is_secret(key):
            if isinstance(value, (dict, list, tuple)):
                return REDACTED if value else value
            return _scalar_under_secret(value)
    if isinstance(value, dict):
        return {(redact_text(k) if isinstance(k, str) else k): redact(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out = [redact(v) for v in value]
        # An argv list: ["--api-key", "abc"] holds the secret in the element after the flag.
        for i in range(len(value) - 1):
            flag = value[i]
            if (isinstance(flag, str) and _ARGV_FLAG_RE.match(flag) and key_is_secret(flag.lstrip("-"))
                    and isinstance(value[i + 1], str) and not value[i + 1].startswith("-")):
                out[i + 1] = REDACTED
        return out
    if isinstance(value, str):
        return redact_text(value)
    return value


SHOWN_CHARS = 20_000   # an event's text as pages, feeds and search show it; the rest is cut off


def shown_prefix(value):
    """The part of a long text that is redacted and shown: SHOWN_CHARS and a margin, so a secret
    that starts before the cut is still matched whole (a hostile 100 MB note costs no more)."""
    return value[:SHOWN_CHARS + 4_096] if isinstance(value, str) and len(value) > SHOWN_CHARS else value


def clip_shown(value):
    """A redacted text cut to SHOWN_CHARS (after redaction, so a secret across the cut went whole)."""
    return value[:SHOWN_CHARS - 1] + "…" if isinstance(value, str) and len(value) > SHOWN_CHARS else value


def redact_event(event: dict) -> dict:
    """A journal event (note, anomaly, ...) with its text (at most SHOWN_CHARS of it), kind and data
    redacted; other fields (id, time, step, digest) unchanged."""
    out = dict(event)
    if isinstance(out.get("text"), str):
        out["text"] = clip_shown(redact_text(shown_prefix(out["text"])))
    if isinstance(out.get("kind"), str):
        out["kind"] = redact_text(out["kind"])
    if out.get("data") is not None:
        out["data"] = redact(out["data"])
    return out
