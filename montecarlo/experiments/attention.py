r"""SimRF-Performer attention: softmax attention with the kernel estimated by PRFs (Sec. 5.4).

The estimator, its numerical stabilisation and the causal form: :ref:`guide-montecarlo.experiments.attention`
(``docs/guide/experiments.rst``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

import montecarlo as mc
from theory import feature_kinds as kinds

from ._common import (
    CHUNK_ELEMENTS,
    check_array,
    check_bool,
    check_budget,
    check_int,
    check_positive_float,
    check_real,
    check_rng,
    child_rng,
    chunks,
    coupling_key,
    describe,
    distinct_couplings,
    format_z,
    mm,
    refuse_repeats,
    seed_entropy,
    z_score,
)
from ._plan import SweepPlan
from .sweeps import check_n_jobs, coupling_pairs, draw_blocks, paired_estimates, paired_weights, unit_seed
from .sweeps import warm_up as sweep_warm_up

#: Default chunk length of the causal prefix sums.
CAUSAL_CHUNK = 64
#: Default standard deviation of the logits q.k/sqrt(d) of unrelated tokens in :func:`synthetic_qkv`,
#: :func:`attention_errors` and ``python -m montecarlo.experiments attention`` (one value for all three).
#: At 0.1 PRF attention is accurate (relative output error about 0.06-0.1 at m = 130, d = 64) and the
#: couplings' kernel MSEs decide its error (SimRF < ORF < IID, resolved with 20 draws); at 0.25 the errors
#: are about 0.25 and the ordering needs about 100 draws; from about 0.5 on the errors approach 1 and
#: the couplings stop being distinguishable (:func:`attention_scan`, the ``new_attention_scan`` figure).
DEFAULT_LOGIT_STD = 0.1


def _check_qkv(Q, K, V):
    nd = np.ndim(Q)
    Q = check_array(Q, "Q", nd if nd >= 2 else 2)
    d = Q.shape[-1]
    K = check_array(K, "K", Q.ndim, d, "Q's width")
    if K.shape[:-1] != Q.shape[:-1]:
        raise ValueError(f"K must have the shape of Q (..., L, d) = {Q.shape}, got {K.shape}")
    if V is not None:
        V = check_array(V, "V", Q.ndim)
        if V.shape[:-1] != Q.shape[:-1]:
            raise ValueError(f"V must have shape (..., L, d_v) with (..., L) = {Q.shape[:-1]}, got {V.shape}")
    return Q, K, V


def _scale(scale, d):
    return 1.0 / math.sqrt(d) if scale is None else check_positive_float(scale, "scale")


def softmax_attention(Q, K, V, causal=False, scale=None, return_matrix=False):
    r"""Exact softmax attention, :math:`\mathrm{softmax}(s\,QK^\top)V` (causal: masked to :math:`j \le i`).

    Parameters
    ----------
    Q, K : array (..., L, d)
    V : array (..., L, d_v)
    causal : bool
    scale : float, optional
        s (default :math:`1/\sqrt d`).
    return_matrix : bool
        Also return the (..., L, L) attention matrix.

    Returns
    -------
    out : ndarray (..., L, d_v)
    A : ndarray (..., L, L), if ``return_matrix``
    """
    Q, K, V = _check_qkv(Q, K, V)
    causal = check_bool(causal, "causal")
    return_matrix = check_bool(return_matrix, "return_matrix")
    s = _scale(scale, Q.shape[-1])
    L = Q.shape[-2]
    check_budget(math.prod(Q.shape[:-1]) * L, "the (..., L, L) attention matrix of softmax_attention",
                 "shorten the sequences or split the batch")
    logits = s * mm(Q, np.swapaxes(K, -1, -2))
    if causal:
        L = Q.shape[-2]
        logits = np.where(np.tril(np.ones((L, L), dtype=bool)), logits, -np.inf)
    logits -= logits.max(axis=-1, keepdims=True)
    A = np.exp(logits)
    A /= A.sum(axis=-1, keepdims=True)
    out = mm(A, V)
    return (out, A) if return_matrix else out


def _logits(X, W, kind="prf", params=None, shared=None):
    """Softmax-kernel log-features (..., L, width m) of a positive feature kind (a name with its ``params``, or a
    :class:`montecarlo.FeatureMap`) for X (..., L, d) and W broadcastable (..., m, d), through the feature map
    (one home of each formula).

    ``shared``: a dict that keeps the projections X W^T and squared norms of X for the next kind whose rows are
    W itself (PRFs and OPRFs project on the same rows; SDERFs on transformed ones): every call with one dict
    must pass the same X and W (:func:`_scan_unit`: one dict per draw and side)."""
    fmap = kind if isinstance(kind, mc.FeatureMap) else _feature_map(kind, params, "attention")
    rows, terms = fmap.prepared(W, rows_axis=True)
    if shared is not None and rows is W:
        if not shared:
            shared["proj"], shared["sq"] = mm(X, np.swapaxes(rows, -1, -2)), np.sum(X * X, axis=-1, keepdims=True)
        proj, sq = shared["proj"].copy(), shared["sq"]  # (the map overwrites its projections)
    else:
        proj = mm(X, np.swapaxes(rows, -1, -2))
        sq = np.sum(X * X, axis=-1, keepdims=True)
    return fmap.apply(proj, sq, m=W.shape[-2], d=W.shape[-1], log=True, xp=np, **terms)


def _feature_map(kind, params, where):
    """The feature map of a positive kind estimating the softmax kernel, with its parameters all given (the
    numpy reference does not choose them from the data): :func:`montecarlo.check_kind_params`."""
    kinds.check_kind(kind, "kind", log_space=True, kernel="softmax")
    return mc.FeatureMap(kind, kernel="softmax", where=where, **mc.check_kind_params(kind, params, name="params",
                                                                                      reals=True))


def _check_w(W, d):
    nd = np.ndim(W)  # no conversion here: check_array refuses masked, boolean and complex input
    if nd < 2:
        raise ValueError(f"W must be an array (..., m, d) of projections, got shape {np.shape(W)}")
    return check_array(W, "W", nd, d, "the head dimension")


def _bidirectional(lq, lk, V):
    """Stabilised bidirectional form; overwrites lq and lk (fresh logits of the caller)."""
    o = lk.max(axis=-2, keepdims=True)  # (..., 1, m)
    ek = np.exp(np.subtract(lk, o, out=lk), out=lk)
    S = mm(np.swapaxes(ek, -1, -2), V)  # (..., m, dv)
    z = ek.sum(axis=-2)  # (..., m), >= 1
    p = np.add(lq, o, out=lq)
    r = (p + np.log(z)[..., None, :]).max(axis=-1, keepdims=True)
    eq = np.exp(np.subtract(p, r, out=p), out=p)
    return mm(eq, S) / mm(eq, z[..., None])


def _logsumexp(a, axis):
    mx = a.max(axis=axis, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    return np.log(np.sum(np.exp(a - mx), axis=axis)) + np.squeeze(mx, axis)


def causal_chunk(chunk, m, lead_size, limit=None):
    """Chunk length of the causal scan: at most ``chunk``, and small enough that a within-chunk
    (lead, b, b, m) log-score tensor (the fallback path) holds at most ``limit`` entries."""
    limit = 4 * CHUNK_ELEMENTS if limit is None else limit
    return max(1, min(chunk, math.isqrt(max(1, limit // max(1, m * lead_size)))))


#: Largest log-gap between a chunk's per-feature key offset and a query's causal prefix mass for
#: which the fast within-chunk path is used (float64: exp(300) is far from overflow, and terms lost
#: to underflow are below e^-400 of the mass); larger gaps take the log-space path.
CAUSAL_GAP = 300.0


def _causal(lq, lk, V, chunk):
    L, m = lq.shape[-2], lq.shape[-1]
    lead = np.broadcast_shapes(lq.shape[:-2], V.shape[:-2])
    dv = V.shape[-1]
    n = math.prod(lead)
    # one flat axis of sequences (batch items, heads, draws): each keeps its own offsets and path
    lq = np.broadcast_to(lq, lead + (L, m)).reshape(n, L, m)
    lk = np.broadcast_to(lk, lead + (L, m)).reshape(n, L, m)
    V = np.broadcast_to(V, lead + (L, dv)).reshape(n, L, dv)
    chunk = causal_chunk(chunk, m, n)
    out = np.empty((n, L, dv))
    o = None
    S = np.zeros((n, m, dv))
    z = np.zeros((n, m))
    tri = np.tril(np.ones((chunk, chunk), dtype=bool))
    for lo in range(0, L, chunk):  # a loop over chunks of the sequence
        hi = min(L, lo + chunk)
        b = hi - lo
        q, k, v = lq[:, lo:hi, :], lk[:, lo:hi, :], V[:, lo:hi, :]
        o_new = k.max(axis=1) if o is None else np.maximum(o, k.max(axis=1))
        # the largest single term of each query's causal mass per feature, max_{j <= i} lk_jf (and the
        # carried state), within log(L) of log sum_{j <= i} exp(lk_jf): a running maximum, O(b m)
        lmass = np.maximum.accumulate(k, axis=1)
        if o is not None:
            lmass = np.maximum(lmass, (o + np.log(z))[:, None, :])
        r = (q + lmass).max(axis=2, keepdims=True)  # the denominator is >= exp(r)
        gap = (o_new[:, None, :] - lmass).max(axis=(1, 2))
        slow = np.flatnonzero(gap > CAUSAL_GAP)
        # fast path: one offset per feature for the chunk (exponents <= CAUSAL_GAP where it is used;
        # the clip only touches sequences recomputed below)
        eq = np.exp(np.minimum(q + o_new[:, None, :] - r, CAUSAL_GAP))
        ek = np.exp(k - o_new[:, None, :])
        a = np.matmul(eq, np.swapaxes(ek, 1, 2)) * tri[:b, :b]
        num = np.matmul(a, v)
        den = a.sum(axis=2, keepdims=True)
        if slow.size:
            # a later key of the chunk dominates an earlier query's features: log-space scores
            qs, ks, rs = q[slow], k[slow], r[slow]
            la = _logsumexp(qs[:, :, None, :] + ks[:, None, :, :], axis=-1)  # (s, b, b)
            a_s = np.exp(np.where(tri[:b, :b], la, -np.inf) - rs)
            num[slow] = np.matmul(a_s, v[slow])
            den[slow] = a_s.sum(axis=2, keepdims=True)
            if o is not None:
                eq_s = np.exp(qs + o[slow][:, None, :] - rs)
                num[slow] += np.matmul(eq_s, S[slow])
                den[slow] += np.matmul(eq_s, z[slow][:, :, None])
        if o is not None:
            shrink = np.exp(o - o_new)
            S *= shrink[:, :, None]
            z *= shrink
            fast = np.ones(n, dtype=bool)
            fast[slow] = False
            num[fast] += np.matmul(eq[fast], S[fast])
            den[fast] += np.matmul(eq[fast], z[fast][:, :, None])
        out[:, lo:hi, :] = num / den
        S += np.matmul(np.swapaxes(ek, 1, 2), v)
        z += ek.sum(axis=1)
        o = o_new
    return out.reshape(lead + (L, dv))


def _scaled_logits(Q, K, W, scale, fmap, shared=None):
    """Log-features of the scaled queries and keys (shared by the attention and its matrix); ``shared``: None, or
    two dicts, of the queries and of the keys (:func:`_logits`)."""
    W = _check_w(W, Q.shape[-1])
    try:
        lead = np.broadcast_shapes(Q.shape[:-2], W.shape[:-2])
    except ValueError:
        raise ValueError(f"W's leading axes {W.shape[:-2]} must broadcast against Q's {Q.shape[:-2]} "
                         f"(W is (m, d) or (..., m, d))") from None
    check_budget(math.prod(lead) * Q.shape[-2] * W.shape[-2], f"the (..., L, m) PRF log-features (lead {lead}, "
                 f"L = {Q.shape[-2]}, m = {W.shape[-2]})", "lower m, shorten the sequences or split the batch")
    s = math.sqrt(_scale(scale, Q.shape[-1]))
    shared = (None, None) if shared is None else shared
    return _logits(s * Q, W, fmap, shared=shared[0]), _logits(s * K, W, fmap, shared=shared[1])


def prf_attention(Q, K, V, W, causal=False, scale=None, chunk=CAUSAL_CHUNK, *, kind="prf", params=None):
    r"""FAVOR+-style linear attention with PRFs of projections W (Sec. 5.4), stabilised (module docs).

    Parameters
    ----------
    Q, K : array (..., L, d)
    V : array (..., L, d_v)
    W : array (m, d) or (..., m, d)
        Projections (:func:`montecarlo.sample_weights`), shared by queries and
        keys; leading axes broadcast against those of Q (e.g. (R, 1, m, d)
        evaluates R independent draws on (B, L, d) inputs at once).
    causal : bool
        Prefix sums over :math:`j \le i` (autoregressive attention).
    scale : float, optional
        s in :math:`e^{s q^\top k}` (default :math:`1/\sqrt d`); queries and
        keys are multiplied by :math:`s^{1/2}` before the features.
    chunk : int
        Largest chunk length of the causal prefix sums; it is lowered so that
        the within-chunk log scores (chunk^2 m per sequence) stay bounded.
    kind : str
        A positive feature kind of :mod:`theory.feature_kinds` estimating the
        softmax kernel (``'prf'``, ``'hyperbolic'``, ...): its log-features
        (hook ``log_features``) replace the PRFs of the formulas above.
    params : dict, optional
        The kind's parameters (``record.parameters``), all of them (e.g.
        ``{"A": -0.1}`` for ``'oprf'``); :class:`montecarlo.nn.PRFAttention`
        can choose them from the data.

    Returns
    -------
    ndarray (..., L, d_v)
    """
    Q, K, V = _check_qkv(Q, K, V)
    causal = check_bool(causal, "causal")
    chunk = check_int(chunk, "chunk", 1)
    fmap = _feature_map(kind, params, "prf_attention")
    lq, lk = _scaled_logits(Q, K, W, scale, fmap)
    if not causal:
        return _bidirectional(lq, lk, V)
    return _causal(lq, lk, V, chunk)


def prf_attention_matrix(Q, K, W, causal=False, scale=None, *, kind="prf", params=None):
    r"""The implicit (..., L, L) attention matrix :math:`\phi(q'_i)^\top\phi(k'_j)/\sum_l\phi(q'_i)^\top\phi(k'_l)`.

    O(L^2 m): for measuring approximation error only (the attention itself
    never forms it).  Stabilised with the per-feature key offsets and
    per-row query offsets of the module docs; in the causal case the offsets
    are those of the whole sequence (rows are then renormalised over
    :math:`j \le i`).

    Parameters
    ----------
    Q, K : array (..., L, d)
    W : array (m, d) or (..., m, d)
    causal : bool
    scale : float, optional
    kind, params
        The feature kind and its parameters (:func:`prf_attention`).

    Returns
    -------
    ndarray (..., L, L)
    """
    Q, K, _ = _check_qkv(Q, K, None)
    causal = check_bool(causal, "causal")
    fmap = _feature_map(kind, params, "prf_attention_matrix")
    check_budget(math.prod(Q.shape[:-1]) * Q.shape[-2], "the (..., L, L) matrix of prf_attention_matrix",
                 "shorten the sequences or split the batch")
    lq, lk = _scaled_logits(Q, K, W, scale, fmap)
    o = lk.max(axis=-2, keepdims=True)
    ek = np.exp(lk - o)
    p = lq + o
    z = ek.sum(axis=-2)
    p -= (p + np.log(z)[..., None, :]).max(axis=-1, keepdims=True)
    A = mm(np.exp(p), np.swapaxes(ek, -1, -2))
    if causal:
        L = A.shape[-1]
        A = np.where(np.tril(np.ones((L, L), dtype=bool)), A, 0.0)
    A /= A.sum(axis=-1, keepdims=True)
    return A


# ---------------------------------------------------------------------------
# The attention-approximation experiment


def synthetic_qkv(n_seq, d_head=64, rng=0, *, batch=(), logit_std=DEFAULT_LOGIT_STD, n_clusters=8, d_model=256):
    r"""Transformer-like queries, keys and values for the attention experiment.

    Tokens :math:`h_i = c_{z_i} + \epsilon_i \in \mathbb R^{D}` (``n_clusters``
    Gaussian cluster centres :math:`c \sim \mathcal N(0, I_D)`, uniform cluster
    labels, :math:`\epsilon \sim \mathcal N(0, I_D)`), layer-normalised (zero
    mean, unit variance per token), then projected by Gaussian
    :math:`W_Q, W_K, W_V \in \mathbb R^{D\times d}` with entries
    :math:`\mathcal N(0, 1/D)`; queries and keys are multiplied by
    :math:`\sqrt{\texttt{logit\_std}}`, so that the logits :math:`q^\top k/\sqrt d`
    of unrelated tokens have standard deviation about ``logit_std``, while
    tokens of one cluster attend to each other more (structured attention).

    Parameters
    ----------
    n_seq : int
        Sequence length L.
    d_head : int
        Head dimension d (the paper's Performers: 64).
    rng : None, int >= 0, numpy.random.Generator or SeedSequence
    batch : tuple of int
        Leading batch shape (e.g. (B, H)).
    logit_std : float > 0
        Default :data:`DEFAULT_LOGIT_STD`.
    n_clusters : int
    d_model : int
        D.

    Returns
    -------
    Q, K, V : ndarrays of shape ``(*batch, L, d)``
    """
    n_seq = check_int(n_seq, "n_seq", 1)
    d_head = check_int(d_head, "d_head", 1)
    logit_std = check_positive_float(logit_std, "logit_std")
    n_clusters = check_int(n_clusters, "n_clusters", 1)
    d_model = check_int(d_model, "d_model", 2)
    if not isinstance(batch, tuple):
        raise TypeError(f"batch must be a tuple of integers >= 1, got {describe(batch)}")
    batch = tuple(check_int(b, "batch", 1) for b in batch)
    check_budget(math.prod(batch) * n_seq * max(d_model, 3 * d_head), "synthetic_qkv",
                 "lower n_seq, d_model or the batch")
    g = np.random.default_rng(check_rng(rng, "rng"))
    centres = g.standard_normal(batch + (n_clusters, d_model))
    labels = g.integers(0, n_clusters, batch + (n_seq,))
    h = np.take_along_axis(centres, labels[..., None], axis=-2) + g.standard_normal(batch + (n_seq, d_model))
    h -= h.mean(axis=-1, keepdims=True)
    h /= h.std(axis=-1, keepdims=True)
    wq, wk, wv = (g.standard_normal((3, d_model, d_head)) / math.sqrt(d_model))
    a = math.sqrt(logit_std)
    return a * (h @ wq), a * (h @ wk), h @ wv


def rel_error(approx, exact, axes):
    r"""Relative Frobenius error :math:`\|a - e\|_F / \|e\|_F` over ``axes`` (broadcasting the leading axes)."""
    return np.sqrt(np.sum((approx - exact) ** 2, axis=axes) / np.sum(exact ** 2, axis=axes))


_rel_error = rel_error  # the former private name, kept for the experiment modules that still use it


@dataclass(frozen=True)
class AttentionErrors:
    r"""Attention approximation errors per coupling, sequence length and m.

    Attributes
    ----------
    couplings : tuple of str
    seq_lens, m_values : tuple of int
    output_mean, output_se : dict
        (coupling, L, m) -> relative Frobenius error of the attention output
        :math:`\|\widehat{\mathrm{Att}} - \mathrm{Att}\|_F/\|\mathrm{Att}\|_F`:
        mean and standard error over draws.
    matrix_mean, matrix_se : dict
        The same for the attention matrix (only where computed).
    n_draws : int
    causal : bool
    logit_std : float or None
        The logit scale of the synthetic data; None when the caller gave the data
        (``attention_errors(data=...)``: their scale is theirs, not a setting).
    """

    couplings: tuple
    seq_lens: tuple
    m_values: tuple
    output_mean: dict
    output_se: dict
    matrix_mean: dict
    matrix_se: dict
    n_draws: int
    causal: bool
    logit_std: float | None

    def format(self):
        """Plain-text table, headed by the settings (logit scale or the caller's data, direction, draws)."""
        source = ("the caller's (Q, K, V) data (no synthetic logit std)" if self.logit_std is None else
                  f"logit std {self.logit_std:g} (q.k / sqrt(d) of unrelated tokens)")
        lines = [f"{source}, "
                 f"{'causal' if self.causal else 'bidirectional'}, {self.n_draws} draws per cell",
                 "L | m | " + " | ".join(f"{c} output" for c in self.couplings)
                 + (" | " + " | ".join(f"{c} matrix" for c in self.couplings) if self.matrix_mean else "")]
        for L in self.seq_lens:
            for m in self.m_values:
                cells = [f"{self.output_mean[c, L, m]:.4f}+-{self.output_se[c, L, m]:.4f}" for c in self.couplings]
                if self.matrix_mean:
                    cells += [f"{self.matrix_mean[c, L, m]:.4f}+-{self.matrix_se[c, L, m]:.4f}"
                              if (c, L, m) in self.matrix_mean else "-" for c in self.couplings]
                lines.append(f"{L} | {m} | " + " | ".join(cells))
        return "\n".join(lines)


def _iterable(values, name):
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of integers >= 1, got {describe(values)}")
    return values


def attention_errors(couplings=("iid", "orthogonal", "simplex"), seq_lens=(256, 1024, 4096),
                     m_values=(16, 64, 130, 256), n_draws=20, rng=0, *, d_head=None, causal=False,
                     logit_std=None, data_rng=0, matrix_max_len=1024, data=None, progress=None):
    r"""Error of PRF attention vs exact softmax attention, per coupling (Sec. 5.4 mechanism).

    For each sequence length L the data are the first L tokens of one
    :func:`synthetic_qkv` draw (or of ``data``); for each (coupling, m) the
    same data see ``n_draws`` independent feature draws.

    Parameters
    ----------
    couplings : sequence of str
    seq_lens : sequence of int
    m_values : sequence of int
        Numbers of features (the paper's Performers: m = 130).
    n_draws : int >= 2
    rng : seed of the feature draws (one stream per coupling and m)
    d_head : int >= 1, optional
        Width of the synthetic data (None: 64).  With ``data``: None or the data's width
        (another value is a ValueError naming d_head).
    causal : bool
    logit_std : float > 0, optional
        Passed to :func:`synthetic_qkv` (None: :data:`DEFAULT_LOGIT_STD`, also the command
        line's default).  It describes synthetic data only: with ``data`` it must be None
        (ValueError naming logit_std otherwise), and the result records ``logit_std=None``.
    data_rng : seed of the synthetic data (not used with ``data``)
    matrix_max_len : int >= 0
        The O(L^2) attention-matrix error is computed for L up to this.
    data : tuple (Q, K, V) of arrays (L_max, d), optional
        Use these instead of synthetic data (e.g. activations of a trained model).
    progress : callable, optional
        Called with a one-line message after each (L, coupling).

    Returns
    -------
    AttentionErrors
    """
    couplings = distinct_couplings(couplings)
    seq_lens = tuple(check_int(L, "seq_lens", 1) for L in _iterable(seq_lens, "seq_lens"))
    m_values = tuple(check_int(m, "m_values", 1) for m in _iterable(m_values, "m_values"))
    n_draws = check_int(n_draws, "n_draws", 2)
    check_budget(n_draws, "the per-draw errors", "lower n_draws")
    causal = check_bool(causal, "causal")
    if logit_std is not None:
        logit_std = check_positive_float(logit_std, "logit_std")
        if data is not None:
            raise ValueError(f"logit_std must be None when data is given (it sets the scale of synthetic data; "
                             f"the caller's data have their own), got {logit_std:g}")
    if d_head is not None:
        d_head = check_int(d_head, "d_head", 1)
    matrix_max_len = check_int(matrix_max_len, "matrix_max_len", 0)
    if not seq_lens or not m_values:
        raise ValueError("seq_lens and m_values must not be empty")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a callable taking one string, got {describe(progress)}")
    data_rng = check_rng(data_rng, "data_rng")
    if data is None:
        logit_std = DEFAULT_LOGIT_STD if logit_std is None else logit_std
        Q, K, V = synthetic_qkv(max(seq_lens), 64 if d_head is None else d_head, data_rng, logit_std=logit_std)
    else:
        if not isinstance(data, (tuple, list)) or len(data) != 3:
            raise TypeError(f"data must be a tuple (Q, K, V) of arrays (L, d), got {describe(data)}")
        Q, K, V = _check_qkv(*data)
        if Q.ndim != 2 or Q.shape[0] < max(seq_lens):
            raise ValueError(f"data must be (Q, K, V) of shape (L, d) with L >= {max(seq_lens)}, got {Q.shape}")
        if d_head is not None and d_head != Q.shape[-1]:
            raise ValueError(f"d_head must be None or the data's width {Q.shape[-1]} when data is given, got {d_head}")
    d = Q.shape[-1]
    entropy = seed_entropy(rng)
    out_mean, out_se, mat_mean, mat_se = {}, {}, {}, {}
    for L in seq_lens:
        q, k, v = Q[:L], K[:L], V[:L]
        want_matrix = L <= matrix_max_len
        if want_matrix:
            exact, A = softmax_attention(q, k, v, causal, return_matrix=True)
        else:
            exact = softmax_attention(q, k, v, causal)
        for c in couplings:
            t0 = time.perf_counter()
            for m in m_values:
                gen = child_rng(entropy, coupling_key(c), m)
                e = np.empty(n_draws)
                em = np.empty(n_draws)
                per = max(1, (4 if causal else 1) * CHUNK_ELEMENTS // (L * m))
                for sl in chunks(n_draws, per):  # draws made and used chunk by chunk (bounded memory)
                    W = mc.sample_weights(c, d, m, rng=gen, n_draws=sl.stop - sl.start)
                    e[sl] = rel_error(prf_attention(q, k, v, W, causal), exact[None], (-2, -1))
                    if want_matrix:  # a loop over draws (L^2 memory each)
                        em[sl] = [rel_error(prf_attention_matrix(q, k, w, causal), A, (-2, -1)) for w in W]
                out_mean[c, L, m], out_se[c, L, m] = float(e.mean()), float(e.std(ddof=1) / math.sqrt(n_draws))
                if want_matrix:
                    mat_mean[c, L, m] = float(em.mean())
                    mat_se[c, L, m] = float(em.std(ddof=1) / math.sqrt(n_draws))
            if progress:
                progress(f"attention L = {L}: {c} ({time.perf_counter() - t0:.1f} s)")
    return AttentionErrors(couplings, seq_lens, m_values, out_mean, out_se, mat_mean, mat_se, n_draws, causal,
                           None if logit_std is None else float(logit_std))


# ---------------------------------------------------------------------------
# Uniform attention and FAVOR# (SDERF) attention: the scan's baseline and its anisotropic kind


def uniform_attention(V, causal=False):
    r"""Uniform attention, every query's weights equal: each output row is the mean of V
    (causal: the mean of :math:`v_1, \dots, v_i`).

    The baseline that a random-feature attention has to beat: it is exact softmax attention at
    logit scale 0, and what a PRF estimate degenerates to when its features are dominated by
    noise.

    Parameters
    ----------
    V : array (..., L, d_v)
    causal : bool

    Returns
    -------
    ndarray (..., L, d_v)
    """
    nd = np.ndim(V)
    V = check_array(V, "V", nd if nd >= 2 else 2)
    causal = check_bool(causal, "causal")
    if not causal:
        return np.broadcast_to(V.mean(axis=-2, keepdims=True), V.shape).copy()
    L = V.shape[-2]
    return np.cumsum(V, axis=-2) / np.arange(1, L + 1)[:, None]


def sderf_attention(Q, K, V, W, a, Q_rot=None, causal=False, scale=None, chunk=CAUSAL_CHUNK):
    r"""Linear attention with FAVOR#'s symmetric dense-exponential features (SDERFs), stabilised.

    The features are those of the feature kind ``'sderf'`` (:func:`montecarlo.sderf.sderf_log_features`,
    softmax kernel, :math:`c = 1/2`) of the scaled queries :math:`q' = s^{1/2}q` and keys :math:`k' = s^{1/2}k`;
    the attention is formed exactly as in :func:`prf_attention` (same offsets, same causal scan).

    Parameters
    ----------
    Q, K : array (..., L, d)
    V : array (..., L, d_v)
    W : array (m, d)
        One draw of projections (any exact coupling), shared by every sequence.
    a : array (d,)
        Eigenvalues of the SDERF matrix A, each < 1/8 (FAVOR#: :func:`montecarlo.sderf.sderf_parameters`
        of the scaled queries and keys).
    Q_rot : array (d, d), optional
        Orthogonal eigenvectors of A (columns); None is the identity.
    causal : bool
    scale : float, optional
        s (default :math:`1/\sqrt d`).
    chunk : int
        Largest chunk of the causal prefix sums (:func:`prf_attention`).

    Returns
    -------
    ndarray (..., L, d_v)
    """
    Q, K, V = _check_qkv(Q, K, V)
    causal = check_bool(causal, "causal")
    chunk = check_int(chunk, "chunk", 1)
    W = _check_w(W, Q.shape[-1])
    if W.ndim != 2:
        raise ValueError(f"W must be one (m, d) draw of projections for sderf_attention, got shape {W.shape}")
    d = Q.shape[-1]
    check_budget(math.prod(Q.shape[:-1]) * W.shape[0], f"the (..., L, m) SDERF log-features (m = {W.shape[0]})",
                 "lower m, shorten the sequences or split the batch")
    params = kinds.hook("sderf", "float_parameters")(d, 0.0, a=a, Q=Q_rot)  # (a, Q) checked against d
    lq, lk = _scaled_logits(Q, K, W, scale, mc.FeatureMap("sderf", kernel="softmax", where="sderf_attention",
                                                          **params))
    return _causal(lq, lk, V, chunk) if causal else _bidirectional(lq, lk, V)


# ---------------------------------------------------------------------------
# The scan over logit scale, sequence length and m: feature kinds, couplings, uniform attention


#: One-sided z above which a difference of mean errors counts as resolved in :func:`attention_scan`
#: (a paired difference of two kinds or couplings, or a kind against uniform attention; false-alarm
#: probability 0.001 per comparison when the means are equal).
DISTINGUISHABLE_Z = 3.09

#: Parameters :func:`attention_scan` chooses from each batch's scaled queries q' and keys k' (the rule of
#: each kind's authors), kind -> description: the record's ``batch_parameters`` rule of the whole batch where the
#: kind has one (FAVOR#'s :func:`montecarlo.sderf.sderf_parameters`), else its ``data_parameters`` rule at
#: :func:`montecarlo.oprf.pair_statistic` (a kind with parameters and neither rule is refused).
DATA_DRIVEN = {
    "oprf": "A = FAVOR++'s optimum A*(s) at s = the mean |q' + k'|^2 / d (montecarlo.oprf.data_optimal_a(q', k'))",
    "sderf": "(a, Q) = montecarlo.sderf.sderf_parameters(q', k'), FAVOR#'s optimum from the eigen-decomposition of "
           "the mean (q' + k')(q' + k')^T",
}


def scan_kinds():
    """The kinds :func:`attention_scan` accepts: the registered positive softmax kinds whose parameters it can
    choose from the data (:data:`DATA_DRIVEN`)."""
    return tuple(k for k in kinds.names(log_space=True, kernel="softmax") if not kinds.get(k).parameters
                 or kinds.get(k).has("batch_parameters") or kinds.get(k).has("data_parameters"))


def _check_scan_kinds(values):
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"kinds must be a sequence of feature kinds from {scan_kinds()}, got {describe(values)}")
    values = tuple(values)
    allowed = scan_kinds()
    for k in values:
        if k not in allowed:
            raise ValueError(f"kinds must be feature kinds from {allowed} (positive softmax kinds whose "
                             f"parameters the scan chooses from the data), got {k!r}")
    if not values:
        raise ValueError(f"kinds must be a non-empty sequence of feature kinds from {allowed}, got {values}")
    refuse_repeats(values, "kinds", "a kind")
    return values


def data_parameters(kind, Q, K, scale=None):
    """The parameters of ``kind`` chosen from queries Q (L, d) and keys K (L, d), scaled by
    :math:`s^{1/2}` (:data:`DATA_DRIVEN`): ``{}`` for a kind without parameters, ``{'A': A}`` for OPRFs,
    ``{'a': a, 'Q': Q}`` for SDERFs."""
    from montecarlo.oprf import pair_statistic

    kind = _check_scan_kinds((kind,))[0]
    Q, K, _ = _check_qkv(Q, K, None)
    if Q.ndim != 2:
        raise ValueError(f"Q and K must be one sequence (L, d) each, got shape {Q.shape}")
    s = math.sqrt(_scale(scale, Q.shape[-1]))
    if kinds.get(kind).has("batch_parameters"):  # the kind's rule from the whole batch (sderf: FAVOR#'s (a, Q))
        return kinds.hook(kind, "batch_parameters")(s * Q, s * K)
    if kinds.get(kind).has("data_parameters"):  # the kind's rule (oprf: FAVOR++'s A) from the pairs' statistic
        chosen = kinds.hook(kind, "data_parameters")(np.float64(pair_statistic(s * Q, s * K)), np)
        return {p: float(value) for p, value in chosen.items()}
    return {}


def _parameter_summary(params):
    """The data-driven parameters of a cell as reals: ``'<kind> <name>'`` for a real parameter, ``'<kind> <name>
    min'`` and ``'... max'`` for one real per direction (SDERFs' eigenvalues a); matrices (Q) are not summarised."""
    out = {}
    for kind, chosen in params.items():
        for name, value in chosen.items():
            if np.ndim(value) == 0:
                out[f"{kind} {name}"] = float(value)
            elif np.ndim(value) == 1:
                out[f"{kind} {name} min"], out[f"{kind} {name} max"] = float(np.min(value)), float(np.max(value))
    return out


def _attend(q, k, v, w, kind, params, causal, shared=None):
    """The attention output of one kind for one draw w (m, d) of checked data and parameters (``shared``: the
    projections kept for the other kinds of this draw, :func:`_scaled_logits`)."""
    lq, lk = _scaled_logits(q, k, w, None, mc.FeatureMap(kind, kernel="softmax", where="attention_scan", **params),
                            shared)
    return _causal(lq, lk, v, CAUSAL_CHUNK) if causal else _bidirectional(lq, lk, v)


def _scan_unit(q, k, v, exact, couplings, kinds_, params, m, n, seed, paired, causal):
    """One unit of :func:`attention_scan`: per-draw relative output errors (len(kinds), len(couplings), n) of one
    block of draws in one (logit std, L, m) cell.  Every coupling's draws come from the unit's one seed
    (:func:`~montecarlo.experiments.sweeps.paired_weights`), and every kind uses the same draws."""
    Ws = paired_weights(couplings, q.shape[-1], m, n, seed, paired=paired)
    out = np.empty((len(kinds_), len(couplings), n))
    for ic, c in enumerate(couplings):
        for r in range(n):  # one draw at a time: (L, m) arrays, faster than broadcasting draws through BLAS
            shared = ({}, {})  # the kinds that project on the draw's rows themselves share the products
            for ik, kind in enumerate(kinds_):
                out[ik, ic, r] = rel_error(_attend(q, k, v, Ws[c][r], kind, params[kind], causal, shared), exact,
                                           (-2, -1))
    return out


def _float_key(x):
    """A float's IEEE bits as an int >= 0 (a seed key that does not depend on the float's position in a list)."""
    return int(np.float64(x).view(np.uint64))


@dataclass(frozen=True)
class AttentionScan:
    r"""Attention error over logit scale, sequence length and m, per feature kind and coupling
    (:func:`attention_scan`).

    Attributes
    ----------
    kinds, couplings : tuple of str
    seq_lens : tuple of int
    logit_stds : tuple of float
    m_values : tuple of int
    mean, stderr : dict
        (kind, coupling) -> ndarray (len(logit_stds), len(seq_lens), len(m_values)) of the
        relative output error :math:`\|\widehat{\mathrm{Att}} - \mathrm{Att}\|_F/\|\mathrm{Att}\|_F`
        (mean over draws) and its standard error.
    uniform : ndarray (len(logit_stds), len(seq_lens))
        The relative error of uniform attention (:func:`uniform_attention`), deterministic.
    diff_mean, diff_stderr : dict
        ((kind, coupling), (kind', coupling')) -> ndarray like ``mean``: the mean of the per-draw
        difference of the two errors and its standard error.  Couplings within a kind (every later
        coupling minus every earlier one: SimRF - IID, SimRF - ORF, ...) and kinds within a coupling
        (oprf - prf, sderf - prf, ...).  With ``paired`` draws these are common random numbers, and
        this standard error is the one to judge an ordering by.
    data_params : dict
        name -> ndarray (len(logit_stds), len(seq_lens)): the data-driven parameters per cell
        (``'oprf A'``; ``'sderf a min'`` and ``'sderf a max'``, the extreme eigenvalues of A).
    n_draws : int
    causal, paired : bool
    d_head : int
    """

    kinds: tuple
    couplings: tuple
    seq_lens: tuple
    logit_stds: tuple
    m_values: tuple
    mean: dict
    stderr: dict
    uniform: np.ndarray
    diff_mean: dict
    diff_stderr: dict
    data_params: dict
    n_draws: int
    causal: bool
    paired: bool
    d_head: int

    def z(self, a, b):
        """Paired z-scores of error(a) - error(b), a and b (kind, coupling) pairs (negative: a is more
        accurate); the pair may be given in either order.  NaN (n/a) where the standard error is 0 or
        round-off relative to the two mean errors (:func:`~montecarlo.experiments.runtime.z_score`)."""
        if (a, b) in self.diff_mean or (b, a) in self.diff_mean:
            scale = np.maximum(np.abs(self.mean[a]), np.abs(self.mean[b]))
            if (a, b) in self.diff_mean:
                return z_score(self.diff_mean[a, b], self.diff_stderr[a, b], scale)
            return -z_score(self.diff_mean[b, a], self.diff_stderr[b, a], scale)
        raise ValueError(f"no paired difference of {a} and {b}: pairs are couplings within one kind and kinds "
                         f"within one coupling, of kinds {self.kinds} and couplings {self.couplings}")

    def uniform_z(self, kind, coupling):
        """z-scores of (uniform error - error) / s.e. (positive: the kind beats uniform attention), shaped like
        ``mean``; the uniform error is exact, so the s.e. is the kind's."""
        mean = self.mean[kind, coupling]
        return z_score(self.uniform[:, :, None] - mean, self.stderr[kind, coupling],
                       np.maximum(abs(self.uniform[:, :, None]), abs(mean)))

    def beats_uniform(self, kind, coupling):
        """Bool array like ``mean``: +1 where the kind's error is below uniform attention's
        (:meth:`uniform_z` > :data:`DISTINGUISHABLE_Z`), -1 where above (< -z), 0 where not resolved."""
        zz = self.uniform_z(kind, coupling)
        return np.where(zz > DISTINGUISHABLE_Z, 1, np.where(zz < -DISTINGUISHABLE_Z, -1, 0))

    def format(self):
        """Plain-text table, one row per (logit std, L, m, kind): uniform attention's error, each coupling's
        error (``<`` / ``>``: resolved below / above uniform), and the paired coupling differences with z."""
        pairs = [(a, b) for a, b in coupling_pairs(self.couplings)]
        lines = [f"{'causal' if self.causal else 'bidirectional'}, d = {self.d_head}, {self.n_draws} draws per cell "
                 f"({'paired' if self.paired else 'independent'} draws across couplings; mean +- s.e.; "
                 f"< / >: below / above uniform attention at |z| > {DISTINGUISHABLE_Z})",
                 "logit std | L | m | kind | uniform | " + " | ".join(self.couplings) + " | "
                 + " | ".join(f"{a} - {b} (z)" for a, b in pairs)]
        mark = {1: "<", -1: ">", 0: " "}
        for i, s in enumerate(self.logit_stds):
            for j, L in enumerate(self.seq_lens):
                for l, m in enumerate(self.m_values):
                    for kind in self.kinds:
                        cells = [f"{self.mean[kind, c][i, j, l]:.4f}+-{self.stderr[kind, c][i, j, l]:.4f}"
                                 f"{mark[int(self.beats_uniform(kind, c)[i, j, l])]}" for c in self.couplings]
                        cells += [f"{self.diff_mean[(kind, a), (kind, b)][i, j, l]:+.4f} "
                                  f"({format_z(self.z((kind, a), (kind, b))[i, j, l])})" for a, b in pairs]
                        lines.append(f"{s:g} | {L} | {m} | {kind} | {self.uniform[i, j]:.4f} | " + " | ".join(cells))
        return "\n".join(lines)


def attention_scan(couplings=("iid", "orthogonal", "simplex"), seq_lens=(64, 256, 1024),
                   logit_stds=(0.1, 0.25, 0.5, 1.0, 2.0), m_values=(64, 130, 512), n_draws=20, rng=0, *,
                   kinds=("prf",), d_head=64, causal=False, data_rng=0, paired=True, n_jobs=None, progress=None):
    r"""Attention error against logit scale, sequence length and m, per feature kind and coupling, next to
    uniform attention (Sec. 5.4; issue "Attention, honestly").

    For each logit scale one :func:`synthetic_qkv` draw (``data_rng``) is cut to each length L;
    the data-driven parameters of each kind (:data:`DATA_DRIVEN`: FAVOR++'s A, FAVOR#'s (a, Q))
    come from the scaled queries and keys of that batch.  Each (logit std, L, m) cell sees
    ``n_draws`` draws of m projections; every coupling's draws come from one seed per block
    of draws (common random numbers, :func:`~montecarlo.experiments.sweeps.paired_weights`)
    and every kind uses the same projections, so differences between couplings and between
    kinds are paired.  The cells run as units of (logit std, L, m, block of
    :data:`~montecarlo.experiments.sweeps.DRAW_BLOCK` draws), each seeded by
    :func:`~montecarlo.experiments.sweeps.unit_seed` of ``rng``, L, m, the logit std's
    value and the block, through :func:`~montecarlo.experiments.sweeps.run_units`: the
    numbers are bit-identical for any ``n_jobs`` and do not depend on which other cells run.

    Parameters
    ----------
    couplings : sequence of str
        Couplings of :data:`montecarlo.COUPLINGS` (expected order: worst first, e.g. IID, ORF, SimRF).
    seq_lens : sequence of int >= 1
    logit_stds : sequence of float > 0
    m_values : sequence of int >= 1
        Numbers of features (the paper's Performers: m = 130).
    n_draws : int >= 2
    rng, data_rng : seeds (feature draws; data)
    kinds : sequence of str, keyword-only
        Feature kinds (:func:`scan_kinds`: e.g. ``'prf'``, ``'oprf'``, ``'sderf'``).
    d_head : int
    causal : bool
    paired : bool
        Common random numbers across couplings (default) or an independent stream per coupling
        (the kinds always share a coupling's draws).
    n_jobs : None or nonzero int
        Parallel workers (None: the machine's cores).
    progress : callable, optional
        Called with one-line progress messages.

    Returns
    -------
    AttentionScan
    """
    n_jobs = check_n_jobs(n_jobs)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a callable taking one string, got {describe(progress)}")
    return attention_scan_plan(couplings, seq_lens, logit_stds, m_values, n_draws, rng, kinds=kinds, d_head=d_head,
                               causal=causal, data_rng=data_rng, paired=paired).run(n_jobs, progress)


def attention_scan_plan(couplings=("iid", "orthogonal", "simplex"), seq_lens=(64, 256, 1024),
                        logit_stds=(0.1, 0.25, 0.5, 1.0, 2.0), m_values=(64, 130, 512), n_draws=20, rng=0, *,
                        kinds=("prf",), d_head=64, causal=False, data_rng=0, paired=True):
    """:func:`attention_scan` before it runs: a ``montecarlo.experiments._plan.SweepPlan`` of its units
    ((logit std, L, m, block of draws); the data, exact attention and data-driven parameters are computed here)
    whose ``finish`` returns the :class:`AttentionScan`.  ``plan.run(n_jobs, progress)`` is
    :func:`attention_scan`.  Arguments as :func:`attention_scan` (without ``n_jobs`` and ``progress``)."""
    couplings = distinct_couplings(couplings)
    kinds_ = _check_scan_kinds(kinds)
    if isinstance(logit_stds, (str, bytes)) or not hasattr(logit_stds, "__iter__"):
        raise TypeError(f"logit_stds must be a sequence of reals > 0, got {describe(logit_stds)}")
    stds = tuple(check_positive_float(s, "logit_stds") for s in logit_stds)
    seq_lens = tuple(check_int(L, "seq_lens", 1) for L in _iterable(seq_lens, "seq_lens"))
    m_values = tuple(check_int(m, "m_values", 1) for m in _iterable(m_values, "m_values"))
    if not stds or not seq_lens or not m_values:
        raise ValueError("logit_stds, seq_lens and m_values must not be empty")
    n_draws = check_int(n_draws, "n_draws", 2)
    blocks = draw_blocks(n_draws)
    d_head = check_int(d_head, "d_head", 1)
    causal = check_bool(causal, "causal")
    paired = check_bool(paired, "paired")
    entropy = seed_entropy(rng)
    data_rng = check_rng(data_rng, "data_rng")
    check_budget(max(seq_lens) * max(seq_lens), "the (L, L) exact attention of the longest sequence",
                 "shorten the sequences")
    shape = (len(stds), len(seq_lens))
    uniform = np.empty(shape)
    data_params = {}
    units, costs, cells = [], [], []
    for i, s in enumerate(stds):
        Q, K, V = synthetic_qkv(max(seq_lens), d_head, data_rng, logit_std=s)
        for j, L in enumerate(seq_lens):
            q, k, v = Q[:L], K[:L], V[:L]
            exact = softmax_attention(q, k, v, causal)
            uniform[i, j] = float(rel_error(uniform_attention(v, causal), exact, (-2, -1)))
            params = {kind: data_parameters(kind, q, k) for kind in kinds_}
            for key, value in _parameter_summary(params).items():
                data_params.setdefault(key, np.empty(shape))[i, j] = value
            for l, m in enumerate(m_values):
                for b, n in blocks:
                    units.append((q, k, v, exact, couplings, kinds_, params, m, n,
                                  unit_seed(entropy, L, m, _float_key(s), b), paired, causal))
                    costs.append(n * len(couplings) * len(kinds_) * L * m * (2 * d_head + 2 * v.shape[-1]))
                    cells.append((i, j, l))
    warm = sweep_warm_up(couplings, d_head, min(m_values), "prf", paired)

    def warm_all():  # every kind's hooks, imported in this thread before the workers start
        from theory import feature_kinds

        warm()
        for kind in kinds_:
            feature_kinds.load(kind)

    def finish(res):
        full = shape + (len(m_values),)
        per_cell = {}
        for cell, r in zip(cells, res):
            per_cell.setdefault(cell, []).append(r)
        names = [(kind, c) for kind in kinds_ for c in couplings]
        pairs = [((kind, a), (kind, b)) for kind in kinds_ for a, b in coupling_pairs(couplings)]
        pairs += [((ka, c), (kb, c)) for c in couplings for ka, kb in coupling_pairs(kinds_)]
        mean = {nm: np.empty(full) for nm in names}
        se = {nm: np.empty(full) for nm in names}
        dmean = {p: np.empty(full) for p in pairs}
        dse = {p: np.empty(full) for p in pairs}
        for cell, parts in per_cell.items():
            errs = np.concatenate(parts, axis=-1)  # (kinds, couplings, n_draws)
            samples = {(kind, c): errs[ik, ic] for ik, kind in enumerate(kinds_) for ic, c in enumerate(couplings)}
            for nm in names:
                x = samples[nm]
                mean[nm][cell], se[nm][cell] = float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))
            for p, est in paired_estimates(samples, pairs).items():
                dmean[p][cell], dse[p][cell] = est.mean, est.stderr
        return AttentionScan(kinds_, couplings, seq_lens, stds, m_values, mean, se, uniform, dmean, dse, data_params,
                             n_draws, causal, paired, d_head)

    return SweepPlan(_scan_unit, units, costs, finish, "attention scan", warm_all)
