"""GroupedExperts against a naive per-token loop: outputs and gradients (input, combine weights,
expert parameters), with dropped (-1) assignments, empty experts, one token, top-1, everything
dropped, and under bf16 autocast; plus the pieces (grouped matmuls, the gather-sum layout)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from glassroom.model import experts as experts_mod
from glassroom.model.experts import GroupedExperts, grouped_matmul, grouped_weight_grad


def make_experts(n_experts=6, d_model=8, d_expert=4, seed=0) -> GroupedExperts:
    torch.manual_seed(seed)
    module = GroupedExperts(n_experts, d_model, d_expert)
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.5)
    return module


def naive(module: GroupedExperts, x, chosen, weights):
    """Token by token, expert by expert: the definition of the layer."""
    h = module.d_expert
    out = []
    for t in range(x.shape[0]):
        total = torch.zeros_like(x[t])
        for j in range(chosen.shape[1]):
            e = int(chosen[t, j])
            if e < 0:
                continue
            hidden = x[t] @ module.gate_up_proj[e]
            total = total + weights[t, j] * ((F.silu(hidden[:h]) * hidden[h:]) @ module.down_proj[e])
        out.append(total)
    return torch.stack(out)


def grads(module, x, weights, output, upstream):
    module.zero_grad(set_to_none=True)
    x.grad = weights.grad = None
    if output.requires_grad:  # the naive loop's output has no graph when everything is dropped
        (output * upstream).sum().backward()
    zero = torch.zeros_like
    return [
        x.grad if x.grad is not None else zero(x),
        weights.grad if weights.grad is not None else zero(weights),
        module.gate_up_proj.grad if module.gate_up_proj.grad is not None else zero(module.gate_up_proj),
        module.down_proj.grad if module.down_proj.grad is not None else zero(module.down_proj),
    ]


def check(chosen, fuse, n_experts=6, d_model=8, d_expert=4, autocast=False, seed=0):
    chosen = torch.as_tensor(chosen)
    module = make_experts(n_experts, d_model, d_expert, seed)
    module.fuse = fuse
    torch.manual_seed(seed + 1)
    x = torch.randn(chosen.shape[0], d_model, requires_grad=True)
    weights = torch.rand(chosen.shape, requires_grad=True)
    upstream = torch.randn(chosen.shape[0], d_model)
    counts = torch.bincount(chosen[chosen >= 0].flatten(), minlength=n_experts)
    want = naive(module, x, chosen, weights)
    want_grads = grads(module, x, weights, want, upstream)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        got = module(x, chosen, weights, counts)
    got_grads = grads(module, x, weights, got.float(), upstream)
    tol = dict(rtol=5e-2, atol=5e-2) if autocast else dict(rtol=1e-5, atol=1e-5)
    if autocast:
        assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, **tol)
    for name, g, w in zip(("x", "weights", "gate_up", "down"), got_grads, want_grads):
        torch.testing.assert_close(g.float(), w, **tol, msg=lambda m, name=name: f"{name}: {m}")
    return module


PLANTED = [[0, 3], [3, 5], [5, 0], [0, 3], [1, 0], [3, 5], [0, 1]]  # experts 2 and 4 empty
# Both paths: fused chunk by chunk (CPU, all experts local) and dispatch -> run_experts -> combine.
both_paths = pytest.mark.parametrize("fuse", [True, False], ids=["fused", "dispatch-combine"])


@both_paths
def test_matches_the_naive_loop_in_fp32(fuse):
    check(PLANTED, fuse)


@both_paths
def test_dropped_assignments_are_not_computed_and_contribute_zero(fuse):
    dropped = [[0, -1], [-1, 5], [5, 0], [-1, -1], [1, 0], [3, -1], [0, 1]]
    check(dropped, fuse)


@both_paths
def test_one_token_and_top1(fuse):
    check([[4, 1, 2]], fuse)
    check([[2], [2], [0], [5], [2]], fuse)


@both_paths
def test_every_assignment_dropped_gives_zero_and_zero_gradients(fuse):
    chosen = torch.full((5, 2), -1)
    module = check(chosen, fuse)
    x = torch.randn(5, 8, requires_grad=True)
    out = module(x, chosen, torch.rand(5, 2), torch.zeros(6, dtype=torch.long))
    assert out.shape == (5, 8) and out.abs().max() == 0


@both_paths
def test_larger_random_routing_with_drops_spanning_several_chunks(monkeypatch, fuse):
    monkeypatch.setattr(experts_mod, "CHUNK_ROWS", 7)  # chunk edges fall inside experts' groups
    torch.manual_seed(3)
    chosen = torch.randn(40, 8).topk(3, dim=-1).indices
    chosen[torch.rand(chosen.shape) < 0.2] = -1
    check(chosen, fuse, n_experts=8)


@both_paths
def test_bf16_autocast_matches_loosely(fuse):
    check(PLANTED, fuse, autocast=True)
    check([[0, -1], [-1, 5], [5, 0], [-1, -1], [1, 0]], fuse, autocast=True)


@both_paths
def test_bf16_autocast_with_chunk_edges_inside_expert_groups(monkeypatch, fuse):
    # the fused path's scratch buffers are reused by chunks of different sizes, and a cut group's
    # bf16 weight-gradient parts are added up in the fp32 gradient
    monkeypatch.setattr(experts_mod, "CHUNK_ROWS", 7)
    torch.manual_seed(4)
    chosen = torch.randn(40, 8).topk(3, dim=-1).indices
    chosen[torch.rand(chosen.shape) < 0.2] = -1
    check(chosen, fuse, n_experts=8, autocast=True)


def test_fused_path_takes_fp32_weights_and_returns_fp32_gradients_under_autocast():
    """The bf16 copies of the expert weights are made inside the fused Function, once; their
    gradients are written into fp32 directly, with no bf16 gradient cast by a ToCopy node."""
    module = make_experts()
    chosen = torch.tensor(PLANTED)
    x = torch.randn(len(PLANTED), 8, requires_grad=True)
    counts = torch.bincount(chosen.flatten(), minlength=6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(x, chosen, torch.rand(chosen.shape), counts)
    weight_nodes = [fn for fn, _ in out.grad_fn.next_functions[1:3]]  # inputs: x, gate_up, down, ...
    assert [type(fn).__name__ for fn in weight_nodes] == ["AccumulateGrad"] * 2  # no ToCopyBackward0
    assert weight_nodes[0].variable is module.gate_up_proj and weight_nodes[1].variable is module.down_proj
    # nothing of the experts' size is kept in bf16 for the backward: each chunk casts its own experts
    saved = out.grad_fn.saved_tensors
    assert not any(t.dtype == torch.bfloat16 and t.dim() == 3 for t in saved)
    assert any(t is module.gate_up_proj for t in saved) and any(t is module.down_proj for t in saved)
    out.float().sum().backward()
    assert module.gate_up_proj.grad.dtype == module.down_proj.grad.dtype == torch.float32


@both_paths
def test_unaligned_widths_take_the_per_expert_loop(fuse):
    # rows of 6 floats are not 16-byte aligned: grouped_mm refuses, the loop computes
    check(PLANTED, fuse, d_model=6, d_expert=3)
    check(PLANTED, fuse, d_model=6, d_expert=3, autocast=True)


@both_paths
def test_bf16_parameters_under_fp32_inputs_and_fp32_parameters_under_bf16_inputs(fuse):
    """Without autocast the compute dtype is x's: the weights are cast to it (chunk by chunk on the
    fused path) and their gradients come back in the parameters' own dtype."""
    chosen = torch.tensor(PLANTED)
    counts = torch.bincount(chosen.flatten(), minlength=6)
    for params, inputs in ((torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)):
        module = make_experts().to(params)
        module.fuse = fuse
        reference = make_experts()  # fp32, weights rounded as the module's
        reference.load_state_dict({k: v.float() for k, v in module.state_dict().items()})
        x = torch.randn(len(PLANTED), 8).to(inputs)
        weights = torch.rand(chosen.shape)
        out = module(x.requires_grad_(), chosen, weights, counts)
        assert out.dtype == inputs
        out.float().sum().backward()
        want = naive(reference, x.detach().float(), chosen, weights)
        want.sum().backward()
        torch.testing.assert_close(out.float(), want, rtol=5e-2, atol=5e-2)
        for got, ref in ((module.gate_up_proj, reference.gate_up_proj), (module.down_proj, reference.down_proj)):
            assert got.grad.dtype == params
            torch.testing.assert_close(got.grad.float(), ref.grad, rtol=5e-2, atol=5e-2)


def test_grouped_weight_grad_matches_per_group_products_and_zero_for_empty_groups():
    torch.manual_seed(0)
    counts = torch.tensor([5, 0, 3, 8])
    a, b = torch.randn(16, 8), torch.randn(16, 4)
    got = grouped_weight_grad(a, b, counts)
    starts = [0, 5, 5, 8]
    for g, (s, c) in enumerate(zip(starts, counts.tolist())):
        torch.testing.assert_close(got[g], a[s : s + c].t() @ b[s : s + c])
    assert got[1].abs().max() == 0
    a6, b6 = torch.randn(16, 6), torch.randn(16, 5)  # unaligned: the loop
    got6 = grouped_weight_grad(a6, b6, counts)
    torch.testing.assert_close(got6[2], a6[5:8].t() @ b6[5:8])
    assert got6[1].abs().max() == 0


def test_grouped_matmul_with_transposed_weights():
    torch.manual_seed(0)
    counts = torch.tensor([2, 0, 6])
    x, w = torch.randn(8, 4), torch.randn(3, 8, 4)
    got = grouped_matmul(x, w.transpose(1, 2), counts)
    torch.testing.assert_close(got[:2], x[:2] @ w[0].t())
    torch.testing.assert_close(got[2:], x[2:] @ w[2].t())


def test_run_experts_sees_rows_sorted_by_expert_and_returns_unweighted_outputs():
    module = make_experts()
    module.fuse = False  # the fused CPU path does not materialise the rows
    chosen = torch.tensor([[3, 0], [0, -1], [5, 3]])
    x = torch.randn(3, 8)
    counts = torch.bincount(chosen[chosen >= 0], minlength=6)
    seen = {}

    def spy(rows, counts_):
        seen["rows"], seen["counts"] = rows.detach().clone(), counts_.clone()
        return module.compute_local(rows, counts_)

    module.run_experts = spy
    module(x, chosen, torch.rand(3, 2), counts)
    # expert 0: tokens 0 and 1; expert 3: tokens 0 and 2; expert 5: token 2
    torch.testing.assert_close(seen["rows"], x[[0, 1, 0, 2, 2]])
    assert seen["counts"].tolist() == [2, 0, 0, 2, 0, 1]


@pytest.mark.parametrize("autocast", [False, True])
def test_moe_layer_gradients_unchanged_through_the_router(autocast):
    """The whole MoEFeedForward: its router weight receives gradient through the combine weights."""
    from glassroom.model.config import MoEConfig
    from glassroom.model.moe import MoEFeedForward

    torch.manual_seed(0)
    layer = MoEFeedForward(8, MoEConfig(n_experts=4, top_k=2, d_expert=4))
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.5)
    x = torch.randn(2, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out, _ = layer(x)
    out.float().sum().backward()
    assert layer.router.weight.grad.abs().sum() > 0
    assert layer.experts.gate_up_proj.grad.abs().sum() > 0


@both_paths
def test_int32_choices_and_experts_empty_at_chunk_edges(monkeypatch, fuse):
    # experts 1-4 empty, expert 0 and 5 hold every row; chunks of 3 rows cut both groups
    monkeypatch.setattr(experts_mod, "CHUNK_ROWS", 3)
    chosen = torch.tensor([[0, 5], [5, 0], [0, 5], [5, -1], [0, 5]], dtype=torch.int32)
    check(chosen, fuse)


@both_paths
def test_inference_without_gradients(fuse):
    module = make_experts()
    module.fuse = fuse
    chosen = torch.tensor(PLANTED)
    x, weights = torch.randn(len(PLANTED), 8), torch.rand(chosen.shape)
    counts = torch.bincount(chosen.flatten(), minlength=6)
    with torch.no_grad():
        want = naive(module, x, chosen, weights)
        torch.testing.assert_close(module(x, chosen, weights, counts), want, rtol=1e-5, atol=1e-5)
    with torch.inference_mode():
        torch.testing.assert_close(module(x, chosen, weights, counts), want, rtol=1e-5, atol=1e-5)


def test_the_fused_path_is_the_cpu_default_and_expert_parallelism_still_goes_through_run_experts():
    module = make_experts()
    chosen = torch.tensor([[3, 0], [0, -1], [5, 3]])
    x, weights = torch.randn(3, 8), torch.rand(3, 2)
    counts = torch.bincount(chosen[chosen >= 0], minlength=6)
    calls = []

    class LocalExchange:  # stands in for train/expert_parallel.py's ExpertExchange
        def run(self, rows, counts_, compute_local):
            calls.append(rows.shape[0])
            return compute_local(rows, counts_)

    want = naive(module, x, chosen, weights)
    torch.testing.assert_close(module(x, chosen, weights, counts), want, rtol=1e-5, atol=1e-5)
    assert calls == []  # fused: no rows handed over
    module.ep = LocalExchange()
    torch.testing.assert_close(module(x, chosen, weights, counts), want, rtol=1e-5, atol=1e-5)
    assert calls == [5]  # the kept rows only, dropped ones never travel




def test_grouped_matmul_matches_a_loop_and_its_fallback():
    torch.manual_seed(0)
    counts = torch.tensor([5, 0, 3, 8])
    x, w = torch.randn(16, 32, requires_grad=True), torch.randn(4, 32, 24, requires_grad=True)
    starts = [0, 5, 5, 8]
    reference = torch.cat([x[s : s + int(c)] @ w[g] for g, (s, c) in enumerate(zip(starts, counts))])
    torch.testing.assert_close(grouped_matmul(x, w, counts), reference)
    # Rows of 6 floats are not 16-byte aligned: the per-expert fallback takes over.
    x6, w6 = torch.randn(16, 6), torch.randn(4, 6, 5)
    ref6 = torch.cat([x6[s : s + int(c)] @ w6[g] for g, (s, c) in enumerate(zip(starts, counts))])
    torch.testing.assert_close(grouped_matmul(x6, w6, counts), ref6)
