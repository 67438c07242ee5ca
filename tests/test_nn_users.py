"""montecarlo.nn as attention users meet it (issue 41 items 7 and 8, issue 38's PRFAttention fuzz findings): the
range of the inputs refused loudly (check_inputs=True) and documented, kind parameters and oversized
projections refused in the constructor naming the argument, (B, L_k) key-padding masks applied per batch
element, the nn.MultiheadAttention adapter (exact plumbing against nn.MultiheadAttention, the large-m limit,
TransformerEncoderLayer's fast path kept out, a small training run), fullgraph with redraw_every."""

import math

import pytest

torch = pytest.importorskip("torch")

from montecarlo._checks import AllocationError  # noqa: E402
from montecarlo.nn import PRFAttention, PRFMultiheadAttention, input_range  # noqa: E402
from theory import feature_kinds  # noqa: E402

KINDS = tuple(k for k in feature_kinds.names(positive=True, kernel="softmax", has=("log_features",))
              if not feature_kinds.get(k).has("prepare"))  # (PRFAttention refuses kinds with a prepare hook)


def _params(kind):
    return {"A": -0.05} if kind == "oprf" else None


# ---------------------------------------------------------------------------
# issue 38: the range of the inputs, kind parameters, oversized projections


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_finite_inputs_beyond_the_float32_range_are_refused_with_the_check(dtype):
    """Fuzz finding: bidirectional float32/bf16 attention of finite entries ~2.5e19 returned all-NaN outputs
    although the docs said bidirectional attention is unaffected.  Now check_inputs=True refuses them naming
    the input; with the check off the documented NaN (never a finite wrong number)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 8, generator=g)
    big = (x * 2.5e19).to(dtype)
    for name, args in (("q", (big, x.to(dtype), x.to(dtype))), ("k", (x.to(dtype), big, x.to(dtype)))):
        with pytest.raises(ValueError, match=f"{name}'s log-features .*bidirectional attention computed in float32"):
            PRFAttention(8, 16, seed=0, check_inputs=True)(*args)
        assert torch.isnan(PRFAttention(8, 16, seed=0)(*args)).all()
    small = (x * 1e18).to(dtype)  # s|x|^2 / 2 about 1e36 < 8.5e37: inside the range, finite
    assert torch.isfinite(PRFAttention(8, 16, seed=0, check_inputs=True)(small, small, x.to(dtype))).all()


def test_scale_beyond_the_compute_dtype_is_refused_without_a_check():
    """scale = 1e308 is not a float32 number: every output was NaN; now a ValueError naming scale (no
    synchronisation needed).  In float64 the scale is representable and only the check can tell."""
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="scale = 1e\\+308 is beyond the range of float32"):
        PRFAttention(8, 16, seed=0, scale=1e308)(x, x, x)
    with pytest.raises(ValueError, match="scale = 1e\\+308 is beyond the range of float32"):
        PRFAttention(8, 16, seed=0, scale=1e308)(x.bfloat16(), x.bfloat16(), x.bfloat16())
    xd = x.double()
    mod = PRFAttention(8, 16, seed=0, scale=1e308, dtype=torch.float64, check_inputs=True)
    with pytest.raises(ValueError, match="q's log-features are not finite"):
        mod(xd, xd, xd)
    assert torch.isfinite(mod(xd * 1e-160, xd * 1e-160, xd)).all()  # s|x|^2 about 1e-12: fine


def test_causal_float64_range():
    """Causal float64 attention turned NaN from entries ~1e10 (documented for float32 only); the check now
    refuses it, and inputs just inside input_range give finite outputs (every kind, d = 8 and 64)."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 300, 8, generator=g, dtype=torch.float64)
    mod = PRFAttention(8, 32, seed=0, causal=True, dtype=torch.float64, check_inputs=True)
    with pytest.raises(ValueError, match="causal attention computed in float64"):
        mod(x * 1e10, x * 1e10, x)
    assert torch.isnan(PRFAttention(8, 32, seed=0, causal=True, dtype=torch.float64)(x * 1e10, x * 1e10, x)).any()
    for compute in (torch.float32, torch.float64):
        for kind in KINDS:
            for d in (8, 64):
                y = torch.randn(2, 300, d, generator=g, dtype=torch.float64)
                k = y * (0.3 + torch.rand(2, 300, 1, generator=g, dtype=torch.float64))
                att = PRFAttention(d, 64, seed=1, causal=True, kind=kind, kind_params=_params(kind), dtype=compute,
                                   check_inputs=True)
                top = max(float((y * y).sum(-1).max()), float((k * k).sum(-1).max()))
                f = math.sqrt(0.9 * 2 * input_range(compute, True) / att.scale / top)
                out = att((f * y).to(compute), (f * k).to(compute), y[..., :3].to(compute))
                assert torch.isfinite(out).all(), (compute, kind, d)


def test_documented_causal_thresholds_hold():
    """The module docs' numbers: input_range is log(largest) / (8 eps) causally (9.3e7 in float32, 4.0e17 in
    float64) and a quarter of the largest number bidirectionally."""
    assert input_range(torch.float32, True) == pytest.approx(9.3e7, rel=0.01)
    assert input_range(torch.float64, True) == pytest.approx(4.0e17, rel=0.01)
    assert input_range(torch.float32, False) == pytest.approx(8.5e37, rel=0.01)
    assert input_range(torch.float64, False) == pytest.approx(4.49e307, rel=0.01)


def test_oprf_a_refused_in_the_constructor():
    """Fuzz finding: PRFAttention(kind="oprf", kind_params={"A": 0.125}) was refused only at the first forward."""
    with pytest.raises(ValueError, match=r"kind_params=\{'A': 0.125\} for kind='oprf': A must be a finite real < 1/8"):
        PRFAttention(8, 16, kind="oprf", kind_params={"A": 0.125})
    with pytest.raises(ValueError, match="kind_params"):
        PRFAttention(8, 16, kind="oprf", kind_params={"A": math.inf})
    PRFAttention(8, 16, kind="oprf", kind_params={"A": 0.124})  # inside: accepted


def test_oversized_projections_name_n_features():
    """Fuzz finding: PRFAttention(8, 2**40)'s AllocationError named '(m, d)' and not n_features."""
    with pytest.raises(AllocationError, match=r"PRFAttention\(d_head=8, n_features=1099511627776\).*reduce n_features"):
        PRFAttention(8, 2**40)
    with pytest.raises(ValueError, match="n_features must be"):
        PRFAttention(8, 0)


# ---------------------------------------------------------------------------
# item 7: masks as users pass them


def _inputs(B, H, L, d=8, seed=3):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, L, d, generator=g, dtype=torch.float64) for _ in range(3))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,H", [(3, 3), (2, 4)])
def test_batch_mask_applies_per_batch_element(B, H, causal):
    """A (B, L_k) mask with (B, H, L, d) inputs is nn.MultiheadAttention's convention, one row per batch
    element: equal to mask[:, None].  Before, with B == H its rows were paired with the heads (the output
    changed by about half); power: the per-head reading differs."""
    q, k, v = _inputs(B, H, 12)
    mask = torch.zeros(B, 12, dtype=torch.bool)
    for b in range(B):
        mask[b, : 2 + 3 * b] = True
    mod = PRFAttention(8, 32, seed=0, causal=causal, dtype=torch.float64)
    got = mod(q, k, v, key_padding_mask=mask)
    assert torch.equal(got, mod(q, k, v, key_padding_mask=mask[:, None]))
    for b in range(B):  # each batch element alone, its own row of the mask
        assert torch.allclose(got[b], mod(q[b], k[b], v[b], key_padding_mask=mask[b]), rtol=1e-12, atol=1e-14)
    if B == H:
        per_head = mod(q, k, v, key_padding_mask=mask[None])
        assert (per_head - got).norm() > 0.1 * got.norm()


def test_batch_mask_of_another_batch_size_is_refused():
    q, k, v = _inputs(2, 4, 10)
    mod = PRFAttention(8, 16, seed=0)
    with pytest.raises(ValueError, match=r"read as nn.MultiheadAttention's \(batch, L\) mask.*mask\[:, None\]"):
        mod(q, k, v, key_padding_mask=torch.zeros(4, 10, dtype=torch.bool))
    out = mod(q, k, v, key_padding_mask=torch.zeros(1, 10, dtype=torch.bool))  # one row for every element
    assert torch.equal(out, mod(q, k, v))
    assert mod(q, k, v, key_padding_mask=torch.zeros(1, 4, 10, dtype=torch.bool)).shape == (2, 4, 10, 8)


# ---------------------------------------------------------------------------
# item 7: the nn.MultiheadAttention adapter


class _ExactCore(torch.nn.Module):
    """Exact softmax attention with PRFAttention's call (q, k, v, key_padding_mask): stands in for the PRF
    estimator to check the adapter's plumbing deterministically."""

    def __init__(self, causal=False):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v, key_padding_mask=None):
        logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if key_padding_mask is not None:
            logits = logits.masked_fill(key_padding_mask.unsqueeze(-2), -math.inf)
        if self.causal:
            L = q.shape[-2]
            logits = logits.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), -math.inf)
        return torch.softmax(logits, -1) @ v


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("kdim", [None, 6])
@pytest.mark.parametrize("causal", [False, True])
def test_adapter_plumbing_equals_multihead_attention(batch_first, kdim, causal):
    """With an exact softmax core in place of the estimator, the adapter's output equals nn.MultiheadAttention's
    (float64, 1e-12): in-projections (packed, or separate with kdim/vdim), heads, bool and float padding masks,
    batch_first, unbatched inputs, the out-projection, causal masks; the state-dict keys are
    nn.MultiheadAttention's.  Power: a mask per head instead of per batch element fails it."""
    torch.manual_seed(4)
    E, H, N, L = 12, 3, 3, 7
    mha = torch.nn.MultiheadAttention(E, H, kdim=kdim, vdim=kdim, batch_first=batch_first, dtype=torch.float64)
    with torch.no_grad():
        for p in mha.parameters():
            p.add_(0.1 * torch.randn_like(p))  # non-zero biases
    prf = PRFMultiheadAttention.from_multihead(mha, n_features=8, seed=0, causal=causal)
    assert set(mha.state_dict()) <= set(prf.state_dict())
    prf.attention = _ExactCore(causal)
    kd = kdim or E
    shape = (lambda n, l, e: (n, l, e)) if batch_first else (lambda n, l, e: (l, n, e))
    g = torch.Generator().manual_seed(5)
    x = torch.randn(*shape(N, L, E), generator=g, dtype=torch.float64)
    y = torch.randn(*shape(N, L, kd), generator=g, dtype=torch.float64)
    pad = torch.zeros(N, L, dtype=torch.bool)
    pad[0, 5:] = True
    pad[2, 3:5] = True
    cm = torch.ones(L, L, dtype=torch.bool).triu(1) if causal else None
    want = mha(x, y, y, key_padding_mask=pad, attn_mask=cm, need_weights=False)[0]
    got = prf(x, y, y, key_padding_mask=pad, attn_mask=cm)
    assert got[1] is None
    assert torch.allclose(got[0], want, rtol=1e-12, atol=1e-13)
    fpad = torch.zeros(N, L, dtype=torch.float64).masked_fill(pad, -math.inf)
    assert torch.allclose(prf(x, y, y, key_padding_mask=fpad, is_causal=causal, attn_mask=cm)[0], want, rtol=1e-12,
                          atol=1e-13)
    xu, yu = (x[:, 1] if not batch_first else x[1]), (y[:, 1] if not batch_first else y[1])  # unbatched: one item
    assert torch.allclose(prf(xu, yu, yu, key_padding_mask=pad[1])[0],
                          mha(xu, yu, yu, key_padding_mask=pad[1], attn_mask=cm, need_weights=False)[0], rtol=1e-12,
                          atol=1e-13)

    class _PerHead(_ExactCore):  # the reading of a (N, S) mask that pairs its rows with the heads
        def forward(self, q, k, v, key_padding_mask=None):
            return super().forward(q, k, v, None if key_padding_mask is None else key_padding_mask[:, 0])

    prf.attention = _PerHead(causal)
    assert not torch.allclose(prf(x, y, y, key_padding_mask=pad, attn_mask=cm)[0], want, rtol=1e-3, atol=1e-3)


def test_adapter_reaches_multihead_attention_as_m_grows():
    """The real estimator: relative error against nn.MultiheadAttention (float64, logits of std about 0.3) over
    6 seeds: mean 1e-3 measured at m = 16384 (5e-3 at 1024, 2.6e-2 at 64, i.e. about 1/sqrt(m)); the check
    asserts < 0.01 at 16384, ten times the measured mean, whose spread over seeds (about 30 % of it) puts a
    false alarm far in the tail; power: the same check at m = 64 fails."""
    torch.manual_seed(6)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True, dtype=torch.float64)
    g = torch.Generator().manual_seed(7)
    x = 0.3 * torch.randn(3, 10, 32, generator=g, dtype=torch.float64)
    pad = torch.zeros(3, 10, dtype=torch.bool)
    pad[1, 7:] = True
    want = mha(x, x, x, key_padding_mask=pad, need_weights=False)[0]

    def error(m):
        errs = []
        for seed in range(6):
            prf = PRFMultiheadAttention.from_multihead(mha, n_features=m, seed=seed)
            with torch.no_grad():
                errs.append(float((prf(x, x, x, key_padding_mask=pad)[0] - want).norm() / want.norm()))
        return sum(errs) / len(errs)

    assert error(16384) < 0.01
    assert error(64) > 0.01


def test_transformer_layer_fast_path_never_bypasses_the_adapter():
    """nn.TransformerEncoderLayer in eval mode without gradients runs a fused exact-attention kernel from
    self_attn.in_proj_weight when self_attn._qkv_same_embed_dim is True: the swapped layer must still compute
    PRF attention (its output equals the layer's own Python path with the adapter, and differs from the
    original layer's)."""
    torch.manual_seed(8)
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        exact = layer(x)
        layer.self_attn = PRFMultiheadAttention.from_multihead(layer.self_attn, n_features=4, seed=0)
        got = layer(x)
        by_hand = layer.norm2(layer.norm1(x + layer.self_attn(x, x, x)[0])
                              + layer._ff_block(layer.norm1(x + layer.self_attn(x, x, x)[0])))
    assert torch.allclose(got, by_hand, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, exact, rtol=1e-3, atol=1e-3)


def test_a_small_training_run_with_the_swapped_attention():
    """A transformer layer trained to output, at every position, the mean of the sequence's first feature over
    its unpadded positions (needs attention across positions and the padding mask), 150 Adam steps, fixed seeds:
    with the adapter (m = 64) the loss falls below a fifth of its start, as with nn.MultiheadAttention; power:
    the same layer with attention cut off (its value projection zeroed and frozen) does not get there."""

    def run(swap, cut=False):
        torch.manual_seed(9)
        layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        if swap:
            layer.self_attn = PRFMultiheadAttention.from_multihead(layer.self_attn, n_features=64, seed=0)
        head = torch.nn.Linear(16, 1)
        params = list(layer.parameters()) + list(head.parameters())
        if cut:
            with torch.no_grad():
                layer.self_attn.in_proj_weight[32:].zero_()
                layer.self_attn.in_proj_bias[32:].zero_()
            layer.self_attn.in_proj_weight.register_hook(lambda grad: torch.cat([grad[:32], 0 * grad[32:]]))
            layer.self_attn.in_proj_bias.register_hook(lambda grad: torch.cat([grad[:32], 0 * grad[32:]]))
        opt = torch.optim.Adam(params, lr=1e-2)
        g = torch.Generator().manual_seed(10)
        losses = []
        for _ in range(150):
            x = torch.randn(16, 12, 16, generator=g)
            pad = torch.rand(16, 12, generator=g) < 0.25
            pad[:, 0] = False
            keep = (~pad).float()
            target = (x[..., 0] * keep).sum(-1, keepdim=True) / keep.sum(-1, keepdim=True)
            out = head(layer(x, src_key_padding_mask=pad)).squeeze(-1)
            loss = ((out - target) ** 2)[~pad].mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return sum(losses[:10]) / 10, sum(losses[-10:]) / 10

    start, end = run(True)
    assert end < start / 5
    ref_start, ref_end = run(False)
    assert ref_end < ref_start / 5
    cut_start, cut_end = run(True, cut=True)
    assert cut_end > cut_start / 5


def test_adapter_refuses_what_linear_attention_cannot_do():
    x = torch.randn(2, 5, 8)
    prf = PRFMultiheadAttention(8, 2, batch_first=True, n_features=8, seed=0)
    with pytest.raises(ValueError, match="need_weights=True"):
        prf(x, x, x, need_weights=True)
    with pytest.raises(ValueError, match="attn_mask is not supported"):
        prf(x, x, x, attn_mask=torch.zeros(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="is_causal=True needs a module built with causal=True"):
        prf(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match="only 0 \\(keep\\) and -inf"):
        prf(x, x, x, key_padding_mask=torch.full((2, 5), -1e9))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(N, S\) = \(2, 5\)"):
        prf(x, x, x, key_padding_mask=torch.zeros(5, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="dropout must be 0"):
        PRFMultiheadAttention(8, 2, dropout=0.1)
    with pytest.raises(ValueError, match="ignore_dropout=True"):
        PRFMultiheadAttention.from_multihead(torch.nn.MultiheadAttention(8, 2, dropout=0.1))
    assert PRFMultiheadAttention.from_multihead(torch.nn.MultiheadAttention(8, 2, dropout=0.1),
                                                ignore_dropout=True).dropout == 0.0
    with pytest.raises(ValueError, match="add_bias_kv=True is not supported"):
        PRFMultiheadAttention(8, 2, add_bias_kv=True)
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads"):
        PRFMultiheadAttention(8, 3)
    causal = PRFMultiheadAttention(8, 2, batch_first=True, n_features=8, seed=0, causal=True)
    with pytest.raises(ValueError, match="must be the causal mask"):
        causal(x, x, x, attn_mask=torch.ones(5, 5, dtype=torch.bool).triu(2))
    with pytest.raises(ValueError, match="all be batched"):
        prf(x, x[0], x[0])


def test_fullgraph_with_redraw_every_names_redraw_every():
    mod = PRFAttention(8, 16, seed=0, redraw_every=2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(Exception, match="redraw_every=None"):
        torch.compile(mod, fullgraph=True, backend="eager")(x, x, x)
    assert torch.compile(mod.eval(), fullgraph=True, backend="eager")(x, x, x).shape == (2, 5, 8)
