"""The torch SimRF-Performer attention module (Sec. 5.4) against the numpy implementation, gradients
against an unstabilised autograd reference, feature redrawing and freezing, and bad input."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import montecarlo as mc  # noqa: E402
from montecarlo.experiments import attention as at  # noqa: E402
from montecarlo.experiments.attention_torch import PRFAttention  # noqa: E402


def _t(a, dtype=torch.float64):
    return torch.tensor(np.asarray(a), dtype=dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_module_equals_numpy_on_the_same_weights(causal, monkeypatch):
    Q, K, V = at.synthetic_qkv(130, 16, 1, batch=(2, 3), logit_std=0.5)
    W = mc.sample_weights("simplex", 16, 24, rng=2)
    ref = at.prf_attention(Q, K, V, W, causal=causal)
    mod = PRFAttention.from_weights(_t(W), causal=causal, chunk=32)
    out = mod(_t(Q), _t(K), _t(V)).numpy()
    assert np.max(np.abs(out - ref)) < 1e-12
    if causal:  # the log-space chunk path of the module
        import montecarlo.experiments.attention_torch as att
        monkeypatch.setitem(att.CAUSAL_GAP, torch.float64, -1.0)
        assert np.max(np.abs(mod(_t(Q), _t(K), _t(V)).numpy() - ref)) < 1e-12
    mod32 = PRFAttention.from_weights(_t(W, torch.float32), causal=causal)
    out32 = mod32(_t(Q, torch.float32), _t(K, torch.float32), _t(V, torch.float32)).numpy()
    assert np.max(np.abs(out32 - ref)) < 1e-4 * np.max(np.abs(ref))


@pytest.mark.parametrize("causal, log_path", [(False, False), (True, False), (True, True)])
def test_gradients_equal_unstabilised_autograd_reference(causal, log_path, monkeypatch):
    """The detached offsets cancel, so d(out)/d(q, k, v) equals the gradient of the plain quadratic
    form exp(.)-features (float64, moderate inputs where nothing overflows)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 20, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mod = PRFAttention(8, 12, "orthogonal", causal=causal, seed=1, dtype=torch.float64, chunk=8)
    if log_path:  # every chunk through the log-space path
        import montecarlo.experiments.attention_torch as att
        monkeypatch.setitem(att.CAUSAL_GAP, torch.float64, -1.0)
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
    Q, K, V = at.synthetic_qkv(64, 16, 6, batch=(2,))
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


def test_causal_float32_with_dominating_future_keys(monkeypatch):
    """float32, keys 0..47 scaled by 30 (log-features about -1800, far beyond exp's float32 range
    below the later keys'): finite, causal (positions < 48 ignore the later keys) and equal to float64
    numpy; power: without the log-space fallback the boundary chunk is not finite."""
    Q, K, V = at.synthetic_qkv(96, 16, 8)
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
    import montecarlo.experiments.attention_torch as att
    monkeypatch.setitem(att.CAUSAL_GAP, torch.float32, 1e30)
    assert not torch.isfinite(mod(_t(Q, torch.float32), _t(K, torch.float32), _t(V, torch.float32))).all()


def test_bad_input():
    mod = PRFAttention(8, 10, seed=0)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="last dimension d_head = 8"):
        mod(torch.randn(2, 5, 7), torch.randn(2, 5, 7), x)
    with pytest.raises(ValueError, match="q and k must have the same shape"):
        mod(x, x[:, :4], x)
    with pytest.raises(ValueError, match="v must have shape"):
        mod(x, x, x[:, :3])
    bad = x.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="k must be finite"):
        mod(x, bad, x)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        mod(x.numpy(), x, x)
    with pytest.raises(ValueError, match="coupling must be one of"):
        PRFAttention(8, 10, "favor")
    with pytest.raises(ValueError, match="n_features must be an integer >= 1"):
        PRFAttention(8, 0)
    with pytest.raises(ValueError, match="dtype must be torch.float32 or torch.float64"):
        PRFAttention(8, 10, dtype=torch.int32)
    with pytest.raises(TypeError, match="causal must be a bool"):
        PRFAttention(8, 10, causal="yes")
    with pytest.raises(ValueError, match="weights must be an"):
        PRFAttention.from_weights(torch.ones(3))
