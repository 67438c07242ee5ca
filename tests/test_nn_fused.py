"""The fused Triton kernels of the causal within-chunk part (montecarlo.nn._fused, issue 20): run on the CPU
through Triton's interpreter (TRITON_INTERPRET=1, set by the root conftest where there is no NVIDIA
device), against the masked quadratic form, by gradcheck, and inside the causal scan, the module and
torch.compile against the torch levels; compiled to cubins for sm 80/90 without a GPU; on a GPU (skipped
here) the compiled kernels against the torch path.  Skipped where Triton is not installed."""

import io
import math
import os
import re
import subprocess
import sys
from types import SimpleNamespace
from unittest import mock

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import montecarlo as mc  # noqa: E402
from montecarlo import nn as mnn  # noqa: E402
from montecarlo.nn._fused import _bf16_rounded, _store_value_grads  # noqa: E402
from montecarlo.nn import PRFAttention  # noqa: E402
from theory import feature_kinds  # noqa: E402

from _procs import run_group  # noqa: E402
from _nn import KINDS, _masked_inputs, _params  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture
def fused():
    """montecarlo.nn._fused with its kernels interpreted on the CPU (the root conftest sets TRITON_INTERPRET=1
    before Triton is imported where there is no NVIDIA device)."""
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton's interpreter is off here (on a GPU the compiled kernels are tested: test_cuda_*)")
    from montecarlo.nn import _fused

    return _fused


def _force_fused(monkeypatch, on):
    """The module's causal operator and features' kernel forced on (on the CPU: Triton's interpreter) or off,
    whatever the device and dtype."""
    monkeypatch.setattr(mnn, "_fused_applies", lambda x, b: on)
    monkeypatch.setattr(mnn, "_fused_features_apply", lambda x, w: on)


def _count_features(fused, monkeypatch):
    """A list that the features' operator fills with its number of features (rows of w), once per tensor
    (queries, keys) that it maps."""
    real, calls = fused.scaled_log_features, []

    def counted(xs, w, *args):
        xs = tuple(xs)
        calls.extend([w.shape[0]] * len(xs))
        return real(xs, w, *args)

    monkeypatch.setattr(fused, "scaled_log_features", counted)
    return calls


def _inputs(g, n, N, b, M, D, dtype=torch.float64, spread=3.0, wild=False):
    """Log-features with the query offsets of the causal scan (qr + running max c of the keys <= 0, c also
    over the earlier chunks' maxima ``before``), values (D - 1 columns: the operator's key mass is the
    scores' row sums, no ones column), prefix states P (D columns: values and key masses).
    ``wild``: the first sequence's last chunk has keys 30 times as spread (no fast chunk)."""
    lk = spread * torch.randn(n, N, b, M, generator=g, dtype=dtype)
    if wild:
        lk[0, -1] *= 30.0
    before = spread * torch.randn(n, N, M, generator=g, dtype=dtype)
    before[:, 0] = -math.inf  # the first chunk has no earlier keys
    qr = torch.randn(n, N, b, M, generator=g, dtype=dtype)
    c = torch.maximum(torch.cummax(lk, 2).values, before.unsqueeze(2))
    qr = qr - (qr + c).amax(-1, keepdim=True)
    v = torch.randn(n, N, b, D - 1, generator=g, dtype=dtype)
    P = torch.randn(n, N, M, D, generator=g, dtype=dtype)
    P[:, 0] = 0.0
    return qr, lk, v, P, before


def _chunk_dense(qr, lk, v, P=None, before=None, strict=False):
    """sum_{j <= i} sum_f e^{qr_if + lk_jf} [v_j, 1] by the plain (b, b, M) tensor (j < i with ``strict``),
    plus sum_f e^{qr_if + before_f} P_f (the earlier chunks) when P is given."""
    b = qr.shape[2]
    keep = torch.ones(b, b, dtype=torch.bool).tril(-1 if strict else 0).unsqueeze(-1)
    A = torch.exp(torch.where(keep, qr.unsqueeze(-2) + lk.unsqueeze(-3), -math.inf)).sum(-1)
    out = A @ torch.cat([v, torch.ones_like(v[..., :1])], -1)
    return out if P is None else out + torch.exp(qr + before.unsqueeze(2)) @ P


def test_host_integer_helpers_equal_tritons():
    """The launches' sizes in Python ints (_pow2: montecarlo.couplings.next_power_of_two, and _cdiv; no
    constexpr-function call per launch) equal triton.next_power_of_2 and triton.cdiv over the sizes that
    occur."""
    from montecarlo.nn import _fused

    for x in range(1, 1100):
        assert _fused._pow2(x) == triton.next_power_of_2(x), x
        for b in (1, 16, 32, 64, 100):
            assert _fused._cdiv(x, b) == triton.cdiv(x, b), (x, b)


@pytest.mark.parametrize("b,M,D", [(16, 1, 2), (32, 5, 3), (64, 33, 17), (256, 128, 65), (512, 256, 129)])
def test_tile_shapes_are_legal(fused, b, M, D):
    """Every tile shape the launches use is one compiled Triton accepts (the interpreter accepts more): powers
    of two of at least 16 for the products' dimensions, tiles that divide the chunk."""
    for fast in (False, True):
        T, F, BD = fused._sizes(b, M, D, fast)
        for x in (T, F, BD):
            assert x >= 16 and x & (x - 1) == 0, (fast, T, F, BD)
        assert b % T == 0 and BD >= D - 1


def test_feature_blocks_follow_the_rule(fused):
    """The launches' sizes (_sizes) as documented: the fast path's tile gcd(b, FAST_TILE), its feature block
    FAST_FEATURE_BLOCK for d_v <= 64 (padded width at most 64), else (d_v = 65, padded to 128)
    FAST_FEATURE_BLOCK_SPILL_FREE; the tile path's TILE x FEATURE_BLOCK; a feature block never wider than m
    rounded up to a power of two nor narrower than 16; the features' kernels' sizes (_feature_meta)."""
    wide, narrow = fused.FAST_FEATURE_BLOCK, fused.FAST_FEATURE_BLOCK_SPILL_FREE
    assert (wide, narrow) == (64, 32)
    for D, want in ((65, (64, wide, 64)), (66, (64, narrow, 128)), (129, (64, narrow, 128)), (17, (64, wide, 16))):
        assert fused._sizes(256, 128, D, True) == want, D
    assert fused._sizes(32, 128, 65, True) == (32, wide, 64)
    assert fused._sizes(256, 20, 65, True) == (64, 32, 64)
    assert fused._sizes(256, 5, 3, True) == (64, 16, 16)
    assert fused._sizes(256, 128, 65) == (fused.TILE, fused.FEATURE_BLOCK, 64) == (16, 32, 64)
    assert fused._sizes(256, 5, 3) == (16, 16, 16)
    # the features' kernels: rows FEATURE_TILE, features min(FEATURE_KERNEL_BLOCK, m) (at least 16), x padded
    assert fused._feature_meta(64, 128, "tf32x2") == dict(T=64, F=32, BX=64, num_warps=4, PREC="tf32x2")
    assert fused._feature_meta(20, 5, "ieee") == dict(T=64, F=16, BX=32, num_warps=4, PREC="ieee")
    assert fused._feature_meta(3, 17, "ieee")["BX"] == 16
    assert fused._feature_meta(64, 128, "ieee", grad=True) == dict(T=64, F=32, BX=64, num_warps=8, PREC="ieee")
    with mock.patch.multiple(fused, FEATURE_GRAD_TILE=128, FEATURE_GRAD_BLOCK=64, FEATURE_GRAD_NUM_WARPS=4):
        assert fused._feature_meta(64, 128, "ieee", grad=True) == dict(T=128, F=64, BX=64, num_warps=4, PREC="ieee")
        assert fused._feature_meta(64, 128, "ieee") == dict(T=64, F=32, BX=64, num_warps=4, PREC="ieee")


def _set_path(fused, monkeypatch, path, data, before):
    """Chunks on the tile path only (``path`` "tile": GAP None), fast only ("fast"), or both ("mixed": inputs
    made with ``wild``, its last chunk on the tile path); asserts that the flags are so."""
    monkeypatch.setattr(fused, "GAP", None if path == "tile" else 40.0)
    flag = fused.fast_chunks(data[0], data[1], before)[1]
    want = torch.full_like(flag, int(path != "tile"))
    if path == "mixed":
        want[0, -1] = 0
    assert torch.equal(flag, want), flag


def test_fast_chunks(fused):
    """Which chunks are fast: a gap of exactly GAP is, GAP + 0.01 is not; a chunk whose first query sees no
    key (first key padded, no earlier chunk) is not; a chunk of padded keys after earlier ones is, with
    offsets clamped to -1e30 (zero factors, no NaN); a NaN makes a chunk slow."""
    lk = torch.zeros(1, 5, 16, 3, dtype=torch.float64)
    before = torch.zeros(1, 5, 3, dtype=torch.float64)
    before[0, 0] = -math.inf
    lk[0, 0, 5, 1] = fused.GAP  # chunk 0: gap exactly GAP over the first key
    lk[0, 1, 5, 2] = fused.GAP + 0.01
    lk[0, 2, 0] = -math.inf  # first key padded, but the earlier chunks' maxima are finite: fast
    lk[0, 3] = -math.inf  # every key padded: fast
    lk[0, 4, 3, 0] = math.nan
    off, flag = fused.fast_chunks(lk - 1.0, lk, before)
    assert flag.tolist() == [[1, 0, 1, 1, 0]]
    assert off[0, 0].tolist() == [0.0, fused.GAP, 0.0] and off[0, 3].tolist() == [-1e30] * 3
    lk[0, 0, 0] = -math.inf  # the first chunk's first key padded: its first query sees nothing
    assert fused.fast_chunks(lk - 1.0, lk, before)[1][0, 0] == 0


@pytest.mark.parametrize("shape", [(2, 2, 32, 20, 5), (1, 3, 64, 33, 17)])
@pytest.mark.parametrize("path", ["tile", "fast", "mixed"])
def test_kernels_equal_the_masked_quadratic_form(fused, monkeypatch, shape, path):
    """Forward and the four gradients of the kernels (queries, keys, values, prefix states) equal the plain
    masked (b, b, M) computation plus the earlier chunks' term and their autograd gradients in float64 (tiles
    of 16, feature blocks of 32 with a ragged last block, D not a power of two; the key mass formed in the
    kernels), with every chunk on the tile path, every chunk fast,
    and both in one call.  Power: the same comparison against the form without the diagonal, and against
    the form without the earlier chunks, fails."""
    g = torch.Generator().manual_seed(1)
    *data, before = _inputs(g, *shape, wild=path == "mixed")
    _set_path(fused, monkeypatch, path, data, before)
    leaves = [x.requires_grad_(True) for x in data]
    out = fused.within(*leaves, before)
    cot = torch.randn(out.shape, generator=g, dtype=out.dtype)
    ga = torch.autograd.grad((out * cot).sum(), leaves)
    plain = [x.detach().clone().requires_grad_(True) for x in leaves]
    ref = _chunk_dense(*plain, before)
    gb = torch.autograd.grad((ref * cot).sum(), plain)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-13)
    for a, b_ in zip(ga, gb):
        assert torch.allclose(a, b_, rtol=1e-12, atol=1e-13)
    strict = _chunk_dense(*[x.detach() for x in leaves], before, strict=True)
    assert not torch.allclose(out, strict, rtol=1e-3, atol=1e-3)
    alone = _chunk_dense(*[x.detach() for x in leaves[:3]])  # without the earlier chunks
    assert not torch.allclose(out, alone, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("path", ["tile", "mixed"])
def test_kernels_backward_is_the_gradient(fused, monkeypatch, path):
    """torch.autograd.gradcheck (finite differences, float64, fast mode: random
    projections of the Jacobian; the full Jacobians against autograd are in the test above) of the kernels on
    two chunks of two tiles of 8 positions (the tile pairs, the diagonal and the earlier chunk's state are
    all differentiated).  Power: a
    backward whose key gradient drops the tile pairs fails the fast mode's directional check."""
    monkeypatch.setattr(fused, "TILE", 8)
    g = torch.Generator().manual_seed(2)
    *data, before = _inputs(g, 1, 2, 16, 2, 2, wild=path == "mixed")
    _set_path(fused, monkeypatch, path, data, before)
    leaves = [x.requires_grad_(True) for x in data]

    def within(*x):
        return fused.within(*x, before)

    assert torch.autograd.gradcheck(within, leaves, eps=1e-6, atol=1e-8, rtol=1e-6, fast_mode=True)
    assert _directional_derivative_agrees(within, leaves, g)
    real = fused._launch_backward

    def diagonal_keys_only(qr, r, lk4, v4, P, bef, off, flag, G, precision):
        gq, gk, gv, gP = real(qr, r, lk4, v4, P, bef, off, flag, G, precision)
        mask = torch.ones(16, 16, dtype=qr.dtype).tril()
        mask[8:, :8] = 0  # the pair (second tile, first tile) dropped
        E = torch.exp(qr.unsqueeze(-2) + lk4.unsqueeze(-3))  # bounded inputs: no overflow above the diagonal
        dA = (G[..., :-1] @ v4.transpose(-1, -2) + G[..., -1:]) * mask
        return gq, (dA.unsqueeze(-1) * E).sum(-3), gv, gP

    monkeypatch.setattr(fused, "_launch_backward", diagonal_keys_only)
    assert not _directional_derivative_agrees(within, leaves, g)


def _directional_derivative_agrees(fn, leaves, g, eps=1e-6, rtol=1e-6):
    """w . (f(x + eps u) - f(x - eps u)) / 2 eps against the backward's (w J) . u, u and w random: the core of
    gradcheck's fast mode, without its slow-mode rerun on failure."""
    u = [torch.randn(x.shape, generator=g, dtype=x.dtype) for x in leaves]
    with torch.no_grad():
        up = fn(*[x + eps * d for x, d in zip(leaves, u)])
        down = fn(*[x - eps * d for x, d in zip(leaves, u)])
    w = torch.randn(up.shape, generator=g, dtype=up.dtype)
    numeric = ((up - down) * w).sum() / (2 * eps)
    grads = torch.autograd.grad((fn(*leaves) * w).sum(), leaves)
    analytic = sum((gr * d).sum() for gr, d in zip(grads, u))
    return bool(abs(numeric - analytic) <= rtol * abs(analytic) + 1e-8)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_causal_scan_with_fused_kernels_equals_the_levels(fused, grad, dtype):
    """_causal with the fused within-chunk part equals the torch levels (outputs and gradients), on keys
    whose log-features span far beyond float32's exp range (the first keys x 30), with padded keys (-inf;
    a whole tile of them, and the first keys of one sequence, whose queries see nothing) and a padded tail;
    both equal the exact log-space form.  Power: the kernels with the diagonal tile dropped differ."""
    g = torch.Generator().manual_seed(3)
    d, L, b, m = 8, 75, 32, 12
    q, k, v = (torch.randn(2, L, d, generator=g, dtype=dtype) for _ in range(3))
    k[:, :20] *= 30.0
    w = torch.randn(m, d, generator=g, dtype=dtype)
    rec = feature_kinds.get("prf")
    pad = torch.zeros(2, L, dtype=torch.bool)
    pad[0, :3] = True
    pad[1, 32:48] = True
    seen = (~pad).cumsum(-1).gt(0).unsqueeze(-1)

    def run(flag, hook=None):
        leaves = [x.detach().clone().requires_grad_(grad) for x in (q, k, v)]
        with torch.set_grad_enabled(grad):
            lq, lk = (mnn._log_features(x, w, None, rec, d ** -0.5, {}) for x in leaves[:2])
            lk = mnn._mask_keys(lk, pad, lk.shape[:-2])
            out = mnn._causal(lq, lk, leaves[2], b, seen=seen, fused=flag)
        grads = torch.autograd.grad((out * torch.linspace(-1, 1, d, dtype=dtype)).sum(), leaves) if grad else ()
        return out.detach(), grads

    a, ga = run(True)
    b_, gb = run(False)
    assert torch.isfinite(a).all() and all(torch.isfinite(x).all() for x in ga)
    rtol, atol = (1e-5, 1e-6) if dtype == torch.float32 else (1e-11, 1e-12)
    assert torch.allclose(a, b_, rtol=rtol, atol=atol)
    for x, y in zip(ga, gb):  # (float32: rounding of sums over the keys, relative to the gradient's scale)
        assert torch.allclose(x, y, rtol=10 * rtol, atol=10 * atol * max(1.0, y.abs().max().item()))
    with torch.no_grad():
        lq, lk = (mnn._log_features(x.double(), w.double(), None, rec, d ** -0.5, {}) for x in (q, k))
        s = torch.logsumexp(lq.unsqueeze(-2) + lk.unsqueeze(-3), -1)
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1) | pad.unsqueeze(-2), -math.inf)
        ref = torch.nan_to_num(torch.softmax(s, -1)) @ v.double()
    assert torch.allclose(a.double(), ref, rtol=100 * rtol, atol=100 * atol)
    for name in ("_forward_kernel", "_fast_forward_kernel"):  # each path's kernel without its diagonal
        real = getattr(fused, name)

        class NoDiagonal:  # the real kernel, then its chunks' diagonal tiles' contributions taken out again
            def __getitem__(self, grid, real=real, fast=name.startswith("_fast")):
                def launch(Q, R, K, V, P, BEF, *rest, **kw):
                    real[grid](Q, R, K, V, P, BEF, *rest, **kw)
                    FLAG, O = rest[-4], rest[-3]
                    mine = (FLAG != 0) if fast else (FLAG == 0)
                    O.sub_(_diagonal_part(Q - R.unsqueeze(-1), K, V) * mine.reshape(Q.shape[:2] + (1, 1)))
                    assert mine.any()  # this data has chunks on both paths
                return launch

        if not grad:
            setattr(fused, name, NoDiagonal())
            try:
                bad, _ = run(True)
            finally:
                setattr(fused, name, real)
            assert not torch.allclose(bad, b_, rtol=1e-2, atol=1e-2), name


def _diagonal_part(Q, K, V, T=16):
    """The contributions of the diagonal tiles (tile length T) of the within-chunk form."""
    n, N, b, M = Q.shape
    t = lambda x: x.reshape(n, N * (b // T), T, x.shape[-1])  # noqa: E731
    return _chunk_dense(t(Q), t(K), t(V)).reshape(*V.shape[:-1], V.shape[-1] + 1)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype,causal", [(torch.float32, True), (torch.bfloat16, True), (torch.bfloat16, False)])
def test_module_with_fused_kernels_equals_the_torch_path(fused, monkeypatch, kind, dtype, causal):
    """PRFAttention (causal, chunks of 32, or bidirectional; a key padding mask with a fully padded sequence)
    gives the same outputs and gradients with the fused kernels (forced on the CPU; also the features' kernel,
    whose calls are counted) as with the torch path, for every positive kind, float32 and bf16 inputs."""
    q, k, v, pad = _masked_inputs(4, 70)
    mod = PRFAttention(16, 24, "simplex", kind=kind, kind_params=_params(kind), causal=causal, seed=1, chunk=32)
    results = []
    calls = _count_features(fused, monkeypatch)
    for on in (True, False):
        _force_fused(monkeypatch, on)  # (the operator and the features' kernel)
        leaves = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        out = mod(*leaves, key_padding_mask=pad)
        if on:  # every kind's linear form through the features' kernel (hyperbolic: [w; -w], 2m rows)
            assert calls == {"hyperbolic": [48, 48]}.get(kind, [24, 24]), calls
        out.float().sum().backward()
        results.append((out.detach().float(), [x.grad.float() for x in leaves]))
    (a, ga), (b_, gb) = results
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # bf16: results rounded to 8 bits
    assert torch.allclose(a, b_, rtol=tol, atol=tol * a.abs().max())
    for x, y in zip(ga, gb):
        assert torch.allclose(x, y, rtol=10 * tol, atol=10 * tol * y.abs().max())


def test_second_derivatives_through_the_kernels_equal_the_torch_path(fused, monkeypatch):
    """backward(create_graph=True) through the fused operator and the features' kernel (forced on the CPU,
    float32, causal, chunks of 32) gives a gradient that is differentiable again, and its derivative (a
    Hessian-vector product: d/d(q, k, v) of <grad_q, u>) equals the torch path's: the operator's and the
    features' backward then run by torch operations (the torch levels through autograd; the features'
    gradient formula), whose second derivatives test_nn_module checks by finite differences for every kind
    (here prf: the kinds differ only in the rows the features' kernel reads).  Before, the kernels' backward
    operators had no derivative."""
    q, k, v, pad = _masked_inputs(8, 70)
    mod = PRFAttention(16, 24, "simplex", causal=True, seed=1, chunk=32)
    u = torch.randn(q.shape, generator=torch.Generator().manual_seed(9))
    results = []
    for on in (True, False):
        _force_fused(monkeypatch, on)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = mod(*leaves, key_padding_mask=pad)
        gq, = torch.autograd.grad(out.square().sum(), leaves[0], create_graph=True)
        results.append((gq.detach(), torch.autograd.grad((gq * u).sum(), leaves)))
    (ga, ha), (gb, hb) = results
    assert torch.allclose(ga, gb, rtol=1e-4, atol=1e-5 * gb.abs().max())
    for x, y in zip(ha, hb):
        assert torch.allclose(x, y, rtol=1e-4, atol=1e-4 * y.abs().max())
    assert not torch.allclose(ha[1], torch.zeros_like(ha[1]))  # (keys enter the second derivative)


@pytest.mark.parametrize("causal", [True, False])
def test_data_driven_oprf_uses_the_features_kernel_with_one_a(fused, monkeypatch, causal):
    """oprf without A: causal, one tracked A for the whole batch (a 0-d tensor: shared rows), so the features'
    kernel runs and equals the torch path; bidirectional, one A per sequence, so it does not (no shared rows)
    and the torch map runs."""
    q, k, v, pad = _masked_inputs(5, 40)
    mod = PRFAttention(16, 24, "simplex", kind="oprf", causal=causal, seed=2, chunk=16)
    mod(q, k, v, key_padding_mask=pad)  # (training: the causal module's running statistics move off 0)
    mod.eval()
    calls = _count_features(fused, monkeypatch)
    outs = []
    for on in (True, False):
        _force_fused(monkeypatch, on)
        outs.append(mod(q, k, v, key_padding_mask=pad, query_padding_mask=None if causal else pad))
    assert calls == ([24, 24] if causal else [])
    assert torch.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5 * outs[1].abs().max())


@pytest.mark.parametrize("dtype,setting,want", [(torch.float32, None, "ieee"), (torch.bfloat16, None, "tf32"),
                                                 (torch.float16, None, "tf32"), (torch.bfloat16, "ieee", "ieee"),
                                                 (torch.float32, "tf32", "tf32"), (torch.bfloat16, "bf16", "bf16")])
def test_products_precision_follows_the_inputs(fused, monkeypatch, dtype, setting, want):
    """The kernels' matrix products run in TF32 for bfloat16/float16 module inputs and in IEEE float32 for
    float32 inputs, forward and backward alike, unless montecarlo.nn._fused.PRECISION says otherwise."""
    seen = []
    for name in ("_launch_forward", "_launch_backward"):
        real = getattr(fused, name)
        monkeypatch.setattr(fused, name, lambda *a, real=real, **kw: seen.append(a[-1]) or real(*a, **kw))
    monkeypatch.setattr(fused, "PRECISION", setting)
    monkeypatch.setattr(mnn, "_fused_applies", lambda x, b: True)
    q, k, v, pad = _masked_inputs(2, 40)
    mod = PRFAttention(16, 8, "simplex", causal=True, seed=1, chunk=16)
    leaves = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    mod(*leaves, key_padding_mask=pad).float().sum().backward()
    assert seen == [want, want]


def test_precision_is_checked(fused, monkeypatch):
    """An unknown products precision is a ValueError naming it and the allowed values (module setting or
    argument), before any kernel runs."""
    g = torch.Generator().manual_seed(9)
    qr, lk, v, P, before = _inputs(g, 1, 1, 16, 4, 3)
    with pytest.raises(ValueError, match=r"precision must be one of \('ieee', 'tf32', 'bf16'\), got 'tf64'"):
        fused.within(qr, lk, v, P, before, "tf64")
    monkeypatch.setattr(fused, "PRECISION", "fp8")
    with pytest.raises(ValueError, match=r"PRECISION must be None or one of \('ieee', 'tf32', 'bf16'\), got 'fp8'"):
        fused.products(True)


def _bf16_edge_values():
    """2048 float32 values for the bfloat16 rounding tests: 2000 over 60 binades, ties, signed zeros,
    subnormals, the largest finite, a value that rounds to infinity, infinities and NaN (then ones)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2000, generator=g) * 10.0 ** torch.randint(-30, 30, (2000,), generator=g)
    ties = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 2 ** -130 * (1 + 2 ** -8)])
    special = torch.tensor([0.0, -0.0, 1e-40, -1e-45, 3.3895e38, 3.4e38, math.inf, -math.inf, math.nan])
    return torch.cat([x, ties, special, torch.ones(2048 - 2000 - 13)])


@triton.jit
def _bf16_rounding_kernel(X, Y, MODE: tl.constexpr):
    """Stores 2048 floats rounded to bfloat16 by _fused._bf16_rounded (MODE 0), by Triton's conversion (1), or
    into a bfloat16 Y as the values' gradient is stored (2: _fused._store_value_grads, 64 rows of 32)."""
    i = tl.arange(0, 2048)
    x = tl.load(X + i)
    if MODE == 2:
        _store_value_grads(Y, 0, 0, 33, tl.reshape(x, (64, 32)), 64, 64, 32)
    else:
        if MODE == 1:
            y = x.to(tl.bfloat16).to(tl.float32)
        else:
            y = _bf16_rounded(x)
        tl.store(Y + i, y)


def test_bf16_rounding_is_to_nearest_even(fused):
    """The interpreter's stand-ins for bfloat16 operands (_bf16_rounded) and for the values' gradient stored in
    bfloat16 (_store_value_grads) round as torch's (and a compiled kernel's) float32 -> bfloat16 conversion: to
    nearest, ties to even, over 60 binades, signed zeros, subnormals, the largest finite, a value that rounds
    to infinity, infinities and NaN, bit for bit (NaN as NaN); the interpreter's own conversion, which
    truncates, differs (power)."""
    x = _bf16_edge_values()
    want = x.bfloat16().float()
    nan = want.isnan()
    for mode in (0, 1, 2):
        y = torch.empty(x.shape, dtype=torch.bfloat16 if mode == 2 else torch.float32)
        _bf16_rounding_kernel[(1,)](x, y, MODE=mode)
        y = y.float()
        assert torch.equal(y.isnan(), nan), mode  # (NaN's bits differ: torch's is 0xffff, a sign and all ones)
        assert torch.equal(y[~nan].view(torch.int32), want[~nan].view(torch.int32)) == (mode != 1), mode


def test_bf16_products_of_float64_tiles(fused):
    """bfloat16 operands from float64 tiles (within() on float64 inputs, PRECISION "bf16"): the interpreter's
    stand-in rounds them through float32 (a bit cast of 64-bit floats to 32-bit integers would fail); against
    the dense form the values' error is bfloat16's (2.3e-3 measured), not float64's."""
    g = torch.Generator().manual_seed(3)
    qr, lk, v, P, before = _inputs(g, 1, 2, 16, 5, 3)
    ref = _chunk_dense(qr, lk, v, P, before)[..., :-1]
    errs = [((fused.within(qr, lk, v, P, before, prec)[..., :-1] - ref).norm() / ref.norm()).item()
            for prec in ("ieee", "bf16")]
    assert errs[0] < 1e-14 and 1e-4 < errs[1] < 1e-2, errs


def _bf16_errors(fused, monkeypatch, device, precisions, n=2, L=256):
    """{precision: relative (Frobenius) errors against float64 of the causal scan's output and the gradients of
    its three inputs} on one case (``n`` sequences of length ``L``, 64 log-features offset by -3, values of width
    16, chunks of 64), the fused kernels on ``device`` at each products precision (``fused``:
    montecarlo.nn._fused)."""
    g = torch.Generator().manual_seed(8)
    lq, lk = (torch.randn(n, L, 64, generator=g, dtype=torch.float64) - 3 for _ in range(2))
    v = torch.randn(n, L, 16, generator=g, dtype=torch.float64)
    cot = torch.randn(v.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def run(prec, dtype, fuse, dev):
        monkeypatch.setattr(fused, "PRECISION", prec)
        leaves = [x.to(dev, dtype).requires_grad_() for x in (lq, lk, v)]
        out = mnn._causal(*leaves, 64, fused=fuse, half=True)
        grads = torch.autograd.grad(out, leaves, cot.to(dev, dtype))
        return [t.detach().double().cpu() for t in (out, *grads)]

    ref = run(None, torch.float64, False, "cpu")
    return {prec: [((x - y).norm() / y.norm()).item() for x, y in zip(run(prec, torch.float32, True, device), ref)]
            for prec in precisions}


@pytest.mark.parametrize("gap", [40.0, None])
def test_bf16_products_error(fused, monkeypatch, gap):
    """Products of bfloat16 operands (PRECISION "bf16", opt-in; on a GPU tensor cores at twice TF32's rate)
    against float64, causal scan of chunks of 64 on the fast path (GAP 40) and the tile path (GAP None):
    relative (Frobenius) error of the output under 4e-3 (2.3e-3 measured: about twice the rounding of a
    bfloat16 output, 2^-9 per element at most) and of the gradients under 1e-2; over 1000 times the IEEE
    products' error (so bfloat16 operands are what ran)."""
    monkeypatch.setattr(fused, "GAP", gap)
    # one sequence of three chunks in the interpreter (the CUDA test runs two of four)
    errs = _bf16_errors(fused, monkeypatch, "cpu", ("ieee", "bf16"), n=1, L=192)
    assert errs["bf16"][0] < 4e-3 and max(errs["bf16"][1:]) < 1e-2, errs
    assert all(b > 1000 * i for b, i in zip(errs["bf16"], errs["ieee"])), errs


def test_shapes_are_checked(fused):
    """The kernels index raw memory, so within() and causal() check every shape against the log-features' and
    v4's (a mismatched state would be read out of bounds) and every dtype and device against v4's (within) or
    the query log-features' (causal, whose values may also be half: test_causal_operator_reads_half_values):
    ValueError naming the argument; without P a zero state of the right width."""
    g = torch.Generator().manual_seed(8)
    qr, lk, v, P, before = _inputs(g, 1, 2, 16, 5, 3)
    with pytest.raises(ValueError, match=r"P must have shape \(1, 2, 5, 3\)"):
        fused.within(qr, lk, v, P[..., :2], before)
    with pytest.raises(ValueError, match="before must have shape"):
        fused.within(qr, lk, v, P, before[:, :1])
    with pytest.raises(ValueError, match="lk4 must have shape"):
        fused.within(qr, lk[..., :4], v, P, before)
    with pytest.raises(ValueError, match=r"P must have v4's dtype and device \(torch.float64, cpu\), got t"):
        fused.within(qr, lk, v, P.float(), before)
    with pytest.raises(ValueError, match=r"lk4 must have lq4's dtype and device \(torch.float32, cpu\), got t"):
        fused.causal(qr.float(), lk, v)
    with pytest.raises(ValueError, match=r"lk4 must have shape \(1, 2, 16, 5\)"):
        fused.causal(qr, lk[..., :4], v)
    b = 16
    qr, lk, v, _, _ = _inputs(g, 1, 1, b, 5, b + 9)  # d_v + 1 > b: a state of the wrong width would be short
    assert torch.allclose(fused.within(qr, lk, v), _chunk_dense(qr, lk, v), rtol=1e-12, atol=1e-13)


def _chunked(g, n, N, b, M, D, wild=False, pad=True):
    """Log-features lq, lk (n, N, b, M) and values (D - 1 columns), as the causal scan hands them to
    montecarlo.nn._fused.causal; ``pad``: the first sequence's first 5 keys and a middle tile of the second
    padded (-inf: its first queries see no key); ``wild``: the first sequence's last chunk's keys x 30."""
    lq = torch.randn(n, N, b, M, generator=g, dtype=torch.float64)
    lk = 3.0 * torch.randn(n, N, b, M, generator=g, dtype=torch.float64)
    if wild:
        lk[0, -1] *= 30.0
    if pad:
        lk[0, 0, :5] = -math.inf
        lk[-1, N // 2, 8:24] = -math.inf
    v = torch.randn(n, N, b, D - 1, generator=g, dtype=torch.float64)
    return lq, lk, v


def _reference_offsets(lq, lk):
    """The rows' offsets by torch: r_i = max_f (lq_if + c_if), c the running maximum over all earlier keys."""
    n, N, b, M = lk.shape
    c = torch.cummax(lk.reshape(n, N * b, M), 1).values.reshape(lk.shape)
    return (lq + c).amax(-1).clamp_min(-1.0e30)


def _dense_causal(lq, lk, v, r):
    """sum_{j <= i} sum_f e^{lq_if - r_i + lk_jf} [v_j, 1] over every earlier position of the sequence."""
    n, N, b, M = lq.shape
    L = N * b
    flat = lambda x: x.reshape(n, L, x.shape[-1])  # noqa: E731
    keep = torch.ones(L, L, dtype=torch.bool).tril().unsqueeze(-1)
    E = torch.exp(torch.where(keep, flat(lq).unsqueeze(-2) - r.reshape(n, L, 1, 1) + flat(lk).unsqueeze(-3),
                              -math.inf))
    ones = torch.ones_like(v[..., -1:])
    return (E.sum(-1) @ flat(torch.cat([v, ones], -1))).reshape(n, N, b, v.shape[-1] + 1)


@pytest.mark.parametrize("scans", [True, False])
def test_chunk_offsets_are_the_running_maxima(fused, monkeypatch, scans):
    """The chunks' offsets (montecarlo.nn._fused.chunk_offsets: the offsets over the chunks by their scan kernel,
    or by torch's cummax with SCAN_KERNELS off; r and the flags by the rows' offsets kernel) equal torch's
    forms: r the running maxima over all earlier keys (the earlier chunks through ``before``, the tile's own
    keys by a scan), with padded keys, wild chunks and rows that see no key (the floor -1e30); ``before``
    the exclusive cummax of the chunks' key maxima, ``off`` those maxima clamped; the flags
    :func:`fast_chunks`' (GAP 40, and GAP None: none fast).  Power: with each chunk's maximum in place of the
    running maximum the offsets differ; a chunk made slow by a wider gap is seen as such."""
    monkeypatch.setattr(fused, "SCAN_KERNELS", scans)
    g = torch.Generator().manual_seed(12)
    lq, lk, _ = _chunked(g, 2, 3, 32, 20, 2, wild=True)
    r, before, off, flag = fused.chunk_offsets(lq, lk)
    o = lk.amax(2)
    want_before = mnn._exclusive_cummax(o, 1, -math.inf)
    assert torch.equal(r, _reference_offsets(lq, lk))
    assert torch.equal(before, want_before) and torch.equal(off, o.clamp_min(-1.0e30))
    assert torch.equal(flag, fused.fast_chunks(None, lk, want_before)[1])
    assert flag.tolist() == [[0, 1, 0], [1, 1, 1]]  # (the first query of sequence 0 sees nothing; wild chunk)
    assert r[0, 0, 0] == -1.0e30 and (r[0, 0, 5:] > -1e3).all()
    whole = (lq + torch.maximum(lk.amax(2, keepdim=True), before.unsqueeze(2))).amax(-1)
    assert not torch.allclose(whole.clamp_min(-1.0e30), r)
    lk[1, 1, 7, 3] = lk[1, 1, 0].max() + 100.0  # a key far above the chunk's first: the chunk turns slow
    flag2 = fused.chunk_offsets(lq, lk)[3]
    assert flag2[1, 1] == 0 and torch.equal(flag2, fused.fast_chunks(None, lk, mnn._exclusive_cummax(
        lk.amax(2), 1, -math.inf))[1])
    monkeypatch.setattr(fused, "GAP", None)
    assert not fused.chunk_offsets(lq, lk)[3].any()


def test_chunk_offsets_propagate_nan(fused):
    """A NaN key makes its chunk's offsets and every later chunk's ``before`` NaN (as torch's amax and cummax)
    and its chunk slow; the other sequence is untouched."""
    g = torch.Generator().manual_seed(15)
    lq, lk, _ = _chunked(g, 2, 4, 16, 5, 2, pad=False)
    lk[0, 1, 3, 2] = math.nan
    r, before, off, flag = fused.chunk_offsets(lq, lk)
    o = lk.amax(2)
    want = mnn._exclusive_cummax(o, 1, -math.inf)
    assert torch.equal(before.isnan(), want.isnan()) and before[0, 2:, 2].isnan().all()
    assert torch.equal(before[~want.isnan()], want[~want.isnan()]) and off[0, 1, 2].isnan()
    assert flag[0, 1] == 0 and torch.equal(flag[1], fused.fast_chunks(None, lk, want)[1][1])


@pytest.mark.parametrize("N,M,D", [(1, 5, 3), (2, 33, 2), (9, 40, 17), (12, 7, 66)])
def test_state_scan_kernels_equal_the_product(fused, N, M, D):
    """The prefix states' scan kernel and its adjoint equal the batched product (montecarlo.nn._prefix_states
    and its adjoint) in float64, with chunks of padded keys (offsets at the floor, ``before`` -inf at the
    first chunks), offsets 200 apart (factors that underflow to 0) and ragged feature blocks and value
    widths; the adjoint is the transpose: <states(K), G> = <K, adjoint(G)>.  Power: the adjoint of a scan
    that skips the rescaling of the running state (factor 1) differs."""
    g = torch.Generator().manual_seed(16)
    n = 2
    o = 3.0 * torch.randn(n, N, M, generator=g, dtype=torch.float64)
    o[0, : N // 2] = -math.inf  # the first chunks of sequence 0 padded
    if N > 2:
        o[1, N - 2] += 200.0
    before = mnn._exclusive_cummax(o, 1, -math.inf)
    off = o.clamp_min(-1.0e30)
    K = torch.randn(n, N, M, D, generator=g, dtype=torch.float64)
    G = torch.randn(n, N, M, D, generator=g, dtype=torch.float64)
    BD = fused._value_block(D)
    P = fused._prefix_states(K, off, before, BD)
    ref = mnn._product_states(K, off, before, -1.0e30)
    assert torch.allclose(P, ref, rtol=1e-13, atol=1e-13) and torch.equal(P[:, 0], torch.zeros_like(P[:, 0]))
    dK = fused._states_adjoint(G, off, before, BD)
    assert torch.allclose(dK, mnn._prefix_states_adjoint(G, off, before, -1.0e30), rtol=1e-13, atol=1e-13)
    assert torch.allclose((P * G).sum(), (K * dK).sum(), rtol=1e-12)
    if N > 2:
        B = before.clamp_min(-1.0e30)  # the same scan without the rescaling by e^{B_c+1 - B_c+2}
        wrong = torch.zeros_like(G)
        T = torch.zeros_like(G[:, 0])
        for c in range(N - 2, -1, -1):
            T = T + G[:, c + 1]
            wrong[:, c] = torch.exp(off[:, c] - B[:, c + 1]).unsqueeze(-1) * T
        assert not torch.allclose(wrong, dK, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("path,states", [("tile", "kernel"), ("fast", "kernel"), ("mixed", "kernel"),
                                         ("mixed", "product"), ("mixed", "scan")])
def test_causal_operator_equals_the_dense_form(fused, monkeypatch, path, states):
    """The whole causal scan in one operator (montecarlo.nn._fused.causal: the chunks' offsets, chunk summaries,
    prefix states by their scan kernel, or with SCAN_KERNELS off by torch's product or log-depth scan, both
    paths' kernels, and the backward with the states' adjoint and the summaries' gradient)
    equals the plain (L, L, M) form with the same offsets r and its autograd gradients in float64, with
    padded keys (rows that see nothing get 0), with every chunk on the tile path, every chunk fast, and both.
    Power: without the summaries' gradient (the key and value kernels' summary term) the key and value
    gradients differ."""
    monkeypatch.setattr(fused, "SCAN_KERNELS", states == "kernel")
    monkeypatch.setattr(mnn, "PRODUCT_STATES", 0.0 if states == "scan" else 1.0)
    g = torch.Generator().manual_seed(13)
    lq, lk, v = _chunked(g, 2, 3, 32, 20, 5, wild=path == "mixed")
    before = mnn._exclusive_cummax(lk.amax(2), 1, -math.inf)
    monkeypatch.setattr(fused, "GAP", None if path == "tile" else 40.0)
    want = {"tile": [[0, 0, 0], [0, 0, 0]], "fast": [[0, 1, 1], [1, 1, 1]], "mixed": [[0, 1, 0], [1, 1, 1]]}
    assert fused.fast_chunks(None, lk, before)[1].tolist() == want[path]  # (a first query seeing nothing: tile)
    leaves = [x.clone().requires_grad_(True) for x in (lq, lk, v)]
    out = fused.causal(*leaves)
    r = _reference_offsets(lq, lk)
    plain = [x.clone().requires_grad_(True) for x in (lq, lk, v)]
    ref = _dense_causal(*plain, r)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-13)
    assert torch.equal(out[0, 0, :5], torch.zeros_like(out[0, 0, :5]))
    cot = torch.randn(out.shape, generator=g, dtype=out.dtype)
    ga = torch.autograd.grad((out * cot).sum(), leaves)
    gb = torch.autograd.grad((ref * cot).sum(), plain)
    finite = torch.isfinite(lk)
    assert torch.equal(ga[1][~finite], torch.zeros_like(ga[1][~finite]))
    for x, y in ((ga[0], gb[0]), (ga[1][finite], gb[1][finite]), (ga[2], gb[2])):
        assert torch.allclose(x, y, rtol=1e-10, atol=1e-12)

    monkeypatch.setattr(fused, "_states_adjoint", lambda gP, *args: torch.zeros_like(gP))  # no summaries' gradient
    gc = torch.autograd.grad((fused.causal(*leaves) * cot).sum(), leaves)
    assert not torch.allclose(gc[1][finite], gb[1][finite], rtol=1e-3, atol=1e-3)
    assert not torch.allclose(gc[2], gb[2], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
def test_causal_operator_reads_half_values(fused, half):
    """The causal operator reads bfloat16/float16 values as they are beside float32 log-features (the module's
    half inputs: no float32 copy of v, and half the memory for the values held for the backward): outputs (in
    float32) and the log-features' gradients bit for bit those of the same values in float32, the values'
    gradient theirs rounded to the values' dtype; chunks on both paths; opcheck with half values (the fake
    tensors' dtypes).  Half values beside float64 log-features, and float32 values beside float64 ones, are a
    ValueError naming v4 and what it may be."""
    g = torch.Generator().manual_seed(21)
    lq, lk, v = (x.float() for x in _chunked(g, 2, 3, 16, 5, 4, wild=True))
    vh = v.to(half)
    cot = torch.randn(*v.shape[:-1], v.shape[-1] + 1, generator=g)  # (numerators and the key mass)
    results = []
    for values in (vh, vh.float()):
        leaves = [x.clone().requires_grad_() for x in (lq, lk, values)]
        out = fused.causal(*leaves)
        results.append((out.detach(), torch.autograd.grad(out, leaves, cot)))
    (a, ga), (b_, gb) = results
    assert a.dtype == torch.float32 and torch.isfinite(a).all() and torch.equal(a, b_)
    assert torch.equal(ga[0], gb[0]) and torch.equal(ga[1], gb[1])
    assert ga[2].dtype == half and torch.equal(ga[2], gb[2].to(half))
    r, before, off, flag = fused.chunk_offsets(lq, lk)
    torch.library.opcheck(fused._causal_op, [x.clone().requires_grad_(True) for x in (lq, lk, vh)]
                          + [r, before, off, flag, "ieee"])
    for values in (vh, v):
        with pytest.raises(ValueError, match=r"v4 must have lq4's dtype and device \(torch.float64, cpu\), or be "
                                             r"bfloat16/float16 beside float32 log-features, got torch\."):
            fused.causal(lq.double(), lk.double(), values)


def test_fused_module_makes_no_float32_copy_of_the_values(fused, monkeypatch):
    """A causal module with bf16 inputs on the fused path (forced on the CPU) casts none of v to float32, in the
    forward or the backward (the operator reads it as it is); power: on the torch path it does."""
    from torch.utils._python_dispatch import TorchDispatchMode

    q, k, v, pad = _masked_inputs(4, 70)
    v = v[..., :12]  # (a shape of its own among the casts)
    mod = PRFAttention(16, 24, "simplex", causal=True, seed=1, chunk=32)
    copies = []

    class Casts(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if (func is torch.ops.aten._to_copy.default and tuple(args[0].shape) == tuple(v.shape)
                    and args[0].dtype == torch.bfloat16 and out.dtype == torch.float32):
                copies.append(func)
            return out

    counts = []
    for on in (True, False):
        _force_fused(monkeypatch, on)
        copies.clear()
        leaves = [t.bfloat16().requires_grad_() for t in (q, k, v)]
        with Casts():
            out = mod(*leaves, key_padding_mask=pad)
            out.backward(torch.ones_like(out))  # (out.float() would be a cast of v's shape)
        counts.append(len(copies))
    assert counts[0] == 0 and counts[1] >= 1, counts


def test_causal_operator_backward_is_the_gradient(fused):
    """torch.autograd.gradcheck (fast mode) of the causal operator on two chunks of 16 positions (r held
    constant: the operator is a function of lq, lk and v for given offsets, which the wrapper fixes from the
    data), and torch.library.opcheck of its operators (schema, fake tensors, autograd registration)."""
    g = torch.Generator().manual_seed(14)
    lq, lk, v = _chunked(g, 1, 2, 16, 3, 3, pad=False)
    r, before, off, flag = fused.chunk_offsets(lq, lk)

    def op(a, b_, c):
        return fused._causal_op(a, b_, c, r, before, off, flag, "ieee")[0]

    leaves = [x.requires_grad_(True) for x in (lq, lk, v)]
    assert torch.autograd.gradcheck(op, leaves, eps=1e-6, atol=1e-8, rtol=1e-6, fast_mode=True)
    assert _directional_derivative_agrees(op, leaves, g)
    f32 = [x.detach().float() for x in (lq, lk, v, r, before, off)]
    torch.library.opcheck(fused._causal_op, [x.requires_grad_(True) for x in f32[:3]] + f32[3:] + [flag, "ieee"])
    torch.library.opcheck(fused._chunk_offsets_op, [f32[0].detach(), f32[1].detach()])  # no gradient


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_ratio_kernels_equal_the_torch_ratio(fused, masked, dtype):
    """The ratio's kernels (eager mode: num / key mass of the first L of each sequence's Lp rows, in the
    output dtype) equal montecarlo.nn._Ratio (outputs and gradients), with padded rows beyond L (zero
    gradient), rows that see no key (output 0, zero gradient) and d_v not a power of two; with create_graph
    the torch form runs (second derivatives by gradgradcheck in float64).  Power: the gradient without the
    key mass's term differs."""
    g = torch.Generator().manual_seed(18)
    n, Lp, L, D = 3, 48, 37, 6
    nd = torch.randn(n, Lp, D, generator=g, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    nd[..., -1] = nd[..., -1].abs() + 0.5  # (bf16 outputs: float32 numerators and masses, as the scan gives)
    seen = None
    if masked:
        seen = torch.rand(n, L, 1, generator=g) > 0.3
        seen[0, :4] = False
    a = nd.clone().requires_grad_(True)
    b_ = nd.clone().requires_grad_(True)
    out = fused.ratio(a, seen, L, dtype)
    ref = mnn._Ratio.apply(b_[:, :L], seen)
    assert out.dtype == dtype and out.shape == (n, L, D - 1)
    tol = 1e-13 if dtype == torch.float64 else 1e-2
    assert torch.allclose(out.to(nd.dtype), ref, rtol=tol, atol=tol)
    if masked:
        assert torch.equal(out[0, :4], torch.zeros_like(out[0, :4]))
    cot = torch.randn(out.shape, generator=g, dtype=torch.float64).to(dtype)
    ga, = torch.autograd.grad(out, a, cot)
    gb, = torch.autograd.grad(ref, b_, cot.to(nd.dtype))
    assert torch.allclose(ga, gb, rtol=tol, atol=tol * gb.abs().max())
    assert torch.equal(ga[:, L:], torch.zeros_like(ga[:, L:]))
    if masked:
        assert torch.equal(ga[0, :4], torch.zeros_like(ga[0, :4]))
    with pytest.MonkeyPatch.context() as mp:  # the switch: the torch form, the same numbers
        mp.setattr(fused, "RATIO_KERNELS_ON", False)
        off = fused.ratio(nd, seen, L, dtype)
    assert off.dtype == dtype and torch.allclose(off.to(nd.dtype), ref.detach(), rtol=tol, atol=tol)
    if dtype == torch.float64:  # (second derivatives on a few rows: each of gradgradcheck's many calls interprets)
        small = nd[:1, :6].clone().requires_grad_(True)
        assert torch.autograd.gradgradcheck(lambda x: fused.ratio(x, None if seen is None else seen[:1, :5], 5,
                                                                  dtype), (small,), atol=1e-8)
        real = fused._ratio_grad_kernel

        class NoMass:  # the kernel, then the key mass's cotangent zeroed
            def __getitem__(self, grid):
                def launch(*args, **kw):
                    real[grid](*args, **kw)
                    args[3][..., -1] = 0.0
                return launch

        fused._ratio_grad_kernel = NoMass()
        try:
            gc, = torch.autograd.grad(fused.ratio(a, seen, L, dtype), a, cot)
        finally:
            fused._ratio_grad_kernel = real
        assert not torch.allclose(gc, gb, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("kind,dtype", [("prf", torch.float32), ("prf", torch.bfloat16), ("prf", torch.float16),
                                        ("hyperbolic", torch.float32), ("oprf", torch.float32),
                                        ("oprf", torch.bfloat16)])
def test_linear_features_kernel_equals_the_torch_map(fused, kind, dtype):
    """The features' kernel (one pass over x in its own dtype) on the kind's linear form (its record's
    ``linear_log_features``: rows and constants) equals the torch map of the record's ``log_features`` on the
    float32 copy (values and autograd's gradients; d = 20 and m = 70 not powers of two, rows not a multiple of
    the tile, broadcast leading axes), gradients in x's dtype (the kernel reads float32, bf16 and fp16, not
    float64: no gradcheck).  Power: without the norm term's gradient (s x sum_f G) the gradients differ;
    opcheck of the operator; no rows give empty results."""
    g = torch.Generator().manual_seed(17)
    rec = feature_kinds.get(kind)
    x = torch.randn(2, 1, 45, 20, generator=g).expand(2, 3, 45, 20).to(dtype)
    w = torch.randn(70, 20, generator=g)
    s = 20 ** -0.5
    params = _params(kind) or {}
    fmap = mc.FeatureMap(kind, kernel="softmax", where="PRFAttention", chosen="data", **params)
    form = PRFAttention._linear_form(SimpleNamespace(_fmap=fmap), w, params)  # (the module's form, its map alone)
    xa = x.detach().clone().requires_grad_(True)
    xb = x.detach().clone().requires_grad_(True)
    a = fused.linear_log_features(xa, *form, s)
    b = mnn._log_features(xb.float(), w, fmap.direction_terms(w), fmap, s, params)
    assert a.dtype == torch.float32 and a.shape == b.shape == (2, 3, 45, 70 * rec.width)
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)
    cot = torch.randn(a.shape, generator=g)
    ga, = torch.autograd.grad((a * cot).sum(), xa)
    gb, = torch.autograd.grad((b * cot).sum(), xb)
    assert ga.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert torch.allclose(ga.float(), gb.float(), rtol=tol, atol=tol * gb.abs().max())
    real = fused._linear_features_grad_kernel

    class NoNorm:  # the kernel, then s x sum_f G added back: the gradient without the norm term
        def __getitem__(self, grid):
            def launch(X, W, G, GX, R, d, M, S, **kw):
                real[grid](X, W, G, GX, R, d, M, S, **kw)
                GX.add_((S * X.float() * G.sum(-1, keepdim=True)).to(GX.dtype))
            return launch

    fused._linear_features_grad_kernel = NoNorm()
    try:
        gc, = torch.autograd.grad((fused.linear_log_features(xa, *form, s) * cot).sum(), xa)
    finally:
        fused._linear_features_grad_kernel = real
    assert not torch.allclose(gc.float(), gb.float(), rtol=tol, atol=tol * gb.abs().max())
    if dtype == torch.float32:
        bias = torch.broadcast_to(torch.as_tensor(form[1], dtype=torch.float32), form[0].shape[:1])
        torch.library.opcheck(fused._linear_features_op, [x[0, 0].clone().requires_grad_(True), form[0], bias, s])
        empty = torch.zeros(2, 0, 20, requires_grad=True)  # no rows: no launch, an empty result and gradient
        out = fused.linear_log_features(empty, *form, s)
        assert out.shape == (2, 0, 70 * rec.width) and torch.autograd.grad(out.sum(), empty)[0].shape == empty.shape


def test_feature_rows_and_scaled_features_check_their_inputs(fused):
    """feature_rows scales the rows by s^{1/2} and lays out the constants (a number or a float32 tensor
    broadcast to (m,)); it and scaled_log_features refuse what the kernel cannot read, naming the argument;
    scaled_log_features keeps the inputs' leading shapes (no views; one row and a vector too) and equals
    linear_log_features."""
    g = torch.Generator().manual_seed(29)
    w = torch.randn(8, 4, generator=g)
    ws, b = fused.feature_rows(w, 0.25, 0.5)
    assert torch.allclose(ws, w * 0.5 ** 0.5, rtol=1e-7) and torch.equal(b, torch.full((8,), 0.25))
    _, b2 = fused.feature_rows(w, torch.arange(8.0), 0.5)
    assert torch.equal(b2, torch.arange(8.0))
    with pytest.raises(ValueError, match="w must be a float32 \\(m, d\\) tensor"):
        fused.feature_rows(w.double(), 0.0, 0.5)
    with pytest.raises(ValueError, match="w must be a float32"):
        fused.feature_rows(w[0], 0.0, 0.5)
    with pytest.raises(ValueError, match="bias must be float32"):
        fused.feature_rows(w, torch.zeros(8, dtype=torch.float64), 0.5)
    with pytest.raises(ValueError, match="must share d"):
        fused.scaled_log_features((torch.randn(3, 5),), ws, b, 0.5)
    with pytest.raises(ValueError, match="b must be float32 of shape \\(8,\\)"):
        fused.scaled_log_features((torch.randn(3, 4),), ws, b[:3], 0.5)
    with pytest.raises(ValueError, match="x must be float32, bfloat16 or float16"):
        fused.scaled_log_features((torch.randn(3, 4).double(),), ws, b, 0.5)
    x = torch.randn(2, 3, 5, 4, generator=g)
    lx, = fused.scaled_log_features((x,), ws, b, 0.5)
    assert lx.shape == (2, 3, 5, 8)
    assert torch.equal(lx, fused.linear_log_features(x, w, 0.25, 0.5))
    want = x @ ws.T + b - 0.25 * (x * x).sum(-1, keepdim=True)
    assert torch.allclose(lx, want, rtol=1e-5, atol=1e-5)
    for one in (x[0, 0, :1], x[0, 0, 0]):  # one row, (1, d) and a vector (d,): one program, the map of that row
        one = one.clone().requires_grad_(True)
        lo, = fused.scaled_log_features((one,), ws, b, 0.5)
        assert lo.shape == (*one.shape[:-1], 8) and torch.allclose(lo, want[0, 0, 0], rtol=1e-5, atol=1e-5)
        grad, = torch.autograd.grad(lo.sum(), one)  # d/dx sum_f (w'_f . x + b_f - s |x|^2 / 2): sum_f w'_f - m s x
        assert torch.allclose(grad, ws.sum(0) - 8 * 0.5 * one.detach(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="must share d"):
        fused.scaled_log_features((torch.tensor(1.0),), ws, b, 0.5)


def test_module_keeps_the_features_rows_while_they_hold(fused, monkeypatch):
    """The module forms its features' kernel rows and constants (feature_rows) once and keeps them between
    forward passes while the projections (the same tensor, unmodified), the scale and the kind's parameters
    stay; a redraw, an in-place change of the weights, load_state_dict or another scale forms them again, and
    the outputs then equal a fresh module's with the same projections (power: each change moves the output).
    A deep copy gives the same outputs and redraws on its own.  Not kept for parameters from the data, for
    inference tensors (no version counter), under torch.compile or while a CUDA graph is captured (whose
    replays must read the projections)."""
    import copy

    _force_fused(monkeypatch, True)
    real, calls = fused.feature_rows, []

    def counted(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(fused, "feature_rows", counted)
    g = torch.Generator().manual_seed(31)
    q, k, v = (torch.randn(2, 40, 16, generator=g) for _ in range(3))
    mod = PRFAttention(16, 24, "simplex", causal=True, seed=2, chunk=32)

    def fresh(m):  # the same projections and scale, nothing kept
        return PRFAttention.from_weights(m.weights.clone(), causal=True, chunk=32, scale=m.scale)(q, k, v)

    stale = mod(q, k, v)
    assert torch.equal(mod(q, k, v), stale) and len(calls) == 1
    other = PRFAttention(16, 24, "simplex", causal=True, seed=9, chunk=32).state_dict()
    for change in (mod.redraw, lambda: mod.weights.mul_(0.5), lambda: mod.load_state_dict(other),
                   lambda: setattr(mod, "scale", 0.3)):
        before = len(calls)
        with torch.no_grad():
            change()
        out = mod(q, k, v)
        assert len(calls) == before + 1
        assert torch.allclose(out, fresh(mod), rtol=1e-6, atol=1e-6)
        assert not torch.allclose(out, stale, rtol=1e-3, atol=1e-3)
        stale = out
    twin = copy.deepcopy(mod)
    assert torch.equal(twin(q, k, v), stale)
    twin.redraw()
    assert torch.allclose(twin(q, k, v), fresh(twin), rtol=1e-6, atol=1e-6)
    assert torch.equal(mod(q, k, v), stale)
    driven = PRFAttention(16, 24, "simplex", kind="oprf", causal=True, seed=2, chunk=32)
    driven(q, k, v)
    assert driven._rows_cache is None
    with torch.inference_mode():
        inf = PRFAttention(16, 24, "simplex", causal=True, seed=2, chunk=32)
        assert inf.weights.is_inference()
        out = inf(q, k, v)
    assert inf._rows_cache is None
    assert torch.equal(out, PRFAttention(16, 24, "simplex", causal=True, seed=2, chunk=32)(q, k, v))
    for name in ("_capturing", "_compiling"):  # (a CUDA graph's capture; torch.compile)
        mod(q, k, v)
        assert mod._rows_cache is not None
        monkeypatch.setattr(mnn, name, lambda *x: True)
        before = len(calls)
        mod(q, k, v)
        mod(q, k, v)
        assert len(calls) == before + 2 and mod._rows_cache is None
        monkeypatch.undo()
        _force_fused(monkeypatch, True)
        monkeypatch.setattr(fused, "feature_rows", counted)
    assert mnn._capturing(torch.zeros(1)) is False  # (the CPU: no capture, and no CUDA query made)


@pytest.mark.parametrize("fused_on", [True, False])
def test_causal_broadcast_leading_shapes_equal_the_expanded_inputs(fused, monkeypatch, fused_on):
    """Queries, keys and values whose leading shapes broadcast (3-D and 4-D; keys and values shared by the
    queries' sequences or heads) give the outputs and gradients of the same inputs expanded by hand, on the
    fused path (forced on the CPU) and the torch path, a chunk length that pads (L = 40, chunks of 16) and one
    that does not (L = 32)."""
    _force_fused(monkeypatch, fused_on)
    g = torch.Generator().manual_seed(43)
    mod = PRFAttention(8, 12, "simplex", causal=True, seed=1, chunk=16)
    for qs, ks, L in (((3,), (1,), 40), ((2, 3), (1, 3), 32), ((2, 1), (2, 3), 40)):
        q = torch.randn(*qs, L, 8, generator=g)
        k, v = (torch.randn(*ks, L, 8, generator=g) for _ in range(2))
        lead = torch.broadcast_shapes(qs, ks)
        cot = torch.randn(*lead, L, 8, generator=g)
        a_leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out = mod(*a_leaves)
        ga = torch.autograd.grad(out, a_leaves, cot)
        b_leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        ref = mod(*[x.expand(*lead, L, 8) for x in b_leaves])
        gb = torch.autograd.grad(ref, b_leaves, cot)
        assert out.shape == ref.shape == (*lead, L, 8), (qs, ks)
        assert torch.allclose(out, ref, rtol=1e-6, atol=1e-6), (qs, ks)
        for x, y in zip(ga, gb):
            assert x.shape == y.shape and torch.allclose(x, y, rtol=1e-5, atol=1e-5), (qs, ks)


def test_ratio_writes_the_shape_asked_for(fused, monkeypatch):
    """ratio reads nd as (n, Lp, D) or (n, N, b, D) and writes the output in the shape asked for (the module's
    leading shape: no view after it), by its kernels and by the torch form, equal to the (n, L, D - 1) result
    reshaped, gradients too; a shape with another number of entries raises, naming it."""
    g = torch.Generator().manual_seed(32)
    n, N, b, D, L = 2, 3, 16, 5, 40
    nd = torch.randn(n, N, b, D, generator=g)
    nd[..., -1] = nd[..., -1].abs() + 0.5
    shape = (1, 2, L, D - 1)
    cot = torch.randn(shape, generator=g)
    for on in (True, False):
        monkeypatch.setattr(fused, "RATIO_KERNELS_ON", on)
        a = nd.clone().requires_grad_(True)
        b_ = nd.reshape(n, N * b, D).clone().requires_grad_(True)
        out = fused.ratio(a, None, L, torch.float32, shape)
        want = fused.ratio(b_, None, L, torch.float32).reshape(shape)
        assert out.shape == shape and torch.equal(out, want), on
        ga, = torch.autograd.grad(out, a, cot)
        gb, = torch.autograd.grad(want, b_, cot)
        assert ga.shape == nd.shape and torch.equal(ga.reshape(gb.shape), gb), on
        with pytest.raises(ValueError, match="shape must hold n L \\(D - 1\\) = 320 entries"):
            fused.ratio(nd, None, L, torch.float32, (n, L, D))


def test_grids_are_kept_per_shape_and_settings(fused, monkeypatch):
    """The launch grids and constexprs (_grids) are formed once per shape and sizing settings: the same object
    again, read-only, and new ones when a setting changes (tests and benchmarks set them)."""
    a = fused._grids(2, 3, 128, 64, 65)
    assert fused._grids(2, 3, 128, 64, 65) is a
    with pytest.raises(TypeError):
        a[1][2]["T"] = 1
    assert a[1][2]["T"] == fused.FAST_TILE == 64 and a[1][0] == (6, 2)
    monkeypatch.setattr(fused, "FAST_TILE", 32)
    b = fused._grids(2, 3, 128, 64, 65)
    assert b[1][2]["T"] == 32 and b[1][0] == (6, 4)
    monkeypatch.setattr(fused, "NUM_WARPS", 2)
    assert fused._grids(2, 3, 128, 64, 65)[0][2]["num_warps"] == 2


def test_broadcast_shapes_helper_equals_torchs():
    """nn._broadcast_shapes (a shortcut where the shapes are equal) equals torch.broadcast_shapes as a tuple,
    and refuses shapes that do not broadcast as it does."""
    for shapes in (((2, 3), (2, 3), (2, 3)), ((2, 1), (1, 3)), ((), (4,)), ((3,),), ((5, 1, 2), (2,))):
        sizes = [torch.Size(s) for s in shapes]
        got = mnn._broadcast_shapes(*sizes)
        assert type(got) is tuple and got == tuple(torch.broadcast_shapes(*shapes)), shapes
    with pytest.raises(RuntimeError):
        mnn._broadcast_shapes(torch.Size((2,)), torch.Size((3,)))


def test_features_products_follow_the_dtype(fused, monkeypatch):
    """The features' kernels' products (feature_products) by x's dtype: "tf32x2" for bf16 and fp16, "ieee" for
    float32, FEATURE_PRECISION where set (a value outside FEATURE_PRECISIONS raises, naming the setting); the
    forward kernel's launches pass it, the gradient's "ieee" (bf16 and float32 x)."""
    assert fused.feature_products(torch.bfloat16) == fused.feature_products(torch.float16) == "tf32x2"
    assert fused.feature_products(torch.float32) == "ieee"
    monkeypatch.setattr(fused, "FEATURE_PRECISION", "tf32x3")
    assert fused.feature_products(torch.bfloat16) == fused.feature_products(torch.float32) == "tf32x3"
    monkeypatch.setattr(fused, "FEATURE_PRECISION", "ieee")
    assert fused.feature_products(torch.bfloat16) == "ieee"
    monkeypatch.setattr(fused, "FEATURE_PRECISION", "tf32x2")  # (half x only: float32 x is not exact in TF32)
    assert fused.feature_products(torch.bfloat16) == fused.feature_products(torch.float16) == "tf32x2"
    assert fused.feature_products(torch.float32) == "tf32x3"
    monkeypatch.setattr(fused, "FEATURE_PRECISION", "tf32")
    with pytest.raises(ValueError, match="FEATURE_PRECISION must be None or one of"):
        fused.feature_products(torch.bfloat16)
    monkeypatch.setattr(fused, "FEATURE_PRECISION", None)
    seen = []

    class Recorded:
        def __init__(self, real):
            self.real = real

        def __getitem__(self, grid):
            def launch(*args, **kw):
                seen.append(kw["PREC"])
                self.real[grid](*args, **kw)
            return launch

    for name in fused.FEATURE_KERNELS:
        monkeypatch.setattr(fused, name, Recorded(getattr(fused, name)))
    g = torch.Generator().manual_seed(3)
    w = torch.randn(24, 8, generator=g)
    for dtype, want in ((torch.bfloat16, "tf32x2"), (torch.float32, "ieee")):
        seen.clear()
        x = torch.randn(5, 8, generator=g).to(dtype).requires_grad_(True)
        fused.linear_log_features(x, w, 0.5, 0.25).sum().backward()
        assert seen == [want, "ieee"], (dtype, seen)


def _feature_errors(fused, monkeypatch, device, precision):
    """Errors of the features' kernels with products ``precision`` (set through feature_products, which the
    tests may point at a value it refuses, "tf32") against float64, on x (4096, 64) in bf16 (forward) and in
    float32 (forward, and the gradient, whose kernel has IEEE products, written in float32), w (128, 64): max
    |error| over the entry's scale
    (sum_k |x_k w'_fk| + |b_f| + s |x|^2 / 2 for l; sum_f |G_f w'_f| + s |x| |sum_f G_f| for the gradient)."""
    monkeypatch.setattr(fused, "feature_products", lambda dtype: precision)
    g = torch.Generator().manual_seed(23)
    x = torch.randn(4096, 64, generator=g) * 1.5
    w = torch.randn(128, 64, generator=g)
    b = torch.randn(128, generator=g)
    s = 64 ** -0.5
    ws, xb = (w * math.sqrt(s)).double(), x.bfloat16().double()
    errs = []
    for xin, x64 in ((x.bfloat16(), xb), (x, x.double())):
        ref = x64 @ ws.T + b.double() - 0.5 * s * (x64 * x64).sum(-1, keepdim=True)
        scale = x64.abs() @ ws.abs().T + b.double().abs() + 0.5 * s * (x64 * x64).sum(-1, keepdim=True)
        xa = xin.to(device).requires_grad_(True)
        lf = fused.linear_log_features(xa, w.to(device), b.to(device), s)
        errs.append(((lf.double().cpu() - ref).abs() / scale).max().item())
    G = torch.randn(4096, 128, generator=g)
    gx, = torch.autograd.grad((lf * G.to(device)).sum(), xa)
    G64 = G.double()
    ref = G64 @ ws - s * G64.sum(-1, keepdim=True) * x.double()
    scale = G64.abs() @ ws.abs() + s * G64.sum(-1, keepdim=True).abs() * x.double().abs()
    errs.append(((gx.double().cpu() - ref).abs() / scale).max().item())
    return errs


@pytest.mark.parametrize("precision", ["tf32x3", "tf32x2"])
def test_features_products_error(fused, monkeypatch, precision):
    """The bound of test_cuda_features_products_error holds for the interpreter's products (IEEE float32 in
    numpy whatever the precision: the CUDA test is the one that sees tf32x3; "tf32x2"'s split of w into its
    TF32 part and the remainder is exact here)."""
    errs = _feature_errors(fused, monkeypatch, "cpu", precision)
    assert max(errs) < 1e-6, errs


@cuda
def test_cuda_features_products_error(monkeypatch):
    """On a GPU the features' forward kernel with "tf32x3" products (opt-in; half x's default is "tf32x2")
    against float64: every entry of l within 1e-5 of its scale (_feature_errors), and so far finer than a bf16
    output's rounding, as the gradient (IEEE products); power: plain TF32 products (1e-3 relative per product)
    exceed the bound in the forward."""
    from montecarlo.nn import _fused

    errs = _feature_errors(_fused, monkeypatch, "cuda", "tf32x3")
    assert max(errs) < 1e-5, errs
    tf32 = _feature_errors(_fused, monkeypatch, "cuda", "tf32")
    assert min(tf32[:2]) > 1e-5, (errs, tf32)


@cuda
def test_cuda_features_tf32x2_error(monkeypatch):
    """On a GPU "tf32x2" products (x times w's TF32 part and times its remainder; the default for half x) meet
    the bound of "tf32x3" for bf16 x (exact in TF32) and in the gradient; power: forced on float32 x, which
    TF32 truncates, the forward exceeds it (which is why feature_products gives float32 x "tf32x3")."""
    from montecarlo.nn import _fused

    errs = _feature_errors(_fused, monkeypatch, "cuda", "tf32x2")
    assert errs[0] < 1e-5 and errs[2] < 1e-5, errs
    assert errs[1] > 1e-5, errs


def _fake_compiled_kernel(fused, monkeypatch, arg_names, runner):
    """A stand-in for a compiled Triton kernel with parameters ``arg_names``, which ``_launch`` takes for one
    (LAUNCH_CACHE on, an empty cache, device 0): its JIT entry records ("jit", grid, args, meta) in ``calls``
    and returns a compiled kernel whose runner for a grid is ``runner(grid, calls)``.  Returns (kernel, calls)."""
    calls = []

    class Compiled:
        def __getitem__(self, grid):
            return runner(grid, calls)

    class Kernel:
        def __getitem__(self, grid):
            def jit(*a, **kw):
                calls.append(("jit", grid, a, kw))
                return Compiled()
            return jit

    k = Kernel()
    k.arg_names = arg_names
    monkeypatch.setattr(fused, "_is_compiled", lambda kernel: kernel is k)
    monkeypatch.setattr(fused, "LAUNCH_CACHE", True)
    monkeypatch.setattr(fused, "_COMPILED", {})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return k, calls


def test_launch_cache_reuses_the_compiled_kernel_per_specialisation(fused, monkeypatch):
    """With LAUNCH_CACHE on, a compiled kernel's first launch of a specialisation goes through the JIT entry
    and later ones through the compiled kernel's runner, with the constexprs appended in parameter order and
    the new grid padded to three sizes (Triton's runner indexes grid[1] and grid[2]: a one-size grid failed
    with IndexError on an H100); a change of anything Triton specialises on (an integer becoming 1 or a
    multiple of 16 or crossing a bound of Triton's i32 / i64 / u64 classes, a tensor's dtype or 16-byte
    alignment, a constexpr, the warps) goes through the JIT entry again (power: a key without the alignment
    would send the misaligned view to the runner).  Off, or for a kernel Triton does not compile (the
    interpreter's, a stand-in), every launch is the JIT entry."""
    k, calls = _fake_compiled_kernel(fused, monkeypatch, ["X", "n", "d", "T", "PREC"],
                                     lambda grid, calls: lambda *a: calls.append(("runner", grid, a)))
    x = torch.zeros(64)
    assert x.data_ptr() % 16 == 0
    fused._launch(k, (2,), x, 32, 7, T=16, PREC="tf32", num_warps=4)
    fused._launch(k, (3,), x, 48, 9, T=16, PREC="tf32", num_warps=4)
    assert [c[0] for c in calls] == ["jit", "runner"] and calls[1] == ("runner", (3, 1, 1), (x, 48, 9, 16, "tf32"))
    for args, meta in (((x, 1, 9), {}), ((x, 32, 16), {}), ((x, 2 ** 31, 9), {}), ((x.double(), 32, 9), {}),
                       ((x[1:], 32, 9), {}), ((x, 32, 9), {"PREC": "ieee"}), ((x, 32, 9), {"num_warps": 8})):
        calls.clear()
        fused._launch(k, (1,), *args, **({"T": 16, "PREC": "tf32", "num_warps": 4} | meta))
        assert [c[0] for c in calls] == ["jit"], (args[1:], meta)
    calls.clear()
    fused._COMPILED.clear()  # (no misaligned entry that a coarser alignment could match)
    fused._launch(k, (1,), x, 32, 7, T=16, PREC="tf32", num_warps=4)
    fused._launch(k, (1,), x[4:], 80, 9, T=16, PREC="tf32", num_warps=4)  # (16 bytes on: still aligned)
    fused._launch(k, (1,), x, 2 ** 31 - 16, 2 ** 16 + 3, T=16, PREC="tf32", num_warps=4)  # (still 32-bit)
    assert [c[0] for c in calls] == ["jit", "runner", "runner"]
    # pairs that differ only in one of Triton's integer classes: ==1, i32 / i64 below and above, i64 / u64
    for cached, other in ((3, 1), (-2 ** 31, -2 ** 31 - 16), (2 ** 31 - 16, 2 ** 31), (2 ** 62, 2 ** 63)):
        calls.clear()
        fused._COMPILED.clear()
        fused._launch(k, (1,), x, cached, 9, T=16, PREC="tf32", num_warps=4)
        fused._launch(k, (1,), x, cached, 9, T=16, PREC="tf32", num_warps=4)
        fused._launch(k, (1,), x, other, 9, T=16, PREC="tf32", num_warps=4)
        assert [c[0] for c in calls] == ["jit", "runner", "jit"], (cached, other)
    monkeypatch.setattr(fused, "LAUNCH_CACHE", False)
    calls.clear()
    fused._launch(k, (1,), x, 32, 7, T=16, PREC="tf32", num_warps=4)
    assert [c[0] for c in calls] == ["jit"]
    monkeypatch.setattr(fused, "LAUNCH_CACHE", True)
    monkeypatch.setattr(fused, "_is_compiled", lambda kernel: False)
    calls.clear()
    fused._launch(k, (1,), x, 32, 7, T=16, PREC="tf32", num_warps=4)
    assert [c[0] for c in calls] == ["jit"]


def test_launch_cache_turns_itself_off_when_the_runner_refuses(fused, monkeypatch):
    """A runner that refuses its arguments (another Triton's convention: here TypeError before launching) turns
    LAUNCH_CACHE off with a RuntimeWarning naming the error, the cache is emptied and that launch and later
    ones go through the JIT entry (each launched once: no launch lost or doubled)."""
    def refusing(grid, calls):
        def runner(*a):
            raise TypeError("function takes exactly 7 arguments (9 given)")
        return runner

    k, calls = _fake_compiled_kernel(fused, monkeypatch, ["X", "n", "T"], refusing)
    x = torch.zeros(16)
    fused._launch(k, (1,), x, 32, T=16)
    assert [c[0] for c in calls] == ["jit"] and len(fused._COMPILED) == 1
    with pytest.warns(RuntimeWarning, match="refused its arguments .TypeError: function takes exactly 7") as rec:
        fused._launch(k, (1,), x, 32, T=16)
    assert rec[0].filename == __file__  # (attributed to the code that launched)
    assert [c[0] for c in calls] == ["jit", "jit"] and fused.LAUNCH_CACHE is False and not fused._COMPILED
    fused._launch(k, (1,), x, 32, T=16)
    assert [c[0] for c in calls] == ["jit"] * 3 and not fused._COMPILED


@cuda
def test_cuda_launch_cache_equals_the_jit_entry(monkeypatch):
    """On a GPU the module's forward and backward (bf16, causal, a mask) with LAUNCH_CACHE on, run twice (the
    second through the compiled kernels' runners), equal those with every launch through the JIT entry, bit for
    bit; the cache holds the kernels launched."""
    from montecarlo.nn import _fused

    monkeypatch.setattr(_fused, "_COMPILED", {})
    g = torch.Generator().manual_seed(29)
    q, k, v = (torch.randn(2, 4, 1000, 64, generator=g).to("cuda", torch.bfloat16) for _ in range(3))
    pad = torch.zeros(2, 1, 1000, dtype=torch.bool, device="cuda")
    pad[0, :, :17] = True
    mod = PRFAttention(64, 128, "simplex", causal=True, seed=0, device="cuda")
    results = []
    for cache in (False, True, True):
        monkeypatch.setattr(_fused, "LAUNCH_CACHE", cache)
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        out = mod(*leaves, key_padding_mask=pad)
        results.append((out.detach(), torch.autograd.grad(out.float().square().sum(), leaves)))
    (a, ga), *cached = results
    for b_, gb in cached:
        assert torch.equal(a, b_) and all(torch.equal(x, y) for x, y in zip(ga, gb))
    assert len(_fused._COMPILED) >= 15, len(_fused._COMPILED)


def test_custom_operator_registration(fused):
    """torch.library.opcheck of the forward operator (schema, fake tensor, autograd registration, dispatch
    consistency) on a small input with gradients."""
    g = torch.Generator().manual_seed(6)
    *data, before = _inputs(g, 1, 2, 16, 5, 3, dtype=torch.float32)
    torch.library.opcheck(fused._within_op, [x.requires_grad_(True) for x in data] + [before, "ieee"])


def test_compiled_causal_scan_calls_the_kernels(fused):
    """Under torch.compile the kernels are opaque custom operators: the compiled causal scan (fused, on the
    CPU through the interpreter) equals eager, outputs and gradients."""
    g = torch.Generator().manual_seed(7)
    lq, lk, v = (torch.randn(2, 40, w, generator=g) for w in (6, 6, 3))

    def f(a, b_, c):
        return mnn._causal(a, b_, c, 16, fused=True)

    results = []
    for fn in (f, torch.compile(f, dynamic=False, fullgraph=True)):  # (no graph break: the operators traced)
        leaves = [x.clone().requires_grad_(True) for x in (lq, lk, v)]
        out = fn(*leaves)
        results.append((out.detach(), torch.autograd.grad(out.square().sum(), leaves)))
    (a, ga), (b_, gb) = results
    assert torch.allclose(a, b_, rtol=1e-5, atol=1e-6)
    for x, y in zip(ga, gb):
        assert torch.allclose(x, y, rtol=1e-4, atol=1e-5)


def test_compiled_module_calls_the_features_kernel(fused, monkeypatch):
    """torch.compile of the module with the features' kernel (oprf with a given A: rows and a constants vector
    from its record's linear form) and the causal operator, both forced on the CPU: equal to eager, outputs and
    gradients, and the features' operator is in the compiled graph (its calls are counted while compiling)."""
    _force_fused(monkeypatch, True)
    calls = _count_features(fused, monkeypatch)
    q, k, v, _ = _masked_inputs(8, 40)
    mod = PRFAttention(16, 24, "simplex", kind="oprf", kind_params={"A": -0.1}, causal=True, seed=3, chunk=16)
    results = []
    for fn in (mod, torch.compile(mod, dynamic=False, fullgraph=True)):
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        out = fn(*leaves)
        results.append((out.detach(), torch.autograd.grad(out.square().sum(), leaves)))
    assert len(calls) >= 4 and set(calls) == {24}, calls  # eager's two, then queries and keys while tracing
    (a, ga), (b_, gb) = results
    assert torch.allclose(a, b_, rtol=1e-5, atol=1e-6)
    for x, y in zip(ga, gb):
        assert torch.allclose(x, y, rtol=1e-4, atol=1e-5 * y.abs().max())


@pytest.mark.parametrize("causal", [False, True])
def test_exported_program_calls_the_kernels_as_operators(fused, monkeypatch, tmp_path, causal):
    """torch.export of a module on the fused path (forced on the CPU: Triton's interpreter) records the kernels
    as the registered operators (simplex_rf::linear_log_features, and for causal attention chunk_offsets and
    causal), and the saved and loaded program equals the eager module (bf16: within one rounding, since the
    export, as torch.compile, takes the ratio's torch form instead of its kernel).  In a fresh process the
    saved program loads once montecarlo.nn._fused is imported (it registers the operators), not with
    montecarlo.nn alone (which imports the kernels only when they run), as the module docs say."""
    _force_fused(monkeypatch, True)
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 3, 64, 16, generator=g).bfloat16() for _ in range(3))
    mod = PRFAttention(16, 32, "simplex", causal=causal, seed=0, chunk=32).eval()
    ep = torch.export.export(mod, (q, k, v))
    ops = {str(n.target).split(".")[1] for n in ep.graph.nodes if str(n.target).startswith("simplex_rf.")}
    assert ops == ({"linear_log_features", "chunk_offsets", "causal"} if causal else {"linear_log_features"})
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    out = torch.export.load(buf).module()(q, k, v).float()
    want = mod(q, k, v).float()
    assert torch.allclose(out, want, rtol=2 ** -7, atol=1e-6)
    if causal:
        path = tmp_path / "prf.pt2"
        torch.export.save(ep, str(path))
        script = ("import sys, torch, montecarlo.nn\n"
                  "try:\n    torch.export.load(sys.argv[1])\nexcept Exception:\n    print('refused')\n"
                  "import montecarlo.nn._fused\ntorch.export.load(sys.argv[1])\nprint('loaded')\n")
        rc, text = run_group([sys.executable, "-c", script, str(path)], 300,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        assert rc == 0 and text.split()[-2:] == ["refused", "loaded"], text[-2000:]


def test_dispatch(monkeypatch):
    """The kernels are chosen only for CUDA float32 features, chunks of a multiple of 16 (at least 16), and
    not with montecarlo.nn.FUSED off nor under a torch.func transform; the features' kernel only for CUDA
    float32/bf16/fp16 inputs with float32 projections that need no gradient and d <= 128.  The conditions
    other than the device are checked here on the CPU (the device seam set to "cpu"), and on a GPU with CUDA
    tensors."""
    x = torch.zeros(1, 1, 32, 4)
    w = torch.zeros(8, 4)
    assert not mnn._fused_applies(x, 32)  # CPU
    assert not mnn._fused_features_apply(x, w)
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        monkeypatch.setattr(mnn, "_FUSED_DEVICE", device)
        xc, wc = x.to(device), w.to(device)
        assert mnn._fused_applies(xc, 32) and mnn._fused_applies(xc, 16) and mnn._fused_applies(xc, 256)
        assert not mnn._fused_applies(xc, 8) and not mnn._fused_applies(xc, 24)
        assert not mnn._fused_applies(xc.double(), 32) and not mnn._fused_applies(xc.bfloat16(), 32)
        assert mnn._fused_features_apply(xc, wc) and mnn._fused_features_apply(xc.bfloat16(), wc)
        assert mnn._fused_features_apply(xc.half(), wc)
        assert not mnn._fused_features_apply(xc.double(), wc.double())
        assert not mnn._fused_features_apply(xc.bfloat16(), wc.double())
        assert not mnn._fused_features_apply(xc, wc.clone().requires_grad_(True))
        wide, edge = torch.zeros(1, 1, 32, 129, device=device), torch.zeros(1, 1, 32, 128, device=device)
        assert not mnn._fused_features_apply(wide, torch.zeros(8, 129, device=device))
        assert mnn._fused_features_apply(edge, torch.zeros(8, 128, device=device))
        monkeypatch.setattr(mnn, "FUSED", False)
        assert not mnn._fused_applies(xc, 32) and not mnn._fused_features_apply(xc, wc)
        monkeypatch.setattr(mnn, "FUSED", True)
        monkeypatch.setattr(mnn, "_TRITON", False)  # (Triton not importable: the torch levels)
        assert not mnn._fused_applies(xc, 32) and not mnn._fused_features_apply(xc, wc)
        monkeypatch.setattr(mnn, "_TRITON", None)
        seen = []  # under a torch.func transform: the torch levels (the kernels' Functions have no vmap/jvp rules)
        torch.func.vmap(lambda t: seen.append((mnn._fused_applies(t, 32), mnn._fused_features_apply(t, wc))) or t)(
            xc.unsqueeze(0))
        assert seen == [(False, False)] and mnn._fused_applies(xc, 32)


def _register_report(tmp_path, *args, timeout=300):
    """``python -m benchmarks.kernel_registers ARGS`` in a process of its own, without TRITON_INTERPRET (so
    that Triton compiles), its cache in the test's temporary folder: (exit code, output)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(mnn.__file__)))  # (montecarlo/nn/__init__.py)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path), TRITON_DEFAULT_FP_FUSION="1",
               PYTHONPATH=os.pathsep.join([root, env.get("PYTHONPATH", "")]))
    try:
        return run_group([sys.executable, "-m", "benchmarks.kernel_registers", *args], timeout, env=env, cwd=root)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the register report took more than {timeout} s (killed)")


@pytest.mark.parametrize("arch,prec", [(80, "ieee"), (90, "ieee"), (90, "tf32"), (90, "bf16")])
def test_kernels_compile_within_the_registers(tmp_path, arch, prec):
    """Every kernel compiles to a cubin for Ampere (sm 80) and Hopper (sm 90, float32, TF32 and bfloat16 products) with
    Triton's own ptxas, no GPU needed (what the interpreter does not check: the kernels' globals are
    constexpr, the dot shapes are legal), through benchmarks.kernel_registers, whose ptxas -v report for the
    default tile shapes shows every kernel within the 255 registers a thread can have and, with TF32
    products, with no spill to local memory (a spill makes a kernel slower)."""
    from montecarlo.nn import _fused as real

    config = f"{real.TILE},{real.FEATURE_BLOCK},{real.NUM_WARPS}"
    code, out = _register_report(tmp_path, "--arch", str(arch), "--precision", prec, "--configs", config)
    assert code == 0, out[-2000:]
    cells = re.findall(r"(\w+) (\d+)/(\d+)", out.splitlines()[-1])
    names = ([name for name, *_ in real.KERNELS] + list(real.FEATURE_KERNELS)
             + list(real.RATIO_KERNELS) + [name for name, _ in real.SCAN_KERNEL_ARGS])
    assert [c[0] for c in cells] == [name.strip("_").replace("_kernel", "") for name in names], out
    assert len(cells) == len(names) == 18
    assert all(int(regs) <= 255 for _, regs, spill in cells), out
    # no spill with TF32 products (bf16/fp16 inputs: the timed setting) or bfloat16 operands (opt-in); with
    # IEEE float32 products (float32 inputs) the fast path's 64 x 64 tiles of FMA products at feature block 64
    # spill (sm 90: the query gradient 764 bytes; benchmarks/README), which an H100 timed faster all the same
    # than the spill-free block 32
    if prec != "ieee":
        assert all(int(spill) == 0 for _, _, spill in cells), out


def test_register_report_rejects_a_malformed_config(tmp_path):
    """A malformed --configs of benchmarks.kernel_registers is a one-line usage error with exit code 2."""
    code, out = _register_report(tmp_path, "--configs", "8,32,4", timeout=600)
    assert code == 2 and "error: argument --configs" in out.strip().splitlines()[-1]


@cuda
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("gap", [40.0, None])
def test_cuda_fused_equals_the_torch_path(grad, dtype, gap, monkeypatch):
    """On a GPU the compiled kernels (the default there) equal the torch levels: outputs and gradients of
    the causal module, the default chunk, L = 1000 with a padding mask; float32 inputs (IEEE products, 1e-4)
    and bf16 inputs (TF32 products, to bf16's rounding); fast chunks (GAP 40: all here) and the tile path
    (GAP None)."""
    from montecarlo.nn import _fused

    monkeypatch.setattr(_fused, "GAP", gap)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 4, 1000, 64, generator=g).to("cuda", dtype) for _ in range(3))
    pad = torch.zeros(2, 1, 1000, dtype=torch.bool, device="cuda")
    pad[0, :, :17] = True
    mod = PRFAttention(64, 128, "simplex", causal=True, seed=0, device="cuda")
    results = []
    for flag in (True, False):
        mnn.FUSED = flag
        try:
            leaves = [x.clone().requires_grad_(grad) for x in (q, k, v)]
            with torch.set_grad_enabled(grad):
                out = mod(*leaves, key_padding_mask=pad)
                grads = torch.autograd.grad(out.sum(), leaves) if grad else ()
        finally:
            mnn.FUSED = True
        results.append((out.detach(), grads))
    (a, ga), (b_, gb) = results
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    a, b_ = a.float(), b_.float()
    assert torch.allclose(a, b_, rtol=tol, atol=0.1 * tol * b_.abs().max())
    for x, y in zip(ga, gb):
        x, y = x.float(), y.float()
        assert torch.allclose(x, y, rtol=10 * tol, atol=tol * y.abs().max())


@cuda
def test_cuda_value_gradient_rounds_as_torch(monkeypatch):
    """Compiled, the values' gradient is stored in bfloat16 by the kernels' own conversion (the interpreter's
    stand-in: test_bf16_rounding_is_to_nearest_even): the same edge values round bit for bit as torch's cast
    (NaN as NaN), and the causal operator's gradient in bfloat16/float16 values equals that in their float32
    copies rounded once (float32 log-features; chunks on both paths: GAP 40 and None)."""
    from montecarlo.nn import _fused

    x = _bf16_edge_values().cuda()
    y = torch.empty(x.shape, dtype=torch.bfloat16, device="cuda")
    _bf16_rounding_kernel[(1,)](x, y, MODE=2)
    want = x.bfloat16()
    nan = want.isnan()
    assert torch.equal(y.isnan(), nan) and torch.equal(y[~nan].view(torch.int16), want[~nan].view(torch.int16))
    g = torch.Generator().manual_seed(3)
    lq, lk, v = (t.float().cuda() for t in _chunked(g, 2, 4, 64, 40, 24, wild=True))
    cot = torch.randn(*v.shape[:-1], v.shape[-1] + 1, generator=g).cuda()
    for gap in (40.0, None):
        monkeypatch.setattr(_fused, "GAP", gap)
        for half in (torch.bfloat16, torch.float16):
            vh = v.to(half)
            grads = []
            for values in (vh, vh.float()):
                leaves = [t.clone().requires_grad_() for t in (lq, lk, values)]
                grads.append(torch.autograd.grad(_fused.causal(*leaves, precision="ieee"), leaves, cot)[2])
            assert grads[0].dtype == half and torch.equal(grads[0], grads[1].to(half)), (gap, half)


@cuda
def test_cuda_graphed_module_equals_eager_and_follows_redraws():
    """torch.cuda.make_graphed_callables of a causal module (the fused path: bf16, the default chunk) replays
    the eager module's outputs and gradients bit for bit (the same kernels: no host synchronisation in the
    forward or backward, which a capture would refuse); a redraw after the capture (in place into the
    projections) reaches the replays, which read the projections themselves rather than rows the module kept
    (_kernel_rows keeps none while a graph is captured): their outputs equal the eager module's with the new
    projections (power: they differ from the old ones)."""
    g = torch.Generator().manual_seed(41)
    q, k, v = (torch.randn(2, 4, 512, 64, generator=g).to("cuda", torch.bfloat16) for _ in range(3))
    cot = torch.randn(2, 4, 512, 64, generator=g).to("cuda", torch.bfloat16)
    mod = PRFAttention(64, 128, "simplex", causal=True, seed=0, device="cuda")
    ref = PRFAttention(64, 128, "simplex", causal=True, seed=0, device="cuda")
    graphed = torch.cuda.make_graphed_callables(mod, tuple(x.clone().requires_grad_() for x in (q, k, v)))

    def run(fn):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out = fn(*leaves)
        out.backward(cot)
        return out.detach().clone(), [x.grad for x in leaves]

    before = None
    for step in range(3):
        (a, ga), (b_, gb) = run(graphed), run(ref)
        assert torch.equal(a, b_) and all(torch.equal(x, y) for x, y in zip(ga, gb)), step
        if before is not None:
            assert not torch.allclose(a.float(), before.float(), rtol=1e-2, atol=1e-2), step
        before = a
        mod.redraw()
        ref.redraw()
        assert torch.equal(mod.weights, ref.weights)


@cuda
def test_cuda_long_sequence_scans_equal_the_torch_path():
    """On a GPU, many chunks (L = 32768: 128 chunks of 256, beyond the batched product of the torch path,
    which then takes its log-depth scan; the kernels at the chunk length the other CUDA tests compile): the
    fused path with its scan kernels (the offsets over the chunks, the prefix states and their adjoint) and
    with the scans by torch operations (SCAN_KERNELS off) equal the torch levels, outputs and gradients,
    float32 inputs (IEEE products), keys whose scale grows along the sequence (the offsets over the chunks
    keep rising)."""
    from montecarlo.nn import _fused

    g = torch.Generator().manual_seed(19)
    L = 32768
    ramp = torch.linspace(0.5, 2.0, L).view(1, 1, L, 1)
    q, k, v = (torch.randn(1, 2, L, 64, generator=g) for _ in range(3))
    k = k * ramp
    mod = PRFAttention(64, 128, "simplex", causal=True, seed=0, device="cuda", chunk=256)
    results = []
    for flag, scans in ((True, True), (True, False), (False, True)):
        mnn.FUSED, _fused.SCAN_KERNELS = flag, scans
        try:
            leaves = [x.cuda().requires_grad_(True) for x in (q, k, v)]
            out = mod(*leaves)
            results.append((out.detach(), torch.autograd.grad(out.square().sum(), leaves)))
        finally:
            mnn.FUSED, _fused.SCAN_KERNELS = True, True
    *fused_runs, (b_, gb) = results
    for a, ga in fused_runs:
        assert torch.allclose(a, b_, rtol=1e-4, atol=1e-5 * b_.abs().max())
        for x, y in zip(ga, gb):
            assert torch.allclose(x, y, rtol=1e-3, atol=1e-4 * y.abs().max())


@cuda
def test_cuda_tf32_products_error():
    """TF32 products (chosen for half-precision inputs) against float64: relative (Frobenius) error of the
    causal scan's output under 3e-3 (bf16 rounds each element by up to 2^-9 = 2e-3), and over ten times
    that of the IEEE products (so TF32 is what ran)."""
    g = torch.Generator().manual_seed(8)
    lq, lk = (torch.randn(4, 1024, 128, generator=g, dtype=torch.float64) - 3 for _ in range(2))
    v = torch.randn(4, 1024, 64, generator=g, dtype=torch.float64)
    ref = mnn._causal(lq.clone(), lk.clone(), v, 256, fused=False)
    errs = {}
    for half in (False, True):
        out = mnn._causal(*(x.float().cuda() for x in (lq, lk, v)), 256, fused=True, half=half).double().cpu()
        errs[half] = ((out - ref).norm() / ref.norm()).item()
    assert errs[True] < 3e-3 and errs[False] < 1e-5 and errs[True] > 10 * errs[False], errs


@cuda
def test_cuda_bf16_products_error(monkeypatch):
    """Products of bfloat16 operands (PRECISION "bf16": the compiled tensor-core products, not the
    interpreter's stand-in of test_bf16_products_error) against float64 on the case of that test: relative
    error of the output under 4e-3 and of the gradients under 1e-2, over 100 times the IEEE products'."""
    from montecarlo.nn import _fused

    errs = _bf16_errors(_fused, monkeypatch, "cuda", ("ieee", "tf32", "bf16"))
    assert errs["bf16"][0] < 4e-3 and max(errs["bf16"][1:]) < 1e-2, errs
    assert all(b > 100 * i for b, i in zip(errs["bf16"], errs["ieee"])), errs


def test_variants_summary_ranks_and_judges_the_targets():
    """The variants' summary ranks each length's forms by time as ratios to SDPA's row of that length and says
    whether the eager default and the fastest form meet the issue-20 targets (at most 3 x SDPA at L = 4096,
    faster than SDPA at 65536; exactly 3 x meets the first, exactly 1 x misses the second); rows without a
    time are listed with their reason; the default form is named by the module's CUDA default chunk unless
    given."""
    from benchmarks.bench_attention import variants_summary

    def row(L, form, ms, **kw):
        return {"L": L, "form": form, "ms": ms, "host_ms": 0.5, **kw}

    rows = [row(4096, "sdpa", 0.8), row(4096, "fused_c256", 2.4), row(4096, "fused_c128", 2.0),
            row(4096, "compiled_fused_c256", None, error="RuntimeError: x"),
            row(65536, "sdpa", 100.0), row(65536, "fused_c256", 100.0), row(65536, "fused_c512", 99.0),
            row(16384, "fused_c256", 9.0)]
    text = "\n".join(variants_summary(rows, default="fused_c256"))
    lines = text.splitlines()
    assert lines[:3] == ["L=4096: SDPA 0.80 ms", "  fused_c128: 2.00 ms = 2.50 x SDPA (host 0.50 ms)",
                         "  fused_c256: 2.40 ms = 3.00 x SDPA (host 0.50 ms)"], text
    assert "  compiled_fused_c256: RuntimeError: x" in lines
    assert "target PRF / SDPA <= 3 at L = 4096: eager default fused_c256 3.00: met" in text
    assert "target PRF / SDPA < 1 at L = 65536: eager default fused_c256 1.00: not met" in text
    assert "target PRF / SDPA < 1 at L = 65536: fastest fused_c512 0.99: met" in text
    assert "L=16384: no SDPA time" in lines and "  fused_c256: 9.00 ms (host 0.50 ms)" in lines
    rows[1]["ms"] = 2.41
    assert "fused_c256 3.01: not met" in "\n".join(variants_summary(rows, default="fused_c256"))
    own = f"fused_c{mnn.DEFAULT_CHUNK['cuda']}"
    assert own == "fused_c128" and f"eager default {own} 2.50: met" in "\n".join(variants_summary(rows))
    rows[0]["ms_median"], rows[2]["ms_median"] = 0.9, 2.7  # the medians' ratio beside the minima's
    assert "  fused_c128: 2.00 ms = 2.50 x SDPA (medians 2.70 / 0.90 = 3.00 x) (host 0.50 ms)" in \
        variants_summary(rows)


def test_gpu_session_fits_one_device_call():
    """benchmarks/gpu_session.sh, the GPU checks as one prepared run, parses as bash and its steps' time limits
    add up to at most 600 s, the most one command on a lent machine may run (so that a step that hangs still
    leaves the others' results); every step that runs Python has a limit."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "benchmarks", "gpu_session.sh")
    assert subprocess.run(["bash", "-n", path], capture_output=True, timeout=600).returncode == 0
    steps = [line for line in open(path).read().splitlines() if "python3 -m" in line and not line.startswith("#")]
    limits = [int(m.group(1)) for line in steps for m in [re.search(r"timeout (\d+) python3", line)] if m]
    assert len(limits) == len(steps) == 7 and sum(limits) <= 600, (steps, limits)


def test_launch_probe_needs_cuda(monkeypatch, capsys):
    """benchmarks.bench_attention --launch without CUDA: exit 2 and one line naming what it needs."""
    from benchmarks import bench_attention

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_attention.main(["--launch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--launch needs CUDA" in err


@pytest.mark.parametrize("flag", ["--host-profile", "--feature-configs"])
def test_cuda_probes_need_cuda(monkeypatch, capsys, flag):
    """benchmarks.bench_attention --host-profile / --feature-configs without CUDA: exit 2 and one line naming
    what it needs."""
    from benchmarks import bench_attention

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_attention.main([flag]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag} needs CUDA" in err


def test_variant_forms_are_checked(capsys):
    """--forms names variants of the table (unknown names: exit 2, one line naming them and the known ones);
    the variants' settings name settings that exist (montecarlo.nn._fused, montecarlo.nn), so that no form
    times the default by a misspelt setting."""
    from benchmarks import bench_attention
    from montecarlo.nn import _fused

    assert bench_attention.main(["--cuda", "--variants", "--forms", "fused_c128", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown ['nope']" in err and "fused_c128_jit" in err
    for name, chunk, comp, kw in bench_attention._variant_forms():
        assert all(hasattr(_fused, k) for k in kw.get("kernel", {})), name
        assert all(hasattr(mnn, k) for k in kw.get("nn", {})), name


@cuda
def test_cuda_launch_probe_times_each_form():
    """On a GPU the launch probe gives a positive host time per launch for Triton's JIT entry and for torch's
    operator (the compiled runner's may be an error string: its arguments differ between Triton versions)."""
    from benchmarks.bench_attention import launch_overhead

    res = launch_overhead(5)
    assert set(res) == {"triton_jit", "triton_compiled", "torch_add"}
    assert res["triton_jit"] > 0 and res["torch_add"] > 0, res


def test_host_overhead_benchmark_counts_the_step(fused, monkeypatch):
    """benchmarks.bench_attention --host (the host's work per eager causal training step, kernels not
    launched) runs on the CPU and counts what a step launches: the features' kernel for q and k and its
    gradient (4), the offsets over the chunks, the rows' offsets, the summaries, the prefix states, both
    paths' forward kernels and the ratio (7), the ratio's gradient, the states' gradient, the states'
    adjoint and both paths' three gradient kernels (9: the key and value kernels add the summaries'
    gradient).  In eager mode no custom
    operator is dispatched (their implementations run as plain functions: _eager); with the operators (as
    under torch.compile) seven calls, and the ratio by torch operations (which torch.compile fuses): two
    launches fewer.  With the scans by torch operations (SCAN_KERNELS off) three launches fewer and more
    torch operators."""
    from benchmarks.bench_attention import host_overhead

    res = host_overhead(2)
    assert res["launches"] == 20 and res["custom_ops"] == 0
    assert res["aten_ops"] <= 28, res  # (57 before the features' rows were kept; the views, ones column, gv's cast cut)
    assert res["aten_ops"] > 0 and res["prf_ms"][0] > 0 and res["sdpa_ms"][0] > 0
    monkeypatch.setattr(fused, "SCAN_KERNELS", False)
    torch_scans = host_overhead(2)
    assert torch_scans["launches"] == 17 and torch_scans["aten_ops"] > res["aten_ops"] + 10
    monkeypatch.setattr(fused, "SCAN_KERNELS", True)
    monkeypatch.setattr(fused, "_eager", lambda *tensors: False)
    res = host_overhead(2)
    assert res["launches"] == 18 and res["custom_ops"] == 7


def test_eager_functions_equal_the_custom_operators(fused, monkeypatch):
    """The eager path (the operators' implementations under autograd.Functions) and the registered custom
    operators give the same outputs and gradients, bit for bit (the same kernels), for the causal module with
    the features' kernel (the ratio by its torch form in both: eager mode's ratio kernel sums in another
    order; test_ratio_kernels_*); and the operators are used for tensor subclasses (fake tensors) and under
    torch.compile (test_compiled_*: fullgraph)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    _force_fused(monkeypatch, True)
    monkeypatch.setattr(fused, "RATIO_KERNELS_ON", False)
    q, k, v, pad = _masked_inputs(9, 40)
    mod = PRFAttention(16, 24, "simplex", causal=True, seed=2, chunk=16)
    results = []
    for eager in (True, False):
        monkeypatch.setattr(fused, "_eager", lambda *t, e=eager: e)
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        out = mod(*leaves, key_padding_mask=pad)
        results.append((out.detach(), torch.autograd.grad(out.square().sum(), leaves)))
    (a, ga), (b_, gb) = results
    assert torch.equal(a, b_) and all(torch.equal(x, y) for x, y in zip(ga, gb))
    monkeypatch.undo()
    x = torch.zeros(2, 3)
    assert fused._eager(x, x)
    with FakeTensorMode() as mode:
        assert not fused._eager(mode.from_tensor(x), x)
