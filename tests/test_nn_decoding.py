"""Decoding token by token with montecarlo.nn.PRFAttention (issue 41 item 4): ``step`` with an explicit
recurrent state in the log-space stabilised form of the causal scan, ``prefill`` for a prompt; the outputs of
L steps equal the causal forward over the sequence (float64 to 1e-12 relative per row; float32 and bf16
within the forward's own rounding), across redraws (a state of other projections is refused), with padding,
batch and torch.compile; bad states refused."""

import pytest

torch = pytest.importorskip("torch")

from montecarlo.nn import DecodingState, PRFAttention  # noqa: E402
from theory import feature_kinds  # noqa: E402

KINDS = tuple(k for k in feature_kinds.names(positive=True, kernel="softmax", has=("log_features",))
              if not feature_kinds.get(k).has("prepare"))  # (PRFAttention refuses kinds with a prepare hook)
CASES = [(kind, {"A": -0.1} if kind == "oprf" else None) for kind in KINDS]
if "oprf" in KINDS:
    CASES.append(("oprf", None))  # A from the running statistics


def _inputs(L, dtype=torch.float64, seed=0, lead=(2, 3), d=8, dv=5):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*lead, L, d, generator=g, dtype=torch.float64).to(dtype),
            torch.randn(*lead, L, d, generator=g, dtype=torch.float64).to(dtype),
            torch.randn(*lead, L, dv, generator=g, dtype=torch.float64).to(dtype))


def _decode(att, q, k, v, pad=None, state=None, step=None):
    step = step or att.step
    outs = []
    for t in range(q.shape[-2]):
        sl = slice(t, t + 1)
        o, state = step(q[..., sl, :], k[..., sl, :], v[..., sl, :], state,
                        key_padding_mask=None if pad is None else pad[..., sl])
        outs.append(o)
    return torch.cat(outs, -2), state


def _row_error(a, b):
    """max over rows of |a - b| / |b| (rows of zeros: absolute)."""
    a, b = a.double(), b.double()
    return float(((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-300)).max())


@pytest.mark.parametrize("kind,params", CASES)
def test_steps_equal_the_causal_forward_float64(kind, params):
    """200 steps (several of the forward's chunks of 64) with a (B, L) key-padding mask (holes; the first 7
    keys of one sequence padded, so its first queries see no key: output 0 in both), batch x heads (2, 3):
    every row within 1e-12 of the forward.  The running statistics of a data-driven A were moved by training
    first (A != 0).  Power: the forward without the mask differs by far more."""
    q, k, v = _inputs(200)
    att = PRFAttention(8, 24, seed=1, causal=True, kind=kind, kind_params=params, dtype=torch.float64, chunk=64)
    if params is None and kind == "oprf":
        att.train()(q, k, v)  # moves running_rho off 0
        assert float(att.running_rho) > 0
    att.eval()
    pad = torch.rand(2, 200, generator=torch.Generator().manual_seed(2)) < 0.2
    pad[1, :7] = True
    want = att(q, k, v, key_padding_mask=pad)
    got, state = _decode(att, q, k, v, pad)
    assert _row_error(got, want) < 1e-12
    assert torch.equal(got[1, :, :7], torch.zeros_like(got[1, :, :7]))
    assert _row_error(att(q, k, v), want) > 1e-3
    assert state.sums.shape == (2, 3, att.weights.shape[0] * feature_kinds.get(kind).width, 6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_steps_in_half_and_single_precision_within_the_forwards_rounding(dtype):
    """Against the float64 forward of the same projections: the steps' error is at most 4 times the forward's
    own (float32 / bf16 inputs, features in float32) plus the output dtype's half ulp."""
    q, k, v = _inputs(130, dtype)
    att = PRFAttention(8, 24, seed=3, causal=True).eval()
    ref = PRFAttention.from_weights(att.weights.double(), causal=True).eval()
    exact = ref(q.double(), k.double(), v.double())
    fwd = att(q, k, v)
    got, _ = _decode(att, q, k, v)
    assert got.dtype == dtype
    unit = torch.finfo(dtype).eps / 2
    assert float((got.double() - exact).abs().max()) <= 4 * float((fwd.double() - exact).abs().max()) + unit


def test_prefill_then_steps_and_broadcast_leading_shapes():
    """prefill of a 70-token prompt then 50 steps equal the forward over 120 tokens; keys shared by the heads
    (leading shape (2, 1) against queries' (2, 3)) broadcast as in forward."""
    q, k, v = _inputs(120)
    k, v = k[:, :1], v[:, :1]
    att = PRFAttention(8, 16, seed=4, causal=True, dtype=torch.float64).eval()
    want = att(q, k, v)
    out, state = att.prefill(q[..., :70, :], k[..., :70, :], v[..., :70, :])
    rest, state = _decode(att, q[..., 70:, :], k[..., 70:, :], v[..., 70:, :], state=state)
    assert _row_error(torch.cat([out, rest], -2), want) < 1e-12
    assert state.sums.shape[:2] == (2, 3)


def test_redraws_and_loads_refuse_old_states():
    """The state records the projections it was built with: after redraw() or load_state_dict a step with the
    old state is a ValueError; a new decode equals the forward with the new projections.  A state of another
    module (an exact deep copy included) is refused too."""
    import copy

    q, k, v = _inputs(20)
    att = PRFAttention(8, 16, seed=5, causal=True, dtype=torch.float64).eval()
    _, state = _decode(att, q, k, v)
    att.redraw()
    with pytest.raises(ValueError, match="other projections"):
        att.step(q[..., :1, :], k[..., :1, :], v[..., :1, :], state)
    got, state = _decode(att, q, k, v)
    assert _row_error(got, att(q, k, v)) < 1e-12
    att.load_state_dict(att.state_dict())
    with pytest.raises(ValueError, match="other projections"):
        att.step(q[..., :1, :], k[..., :1, :], v[..., :1, :], state)
    twin = copy.deepcopy(att)
    _, state = att.step(q[..., :1, :], k[..., :1, :], v[..., :1, :])
    with pytest.raises(ValueError, match="another PRFAttention module"):
        twin.step(q[..., :1, :], k[..., :1, :], v[..., :1, :], state)


def test_training_mode_steps_never_redraw():
    q, k, v = _inputs(12)
    att = PRFAttention(8, 16, seed=6, causal=True, redraw_every=1, dtype=torch.float64).train()
    w = att.weights.clone()
    _decode(att, q, k, v)
    assert torch.equal(att.weights, w) and att.calls_since_redraw == 0


def test_steps_under_torch_compile():
    """The compiled step (torch.compile, aot_eager backend: Dynamo's graph and AOTAutograd, as inductor sees
    them) gives the eager steps' outputs; the state is a named tuple (a pytree)."""
    q, k, v = _inputs(24)
    att = PRFAttention(8, 16, seed=7, causal=True, dtype=torch.float64).eval()
    want, _ = _decode(att, q, k, v)
    got, state = _decode(att, q, k, v, step=torch.compile(att.step, backend="aot_eager"))
    assert isinstance(state, DecodingState)
    assert _row_error(got, want) < 1e-14


def test_steps_are_differentiable_as_the_forward():
    """Gradients through the steps equal the forward's (float64): the offsets are constants in both."""
    q, k, v = (t.requires_grad_() for t in _inputs(30, lead=(2,)))
    att = PRFAttention(8, 16, seed=8, causal=True, dtype=torch.float64).eval()
    g = torch.randn(2, 30, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    want = torch.autograd.grad((att(q, k, v) * g).sum(), (q, k, v))
    got = torch.autograd.grad((_decode(att, q, k, v)[0] * g).sum(), (q, k, v))
    for a, b in zip(got, want):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_bad_steps_are_refused():
    q, k, v = _inputs(3)
    att = PRFAttention(8, 16, seed=9, causal=True, dtype=torch.float64)
    with pytest.raises(ValueError, match="step\\(\\) takes one position"):
        att.step(q, k, v)
    with pytest.raises(ValueError, match="build the module with causal=True"):
        PRFAttention(8, 16, seed=0).step(q[..., :1, :], k[..., :1, :], v[..., :1, :])
    _, state = att.step(q[..., :1, :], k[..., :1, :], v[..., :1, :])
    with pytest.raises(ValueError, match="do not fit a state"):
        att.step(q[:1, :, :1, :].expand(4, 3, 1, 8), k[..., :1, :].repeat(2, 1, 1, 1), v[..., :1, :].repeat(2, 1, 1, 1),
                 state)
    with pytest.raises(ValueError, match="d_v = 5"):
        att.step(q[..., 1:2, :], k[..., 1:2, :], v[..., 1:2, :2], state)
    with pytest.raises(ValueError, match="keep one input dtype"):
        att.step(q[..., 1:2, :].float(), k[..., 1:2, :].float(), v[..., 1:2, :].float(),
                 state._replace(sums=state.sums.float()))
    with pytest.raises(TypeError, match="DecodingState"):
        att.step(q[..., 1:2, :], k[..., 1:2, :], v[..., 1:2, :], (state.sums, state.offset))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_steps_equal_the_fused_forward(dtype):
    """On the GPU (the forward's fused kernels and features' kernel where Triton is importable; the steps use
    the features' kernel too): prefill of 300 tokens and 40 steps against the forward over 340, within 4 times
    the forward's own error against float64 plus half an ulp of the output dtype."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 340, 64, device="cuda", generator=g).to(dtype) for _ in range(3))
    att = PRFAttention(64, 128, seed=0, causal=True, device="cuda").eval()
    exact = PRFAttention.from_weights(att.weights.double(), causal=True).eval()(q.double(), k.double(), v.double())
    fwd = att(q, k, v)
    out, state = att.prefill(q[..., :300, :], k[..., :300, :], v[..., :300, :])
    rest, _ = _decode(att, q[..., 300:, :], k[..., 300:, :], v[..., 300:, :], state=state)
    got = torch.cat([out, rest], -2)
    unit = torch.finfo(dtype).eps / 2
    assert float((got.double() - exact).abs().max()) <= 4 * float((fwd.double() - exact).abs().max()) + unit


def test_steps_through_the_kernels_interpreted(monkeypatch):
    """The kernels' paths on the CPU through Triton's interpreter (as tests/test_nn_fused.py): the forward by the
    fused causal operator and the features' kernel, the steps and the prefill through the features' kernel;
    float32, within 4 times the forward's own error against float64."""
    import os

    pytest.importorskip("triton")
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton's interpreter is off here (on a GPU: test_cuda_steps_equal_the_fused_forward)")
    from montecarlo import nn as mnn

    q, k, v = _inputs(40, torch.float32, lead=(1, 2))
    att = PRFAttention(8, 16, seed=10, causal=True, chunk=16).eval()
    exact = PRFAttention.from_weights(att.weights.double(), causal=True).eval()(q.double(), k.double(), v.double())
    monkeypatch.setattr(mnn, "_fused_applies", lambda x, b: True)
    monkeypatch.setattr(mnn, "_fused_features_apply", lambda x, w: True)
    from montecarlo.nn import _fused

    calls, real = [], _fused.scaled_log_features
    monkeypatch.setattr(_fused, "scaled_log_features", lambda *a: calls.append(1) or real(*a))
    fwd = att(q, k, v)
    out, state = att.prefill(q[..., :24, :], k[..., :24, :], v[..., :24, :])
    rest, _ = _decode(att, q[..., 24:, :], k[..., 24:, :], v[..., 24:, :], state=state)
    got = torch.cat([out, rest], -2)
    assert len(calls) == 1 + 2 + 16  # the forward, the prefill (its forward and its keys), one per step
    assert float((got.double() - exact).abs().max()) <= 4 * float((fwd.double() - exact).abs().max()) + 6e-8
