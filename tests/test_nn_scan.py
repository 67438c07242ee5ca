"""The causal backward of montecarlo.nn.PRFAttention linear in L on the CPU (issue 41 item 5): the prefix
states' recursion over chunks has a backward of its own (the recursion run backwards into one gradient
buffer) instead of autograd's, which zero-filled a full-size gradient at every chunk's select.  Checked
without a clock: the entries the backward writes, counted by a dispatch mode, grow linearly in L; the
gradients equal autograd's of the plain recursion, also differentiated twice and under torch.func."""

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from montecarlo import nn as mnn  # noqa: E402
from montecarlo.nn import PRFAttention  # noqa: E402


class _Written(TorchDispatchMode):
    """Entries written by every torch operator (the sizes of their tensor outputs, in-place ones included)."""

    def __init__(self):
        super().__init__()
        self.entries = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.entries += t.numel()
        return out


def _backward_entries(L, m=16, d=8):
    att = PRFAttention(d, m, seed=0, causal=True, chunk=16)
    q, k, v = (torch.randn(1, 2, L, d, requires_grad=True) for _ in range(3))
    out = att(q, k, v)
    with _Written() as w:
        out.sum().backward()
    return w.entries


def test_backward_work_is_linear_in_the_length():
    """Entries written by the backward at L = 1024 and 4096 (chunks of 16: 64 and 256 chunks): the ratio is
    4.0 for linear work (measured 4.0) and was 8.5 before (each chunk's select zero-filled a gradient of all
    chunks: 16 times more at 4 times the length); the check asserts at most 4.5."""
    ratio = _backward_entries(4096) / _backward_entries(1024)
    assert ratio < 4.5, ratio


def test_loop_states_gradients_equal_autograd_of_the_recursion():
    """The hand-written backward (and its create_graph form, differentiated again) against autograd of the
    plain recursion, float64; the jvp against torch.func.jvp of the recursion."""
    g = torch.Generator().manual_seed(1)
    K = torch.randn(2, 7, 3, 4, dtype=torch.float64, generator=g, requires_grad=True)
    decay = torch.rand(2, 7, 3, dtype=torch.float64, generator=g)
    G = torch.randn(2, 7, 3, 4, dtype=torch.float64, generator=g)
    want = torch.autograd.grad((mnn._loop_recursion(K, decay) * G).sum(), K, create_graph=True)[0]
    got = torch.autograd.grad((mnn._loop_states(K, decay) * G).sum(), K, create_graph=True)[0]
    assert torch.allclose(got, want, rtol=1e-13, atol=1e-14)
    assert torch.allclose(mnn._loop_states(K.detach(), decay), mnn._loop_recursion(K.detach(), decay), rtol=1e-14,
                          atol=1e-15)
    t = torch.randn_like(K)
    jv = torch.func.jvp(lambda k: mnn._loop_states(k, decay), (K.detach(),), (t,))[1]
    assert torch.allclose(jv, mnn._loop_recursion(t, decay), rtol=1e-13, atol=1e-14)
    vj = torch.func.vjp(lambda k: mnn._loop_states(k, decay), K.detach())[1](G)[0]
    assert torch.allclose(vj, want, rtol=1e-13, atol=1e-14)
    assert not torch.allclose(got, G, rtol=1e-3, atol=1e-3)  # (power: the gradient is not its cotangent)


def test_causal_gradients_through_the_loop_equal_the_scan(monkeypatch):
    """The module's causal gradients on the CPU (the loop over chunks) against the log-depth scan's (the other
    route), float64, 300 positions in chunks of 32."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 300, 8, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3))
    G = torch.randn(2, 300, 8, dtype=torch.float64, generator=g)
    att = PRFAttention(8, 16, seed=3, causal=True, chunk=32, dtype=torch.float64)
    loop = torch.autograd.grad((att(q, k, v) * G).sum(), (q, k, v))
    real = mnn._causal
    monkeypatch.setattr(mnn, "_causal", lambda *a, **kw: real(*a, **{**kw, "scan": True}))
    scan = torch.autograd.grad((att(q, k, v) * G).sum(), (q, k, v))
    for a, b in zip(loop, scan):
        assert torch.allclose(a, b, rtol=1e-11, atol=1e-13)
