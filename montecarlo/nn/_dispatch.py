"""Path dispatch of :mod:`montecarlo.nn`'s causal attention: the fused Triton operator
(:mod:`montecarlo.nn._fused`, imported when it first runs: Triton is optional) or the torch scan
(:mod:`montecarlo.nn._scan`), and the switches that choose between them."""

from __future__ import annotations

import math

import torch

import montecarlo as mc
from montecarlo.nn._ops import _broadcast_shapes, _ratio, _very_negative, _with_ones
from montecarlo.nn._probes import _compiling, _transformed, _triton_available
from montecarlo.nn._scan import _unfused


#: The causal scan on CUDA float32 features by the fused Triton operator (:func:`montecarlo.nn._fused.causal`)
#: where Triton is importable; False: always the torch levels.
FUSED = True
# The device type whose tensors the fused operators take (the tests set it to "cpu", where Triton's
# interpreter runs the kernels, to check the other conditions of :func:`_fused_applies` without a GPU).
_FUSED_DEVICE = "cuda"


def _fused_applies(x, b):
    """Whether the causal scan runs in the fused Triton operator: :data:`FUSED`, a CUDA float32 tensor,
    chunks of a multiple of 16 positions, and Triton importable (eager or under ``torch.compile``, which
    calls them as custom operators)."""
    if not (FUSED and x.device.type == _FUSED_DEVICE and x.dtype == torch.float32 and b >= 16 and b % 16 == 0):
        return False
    return _triton_available() and not _transformed()


def _fused_features_apply(x, w):
    """Whether a kind's linear log-features can run in montecarlo.nn._fused's kernel: :data:`FUSED`, CUDA
    inputs in float32, bfloat16 or float16 with float32 projections that need no gradient, d <= 128, Triton
    importable."""
    if not (FUSED and x.device.type == _FUSED_DEVICE and x.dtype in (torch.float32, torch.bfloat16, torch.float16)
            and w.dtype == torch.float32 and not w.requires_grad and x.shape[-1] <= 128):
        return False
    return _triton_available() and not _transformed()


def _as_rows(x, lead, shape):
    """``x`` (..., a, c) broadcast to ``lead`` + (a, c) and reshaped to ``shape``: no operator where it already
    has them (each view is host time and an autograd node)."""
    if tuple(x.shape[:-2]) != lead:
        x = x.expand(lead + tuple(x.shape[-2:]))
    return x if tuple(x.shape) == shape else x.reshape(shape)


def _causal(lq, lk, v, chunk, seen=None, scan=None, fused=None, half=False, out_dtype=None):
    r"""Stabilised causal attention (module docs): prefix states over chunks, dyadic blocks within a chunk,
    the diagonal directly.  ``lq``, ``lk`` (..., L, M) fresh log-features (padded keys -inf; overwritten in
    place where no gradient needs them), v (..., L, d_v; any float dtype: cast to the log-features' here,
    except bfloat16/float16 values on the fused path, which reads them as they are); ``chunk`` a power of
    two; ``seen`` (..., L, 1) bool or None; ``scan``: combine the chunks by the log-depth scan (True), the
    loop over chunks (False), or by device (None: the scan off the CPU and under ``torch.compile``, the loop
    on the CPU, where it runs in place and holds the least memory); ``fused``: the whole scan by the Triton operator
    :func:`montecarlo.nn._fused.causal` (True; ``scan`` then does not apply), by torch operations (False), or
    where the operator applies (None: :func:`_fused_applies`); ``half``: the module's inputs are
    bfloat16/float16 (the kernels' products then run in TF32: :func:`montecarlo.nn._fused.products`);
    ``out_dtype``: the dtype the fused path writes its output in (its ratio's kernel; None: the features').

    Every exponential below has an exponent <= 0 by construction, whatever the data: the offsets of a group
    of keys are their per-feature maxima, and a query reads only groups that lie wholly in its past, so each
    offset is at most the query's running maximum c_if, which sets the query's row offset r_i.
    """
    L, M = lq.shape[-2], lq.shape[-1]
    lead = _broadcast_shapes(lq.shape[:-2], lk.shape[:-2], v.shape[:-2])
    dv = v.shape[-1]
    if math.prod(lead) == 0:  # an empty batch: an empty output, still connected to the inputs' graph
        return v.expand(lead + (L, dv)) * 0 + (lq.sum() + lk.sum()) * 0
    n = math.prod(lead)
    neg = _very_negative(lq.dtype)
    grad = torch.is_grad_enabled() and (lq.requires_grad or lk.requires_grad or v.requires_grad)
    if scan is None:
        scan = lq.device.type != "cpu" or _compiling() or _transformed()
    b = min(chunk, mc.couplings.next_power_of_two(L))  # a power of two, no longer than needed
    N = -(-L // b)
    Lp = N * b
    pad = Lp - L
    # (n, N, b, .) directly where no padding is needed: one view, none where the shapes are already so
    lq = _as_rows(lq, lead, (n, L, M) if pad else (n, N, b, M))
    lk = _as_rows(lk, lead, (n, L, M) if pad else (n, N, b, M))
    if not grad:  # written in place below: no broadcast (stride-0) views
        lq, lk = lq.contiguous(), lk.contiguous()
    if fused is None:
        fused = _fused_applies(lq, b)
    if fused:
        from montecarlo.nn import _fused
    if not (fused and _fused._half_values(lq, v)):  # (the operator reads half values as they are: no float32 copy)
        v = v.to(lq.dtype)
    ve = _as_rows(v, lead, (n, L, dv) if pad else (n, N, b, dv))
    if not fused:  # (the fused operator forms the key mass itself: no ones column stored)
        ve = _with_ones(ve)
    D = dv + 1
    if pad:  # pad to whole chunks: keys -inf (no mass), queries and values 0 (outputs dropped)
        lq = torch.nn.functional.pad(lq, (0, 0, 0, pad)).reshape(n, N, b, M)
        lk = torch.nn.functional.pad(lk, (0, 0, 0, pad), value=-math.inf).reshape(n, N, b, M)
        ve = torch.nn.functional.pad(ve, (0, 0, 0, pad)).reshape(n, N, b, ve.shape[-1])
    if seen is not None:
        seen = seen.expand(lead + (L, 1)).reshape(n, L, 1)
    if fused:  # the whole scan in the kernels' operator
        nd = _fused.causal(lq, lk, ve, _fused.products(half))
        return _fused.ratio(nd, seen, L, out_dtype or nd.dtype, lead + (L, dv))
    nd = _unfused(lq, lk, ve, neg, grad, scan)
    return _ratio(nd.view(n, Lp, D)[:, :L], seen).reshape(lead + (L, dv))
