"""Redaction: what every path that shows a run to the outside passes its text through.

Used by `glassroom serve` (run meta, events, the live stream), `glassroom publish` (meta.json,
config, events, notes, atlas excerpts) and the mirrors' config uploads (wandb). Two entry points:

- `redact(tree)`: a copy of a config-like tree (dicts, lists, scalars). A value under a key that
  looks secret (`api_key`, `hf_token`, `db-password`, `auth`, ...) becomes `<redacted>`, and so does a
  whole dict or list under such a key (`auth: {user: .., pass: ..}`) or under an environment section
  (`env`, `environment`, `env_vars`, ...); every other string goes through `redact_text`.
- `redact_text(text)`: a copy of a string with, anywhere inside it, credentials in URLs
  (`https://user:pass@host` -> `https://<redacted>@host`), PEM private key blocks, well-known token
  shapes (AWS key ids and secret keys, `hf_`, `sk-`, `ghp_`.., `github_pat_`, `xox?-`, JWTs, ...),
  `Bearer ...` credentials, and the values of `KEY=VALUE`, `KEY: VALUE`, `--key=value` and
  `--key value` pairs whose key looks secret, replaced by `<redacted>` (a value after `KEY:` runs
  to the end of the line or the next comma, semicolon or bracket; after `=` to the next space).

Key rule (`key_is_secret`): the key is split into words on `_`, `-`, `.`, spaces and camelCase; it is
secret when a word is one of SECRET_WORDS or the joined words contain `password`, `apikey`,
`accesskey`, `secretkey` or `privatekey`. The word `token` is the exception that counts: a key where
`token` stands next to a count word (`max_token`, `token_budget`, `token_count`, `eos_token_id`) is
not secret, and `tokens`, `tokenizer`, `tokens_per_step` never contain the word `token` at all.
Ordinary values survive: plain URLs, hex digests (commit shas, sha256), model names, paths, numbers.
The limits (a 40-hex wandb key under an innocent name, a password inside free prose) are listed in
docs/publish.md.
"""

from __future__ import annotations

import re
from typing import Any

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
# Whole sections that hold the machine's environment are never shown.
ENV_WORDS = {"env", "environ", "environment", "envvars"}

# Token shapes found anywhere inside a string, whatever their key.
_B = r"(?<![A-Za-z0-9_\-])"          # a token starts at a word edge
_TOKENS = [
    r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Za-z0-9])",   # AWS access key ids
    _B + r"hf_[A-Za-z0-9]{16,}",                                     # Hugging Face
    _B + r"sk-[A-Za-z0-9_\-]{16,}",                                  # OpenAI, Anthropic (sk-proj-, sk-ant-)
    _B + r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}",                    # Stripe
    _B + r"gh[pousr]_[A-Za-z0-9]{20,}",                              # GitHub tokens
    _B + r"github_pat_[A-Za-z0-9_]{20,}",
    _B + r"glpat-[A-Za-z0-9_\-]{20,}",                               # GitLab
    _B + r"xox[abprs]-[A-Za-z0-9\-]{10,}",                           # Slack
    _B + r"npm_[A-Za-z0-9]{30,}",
    _B + r"AIza[0-9A-Za-z_\-]{35}",                                  # Google API keys
    _B + r"eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*",   # JWTs
    _B + r"ya29\.[0-9A-Za-z_\-]{20,}",                               # Google OAuth access tokens
    r"(?<=hooks\.slack\.com/services/)[A-Za-z0-9/_\-]{8,}",          # Slack webhook URLs (the path is the secret)
    r"(?<=/api/webhooks/)[0-9]+/[A-Za-z0-9_\-]{20,}",                 # Discord webhook URLs
]
_TOKEN_RE = re.compile("|".join(f"(?:{p})" for p in _TOKENS))
_PEM_RE = re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[A-Z0-9 ]*-----|\Z)", re.S)
# An AWS secret access key: 40 base64-ish characters (not all lowercase hex, so a commit sha is
# kept) within 60 characters after the word aws or secret.
_AWS_SECRET_RE = re.compile(
    r"(?i:aws|secret)[^\n]{0,60}?(?<![A-Za-z0-9/+])(?![0-9a-f]{40}(?![A-Za-z0-9/+]))([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")
# Up to the last `@` before the path, so a password holding `@` (`user:p@ss@host`) goes whole.
# (A scheme starts where a run of scheme characters starts, and is read in one go: a long run of
# `a-a-a-...` costs linear time, not quadratic.)
_URL_CREDS_RE = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]*+://)([^\s/?#\"'<>]+)@")
_BEARER_RE = re.compile(r"\b(Bearer|Basic)\s+([A-Za-z0-9._~+/\-]{8,}=*)")
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

_INNER_PAIR_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*)=(?!=)")
_ARGV_FLAG_RE = re.compile(r"^--?[A-Za-z][A-Za-z0-9_\-]*$")


def _words(key: Any) -> list[str]:
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(key))
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", text).lower()
    return [p for p in re.split(r"[^a-z0-9]+", text) if p]


def key_is_secret(key: Any) -> bool:
    """True for keys like `api_key`, `hf_token`, `wandbApiKey`, `db-password`, `secret`, `auth`;
    False for `tokens`, `tokenizer`, `max_tokens`, `tokens_per_step`, `token_budget`, `lr`."""
    parts = _words(key)
    hits = [p for p in parts if p in SECRET_WORDS]
    if hits and not (set(hits) == {"token"} and any(p in _COUNT_WORDS for p in parts)):
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
    return f"{match.group(1)} {REDACTED}"


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
        value = _VALUE_RE.match(text, m.end())
        if value is None or value.group(0) in ('""', "''"):
            continue
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
    if _INVISIBLE_RE.search(text):
        seen = _INVISIBLE_RE.sub("", text)
        hidden = _redact_visible(seen, pairs)
        if hidden != seen:
            return hidden
    return _redact_visible(text, pairs)


def _redact_visible(text: str, pairs: bool) -> str:
    out = _PEM_RE.sub(REDACTED, text)
    out = _URL_CREDS_RE.sub(lambda m: f"{m.group(1)}{REDACTED}@", out)
    out = _TOKEN_RE.sub(REDACTED, out)
    out = _AWS_SECRET_RE.sub(lambda m: m.group(0)[: m.start(1) - m.start(0)] + REDACTED, out)
    out = _BEARER_RE.sub(_bearer, out)
    if not pairs:
        return out
    out = _USER_PASS_RE.sub(lambda m: m.group(0) if m.group(4).isdigit()   # docker -u 1000:1000
                            else f"{m.group(1)}{m.group(2)}{m.group(3)}:{REDACTED}", out)
    return _redact_pairs(out)


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
