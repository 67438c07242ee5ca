"""The torch SimRF-Performer attention module (montecarlo.nn, Sec. 5.4) against the numpy implementation,
gradients against an unstabilised autograd reference, feature redrawing and freezing, and bad input.

The CUDA tests at the end are skipped without a GPU; on one, run them with
``python -m pytest -q -p no:cacheprovider tests/test_experiments_torch.py tests/test_nn_module.py -k cuda``."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import montecarlo as mc  # noqa: E402
from montecarlo.experiments import attention as at  # noqa: E402
from montecarlo.nn import PRFAttention  # noqa: E402
from theory import feature_kinds  # noqa: E402


def _t(a, dtype=torch.float64):
    return torch.tensor(np.asarray(a), dtype=dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_module_equals_numpy_on_the_same_weights(causal):
    Q, K, V = at.synthetic_qkv(130, 16, 1, batch=(2, 3), logit_std=0.5)
    W = mc.sample_weights("simplex", 16, 24, rng=2)
    ref = at.prf_attention(Q, K, V, W, causal=causal)
    mod = PRFAttention.from_weights(_t(W), causal=causal, chunk=32)
    out = mod(_t(Q), _t(K), _t(V)).numpy()
    assert np.max(np.abs(out - ref)) < 1e-12
    if causal:  # every chunk length (one position per chunk: the scan alone; 256: the dyadic blocks alone)
        for chunk in (1, 2, 8, 64, 256):
            mod.chunk = chunk
            assert np.max(np.abs(mod(_t(Q), _t(K), _t(V)).numpy() - ref)) < 1e-12
    mod32 = PRFAttention.from_weights(_t(W, torch.float32), causal=causal)
    out32 = mod32(_t(Q, torch.float32), _t(K, torch.float32), _t(V, torch.float32)).numpy()
    assert np.max(np.abs(out32 - ref)) < 1e-4 * np.max(np.abs(ref))


@pytest.mark.parametrize("causal, chunk", [(False, None), (True, 8), (True, 1), (True, 64)])
def test_gradients_equal_unstabilised_autograd_reference(causal, chunk):
    """The detached offsets cancel, so d(out)/d(q, k, v) equals the gradient of the plain quadratic
    form exp(.)-features (float64, moderate inputs where nothing overflows); causal: scan only (chunk 1),
    dyadic blocks only (64 > L = 20, padded), both (8)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 20, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mod = PRFAttention(8, 12, "orthogonal", causal=causal, seed=1, dtype=torch.float64, chunk=chunk)
    w = mod.weights
    s = 8 ** -0.25

    def feats(x):
        x = s * x
        return torch.exp(x @ w.T - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(12)

    A = feats(q) @ feats(k).transpose(-1, -2)
    if causal:
        A = torch.tril(A)
    ref = (A @ v) / A.sum(-1, keepdim=True)
    out = mod(q, k, v)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-13)
    cot = torch.randn(out.shape, generator=g, dtype=torch.float64)
    g1 = torch.autograd.grad(out, (q, k, v), cot)
    g2 = torch.autograd.grad(ref, (q, k, v), cot)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_coupling_geometry_of_the_drawn_features():
    """The module draws the requested coupling: simplex rows of a block subtend cos = -1/(d-1),
    orthogonal rows cos = 0 (Sec. 3, eq. simplex_vectors)."""
    d = 8
    for coupling, cos in (("simplex", -1 / (d - 1)), ("orthogonal", 0.0)):
        w = PRFAttention(d, d, coupling, seed=3, dtype=torch.float64).weights
        u = w / w.norm(dim=1, keepdim=True)
        c = u @ u.T
        off = c[~torch.eye(d, dtype=torch.bool)]
        assert torch.allclose(off, torch.full_like(off, cos), atol=1e-12)


def test_redraw_freeze_and_determinism():
    x = torch.randn(1, 2, 30, 16)
    mod = PRFAttention(16, 20, seed=4, redraw_every=1)
    mod.train()
    a = mod(x, x, x)
    b = mod(x, x, x)  # second call in training mode redraws first
    assert not torch.equal(a, b)
    mod.freeze()
    c, d = mod(x, x, x), mod(x, x, x)
    assert torch.equal(c, d) and mod.frozen
    w = mod.weights.clone()
    mod.redraw()  # explicit redraw works even when frozen
    assert not torch.equal(w, mod.weights)
    mod.unfreeze().eval()
    e, f = mod(x, x, x), mod(x, x, x)
    assert torch.equal(e, f)  # eval never redraws
    same = PRFAttention(16, 20, seed=4)
    other = PRFAttention(16, 20, seed=5)
    fresh = PRFAttention(16, 20, seed=4, redraw_every=1)
    assert torch.equal(same.weights, fresh.weights) and not torch.equal(same.weights, other.weights)
    fresh.redraw()
    same.redraw()
    assert torch.equal(same.weights, fresh.weights)  # the redraw sequence is seeded
    clone = PRFAttention(16, 20, seed=99)
    clone.load_state_dict(same.state_dict())
    clone.eval(), same.eval()
    assert torch.equal(clone(x, x, x), same(x, x, x))


def test_float32_stabilisation_and_batch_independence():
    """float32 with item 0's keys of huge norm (log-features about -3000, far beyond exp's float32
    range below item 1's): finite, equal to float64 numpy, and item 1 unchanged by rescaling item 0."""
    Q, K, V = at.synthetic_qkv(64, 16, 6, batch=(2,), logit_std=1.0)
    K[0] *= 40.0
    W = mc.sample_weights("simplex", 16, 32, rng=7)
    for causal in (False, True):
        mod = PRFAttention.from_weights(_t(W, torch.float32), causal=causal)
        out = mod(_t(Q, torch.float32), _t(K, torch.float32), _t(V, torch.float32))
        assert torch.isfinite(out).all()
        ref = at.prf_attention(Q, K, V, W, causal=causal)
        assert np.max(np.abs(out.numpy() - ref)) < 1e-3 * np.max(np.abs(ref))
        K2 = K.copy()
        K2[0] *= 2
        out2 = mod(_t(Q, torch.float32), _t(K2, torch.float32), _t(V, torch.float32))
        assert torch.equal(out[1], out2[1])


def _one_offset_per_chunk(lq, lk, v, chunk):
    """Causal attention with one per-feature key offset per chunk (the scan without the dyadic blocks):
    correct in exact arithmetic, the power check of the test below."""
    out = []
    for lo in range(0, lq.shape[0], chunk):
        hi = lo + chunk
        o = lk[:hi].amax(0)
        eq, ek = torch.exp(lq[lo:hi] + o - (lq[lo:hi] + o).amax(-1, keepdim=True)), torch.exp(lk[:hi] - o)
        a = torch.tril(eq @ ek.T, diagonal=lo)
        out.append((a @ v[:hi]) / a.sum(-1, keepdim=True))
    return torch.cat(out)


def test_causal_float32_with_dominating_future_keys():
    """float32, keys 0..47 scaled by 30 (log-features about -1800, far beyond exp's float32 range
    below the later keys'): finite, causal (positions < 48 ignore the later keys) and equal to float64
    numpy; power: with one per-feature offset per chunk the boundary chunk is not finite."""
    Q, K, V = at.synthetic_qkv(96, 16, 8, logit_std=1.0)
    W = mc.sample_weights("simplex", 16, 24, rng=9)
    K[:48] *= 30.0
    K2 = K.copy()
    K2[48:] = np.random.default_rng(10).normal(size=(48, 16))
    mod = PRFAttention.from_weights(_t(W, torch.float32), causal=True, chunk=32)
    a = mod(_t(Q, torch.float32), _t(K, torch.float32), _t(V, torch.float32))
    b = mod(_t(Q, torch.float32), _t(K2, torch.float32), _t(V, torch.float32))
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    assert torch.allclose(a[:48], b[:48], rtol=1e-5, atol=1e-6)
    ref = at.prf_attention(Q, K, V, W, causal=True)
    assert np.max(np.abs(a.numpy() - ref)) < 1e-3 * np.max(np.abs(ref))
    from montecarlo.nn import _log_features
    from theory import feature_kinds

    rec = feature_kinds.get("prf")
    w = mod.weights
    lq, lk = (_log_features(_t(x, torch.float32), w, None, rec, 16 ** -0.5, {}) for x in (Q, K))
    assert not torch.isfinite(_one_offset_per_chunk(lq, lk, _t(V, torch.float32), 32)).all()


def test_bad_input():
    mod = PRFAttention(8, 10, seed=0)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="last dimension d_head = 8"):
        mod(torch.randn(2, 5, 7), torch.randn(2, 5, 7), x)
    with pytest.raises(ValueError, match=r"v must have shape \(..., L_k, d_v\) with L_k = 4 keys"):
        mod(x, x[:, :4], x)
    with pytest.raises(ValueError, match="v must have shape"):
        mod(x, x, x[:, :3])
    with pytest.raises(ValueError, match="causal attention needs as many queries as keys, got 5 and 4"):
        PRFAttention(8, 10, seed=0, causal=True)(x, x[:, :4], x[:, :4])
    with pytest.raises(ValueError, match="leading .* must broadcast"):
        mod(x, torch.randn(3, 5, 8), torch.randn(3, 5, 8))
    with pytest.raises(TypeError, match="q, k and v must share one dtype"):
        mod(x, x.double(), x)
    with pytest.raises(TypeError, match="q must be float32, float64, bfloat16 or float16, got torch.int64"):
        mod(x.long(), x, x)
    with pytest.raises(TypeError, match="key_padding_mask must be a bool tensor"):
        mod(x, x, x, key_padding_mask=torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(..., L_k\) with L_k = 5"):
        mod(x, x, x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    bad = x.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="k must be finite"):
        PRFAttention(8, 10, seed=0, check_inputs=True)(x, bad, x)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        mod(x.numpy(), x, x)
    with pytest.raises(ValueError, match="coupling must be one of"):
        PRFAttention(8, 10, "favor")
    with pytest.raises(ValueError, match="n_features must be an integer >= 1"):
        PRFAttention(8, 0)
    with pytest.raises(ValueError, match="dtype must be one of torch.float32, torch.float64, torch.bfloat16"):
        PRFAttention(8, 10, dtype=torch.int32)
    for flag in ("yes", "False", 1, None):
        with pytest.raises(TypeError, match="causal must be True or False"):
            PRFAttention(8, 10, causal=flag)
    assert PRFAttention(8, 10, causal=np.bool_(True), seed=0).causal is True
    with pytest.raises(ValueError, match="d must be an integer >= 2 for the simplex coupling"):
        PRFAttention(1, 10)
    with pytest.raises(ValueError, match="give seed or generator, not both"):
        PRFAttention(8, 10, seed=0, generator=torch.Generator())
    with pytest.raises(MemoryError, match="would need"):  # montecarlo's AllocationError (also a ValueError)
        PRFAttention(64, 10**12)
    with pytest.raises(TypeError, match="generator must be None or a torch.Generator"):
        PRFAttention(8, 10, generator=np.random.default_rng(0))
    with pytest.raises(TypeError, match="seed must be None, an int >= 0"):
        PRFAttention(8, 10, seed=np.random.RandomState(0))
    with pytest.raises(ValueError, match="weights must be an"):
        PRFAttention.from_weights(torch.ones(3))


# ---------------------------------------------------------------------------
# Issue 14 item 2: dtypes, cross-attention, key-padding masks, generators, torch.compile, couplings


def _dense_reference(q, k, v, w, causal=False, pad=None):
    """The plain quadratic form (no stabilisation) in float64: phi(q) phi(k)^T, masked, row-normalised."""
    s = q.shape[-1] ** -0.25
    m = w.shape[0]

    def feats(x):
        x = s * x
        return torch.exp(x @ w.T - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(m)

    A = feats(q) @ feats(k).transpose(-1, -2)
    if causal:
        A = torch.tril(A)
    if pad is not None:
        A = A * (~pad).unsqueeze(-2)
    den = A.sum(-1, keepdim=True)
    return (A @ v) / torch.where(den > 0, den, 1.0)  # rows that see no key: 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_half_precision_inputs(dtype, causal):
    """bf16/fp16 in, the same dtype out; the features are computed in float32 (the output is exactly the
    float32 module's on the upcast inputs, rounded once) and agree with float64 numpy to the output
    dtype's rounding.  Power: the same quadratic form evaluated in the half dtype misses that tolerance."""
    Q, K, V = at.synthetic_qkv(70, 16, 3, batch=(2,), logit_std=0.5)
    W = mc.sample_weights("simplex", 16, 24, rng=4)
    mod = PRFAttention.from_weights(_t(W, torch.float32), causal=causal, chunk=32)
    q, k, v = (_t(a, dtype) for a in (Q, K, V))
    out = mod(q, k, v)
    assert out.dtype == dtype
    assert torch.equal(out, mod(q.float(), k.float(), v.float()).to(dtype))
    ref = torch.as_tensor(at.prf_attention(*(a.double().numpy() for a in (q, k, v)), W, causal=causal))
    err = (out.double() - ref).abs()
    eps = torch.finfo(dtype).eps
    assert torch.all(err <= eps * ref.abs() + 1e-5 * ref.abs().max())
    naive = _dense_reference(q, k, v, _t(W, dtype), causal).double()  # the same form computed in the half dtype
    assert not torch.all((naive - ref).abs() <= eps * ref.abs() + 1e-5 * ref.abs().max())


def test_autocast_keeps_features_in_float32():
    x = torch.randn(2, 30, 16, generator=torch.Generator().manual_seed(0))
    mod = PRFAttention(16, 20, seed=0)
    plain = mod(x, x, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (x @ mod.weights.T).dtype == torch.bfloat16  # autocast is active around the module
        inside = mod(x, x, x)
    assert inside.dtype == torch.float32 and torch.equal(inside, plain)


def test_module_to_half_keeps_float32_projections_and_redraws():
    """model.to(torch.bfloat16) with redraw_every used to crash at the first redraw."""
    mod = PRFAttention(16, 20, "orthogonal", seed=1, redraw_every=1).to(torch.bfloat16)
    assert mod.weights.dtype == torch.float32
    x = torch.randn(1, 2, 30, 16, dtype=torch.bfloat16)
    mod.train()
    a = mod(x, x, x)
    w = mod.weights.clone()
    b = mod(x, x, x)  # redraws first
    assert a.dtype == b.dtype == torch.bfloat16 and not torch.equal(a, b) and not torch.equal(w, mod.weights)
    u = mod.weights / mod.weights.norm(dim=1, keepdim=True)
    assert torch.allclose(u[:16] @ u[:16].T, torch.eye(16), atol=1e-6)  # still an exact orthogonal block
    assert mod.half().weights.dtype == torch.float32
    assert mod.double().weights.dtype == torch.float64
    assert mod.float().weights.dtype == torch.float32
    assert PRFAttention(8, 4, dtype=torch.bfloat16, seed=0).weights.dtype == torch.float32
    assert PRFAttention.from_weights(torch.randn(4, 8).bfloat16()).weights.dtype == torch.float32


def test_cross_attention_and_key_padding_mask():
    """L_q = 7 queries, L_k = 13 keys, a (B, 1, L_k) padding mask over (B, H) heads: equal to the dense
    float64 quadratic form, and for one sequence to attention over its unpadded keys only; a sequence
    whose keys are all padded gets 0 with a zero, finite gradient.  Power: the mask changes the output."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 2, 7, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(3, 2, 13, 8, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(3, 2, 13, 5, generator=g, dtype=torch.float64, requires_grad=True)
    pad = torch.rand(3, 1, 13, generator=g) < 0.3
    pad[2] = True  # batch item 2: every key padded
    pad[0, 0, 0] = True
    mod = PRFAttention(8, 16, "simplex", seed=2, dtype=torch.float64)
    out = mod(q, k, v, key_padding_mask=pad)
    assert out.shape == (3, 2, 7, 5)
    ref = _dense_reference(q, k, v, mod.weights, pad=pad)
    assert torch.allclose(out[:2], ref[:2], rtol=1e-12, atol=1e-13)
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    keep = ~pad[0, 0]
    sliced = mod(q[0], k[0][:, keep], v[0][:, keep])
    assert torch.allclose(out[0], sliced, rtol=1e-12, atol=1e-13)
    assert (out[0] - mod(q[0], k[0], v[0])).abs().max() > 1e-3
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
        assert torch.equal(t.grad[2], torch.zeros_like(t.grad[2]))
    assert torch.equal(k.grad[0, :, 0], torch.zeros_like(k.grad[0, :, 0]))  # a padded key gets no gradient


@pytest.mark.parametrize("chunk", [8, 1, 64])
def test_causal_key_padding_mask(chunk):
    """Causal, left padding (item 0: first 11 keys padded, longer than a chunk) and random holes (item 1):
    equal to the dense float64 form on the rows that see a key (scan, dyadic blocks and both), rows that
    see none get 0, and the gradients are finite and equal to the dense reference's.  Power: ignoring the
    mask changes the output."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 40, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    pad = torch.zeros(2, 40, dtype=torch.bool)
    pad[0, :11] = True
    pad[1] = torch.rand(40, generator=g) < 0.3
    pad[1, 0] = True
    mod = PRFAttention(8, 12, "orthogonal", causal=True, seed=4, dtype=torch.float64, chunk=chunk)
    out = mod(q, k, v, key_padding_mask=pad)
    seen = (torch.cumsum((~pad).long(), dim=1) > 0)
    ref = _dense_reference(q, k, v, mod.weights, causal=True, pad=pad)
    assert torch.allclose(out[seen], ref[seen], rtol=1e-12, atol=1e-13)
    assert torch.equal(out[~seen], torch.zeros_like(out[~seen]))
    assert (out - mod(q, k, v)).abs().max() > 1e-3
    cot = torch.randn(out.shape, generator=g, dtype=torch.float64) * seen.unsqueeze(-1)
    g1 = torch.autograd.grad(out, (q, k, v), cot)
    g2 = torch.autograd.grad(ref, (q, k, v), cot)
    for a, b in zip(g1, g2):
        assert torch.isfinite(a).all()
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_redraw_under_a_user_generator():
    """Every draw comes from the caller's torch.Generator (reseeding reproduces the sequence); torch's
    global generator is untouched."""
    from montecarlo.nn import draw_projections

    state = torch.get_rng_state()
    gen = torch.Generator().manual_seed(5)
    mod = PRFAttention(8, 12, "simplex", generator=gen, redraw_every=1)
    first = mod.weights.clone()
    mod.redraw()
    second = mod.weights.clone()
    twin = torch.Generator().manual_seed(5)
    assert torch.equal(first, draw_projections("simplex", 8, 12, generator=twin))
    assert torch.equal(second, draw_projections("simplex", 8, 12, generator=twin))
    assert not torch.equal(first, second)
    gen.manual_seed(5)
    assert torch.equal(mod.redraw().weights, first)
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind,kind_params", [("prf", None), ("hyperbolic", None), ("oprf", {"A": -0.1}),
                                              ("oprf", None)])
def test_torch_compile(causal, kind, kind_params):
    """torch.compile traces the module as one graph (dynamo + AOTAutograd, backend 'aot_eager', fullgraph: no
    graph break) for every kind, oprf with A given and from the data (eval mode: the tracked A stays put):
    the same output and gradients as eager mode, float32 and bf16.  Graph breaks found by this test: the
    kinds' modules imported lazily inside forward, an array's backend read from its module name, and the
    namespace lookup of the pair statistic.  The default 'inductor' backend also works but takes about a
    minute to compile on two CPU cores (measured 42 s + 8 s), too slow for the suite."""
    if kind not in feature_kinds.names():
        pytest.skip(f"the {kind!r} feature kind is not registered")
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    mod = PRFAttention(16, 24, "simplex", kind=kind, kind_params=kind_params, seed=0, causal=causal,
                       chunk=16).eval()
    q, k, v = (torch.randn(2, 3, 40, 16, generator=g, requires_grad=True) for _ in range(3))
    compiled = torch.compile(mod, backend="aot_eager", fullgraph=True)
    out, ref = compiled(q, k, v), mod(q, k, v)
    assert torch.allclose(out, ref, rtol=1e-6, atol=1e-7)
    ga = torch.autograd.grad(out.sum(), (q, k, v))
    gb = torch.autograd.grad(ref.sum(), (q, k, v))
    for a, b in zip(ga, gb):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    half = compiled(q.detach().bfloat16(), k.detach().bfloat16(), v.detach().bfloat16())
    assert half.dtype == torch.bfloat16


def test_torch_compile_with_redraws():
    """A compiled module with ``redraw_every`` redraws exactly as the eager one (the same projections, outputs
    and counter at every step) with one graph break, at the redraw schedule (run eagerly:
    torch.compiler.disable), compiled once, and no warning from dynamo (before: it traced into the samplers,
    seven graph breaks and warnings about __import__ and lru_cache, and the projections it drew differed from
    eager's at rounding level: outputs 1.6e-6 apart, which this test's tolerance catches).  Power: the eager
    module did redraw, so a compiled one that skipped or repeated a redraw would differ."""
    import warnings

    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    ref = PRFAttention(16, 24, "simplex", causal=True, seed=0, redraw_every=2, chunk=16)
    mod = PRFAttention(16, 24, "simplex", causal=True, seed=0, redraw_every=2, chunk=16)
    first = ref.weights.clone()
    compiled = torch.compile(mod, backend="aot_eager")
    g = torch.Generator().manual_seed(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(5):
            q = torch.randn(2, 40, 16, generator=g)
            a, b = ref(q, q, q), compiled(q, q, q)
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-7), step
            assert torch.equal(ref.weights, mod.weights) and ref.calls_since_redraw == mod.calls_since_redraw
    assert not torch.equal(ref.weights, first)  # (two redraws in five steps)
    assert not [str(w.message) for w in caught if "Dynamo" in str(w.message)]
    # (one graph after the break; before it, the input checks have no tensor operation since the module's
    # torch.broadcast_shapes, which made scratch tensors, takes a shortcut for equal shapes: a second graph then)
    assert sum(counters["graph_break"].values()) == 1 and counters["stats"]["unique_graphs"] == 1


def test_construction_registers_the_hooks_forward_uses():
    """A fresh process: building a PRFAttention registers its kind's hooks (imports the kind's modules), so that
    forward looks them up without an import, which torch.compile cannot trace (a graph break; fullgraph
    refused it for 'hyperbolic' when the module was compiled before any eager call)."""
    import os
    import sys

    from _procs import run_group

    code = ("import theory.feature_kinds as k; from montecarlo.nn import PRFAttention; "
            "before = ('hyperbolic', 'log_features') in k._HOOKS; PRFAttention(8, 4, kind='hyperbolic'); "
            "print(before, ('hyperbolic', 'log_features') in k._HOOKS)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rc, out = run_group([sys.executable, "-c", code], 120, cwd=root,
                        env={**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])})
    assert rc == 0, out
    assert out.split()[-2:] == ["False", "True"], out  # (not registered by the import alone: a real check)


def test_simplex_plus_coupling():
    """PRFAttention(coupling='simplex_plus') constructs and runs on torch float32 (issue 12 item 4), equal to
    the numpy reference on its weights."""
    mod = PRFAttention(16, 40, "simplex_plus", seed=0)
    assert mod.weights.dtype == torch.float32 and torch.isfinite(mod.weights).all()
    Q, K, V = at.synthetic_qkv(50, 16, 2, logit_std=0.5)
    out = mod(_t(Q, torch.float32), _t(K, torch.float32), _t(V, torch.float32))
    ref = at.prf_attention(Q, K, V, mod.weights.double().numpy())
    assert np.max(np.abs(out.numpy() - ref)) < 1e-4 * np.max(np.abs(ref))


# ---------------------------------------------------------------------------
# CUDA (skipped without a GPU; the command is in the module docs)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_dtypes_mask_and_generators(causal, dtype):
    """On the GPU: a CPU generator drives a CUDA module (the same draws as on the CPU), a CUDA generator
    works too; half inputs come back in their dtype, within their rounding of the float64 CPU reference,
    with a key-padding mask; autocast does not lower the feature precision."""
    gen_cpu = torch.Generator().manual_seed(7)
    mod = PRFAttention(16, 40, "simplex", causal=causal, generator=gen_cpu, device="cuda", chunk=16)
    cpu_twin = PRFAttention(16, 40, "simplex", causal=causal, generator=torch.Generator().manual_seed(7))
    assert mod.weights.device.type == "cuda" and torch.equal(mod.weights.cpu(), cpu_twin.weights)
    gen_gpu = torch.Generator(device="cuda").manual_seed(1)
    assert PRFAttention(16, 40, generator=gen_gpu, device="cuda").weights.device.type == "cuda"
    g = torch.Generator().manual_seed(2)
    q, k, v = (0.7 * torch.randn(2, 3, 48, 16, generator=g, dtype=torch.float64) for _ in range(3))
    pad = torch.zeros(2, 1, 48, dtype=torch.bool)
    pad[0, :, :5] = True
    pad[1, :, 30:] = True
    out = mod(*(t.to("cuda", dtype) for t in (q, k, v)), key_padding_mask=pad.cuda())
    assert out.dtype == dtype and out.device.type == "cuda"
    qr, kr, vr = (t.to(dtype).double() for t in (q, k, v))
    ref = _dense_reference(qr, kr, vr, mod.weights.cpu().double(), causal=causal, pad=pad)
    tol = max(torch.finfo(dtype).eps, 1e-5)
    assert torch.all((out.cpu().double() - ref).abs() <= tol * ref.abs() + 1e-5 * ref.abs().max())
    if dtype == torch.float32:
        x = (q.float().cuda(), k.float().cuda(), v.float().cuda())
        plain = mod(*x)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            inside = mod(*x)
        assert inside.dtype == torch.float32 and torch.allclose(inside, plain, rtol=1e-5, atol=1e-6)


@cuda
def test_cuda_module_to_bfloat16_redraw_and_compile():
    """model.to('cuda', torch.bfloat16) with redraw_every: float32 projections on the GPU, redraws work;
    torch.compile with the default (inductor) backend matches eager mode."""
    mod = PRFAttention(32, 64, "orthogonal", seed=0, redraw_every=1).to("cuda", torch.bfloat16)
    assert mod.weights.dtype == torch.float32 and mod.weights.device.type == "cuda"
    x = torch.randn(2, 4, 128, 32, device="cuda", dtype=torch.bfloat16)
    mod.train()
    a, b = mod(x, x, x), mod(x, x, x)
    assert a.dtype == torch.bfloat16 and not torch.equal(a, b)
    mod.eval()
    torch._dynamo.reset()
    compiled = torch.compile(mod)
    y = torch.randn(2, 4, 128, 32, device="cuda")
    assert torch.allclose(compiled(y, y, y), mod(y, y, y), rtol=1e-4, atol=1e-5)
