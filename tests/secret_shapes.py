"""Planted secrets and the controls that must survive them, for the redaction tests and
bench/redaction_rules.py: every token shape the redaction promises to find, made at random from a
seeded RNG with each shape's own alphabet and length, and the places a token can stand (standalone,
after `-`, `_`, `/`, `=`, inside a run, metric or folder name, a domain, a URL, prose, JSON)."""

from __future__ import annotations

import json
import random
import string
import uuid
from pathlib import Path
from typing import Callable

import yaml

ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "_-"
B64 = ALNUM + "/+"
HEX = "0123456789abcdef"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
REPO = Path(__file__).resolve().parents[1]


def rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _mixed(rng: random.Random, alphabet: str, n: int) -> str:
    """n random characters with a digit and an upper-case letter in them, as real tokens have."""
    body = list(rand(rng, alphabet, n - 2)) + [rng.choice(string.digits), rng.choice(string.ascii_uppercase)]
    rng.shuffle(body)
    return "".join(body)


def _putty(rng: random.Random) -> tuple[str, str]:
    private = "\n".join(rand(rng, B64, 64) for _ in range(3))
    block = (f"PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: eddsa-key-2024\nPublic-Lines: 2\n"
             f"AAAAC3NzaC1lZDI1NTE5AAAAI{rand(rng, B64, 40)}\n{rand(rng, B64, 20)}\nPrivate-Lines: 3\n{private}\n"
             f"Private-MAC: {rand(rng, HEX, 64)}")
    return block, private


# name -> rng -> (the text planted, the part of it that must not survive)
TOKENS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "hf": lambda r: ("hf_" + (s := _mixed(r, string.ascii_letters, 34)), s),
    "github": lambda r: (r.choice(["ghp_", "gho_", "ghs_", "ghu_"]) + (s := _mixed(r, ALNUM, 36)), s),
    "github_pat": lambda r: ("github_pat_11" + (s := _mixed(r, ALNUM, 20) + "_" + _mixed(r, ALNUM, 59)), s),
    "openai_proj": lambda r: ("sk-proj-" + (s := _mixed(r, URLSAFE, 120)), s),
    "anthropic": lambda r: ("sk-ant-api03-" + (s := _mixed(r, URLSAFE, 93)), s),
    "slack_webhook": lambda r: (f"https://hooks.slack.com/services/T{rand(r, string.ascii_uppercase, 8)}/"
                                f"B{rand(r, string.ascii_uppercase, 8)}/" + (s := _mixed(r, ALNUM, 24)), s),
    "slack_workflow": lambda r: (f"https://hooks.slack.com/workflows/T{rand(r, string.ascii_uppercase, 8)}/"
                                 f"A{rand(r, string.ascii_uppercase, 8)}/{rand(r, string.digits, 18)}/"
                                 + (s := _mixed(r, ALNUM, 24)), s),
    "slack_trigger": lambda r: (f"https://hooks.slack.com/triggers/T{rand(r, string.ascii_uppercase, 8)}/"
                                f"{rand(r, string.digits, 13)}/" + (s := rand(r, HEX, 32)), s),
    "discord_webhook": lambda r: (f"https://discord.com/api/webhooks/{rand(r, string.digits, 18)}/"
                                  + (s := _mixed(r, URLSAFE, 68)), s),
    "discord_bot": lambda r: ((s := r.choice("MNO") + _mixed(r, URLSAFE, 25) + "." + rand(r, URLSAFE, 6) + "."
                               + _mixed(r, URLSAFE, r.choice([27, 38]))), s),
    "pypi": lambda r: ("pypi-AgEIcHlwaS5vcmc" + (s := _mixed(r, URLSAFE, r.choice([40, 60, 140, 180]))), s),
    "twilio": lambda r: ("SK" + (s := rand(r, HEX, 32)), s),
    "sendgrid": lambda r: ("SG." + (s := _mixed(r, URLSAFE, 22) + "." + _mixed(r, URLSAFE, 43)), s),
    "mailgun": lambda r: ("key-" + (s := rand(r, HEX, 32)), s),
    "hf_org": lambda r: ("api_org_" + (s := _mixed(r, string.ascii_letters, 34)), s),
    "shopify": lambda r: ("shpat_" + (s := rand(r, HEX, 32)), s),
    "doppler": lambda r: ("dp.st." + (s := _mixed(r, ALNUM, 43)), s),
    "age": lambda r: ("AGE-SECRET-KEY-1" + (s := rand(r, BECH32, 58)), s),
    "telegram": lambda r: ((s := rand(r, string.digits, 10) + ":AA" + _mixed(r, URLSAFE, 33)), s),
    "telegram_url": lambda r: ("https://api.telegram.org/bot" + (s := rand(r, string.digits, 9) + ":AA"
                                                                 + _mixed(r, URLSAFE, 33)) + "/sendMessage", s),
    "google_oauth": lambda r: ("GOCSPX-" + (s := _mixed(r, URLSAFE, 28)), s),
    "linear": lambda r: ("lin_api_" + (s := _mixed(r, ALNUM, 40)), s),
    "databricks": lambda r: ("dapi" + (s := rand(r, HEX, 32)), s),
    "groq": lambda r: ("gsk_" + (s := _mixed(r, ALNUM, 52)), s),
    "replicate": lambda r: ("r8_" + (s := _mixed(r, ALNUM, 37)), s),
    "github_app": lambda r: ("v1." + (s := rand(r, HEX, r.choice([40, 48]))), s),
    "aws_session": lambda r: (r.choice(["FwoGZXIvYXdz", "IQoJb3JpZ2lu"]) + (s := _mixed(r, B64, 300)) + "==", s),
    "aws_key_id": lambda r: ("AKIA" + (s := rand(r, string.ascii_uppercase + string.digits, 16)), s),
    "stripe": lambda r: ("sk_live_" + (s := _mixed(r, ALNUM, 24)), s),
    "gitlab": lambda r: ("glpat-" + (s := _mixed(r, URLSAFE, 20)), s),
    "slack_token": lambda r: ("xoxb-" + (s := rand(r, string.digits, 12) + "-" + _mixed(r, ALNUM, 24)), s),
    "jwt": lambda r: ((s := "eyJ" + _mixed(r, URLSAFE, 20) + ".eyJ" + _mixed(r, URLSAFE, 40) + "."
                       + _mixed(r, URLSAFE, 43)), s),
}
# Shapes that are a credential only with the words around them: placed in their own carriers.
TEXTS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "bearer": lambda r: ("authorization: bearer " + (s := _mixed(r, ALNUM + "._-", 40)), s),
    "bearer_prose": lambda r: ("sent it with bearer " + (s := _mixed(r, ALNUM, 32)) + " to the api", s),
    "xml_password": lambda r: ("<password>" + (s := _mixed(r, ALNUM + "!#%", 16)) + "</password>", s),
    "putty": _putty,
}

# Where a token stands: name -> token -> text.
POSITIONS: dict[str, Callable[[str], str]] = {
    "standalone": lambda t: t,
    "after_dash": lambda t: f"exp-{t}",
    "after_underscore": lambda t: f"sweep_{t}",
    "after_slash": lambda t: f"custom/{t}",
    "after_equals": lambda t: f"seed=3 ref={t}",
    "run_name": lambda t: f"runs/exp-{t}-seed1",
    "metric_name": lambda t: f"custom/run-{t}/loss",
    "folder": lambda t: f"ladders/{t}/rung-2",
    "domain": lambda t: f"https://{t}.example.com/",
    "url_path": lambda t: f"https://example.org/cb/{t}?step=5",
    "url_query": lambda t: f"https://example.org/cb?next={t}&x=1",
    "prose": lambda t: f"rotated {t} yesterday, see the log",
    "json": lambda t: json.dumps({"note": t}),
}
TEXT_POSITIONS: dict[str, Callable[[str], str]] = {
    "standalone": lambda t: t,
    "prose": lambda t: f"the launcher said:\n{t}\nand then stopped",
    "json": lambda t: json.dumps({"note": t}),
}


def planted(seed: int, n: int) -> list[tuple[str, str, str, str]]:
    """(shape, position, text, secret part) for n random instances of every shape in every position."""
    rng = random.Random(seed)
    out = []
    for shapes, positions in ((TOKENS, POSITIONS), (TEXTS, TEXT_POSITIONS)):
        for shape, make in shapes.items():
            for position, place in positions.items():
                for _ in range(n):
                    token, secret = make(rng)
                    out.append((shape, position, place(token), secret))
    return out


RULE_POSITIONS: dict[str, Callable[[str], str]] = {
    "standalone": lambda t: t,
    "after a dash": lambda t: f"exp-{t}",
    "run folder": lambda t: f"runs/{t}/store.sqlite",
    "prose": lambda t: f"the launcher printed {t} and stopped",
    "json": lambda t: json.dumps({"note": t}),
}


def from_rules(seed: int) -> list[tuple[str, str, str, str]]:
    """(rule id, position, text, secret part): one instance of every rule redaction applies, made from
    the rule's own regex (rstr), in every RULE_POSITIONS place; the secret part is what the rule
    itself finds in the instance (its first group of 8 or more characters, else the match). Rules
    whose regex rstr cannot invert, or whose instance holds less than 12 secret characters, are left
    out (counted by the caller: `len(rule_set().ids)` against the ids returned)."""
    import warnings

    import regex
    import rstr

    from glassroom.observe import secret_rules

    rules = secret_rules.rule_set()
    patterns = {r["id"]: r["pattern"] for r in secret_rules.read_rules()}
    make = rstr.Rstr(random.Random(seed))
    out = []
    for index, rule_id in enumerate(rules.ids):
        pattern = patterns[rule_id]
        if regex.search(r".\(\?[a-zA-Z]+\)", pattern):   # flags mid-pattern: rstr reads them only at the start
            pattern = "(?i)" + regex.sub(r"\(\?[a-zA-Z]+\)", "", pattern)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                token = make.xeger(pattern)
        except Exception:
            continue
        m = rules.compiled[index].search(token)
        if m is None:
            continue
        group = next((g for g in range(1, (m.re.groups or 0) + 1) if m.group(g) and len(m.group(g)) >= 8), 0)
        secret = m.group(group).strip(" \t\r\n\"'=:")
        if len(secret) < 12 or not token.isprintable() or any(c in token for c in "{}|^`[]<>\\"):   # junk no service issues
            continue
        out += [(rule_id, position, place(token), secret) for position, place in RULE_POSITIONS.items()
                if not (position == "json" and ('"' in token or "\\" in token))]   # JSON escapes would change the token
    return out


def leaked(secret: str, text: str, window: int = 12) -> bool:
    """True when any `window` characters in a row of the secret part are still in `text`."""
    w = min(window, len(secret))
    return any(secret[i:i + w] in text for i in range(len(secret) - w + 1))


# ---- controls: ordinary values that must come through unchanged

HARMLESS_CONFIG = {
    "model": {"num_key_value_heads": 8, "n_kv_heads": 2, "key_proj_bias": False, "rope_theta": 500000.0,
              "tokenizer_pat": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+", "name": "meta-llama/Llama-3-8B"},
    "eval": {"pass_at_k": [1, 10], "sig_figs": 3, "metrics": ["eval/macro/loss", "pass@1"], "tasks": ["hellaswag"]},
    "data": {"text_key": "text", "cache_key": "shard-00012", "sort_key": "length"},
    "code": {"commit": "0123456789abcdef0123456789abcdef01234567"},
}
METRICS = ["eval/macro/loss", "eval/macro/bpb", "train/loss", "train/lr", "throughput/tokens_per_s",
           "moe/layer_1/tokens_per_expert", "norm/grad/attention", "data/tokens/code", "eval/code/bpb",
           "norm/update/layer_3", "moe/layer_3/bias_norm", "downstream/hellaswag/acc_norm", "eval/pass_at_k/1"]
PATHS = ["/data/corpora/prose/shard-00012.bin", "lab/runs/moe/checkpoints/step_0002600", "experiments/train-moe.yaml",
         "runs/hero/store.sqlite", "~/.cache/glassroom/tokenizer.json", "ladders/demo-fit/rungs/rung-2/config.yaml",
         "C:\\Users\\lab\\runs\\hero", "lab/data/demo/dataset/shards/train-000.bin"]
URLS = ["https://huggingface.co/meta-llama/Llama-3-8B", "https://github.com/org/repo/commit/0123456789abcdef",
        "https://example.org/runs/hero?step=250#loss", "git@github.com:org/repo.git", "http://127.0.0.1:8080/runs/hero",
        "https://docs.python.org/3/library/re.html", "https://arxiv.org/abs/2401.04088",
        "https://hooks.slack.com/", "https://discord.com/channels/123/456"]
PROSE = ["switched the data mixture to more code", "loss spike at step 1200: swapped shard 12",
         "eval at step 250: macro bpb 1.234", "Basic authentication is fine", "the bearer of this note asked for more",
         "checkpoint step 1000 saved", "prediction sealed: sha256 " + "ab" * 32,
         "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
         "of a wife.", "To be, or not to be, that is the question", "the key insight is that pass rates rose",
         "see the sort key and the primary key of the table", "we pass the tokenizer pattern through unchanged"]


def flat(tree, prefix="") -> list[tuple[str, object]]:
    if isinstance(tree, dict):
        return [kv for k, v in tree.items() for kv in flat(v, f"{prefix}{k}.")]
    return [(prefix[:-1], tree)]


def real_config() -> dict:
    """experiments/train-moe.yaml, the demo's MoE config, as a tree."""
    return yaml.safe_load((REPO / "experiments" / "train-moe.yaml").read_text())


def demo_prose(limit: int = 200) -> list[str]:
    """Lines of English prose from the demo corpus's sources where installed (the Python docs, the
    Jargon File); the built-in PROSE otherwise."""
    found = sorted(Path("/usr/share/doc/python3.11/html/_sources/tutorial").glob("*.txt"))
    lines = []
    for path in found:
        lines += [line.strip() for line in path.read_text(errors="replace").splitlines()
                  if len(line.strip()) > 40 and " " in line.strip() and not line.startswith((" ", ".."))]
    return (lines[:limit] or []) + PROSE


def controls(seed: int, n: int) -> dict[str, list[str]]:
    """kind -> texts that hold no secret and must come through unchanged."""
    rng = random.Random(seed)
    config = real_config()
    config_lines = [f"{k}: {v}" for k, v in flat(config) + flat(HARMLESS_CONFIG)]
    plain = {
        "config lines": config_lines,
        "config keys": [k.rsplit(".", 1)[-1] for k, _ in flat(config) + flat(HARMLESS_CONFIG)],
        "sha256": [rand(rng, HEX, 64) for _ in range(n)],
        "commit sha": [rand(rng, HEX, 40) for _ in range(n)],
        "uuid": [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)],
        "paths": PATHS,
        "urls": URLS,
        "metrics": METRICS,
        "numbers": [repr(rng.uniform(-1e6, 1e6)) for _ in range(n)] + ["3e-3", "1e-08", "65536", "0.999"],
        "prose": demo_prose(),
    }
    # each also as a quoted JSON value, as meta.json, runs.json and the API carry it
    return {kind: texts + [json.dumps({"value": t}) for t in texts] for kind, texts in plain.items()}
