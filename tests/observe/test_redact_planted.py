"""glassroom.observe.redact over generated planted secrets: every shape of tests/secret_shapes.py,
N random instances each from a seeded RNG, in every position a token can stand (after `-`, `_`, `/`,
`=`, inside run, metric and folder names, domains, URLs, prose, JSON), through redact_text and through
redact (a value, a dict key, a list item); controls (the demo's MoE config, model and metric keys,
digests, commit shas, UUIDs, paths, URLs, numbers, prose) come through unchanged; public_name."""

from __future__ import annotations

import random

import pytest

from glassroom.observe.redact import REDACTED, key_is_secret, public_name, redact, redact_text
from secret_shapes import HARMLESS_CONFIG, POSITIONS, TEXTS, TOKENS, controls, from_rules, leaked, planted, real_config

N = 6
SEED = 20261203
PLANTED = planted(SEED, N)


@pytest.mark.parametrize("shape", sorted(TOKENS) + sorted(TEXTS))
def test_every_planted_shape_is_removed_in_every_position(shape):
    rows = [r for r in PLANTED if r[0] == shape]
    assert len(rows) >= N * 3
    for _, position, text, secret in rows:
        out = redact_text(text)
        assert not leaked(secret, out) and REDACTED in out, (shape, position, text, out)
        assert not leaked(secret, redact_text(text, pairs=False)), (shape, position, text)


def test_every_rule_of_the_maintained_set_is_applied_wherever_its_token_stands():
    """One instance of each Betterleaks and Veles rule, made from the rule's own regex, standalone,
    after a dash, as a run folder, in prose and in JSON: none of its secret comes through."""
    from glassroom.observe.secret_rules import rule_set

    rows = from_rules(SEED)
    planted_rules = {r[0] for r in rows}
    assert len(rule_set().ids) >= 400 and len(planted_rules) >= 120   # the rule set loaded, the generator made them
    missed = [(rule, position, text[:120]) for rule, position, text, secret in rows if leaked(secret, redact_text(text))]
    assert not missed, missed[:10]


def test_a_service_prefix_and_a_random_body_is_found_without_a_rule_for_the_service():
    """The class the named rules stand for: a short prefix and 20+ random letters and digits."""
    rng = random.Random(SEED)
    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    for prefix in ("zq_", "acme-", "ybx.live.", "tok_v2_", "ZZPAT-", "q-9-"):
        for _ in range(20):
            body = "".join(rng.choice(alnum) for _ in range(rng.randint(24, 64))) + "Aa1"
            for text in (f"{prefix}{body}", f"exp-{prefix}{body}-seed1", f"runs/{prefix}{body}/loss", f"note {prefix}{body}."):
                out = redact_text(text)
                assert not leaked(body, out), (text, out)
    for name in ("meta-llama/Llama-3.1-8B-Instruct", "vivid-sunset-42", "hero-c7c68edd", "sha256-" + "Ab1" * 15,
                 "run-" + "0123456789abcdef" * 4, "Qwen2.5-0.5B-Instruct-GGUF", "step_0002600", "deepseek-ai/DeepSeek-V3-Base"):
        assert redact_text(name) == name


def test_planted_secrets_in_a_tree_as_values_keys_and_list_items():
    texts = [text for _, _, text, _ in PLANTED]
    out = redact({"notes": texts, "by_name": {text: 1 for text in texts},
                  "runs": [{"name": text, "lr": 3e-3} for text in texts]})
    keys = "\n".join(out["by_name"])   # redacted keys collapse: few and short
    assert len(out["notes"]) == len(out["runs"]) == len(PLANTED)
    for i, (_, position, text, secret) in enumerate(PLANTED):
        for shown in (out["notes"][i], out["runs"][i]["name"]):
            assert not leaked(secret, shown), (position, text, shown)
        assert not leaked(secret, keys), (position, text)
    assert all(run["lr"] == 3e-3 for run in out["runs"])


def test_tokens_after_a_dash_underscore_or_slash_in_names():
    hf, ghp, proj = (TOKENS[s](random.Random(s))[0] for s in ("hf", "github", "openai_proj"))
    for text in (f"exp-{hf}", f"sweep_{ghp}", f"custom/run-{proj}", f"runs/exp-{hf}-seed1/store"):
        out = redact_text(text)
        assert REDACTED in out and hf not in out and ghp not in out and proj not in out, out
    assert redact_text(f"custom/run-{proj}/loss") == "custom/run-<redacted>/loss"


@pytest.mark.parametrize("kind", sorted(controls(SEED, 40)))
def test_controls_survive(kind):
    for text in controls(SEED, 40)[kind]:
        assert redact_text(text) == text, (kind, text)
        assert redact_text(text, pairs=False) == text, (kind, text)


def test_a_real_config_and_model_keys_survive_whole():
    assert redact(real_config()) == real_config()
    assert redact(HARMLESS_CONFIG) == HARMLESS_CONFIG


@pytest.mark.parametrize("key", ["num_key_value_heads", "pass_at_k", "tokenizer_pat", "sig_figs", "key_proj",
                                 "n_kv_heads", "text_key", "cache_key", "sort_key", "rng_key", "forward_pass",
                                 "pass_rate", "pass_at_1", "keyframe", "passes", "eos_token_id", "max_tokens"])
def test_model_and_metric_keys_are_not_secret(key):
    assert key_is_secret(key) is False
    assert redact({key: 8}) == {key: 8} and redact_text(f"{key}: 8") == f"{key}: 8"


@pytest.mark.parametrize("key", ["api_key", "hf_token", "db_password", "private_key", "auth", "secret", "github_pat",
                                 "aws_secret_access_key", "key", "pass", "pat", "sig", "openai_key", "db_pass",
                                 "gh_pat", "X-Api-Key", "wandbApiKey", "ssh_key", "signing_key"])
def test_credential_keys_stay_secret(key):
    assert key_is_secret(key) is True
    assert redact({key: "abc123"}) == {key: REDACTED}


def test_public_name_is_stable_distinct_and_clean():
    rng = random.Random(SEED)
    tokens = [TOKENS[s](rng)[0] for s in ("hf", "github", "openai_proj", "telegram", "age")]
    names = [f"runs/exp-{t}-seed1" for t in tokens] + [f"sweep_{tokens[1]}", f"a/{tokens[0]}/b/{tokens[2]}"]
    shown = [public_name(n) for n in names]
    assert len(set(shown)) == len(shown) and shown == [public_name(n) for n in names]
    for name, pub in zip(names, shown):
        assert redact_text(pub) == pub and "redacted-" in pub and "<" not in pub, (name, pub)
        assert not any(t in pub for t in tokens)
    assert shown[0].startswith("runs/exp-redacted-") and shown[0].endswith("-seed1")
    assert public_name("runs/hero") == "runs/hero" and public_name("api_key=abc123").startswith("api_key=redacted-")
    assert set(POSITIONS) >= {"after_dash", "after_underscore", "after_slash", "run_name", "metric_name", "folder"}
