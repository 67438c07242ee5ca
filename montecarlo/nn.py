r"""SimRF-Performer attention as a torch ``nn.Module`` (Sec. 5.4).

:class:`PRFAttention` computes FAVOR+-style linear attention with the softmax
kernel estimated by positive random features of any coupling (the
SimRFs-Performer of Sec. 5.4 with ``coupling="simplex"``), bidirectional or
causal, self- or cross-attention, with an optional key-padding mask, with the
same log-space stabilisation as the numpy reference
:func:`montecarlo.experiments.attention.prf_attention` (see that module for
the formulas): per-sequence, per-feature key offsets and per-row query
offsets that cancel exactly, no global maximum across batch items or heads,
and no ``eps`` inside the features (see :class:`PRFAttention`, Notes, for what
an ``eps`` does to the error).  The offsets are detached from the graph;
since the output does not depend on them, the gradients are unchanged.

Precision: the features are computed in float32 (float64 when the inputs or
the projections are float64) whatever the input dtype, with autocast
disabled inside; the output comes back in the input dtype.  bfloat16 and
float16 inputs are therefore welcome, and ``model.to(torch.bfloat16)`` keeps
the projections in float32 (a bfloat16-rounded matrix would no longer be a
draw of the coupling).

The random projections live in the buffer ``weights`` (m, d), shared by
queries and keys and saved with the ``state_dict``.  They are drawn by
:func:`montecarlo.sample_weights` from ``generator`` (a ``torch.Generator``
the caller owns and seeds) or, without one, from a numpy generator seeded by
``seed``:

* :meth:`PRFAttention.redraw` draws fresh features explicitly;
* ``redraw_every=k`` also redraws automatically every k forward passes in
  training mode (the Performer's feature redrawing);
* :meth:`PRFAttention.freeze` (or ``eval()``, which never redraws) keeps the
  features fixed, so that evaluation is deterministic.

``torch.compile`` works (the input checks and the per-sequence choice of the
causal path are data-dependent and run between compiled graphs);
``torch.jit.script`` does not (TorchScript is deprecated upstream; use
``torch.compile``).

For performer-pytorch's ``FastAttention`` see
:mod:`montecarlo.experiments.performer`.  This module needs torch; it is not
imported by :mod:`montecarlo.experiments`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

import montecarlo as mc

from montecarlo._checks import check_bool

from ._common import check_coupling, check_int, check_positive_float, check_rng

#: dtypes of the projections (and of the feature computations); other accepted dtypes store float32.
STORAGE_DTYPES = (torch.float32, torch.float64)
#: Input dtypes the module accepts (features computed in float32 for the half types).
INPUT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _logits(x, w):
    """Softmax-kernel PRF log-features (..., L, m)."""
    m = w.shape[0]
    return x @ w.transpose(0, 1) - 0.5 * (x * x).sum(-1, keepdim=True) - 0.5 * math.log(m)


def _finite_or(x, fallback):
    """``x`` where finite, else ``fallback`` (offsets of sequences or rows that see no key)."""
    return torch.where(torch.isfinite(x), x, fallback)


def _ratio(num, den, seen):
    """num / den on rows that see a key, 0 (with zero gradient) on rows that see none.

    A row that sees a key has a denominator >= 1 by construction; if it were 0 anyway (an underflow), the
    NaN of 0/0 shows it: only the rows known to see nothing are set to 0.
    """
    return torch.where(seen, num / torch.where(seen, den, torch.ones_like(den)), torch.zeros_like(num))


def _bidirectional(lq, lk, v):
    """Stabilised bidirectional form; masked keys have ``lk = -inf``."""
    o = lk.amax(-2, keepdim=True).detach()
    o = _finite_or(o, torch.zeros_like(o))  # a sequence whose keys are all masked
    ek = torch.exp(lk - o)
    S = ek.transpose(-1, -2) @ v
    z = ek.sum(-2)
    p = lq + o
    r = (p + torch.log(z).unsqueeze(-2)).amax(-1, keepdim=True).detach()
    seen = torch.isfinite(r)  # -inf only when every key of the sequence is masked
    r = torch.where(seen, r, p.detach().amax(-1, keepdim=True))
    eq = torch.exp(p - r)
    return _ratio(eq @ S, eq @ z.unsqueeze(-1), seen)


#: Fast-path threshold of the causal scan per compute dtype (see ``attention.CAUSAL_GAP``): exp(gap) must
#: stay far from overflow and e^-(range - gap) far below the dtype's precision.
CAUSAL_GAP = {torch.float64: 300.0, torch.float32: 30.0}


def _causal(lq, lk, v, chunk):
    """Chunked causal scan (see :mod:`montecarlo.experiments.attention`); each sequence of the flattened
    batch chooses the fast or the log-space chunk path on its own.  Masked keys have ``lk = -inf``: they
    add nothing, and a query that sees no key gets 0."""
    L, m = lq.shape[-2], lq.shape[-1]
    lead = tuple(torch.broadcast_shapes(lq.shape[:-2], lk.shape[:-2], v.shape[:-2]))
    dv = v.shape[-1]
    n = max(1, math.prod(lead))
    lq = lq.expand(lead + (L, m)).reshape(n, L, m)
    lk = lk.expand(lead + (L, m)).reshape(n, L, m)
    v = v.expand(lead + (L, dv)).reshape(n, L, dv)
    chunk = max(1, min(chunk, math.isqrt(max(1, (1 << 22) // (m * n)))))
    gap_max = CAUSAL_GAP[lq.dtype]
    very_negative = torch.finfo(lq.dtype).min / 4  # finite stand-in for -inf inside a log-sum-exp
    outs = []
    o = S = z = None
    tri = torch.ones(chunk, chunk, dtype=torch.bool, device=lq.device).tril()
    for lo in range(0, L, chunk):  # loop over chunks of the sequence
        hi = min(L, lo + chunk)
        b = hi - lo
        q, k, vc = lq[:, lo:hi, :], lk[:, lo:hi, :], v[:, lo:hi, :]
        kmax = k.amax(1).detach()
        o_new = kmax if o is None else torch.maximum(o, kmax)  # -inf until a sequence sees a key
        on = _finite_or(o_new, torch.zeros_like(o_new))
        lmass = torch.cummax(k.detach(), dim=1).values  # largest causal term per feature (see attention.py)
        if o is not None:
            lmass = torch.maximum(lmass, (o + torch.log(z.detach())).unsqueeze(1))
        seen = torch.isfinite(lmass[..., :1])  # (n, b, 1): the query sees at least one key
        qd = q.detach()
        r = torch.where(seen, (qd + lmass).amax(-1, keepdim=True), (qd + on.unsqueeze(1)).amax(-1, keepdim=True))
        gap = torch.where(seen, on.unsqueeze(1) - lmass, torch.full_like(lmass, -math.inf))
        slow = torch.nonzero(gap.amax(dim=(1, 2)) > gap_max).flatten()
        ek = torch.exp(k - on.unsqueeze(1))
        eq = torch.exp(torch.clamp(q + on.unsqueeze(1) - r, max=gap_max))  # clamp touches slow rows only
        a = (eq @ ek.transpose(1, 2)).masked_fill(~tri[:b, :b], 0.0)
        num, den = a @ vc, a.sum(-1, keepdim=True)
        if o is not None:
            shrink = torch.exp(o - on)  # <= 1; 0 while nothing was seen (o = -inf)
            S_new, z_new = S * shrink.unsqueeze(-1), z * shrink
            num = num + eq @ S_new
            den = den + eq @ z_new.unsqueeze(-1)
        if slow.numel():  # a later key dominates an earlier query's features: log-space scores
            qs, ks, rs = q[slow], k[slow], r[slow]
            ks = _finite_or(ks, torch.full_like(ks, very_negative))  # masked keys: no NaN gradient
            la = torch.logsumexp(qs.unsqueeze(2) + ks.unsqueeze(1), dim=-1)
            a_s = torch.exp(la.masked_fill(~tri[:b, :b], float("-inf")) - rs)
            num_s, den_s = a_s @ vc[slow], a_s.sum(-1, keepdim=True)
            if o is not None:
                eq_s = torch.exp(qs + o[slow].unsqueeze(1) - rs)
                num_s = num_s + eq_s @ S[slow]
                den_s = den_s + eq_s @ z[slow].unsqueeze(-1)
            num = num.index_copy(0, slow, num_s)
            den = den.index_copy(0, slow, den_s)
        outs.append(_ratio(num, den, seen))
        S_add, z_add = ek.transpose(1, 2) @ vc, ek.sum(1)
        S, z = (S_add, z_add) if o is None else (S_new + S_add, z_new + z_add)
        o = o_new
    return torch.cat(outs, dim=1).reshape(lead + (L, dv))


def _check_generator(generator):
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be None or a torch.Generator, got {type(generator).__name__}")
    return generator


def _storage_dtype(dtype, name="dtype"):
    if dtype not in INPUT_DTYPES:
        raise ValueError(f"{name} must be one of torch.float32, torch.float64, torch.bfloat16, torch.float16, "
                         f"got {dtype!r}")
    return dtype if dtype in STORAGE_DTYPES else torch.float32


def draw_projections(coupling, d, m, *, generator=None, rng=None, device=None, dtype=torch.float32):
    """(m, d) projections of a coupling as a torch tensor, drawn from a torch or numpy generator.

    Parameters
    ----------
    coupling : str
        Any coupling of :data:`montecarlo.COUPLINGS`.
    d, m : int
        Dimensionality and number of projections.
    generator : torch.Generator, optional
        Drawn from on the generator's own device (then moved to ``device``).
    rng : None, int or numpy.random.Generator
        Used when ``generator`` is None (torch's generator is seeded from it).
    device : torch device, optional
        Where the result lives (default: the generator's device, else CPU).
    dtype : torch.float32 or torch.float64
        dtype of the result.

    Returns
    -------
    torch.Tensor of shape (m, d)
        Rows exactly :math:`\\mathcal N(0, I_d)` for the exact couplings.
    """
    _check_generator(generator)
    if generator is not None:
        w = mc.sample_weights(coupling, d, m, rng=generator, xp="torch", device=generator.device, dtype=dtype)
        return w if device is None else w.to(device)
    return mc.sample_weights(coupling, d, m, rng=rng, xp="torch", device=device, dtype=dtype)


class PRFAttention(nn.Module):
    r"""Linear softmax attention with PRFs of a chosen coupling (SimRFs-Performer, Sec. 5.4).

    Parameters
    ----------
    d_head : int
        Query/key dimension d.
    n_features : int
        Number m of random features (the paper's Performers: 130).
    coupling : str
        One of :data:`montecarlo.COUPLINGS` (default ``'simplex'``), looked up
        in :mod:`theory.registry`.
    causal : bool
        Prefix-sum (autoregressive) attention: query i sees keys j <= i
        (needs as many queries as keys).
    scale : float, optional
        s in :math:`e^{s q^\top k}` (default :math:`1/\sqrt d`).
    seed : None, int, numpy.random.Generator or SeedSequence
        Seed of the feature draws (initial and every redraw) when no
        ``generator`` is given.
    generator : torch.Generator, optional
        The generator every draw uses (the caller seeds and owns it; each
        draw advances it).  A CPU generator works for a module on any device.
    redraw_every : int, optional
        In training mode and unless frozen, redraw the features every this
        many forward passes.
    chunk : int
        Chunk length of the causal prefix sums.
    dtype : torch dtype
        float32 (default) or float64: the dtype of the projections and of the
        feature computations.  bfloat16 and float16 are accepted and store
        float32 (features are always computed in at least float32).
    device : torch device, optional
        Where the projections live (inputs must be on the same device).

    Notes
    -----
    **Why performer-pytorch's FastAttention shows a smaller error.**
    performer-pytorch's ``softmax_kernel`` adds ``eps = 1e-4`` to every
    feature after subtracting a per-row maximum (queries) and one maximum over
    all keys and features of a sequence (keys).  With ``eps = 0`` and the same
    projection matrix its output equals this module's to float32 rounding
    (measured: identical relative errors to 3 digits).  The ``eps`` is a
    data-dependent shrinkage towards uniform attention (the mean of V): the
    key features are shifted by :math:`\max_{j,f} w_f^\top k'_j` (13.3 at
    logit std 1, L = 1024, m = 130, :math:`\|k'\|^2 \approx 8.5`) and carry
    the factor :math:`e^{-\|k'\|^2/2}`, so most of them fall below ``eps``:
    99.8% of them (median :math:`2.5\cdot 10^{-8}`) at logit std 1, where
    ``eps`` then carries 98% of the total key mass; 87% (54% of the mass) at
    0.5; 15% (7%) at 0.25.  Relative output error
    against exact softmax attention, L = 1024, d = 64, m = 130, synthetic
    Q, K, V of :func:`~montecarlo.experiments.attention.synthetic_qkv`,
    mean +- standard error over 10 draws of the same matrices in both
    (:func:`montecarlo.experiments.performer.fast_attention_errors`, defaults):

    =========  ==========  ==============  ==============  ==============  ========
    logit std  coupling    this module     FastAttention   FastAttention   mean(V)
                                                           vs mean(V)      vs exact
    =========  ==========  ==============  ==============  ==============  ========
    0.25       orthogonal  0.242 +- 0.014  0.227 +- 0.013  0.286 +- 0.016  0.193
    0.25       simplex     0.223 +- 0.012  0.208 +- 0.011  0.267 +- 0.013  0.193
    0.5        orthogonal  0.540 +- 0.022  0.370 +- 0.011  0.336 +- 0.025  0.368
    0.5        simplex     0.537 +- 0.019  0.374 +- 0.012  0.330 +- 0.032  0.368
    1          orthogonal  0.914 +- 0.026  0.607 +- 0.001  0.040 +- 0.006  0.613
    1          simplex     0.940 +- 0.023  0.608 +- 0.001  0.047 +- 0.008  0.613
    =========  ==========  ==============  ==============  ==============  ========

    At logit std 1 FastAttention's output is within 5% of the mean of V: its
    error is that of uniform attention (bias), not of a better estimate; this
    module's error is the variance of the unbiased PRF estimator (eq.
    ``def_prf``), which the coupling reduces and which shrinks as m grows,
    whereas the shrinkage's bias does not.  At logit std 0.25 the shrinkage
    costs little bias and FastAttention is 6% better; from 0.5 on its error is
    that of uniform attention.  To compare couplings, use the unbiased form.

    Examples
    --------
    >>> att = PRFAttention(64, 130, "simplex", seed=0)
    >>> q = k = v = torch.randn(2, 4, 100, 64)
    >>> att(q, k, v).shape
    torch.Size([2, 4, 100, 64])
    >>> att(q.bfloat16(), k.bfloat16(), v.bfloat16()).dtype
    torch.bfloat16
    """

    def __init__(self, d_head, n_features=130, coupling="simplex", *, causal=False, scale=None, seed=None,
                 generator=None, redraw_every=None, chunk=64, dtype=torch.float32, device=None):
        super().__init__()
        self.d_head = check_int(d_head, "d_head", 1)
        self.n_features = check_int(n_features, "n_features", 1)
        self.coupling = check_coupling(coupling)
        self.causal = check_bool(causal, "causal")
        self.scale = 1.0 / math.sqrt(self.d_head) if scale is None else check_positive_float(scale, "scale")
        self.redraw_every = None if redraw_every is None else check_int(redraw_every, "redraw_every", 1)
        self.chunk = check_int(chunk, "chunk", 1)
        storage = _storage_dtype(dtype)
        if generator is not None and seed is not None:
            raise ValueError("give seed or generator, not both")
        self._generator = _check_generator(generator)
        self._rng = np.random.default_rng(check_rng(seed, "seed"))
        self._frozen = False
        self._calls = 0
        # drawn before anything is allocated: sample_weights bounds the memory that n_features x d_head asks for
        self.register_buffer("weights", draw_projections(self.coupling, self.d_head, self.n_features,
                                                         generator=self._generator, rng=self._rng, device=device,
                                                         dtype=storage))

    @classmethod
    def from_weights(cls, weights, **kwargs):
        """A module with the given (m, d) projections (e.g. shared with numpy code), frozen."""
        if not isinstance(weights, torch.Tensor):
            weights = torch.as_tensor(np.asarray(weights))
        if weights.ndim != 2:
            raise ValueError(f"weights must be an (m, d) tensor, got shape {tuple(weights.shape)}")
        if not weights.dtype.is_floating_point:
            raise ValueError(f"weights must hold real floating numbers, got dtype {weights.dtype}")
        kwargs.setdefault("dtype", weights.dtype if weights.dtype in STORAGE_DTYPES else torch.float32)
        mod = cls(weights.shape[1], weights.shape[0], device=weights.device, **kwargs)
        with torch.no_grad():
            mod.weights.copy_(weights)
        mod.freeze()
        return mod

    @torch.no_grad()
    def redraw(self):
        """Draw fresh projections of the module's coupling (in place, on its device and dtype)."""
        w = draw_projections(self.coupling, self.d_head, self.n_features, generator=self._generator,
                             rng=self._rng, device=self.weights.device, dtype=self.weights.dtype)
        self.weights.copy_(w)
        self._calls = 0
        return self

    def _apply(self, fn, *args, **kwargs):
        """``.to()``, ``.half()``, ``.cuda()``...: the projections follow the device but never drop below
        float32 (a bfloat16 copy of a simplex block is not a simplex block)."""
        before = self.weights
        out = super()._apply(fn, *args, **kwargs)
        after = self._buffers["weights"]
        if after is not None and after.dtype not in STORAGE_DTYPES:
            self._buffers["weights"] = before.to(device=after.device)
        return out

    def freeze(self):
        """Keep the current features: no automatic redraws (explicit :meth:`redraw` still works)."""
        self._frozen = True
        return self

    def unfreeze(self):
        """Allow the automatic redraws of ``redraw_every`` again."""
        self._frozen = False
        return self

    @property
    def frozen(self):
        """Whether automatic redraws are off."""
        return self._frozen

    def extra_repr(self):
        return (f"d_head={self.d_head}, n_features={self.n_features}, coupling={self.coupling!r}, "
                f"causal={self.causal}, redraw_every={self.redraw_every}, frozen={self._frozen}")

    def _check(self, q, k, v, key_padding_mask):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.ndim < 2:
                raise ValueError(f"{name} must have shape (..., L, d), got {tuple(t.shape)}")
            if t.dtype not in INPUT_DTYPES:
                raise TypeError(f"{name} must be float32, float64, bfloat16 or float16, got {t.dtype}")
            if t.device != self.weights.device:
                raise ValueError(f"{name} is on {t.device} but the module is on {self.weights.device} "
                                 "(move the module with .to(device))")
        if not (q.dtype == k.dtype == v.dtype):
            raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
        if q.shape[-1] != self.d_head or k.shape[-1] != self.d_head:
            raise ValueError(f"q and k must have last dimension d_head = {self.d_head}, "
                             f"got {tuple(q.shape)} and {tuple(k.shape)}")
        if v.shape[-2] != k.shape[-2]:
            raise ValueError(f"v must have shape (..., L_k, d_v) with L_k = {k.shape[-2]} keys, got {tuple(v.shape)}")
        if self.causal and q.shape[-2] != k.shape[-2]:
            raise ValueError(f"causal attention needs as many queries as keys, got {q.shape[-2]} and {k.shape[-2]}")
        shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
        if key_padding_mask is not None:
            if not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.dtype != torch.bool:
                raise TypeError("key_padding_mask must be a bool tensor (..., L_k), True at padded keys, got "
                                f"{getattr(key_padding_mask, 'dtype', type(key_padding_mask).__name__)}")
            if key_padding_mask.ndim < 1 or key_padding_mask.shape[-1] != k.shape[-2]:
                raise ValueError(f"key_padding_mask must have shape (..., L_k) with L_k = {k.shape[-2]}, "
                                 f"got {tuple(key_padding_mask.shape)}")
            if key_padding_mask.device != k.device:
                raise ValueError(f"key_padding_mask is on {key_padding_mask.device}, k on {k.device}")
            shapes.append(key_padding_mask.shape[:-1])
        try:
            torch.broadcast_shapes(*shapes)
        except RuntimeError:
            raise ValueError("the leading (batch, head) shapes of q, k, v and key_padding_mask must broadcast, "
                             f"got {[tuple(s) for s in shapes]}") from None
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not torch.isfinite(t).all():
                raise ValueError(f"{name} must be finite (found NaN or inf)")

    def forward(self, q, k, v, key_padding_mask=None):
        """Attention output for queries q (..., L_q, d), keys k (..., L_k, d) and values v (..., L_k, d_v).

        Parameters
        ----------
        q, k, v : torch.Tensor
            One dtype (float32, float64, bfloat16 or float16); leading shapes
            broadcast.  Cross-attention: L_q may differ from L_k
            (bidirectional only).
        key_padding_mask : torch.Tensor of bool, optional
            Shape (..., L_k), broadcasting against k's leading shape; True
            marks padded keys, which are ignored (the convention of
            ``torch.nn.MultiheadAttention``).  A query that sees no key (all
            keys masked, or in the causal case all keys up to its position)
            gets output 0 and zero gradient: it is padding itself.

        Returns
        -------
        torch.Tensor (..., L_q, d_v)
            In the input dtype.
        """
        self._check(q, k, v, key_padding_mask)
        if self.training and not self._frozen and self.redraw_every is not None:
            if self._calls >= self.redraw_every:
                self.redraw()
            self._calls += 1
        w = self.weights
        out_dtype = q.dtype
        compute = torch.float64 if torch.float64 in (w.dtype, q.dtype) else torch.float32
        with torch.autocast(device_type=q.device.type, enabled=False):
            w = w.to(compute)
            s = math.sqrt(self.scale)
            q, k, v = q.to(compute), k.to(compute), v.to(compute)
            lq, lk = _logits(s * q, w), _logits(s * k, w)
            if key_padding_mask is not None:
                lk = torch.where(key_padding_mask.unsqueeze(-1), torch.full_like(lk, -math.inf), lk)
            out = _causal(lq, lk, v, self.chunk) if self.causal else _bidirectional(lq, lk, v)
        return out.to(out_dtype)
