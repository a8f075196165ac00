"""Tests against deliberate bugs (mutants) that the rest of the suite let through.

Each test here fails on one deliberate bug that survived the older tests, and passes on correct
code: feed-forward output projections without the depth scaling, a sliding window one position
off, every epoch of a domain replaying one window order, anomaly layers named by size instead of
change, a non-GET method or a foreign Host let through on any route of the app, the ladder's point
estimate replaced by its interval's bound, and bits per byte without the division by ln 2. The
resume counters (trainer.json) are compared in tests/test_resume_kill.py and tests/test_train.py.
scripts/mutation.sh plants such bugs and reports those no test catches (docs/design.md, "Mutation check").
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch

from glassroom.model.config import ModelConfig, MoEConfig
from glassroom.model.transformer import INIT_STD, build_model, sliding_window_mask

DENSE = ModelConfig(vocab_size=256, d_model=64, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=64)
MOE = dataclasses.replace(
    DENSE, moe=MoEConfig(n_experts=8, top_k=2, d_expert=32, n_shared_experts=1, first_dense_layers=1))


# ---------------------------------------------------------------- model: initialisation


@pytest.mark.parametrize("cfg", [DENSE, MOE], ids=["dense", "moe"])
def test_every_projection_into_the_residual_stream_is_scaled_by_depth(cfg):
    """attn.wo, the dense `down`, the shared experts' `down` and experts.down_proj: std 0.02 /
    sqrt(2 * n_layers); every other matrix std 0.02. Checked per parameter, by name."""
    model = build_model(cfg, seed=0)
    residual_std = INIT_STD / math.sqrt(2 * cfg.n_layers)
    scaled = []
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            assert torch.all(param == 1.0), name
            continue
        into_residual = name.endswith(("attn.wo.weight", "down.weight", "down_proj"))
        want = residual_std if into_residual else INIT_STD
        got = float(param.detach().float().std())
        assert got == pytest.approx(want, rel=0.06), (name, got, want)
        if into_residual:
            scaled.append(name)
    kinds = {re.sub(r"^blocks\.\d+\.", "", n) for n in scaled}
    want_kinds = {"attn.wo.weight", "mlp.down.weight"}
    if cfg.moe is not None:
        want_kinds |= {"mlp.experts.down_proj", "mlp.shared_experts.down.weight"}
    assert kinds == want_kinds  # each kind of output projection really exists and was checked


# ---------------------------------------------------------------- model: sliding window


def test_sliding_window_mask_is_exactly_the_band():
    from glassroom.model import transformer

    transformer._MASKS.clear()   # built here, not taken from the cache (so a mutant of it is tested)
    for seq, window in ((9, 1), (12, 4), (16, 5)):
        mask = sliding_window_mask(seq, window, torch.device("cpu"))
        want = torch.tensor([[0 <= i - j < window for j in range(seq)] for i in range(seq)])
        assert torch.equal(mask, want), (seq, window)
        assert int(mask.sum(1).max()) == window  # each query sees exactly `window` keys once far enough in


def test_a_sliding_layer_sees_exactly_window_positions():
    """Window 4: the token at p changes the logits at p, p+1, p+2 and p+3, each one, and none after."""
    cfg = dataclasses.replace(DENSE, n_layers=1, sliding_window=4, global_every=None)
    model = build_model(cfg, seed=0).eval()
    tokens = torch.randint(0, cfg.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1))
    for p in (3, 6):
        changed = tokens.clone()
        changed[0, p] = (changed[0, p] + 1) % cfg.vocab_size
        with torch.no_grad():
            diff = (model(tokens).logits - model(changed).logits).abs().amax(-1)[0]
        for q in range(p, p + 4):
            assert diff[q] > 1e-4, (p, q, diff.tolist())
        assert float(diff[:p].max()) == 0.0 and float(diff[p + 4:].max()) < 1e-6, (p, diff.tolist())


# ---------------------------------------------------------------- data: epochs of a small domain


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    """A two-domain dataset (email, web) from stdlib sources, built in one process (no worker pool,
    so scripts/mutation.sh can run this in its forked children)."""
    import io

    from data_helpers import make_corpus, write_recipe
    from glassroom.data.build import build_dataset
    from glassroom.data.recipe import load_recipe

    root = tmp_path_factory.mktemp("epochs")
    make_corpus(root)
    build_dataset(load_recipe(write_recipe(root)), root / "dataset", workers=1, log=io.StringIO())
    return root / "dataset"


def test_each_epoch_of_a_domain_visits_every_window_in_a_new_order(small_dataset):
    from glassroom.data.mixture import Mixture

    mix = Mixture(small_dataset, {"email": 0.1, "web": 0.9}, seq_len=32, batch_size=8, seed=5)
    d = mix.domains.index("email")
    n = int(mix.windows[d])
    g = np.arange(0, 12 * n, dtype=np.int64)  # about 1.2 epochs of email at weight 0.1
    dom, start = mix.locate(g)
    order = start[dom == d] // mix.seq_len  # email's k-th sequence, k = 0, 1, ...
    assert len(order) >= n + 50
    first, second = order[:n], order[n:]
    assert sorted(first.tolist()) == list(range(n))  # an epoch is a permutation of the windows
    assert len(set(second.tolist())) == len(second)  # the next epoch starts again without repeats
    assert not np.array_equal(second, first[:len(second)])  # ... in another order
    assert np.mean(second == first[:len(second)]) < 0.05


# ---------------------------------------------------------------- observe: anomaly attribution


def test_anomaly_names_the_layer_that_changed_not_the_largest():
    """Layer 1 of the routed experts is large and steady; layer 2 is small and jumps at step 500."""
    from glassroom.observe.anomalies import AnomalyDetector

    detector = AnomalyDetector(window=50, sigma=4, min_history=10)
    rng = np.random.default_rng(0)
    big, small = 30.0, 1.0
    events = []
    for step in range(10, 610, 10):
        big += 0.002 + rng.normal(0, 0.0005)
        if step == 500:
            small = 8.0
        experts = math.hypot(big, small)
        metrics = {"train/loss": 3.0 + rng.normal(0, 0.01), "norm/param/total": math.hypot(experts, 5.0),
                   "norm/param/attention": 5.0, "norm/param/experts": experts,
                   "norm/param/experts/layer_1": big, "norm/param/experts/layer_2": small}
        events += detector.observe(step, metrics)
    assert [e["data"]["step"] for e in events] == [500]
    event = events[0]
    assert event["data"]["layers"] == [2], event
    assert "from the routed experts (layer 2)" in event["text"], event["text"]
    assert max(event["data"]["attribution"], key=event["data"]["attribution"].get) == "experts"


# ---------------------------------------------------------------- web: every route of the app

BAD_HOSTS = ["127.attacker.example", "127.0.0.1.nip.io", "127.evil.com", "attacker.example", "localhost.evil.com",
             "127.1", "0x7f.0.0.1", ""]
GOOD_HOSTS = ["127.0.0.1:8080", "localhost", "[::1]:8080"]
WRITE_METHODS = ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"]


@pytest.fixture(scope="module")
def app_and_paths(tmp_path_factory):
    """The dashboard app over a small lab, and one concrete path for every route the app declares."""
    from starlette.routing import Mount, Route

    from glassroom.web.server import create_app
    from web_helpers import write_run

    lab = tmp_path_factory.mktemp("routes")
    write_run(lab / "hero", steps=60)
    app = create_app(lab)
    inner = app.app  # MethodAndHostGuard wraps the Starlette app
    paths = []
    for route in inner.routes:
        if isinstance(route, Mount):
            paths.append(route.path + "/style.css")
        else:
            assert isinstance(route, Route), route
            assert set(route.methods or ()) <= {"GET", "HEAD"}, (route.path, route.methods)
            path = re.sub(r"\{[^}]+\}", "hero", route.path)
            paths.append(path + ("?run=nope" if path == "/api/stream" else "?run=hero"))
    assert len(paths) >= 14 and "/api/events?run=hero" in paths and "/static/style.css" in paths
    return app, paths


def _client(app):
    from starlette.testclient import TestClient

    return TestClient(app, base_url="http://127.0.0.1:8080", raise_server_exceptions=False)


def test_every_route_refuses_every_method_but_get_and_head(app_and_paths):
    app, paths = app_and_paths
    with _client(app) as client:
        for path in paths:
            assert client.get(path).status_code not in (405, 421), path  # the path reaches its route
            for method in WRITE_METHODS:
                response = client.request(method, path)
                assert response.status_code == 405, (method, path, response.status_code)
                assert response.headers.get("allow") == "GET, HEAD", (method, path)


def test_every_route_refuses_foreign_host_headers(app_and_paths):
    app, paths = app_and_paths
    with _client(app) as client:
        for path in paths:
            for host in BAD_HOSTS:
                response = client.get(path, headers={"host": host})
                assert response.status_code == 421, (host, path, response.status_code)
                assert "default-src 'self'" in response.headers["content-security-policy"]
            for host in GOOD_HOSTS:
                assert client.get(path, headers={"host": host}).status_code not in (405, 421), (host, path)


# ---------------------------------------------------------------- ladder: the point estimate


def test_endpoint_prediction_is_the_fitted_value_inside_its_interval():
    from glassroom.ladder.fit import fit_endpoints, leave_largest_out, predict_interval

    rng = np.random.default_rng(3)
    C = np.logspace(17, 21, 6)
    loss = (1.8 + 400.0 * C ** -0.15) * np.exp(rng.normal(0, 0.002, len(C)))
    fit = fit_endpoints(C[:-1], loss[:-1], replicates=60, noise_floor=0.002)
    mean, lo, hi = predict_interval(fit, {"C": C[-1:]})
    assert float(mean[0]) == float(fit.predict({"C": C[-1:]})[0])
    assert lo[0] < mean[0] < hi[0] and min(mean[0] - lo[0], hi[0] - mean[0]) > 1e-4 * mean[0]
    result = leave_largest_out(C, loss, replicates=60, noise_floor=0.002)
    assert result["predicted_loss"] == float(mean[0])
    assert result["relative_error"] == pytest.approx((mean[0] - loss[-1]) / loss[-1], rel=1e-12)


def test_curve_prediction_and_backtest_report_the_fitted_curve(tmp_path):
    from glassroom.ladder.predict import backtest, curve_features, fit_curves, lr_multipliers, predict_curve
    from glassroom.ladder.rungs import load_rungs
    from ladder_helpers import write_ladder

    spec, _, hero = write_ladder(tmp_path, noise=0.002, seed=1, spec_overrides={"fit": {"bootstrap": 30}})
    rungs = load_rungs(tmp_path)
    fit = fit_curves(rungs[:-1], spec.fit.metric, spec.fit)
    held = rungs[-1]
    band = predict_curve(fit, held.params, held.config["train"], held.tokens_per_step, spec.fit)
    X = curve_features(held.params, held.tokens_per_step, lr_multipliers(held.config["train"]),
                       np.asarray(band["steps"]), spec.fit.momentum)
    np.testing.assert_array_equal(band["mean"], fit.predict(X))
    assert band["final_loss"] == band["mean"][-1]
    lo, hi = band["final_interval"]
    assert lo < band["final_loss"] < hi and min(band["final_loss"] - lo, hi - band["final_loss"]) > 1e-4
    result = backtest(tmp_path, spec.fit)
    # The backtest's band also carries the law's leave-one-size-out misfit beyond the seed noise.
    from types import SimpleNamespace

    from glassroom.ladder.predict import _misfit_sd

    extra = _misfit_sd(result["misfit"], SimpleNamespace(sigma=result["noise"]["sigma"]))
    wide = predict_curve(fit, held.params, held.config["train"], held.tokens_per_step, spec.fit, misfit=extra)
    assert result["predicted_loss"] == band["final_loss"] == wide["final_loss"]
    assert result["interval"] == wide["final_interval"]


# ---------------------------------------------------------------- train: bits per byte


def test_bits_per_byte_is_nats_over_ln2_over_bytes(tiny_dataset):
    """A model whose logits are all zero has loss ln(V) per token: bpb = log2(V) * tokens / bytes."""
    from glassroom.data.mixture import Dataset
    from glassroom.train.evaluate import evaluate, load_validation
    from glassroom.train.parallel import DistInfo

    dataset = Dataset(tiny_dataset)
    vocab = dataset.vocab_size
    cfg = ModelConfig(vocab_size=vocab, d_model=32, n_layers=1, n_heads=2, d_ff=64, max_seq_len=32)
    model = build_model(cfg, seed=0)
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
    sets = load_validation(dataset, dataset.domains, 16, 6)
    results = evaluate(model, sets, 4, torch.device("cpu"), None, DistInfo())
    for vs in sets:
        tokens, n_bytes = vs.tokens.shape[0] * 16, float(vs.window_bytes.sum())
        assert results[f"eval/{vs.domain}/loss"] == pytest.approx(math.log(vocab), rel=1e-6)
        assert results[f"eval/{vs.domain}/bpb"] == pytest.approx(math.log2(vocab) * tokens / n_bytes, rel=1e-6)
    bpbs = [results[f"eval/{vs.domain}/bpb"] for vs in sets]
    assert results["eval/macro/bpb"] == pytest.approx(sum(bpbs) / len(bpbs), rel=1e-12)


# ---------------------------------------------------------------- train: checkpoints in process


def test_checkpoints_save_verify_retain_fall_back_and_load_in_process(tmp_path):
    """The checkpoint module without a training run (so scripts/mutation.sh can test its mutants in
    seconds): manifest checksums, retention, a flipped and a truncated file named, the fallback to
    the newest intact checkpoint, and a load that restores model, optimizer and RNG exactly."""
    import hashlib
    import json

    from glassroom.train import checkpoint as ckpt

    model = build_model(MOE, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    saved = {}
    for step in range(1, 5):
        model(torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(step))).logits.float().pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        saved[step] = ({k: v.clone() for k, v in model.state_dict().items()},
                       {n: optimizer.state[p]["exp_avg"].clone() for n, p in model.named_parameters()},
                       torch.get_rng_state().clone())
        ckpt.save_checkpoint(tmp_path, step, model, optimizer, {"train_state": {"tokens_seen": 100 * step}},
                             keep_last=2, keep_every=None)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [3, 4]  # retention: the newest two
    newest = tmp_path / "checkpoints" / "step_0000004"
    assert ckpt.verify_checkpoint(newest, 4) is None and ckpt.verify_checkpoint(newest, 3) is not None
    manifest = json.loads((newest / "manifest.json").read_text())["files"]
    assert {"trainer.json", ".metadata"} <= set(manifest)
    for name, entry in manifest.items():
        content = (newest / name).read_bytes()
        assert entry == {"bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}, name

    data = max((n for n in manifest if n.endswith(".distcp")), key=lambda n: manifest[n]["bytes"])
    content = bytearray((newest / data).read_bytes())
    content[len(content) // 2] ^= 0xFF
    (newest / data).write_bytes(bytes(content))
    assert ckpt.verify_checkpoint(newest, 4) == f"checkpoints/step_0000004/{data}: checksum mismatch"
    (newest / data).write_bytes(bytes(content[:100]))
    assert ckpt.verify_checkpoint(newest, 4) == (f"checkpoints/step_0000004/{data}: truncated "
                                                 f"(100 bytes, the manifest says {manifest[data]['bytes']})")
    choice = ckpt.choose_for_resume(tmp_path)
    assert choice.step == 3 and choice.path.name == "step_0000003" and choice.verified
    assert [(s, p.name) for s, p, _ in choice.damaged] == [(4, "step_0000004")]
    moved = ckpt.set_aside(tmp_path, newest)
    assert moved == tmp_path / "checkpoints" / "damaged" / "step_0000004" and not newest.exists()
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [3]

    fresh = build_model(MOE, seed=1)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    torch.manual_seed(123)
    state = ckpt.load_checkpoint(choice.path, fresh, fresh_optimizer)
    assert state["step"] == 3 and state["train_state"] == {"tokens_seen": 300}
    weights, moments, rng = saved[3]
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, weights[name]), name
    for name, param in fresh.named_parameters():
        assert torch.equal(fresh_optimizer.state[param]["exp_avg"], moments[name]), name
    assert torch.equal(torch.get_rng_state(), rng)


def test_checkpoints_save_verify_keep_every_and_malformed_manifests(tmp_path):
    """Retention keeps every `keep_every`-th step besides the newest `keep_last`; a manifest whose
    entries have the wrong shape or name a file outside the checkpoint is damage, named in one line."""
    import json

    from glassroom.train import checkpoint as ckpt

    model = build_model(MOE, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(1, 7):
        ckpt.save_checkpoint(tmp_path, step, model, optimizer, {"train_state": {}}, keep_last=2, keep_every=2)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [2, 4, 5, 6]

    newest = tmp_path / "checkpoints" / "step_0000006"
    original = (newest / "manifest.json").read_text()
    files = json.loads(original)["files"]
    name = next(iter(files))
    broken = {
        "bytes as text": {**files, name: {"bytes": "12", "sha256": files[name]["sha256"]}},
        "no digest": {**files, name: {"bytes": files[name]["bytes"]}},
        "outside": {**files, "../step_0000005/trainer.json": files[name]},
        "absolute": {**files, "/etc/passwd": files[name]},
    }
    for what, entries in broken.items():
        (newest / "manifest.json").write_text(json.dumps({"format": 1, "files": entries}))
        problem = ckpt.verify_checkpoint(newest, 6)
        assert problem == "checkpoints/step_0000006/manifest.json: not a readable checksum manifest", what
    (newest / "manifest.json").write_text(json.dumps({"format": 1, "files": []}))
    assert ckpt.verify_checkpoint(newest, 6) is not None
    (newest / "manifest.json").write_text(original)
    assert ckpt.verify_checkpoint(newest, 6) is None


def test_rope_is_a_rotation_by_position_that_keeps_only_relative_offsets():
    """RoPE from its definition: pair i of a head turns by position * theta^(-2i/h); so norms are kept,
    position 0 is the identity, and a query-key product depends on the offset alone (shift both
    positions and it is unchanged)."""
    from glassroom.model.transformer import apply_rope, rope_tables

    head_dim, theta = 8, 10_000.0
    cos, sin = rope_tables(head_dim, 64, theta)
    expected = torch.outer(torch.arange(64, dtype=torch.float64),
                           theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    torch.testing.assert_close(cos, expected.cos().float())
    torch.testing.assert_close(sin, expected.sin().float())

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 64, head_dim, generator=g), torch.randn(1, 1, 64, head_dim, generator=g)
    rq = apply_rope(q, cos, sin)
    torch.testing.assert_close(rq[..., 0, :], q[..., 0, :])                       # position 0: unchanged
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))                    # a rotation
    same_q, same_k = q[..., :1, :].expand(1, 1, 64, head_dim), k[..., :1, :].expand(1, 1, 64, head_dim)
    rq, rk = apply_rope(same_q, cos, sin), apply_rope(same_k, cos, sin)
    scores = rq[0, 0] @ rk[0, 0].T                                                 # (query pos, key pos)
    for offset in (0, 3, 17):
        diagonal = torch.diagonal(scores, -offset)
        torch.testing.assert_close(diagonal, diagonal[0].expand_as(diagonal), rtol=1e-4, atol=1e-4)
