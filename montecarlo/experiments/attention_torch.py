r"""SimRF-Performer attention as a torch ``nn.Module`` (Sec. 5.4).

:class:`PRFAttention` computes FAVOR+-style linear attention with the softmax
kernel estimated by positive random features of any coupling (the
SimRFs-Performer of Sec. 5.4 with ``coupling="simplex"``), bidirectional or
causal, with the same log-space stabilisation as the numpy reference
:func:`montecarlo.experiments.attention.prf_attention` (see that module for
the formulas): per-sequence, per-feature key offsets and per-row query
offsets that cancel exactly, no global maximum across batch items or heads,
and no ``eps`` inside the features.  The offsets are detached from the graph;
since the output does not depend on them, the gradients are unchanged.

The random projections live in the buffer ``weights`` (m, d), shared by
queries and keys and saved with the ``state_dict``.  They are drawn by
:func:`montecarlo.sample_weights` on the module's device from a numpy
generator seeded by ``seed``:

* :meth:`PRFAttention.redraw` draws fresh features explicitly;
* ``redraw_every=k`` also redraws automatically every k forward passes in
  training mode (the Performer's feature redrawing);
* :meth:`PRFAttention.freeze` (or ``eval()``, which never redraws) keeps the
  features fixed, so that evaluation is deterministic.

This module needs torch; it is not imported by :mod:`montecarlo.experiments`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

import montecarlo as mc

from ._common import check_coupling, check_int, check_positive_float


def _logits(x, w):
    """Softmax-kernel PRF log-features (..., L, m)."""
    m = w.shape[0]
    return x @ w.transpose(0, 1) - 0.5 * (x * x).sum(-1, keepdim=True) - 0.5 * math.log(m)


def _bidirectional(lq, lk, v):
    o = lk.amax(-2, keepdim=True).detach()
    ek = torch.exp(lk - o)
    S = ek.transpose(-1, -2) @ v
    z = ek.sum(-2)
    p = lq + o
    r = (p + torch.log(z).unsqueeze(-2)).amax(-1, keepdim=True).detach()
    eq = torch.exp(p - r)
    return (eq @ S) / (eq @ z.unsqueeze(-1))


#: Fast-path threshold of the causal scan per dtype (see ``attention.CAUSAL_GAP``): exp(gap) must stay
#: far from overflow and e^-(range - gap) far below the dtype's precision.
CAUSAL_GAP = {torch.float64: 300.0, torch.float32: 30.0}


def _causal(lq, lk, v, chunk):
    """Chunked causal scan (see :mod:`montecarlo.experiments.attention`); each sequence of the flattened
    batch chooses the fast or the log-space chunk path on its own."""
    L, m = lq.shape[-2], lq.shape[-1]
    lead = tuple(torch.broadcast_shapes(lq.shape[:-2], v.shape[:-2]))
    dv = v.shape[-1]
    n = max(1, math.prod(lead))
    lq = lq.expand(lead + (L, m)).reshape(n, L, m)
    lk = lk.expand(lead + (L, m)).reshape(n, L, m)
    v = v.expand(lead + (L, dv)).reshape(n, L, dv)
    chunk = max(1, min(chunk, math.isqrt(max(1, (1 << 22) // (m * n)))))
    gap_max = CAUSAL_GAP[lq.dtype]
    outs = []
    o = S = z = None
    tri = torch.ones(chunk, chunk, dtype=torch.bool, device=lq.device).tril()
    for lo in range(0, L, chunk):  # loop over chunks of the sequence
        hi = min(L, lo + chunk)
        b = hi - lo
        q, k, vc = lq[:, lo:hi, :], lk[:, lo:hi, :], v[:, lo:hi, :]
        kmax = k.amax(1).detach()
        o_new = kmax if o is None else torch.maximum(o, kmax)
        lmass = torch.cummax(k.detach(), dim=1).values  # largest causal term per feature (see attention.py)
        if o is not None:
            lmass = torch.maximum(lmass, (o + torch.log(z.detach())).unsqueeze(1))
        r = (q.detach() + lmass).amax(-1, keepdim=True)
        slow = torch.nonzero((o_new.unsqueeze(1) - lmass).amax(dim=(1, 2)) > gap_max).flatten()
        ek = torch.exp(k - o_new.unsqueeze(1))
        eq = torch.exp(torch.clamp(q + o_new.unsqueeze(1) - r, max=gap_max))  # clamp touches slow rows only
        a = (eq @ ek.transpose(1, 2)).masked_fill(~tri[:b, :b], 0.0)
        num, den = a @ vc, a.sum(-1, keepdim=True)
        if o is not None:
            shrink = torch.exp(o - o_new)
            S_new, z_new = S * shrink.unsqueeze(-1), z * shrink
            num = num + eq @ S_new
            den = den + eq @ z_new.unsqueeze(-1)
        if slow.numel():  # a later key dominates an earlier query's features: log-space scores
            qs, ks, rs = q[slow], k[slow], r[slow]
            la = torch.logsumexp(qs.unsqueeze(2) + ks.unsqueeze(1), dim=-1)
            a_s = torch.exp(la.masked_fill(~tri[:b, :b], float("-inf")) - rs)
            num_s, den_s = a_s @ vc[slow], a_s.sum(-1, keepdim=True)
            if o is not None:
                eq_s = torch.exp(qs + o[slow].unsqueeze(1) - rs)
                num_s = num_s + eq_s @ S[slow]
                den_s = den_s + eq_s @ z[slow].unsqueeze(-1)
            num = num.index_copy(0, slow, num_s)
            den = den.index_copy(0, slow, den_s)
        outs.append(num / den)
        S_add, z_add = ek.transpose(1, 2) @ vc, ek.sum(1)
        S, z = (S_add, z_add) if o is None else (S_new + S_add, z_new + z_add)
        o = o_new
    return torch.cat(outs, dim=1).reshape(lead + (L, dv))


class PRFAttention(nn.Module):
    r"""Linear softmax attention with PRFs of a chosen coupling (SimRFs-Performer, Sec. 5.4).

    Parameters
    ----------
    d_head : int
        Query/key dimension d.
    n_features : int
        Number m of random features (the paper's Performers: 130).
    coupling : str
        One of :data:`montecarlo.COUPLINGS` (default ``'simplex'``).
    causal : bool
        Prefix-sum (autoregressive) attention.
    scale : float, optional
        s in :math:`e^{s q^\top k}` (default :math:`1/\sqrt d`).
    seed : None or int
        Seed of the feature draws (initial and every redraw).
    redraw_every : int, optional
        In training mode and unless frozen, redraw the features every this
        many forward passes.
    chunk : int
        Chunk length of the causal prefix sums.
    dtype, device : torch dtype (float32 or float64) and device of the features.

    Examples
    --------
    >>> att = PRFAttention(64, 130, "simplex", seed=0)
    >>> q = k = v = torch.randn(2, 4, 100, 64)
    >>> att(q, k, v).shape
    torch.Size([2, 4, 100, 64])
    """

    def __init__(self, d_head, n_features=130, coupling="simplex", *, causal=False, scale=None, seed=None,
                 redraw_every=None, chunk=64, dtype=torch.float32, device=None):
        super().__init__()
        self.d_head = check_int(d_head, "d_head", 1)
        self.n_features = check_int(n_features, "n_features", 1)
        self.coupling = check_coupling(coupling)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
        self.causal = causal
        self.scale = 1.0 / math.sqrt(self.d_head) if scale is None else check_positive_float(scale, "scale")
        self.redraw_every = None if redraw_every is None else check_int(redraw_every, "redraw_every", 1)
        self.chunk = check_int(chunk, "chunk", 1)
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
        self._rng = np.random.default_rng(seed)
        self._frozen = False
        self._calls = 0
        self.register_buffer("weights", torch.empty(self.n_features, self.d_head, dtype=dtype, device=device))
        self.redraw()

    @classmethod
    def from_weights(cls, weights, **kwargs):
        """A module with the given (m, d) projections (e.g. shared with numpy code), frozen."""
        if not isinstance(weights, torch.Tensor):
            weights = torch.as_tensor(np.asarray(weights))
        if weights.ndim != 2:
            raise ValueError(f"weights must be an (m, d) tensor, got shape {tuple(weights.shape)}")
        if weights.dtype not in (torch.float32, torch.float64):
            weights = weights.to(torch.float32)
        kwargs.setdefault("dtype", weights.dtype)
        mod = cls(weights.shape[1], weights.shape[0], device=weights.device, **kwargs)
        with torch.no_grad():
            mod.weights.copy_(weights)
        mod.freeze()
        return mod

    @torch.no_grad()
    def redraw(self):
        """Draw fresh projections of the module's coupling (in place, on its device and dtype)."""
        w = mc.sample_weights(self.coupling, self.d_head, self.n_features, rng=self._rng, xp="torch",
                              device=self.weights.device, dtype=self.weights.dtype)
        self.weights.copy_(w)
        self._calls = 0
        return self

    def freeze(self):
        """Keep the current features: no automatic redraws (explicit :meth:`redraw` still works)."""
        self._frozen = True
        return self

    def unfreeze(self):
        self._frozen = False
        return self

    @property
    def frozen(self):
        return self._frozen

    def extra_repr(self):
        return (f"d_head={self.d_head}, n_features={self.n_features}, coupling={self.coupling!r}, "
                f"causal={self.causal}, redraw_every={self.redraw_every}, frozen={self._frozen}")

    def _check(self, q, k, v):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.ndim < 2:
                raise ValueError(f"{name} must have shape (..., L, d), got {tuple(t.shape)}")
        if q.shape[-1] != self.d_head or k.shape[-1] != self.d_head:
            raise ValueError(f"q and k must have last dimension d_head = {self.d_head}, "
                             f"got {tuple(q.shape)} and {tuple(k.shape)}")
        if q.shape != k.shape:
            raise ValueError(f"q and k must have the same shape, got {tuple(q.shape)} and {tuple(k.shape)}")
        if v.shape[:-1] != q.shape[:-1]:
            raise ValueError(f"v must have shape (..., L, d_v) with (..., L) = {tuple(q.shape[:-1])}, "
                             f"got {tuple(v.shape)}")
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not torch.isfinite(t).all():
                raise ValueError(f"{name} must be finite (found NaN or inf)")

    def forward(self, q, k, v):
        """Attention output (..., L, d_v) for q, k (..., L, d) and v (..., L, d_v)."""
        self._check(q, k, v)
        if self.training and not self._frozen and self.redraw_every is not None:
            if self._calls >= self.redraw_every:
                self.redraw()
            self._calls += 1
        w = self.weights
        s = math.sqrt(self.scale)
        q, k, v = q.to(w.dtype), k.to(w.dtype), v.to(w.dtype)
        lq, lk = _logits(s * q, w), _logits(s * k, w)
        if self.causal:
            return _causal(lq, lk, v, self.chunk)
        return _bidirectional(lq, lk, v)
