r"""Fused Triton kernels for causal PRF attention (:mod:`montecarlo.nn`).

The kernels' sums, the tile and fast paths, the backward pass and the tests: :ref:`guide-montecarlo.nn._fused`
(``docs/guide/attention.rst``).
"""

import functools
import math
import types

import torch
import triton
import triton.language as tl

from montecarlo.couplings import next_power_of_two as _pow2
from montecarlo.nn import _ops, _probes, _scan
from theory.validation import describe

#: Tile length T (positions), feature block F and warps per program of the tile path's kernels; T x T x F
#: exponentials live in registers in the diagonal tiles (``benchmarks.bench_attention --cuda --variants``
#: times other shapes).
TILE = 16
FEATURE_BLOCK = 32
NUM_WARPS = 4
#: ``input_precision`` of the kernels' matrix products, or None (the default): by the dtype of the module's
#: inputs (:func:`products`), "tf32" (tensor cores, operands rounded to 10-bit mantissas: about 1e-3 relative
#: error in the scores, under the rounding of bfloat16/float16 inputs and outputs, 8/11-bit mantissas) for
#: half-precision inputs, "ieee" (float32 FMA, as the torch path's float32 products) otherwise.  On an H100
#: (L = 65536, chunk 256, bf16) "tf32" took the fused causal pass from 226 to 117 ms.  "bf16" (opt-in, never
#: the default) rounds both operands of every product in the causal kernels to bfloat16 (float32 sums; the
#: log-features' kernel keeps IEEE products, whose errors the exponentials would amplify): tensor cores at
#: twice TF32's rate and half its operand registers, at about twice a bfloat16 output's rounding error
#: (2.3e-3 relative against float64 through the interpreter's stand-in, test_bf16_products_error; TF32's
#: 10-bit operands round four times finer); on an H100 (bf16, chunk 128) 30.6 against 33.5 ms at L = 65536,
#: 3.05 against 2.73 at 4096 (host-bound there): not the default.
PRECISION = None
#: The values ``PRECISION`` may take here (besides None).
PRECISIONS = ("ieee", "tf32", "bf16")
#: A chunk is *fast* when its keys' per-feature maxima o_f exceed the running maxima c_0f at its first query
#: by at most GAP (None: no chunk is): then every score is the product of two factors with the chunk's
#: offsets, e^{qr_if + o_f} <= e^GAP and e^{lk_jf - o_f} <= 1, and the fast path's kernels run on matrix
#: products of factors alone; other chunks take the tile path (per-tile maxima, exponentials per tile pair
#: and per (i, j, f) on the diagonal).  Terms lost to the key factor's underflow (exponent below about -87)
#: are below e^(GAP - 87) relative to the largest.
GAP = 40.0
#: Tile, feature block and warps of the fast path's kernels (a tile of gcd(FAST_TILE, b) positions); on an
#: H100 (bf16, chunk 256) 64, 64, 8 took 5.4 / 84 ms at L = 4096 / 65536, features 32 6.5 / 85, tile 32 on 4
#: warps 6.5 / 89.
FAST_TILE = 64
FAST_FEATURE_BLOCK = 64
FAST_NUM_WARPS = 8
#: The fast path's feature block for d_v > 64, where 64 spills (sm 90, chunk 256, TF32 d_v 128: forward and
#: summary gradient 24 / 64 bytes at 64, none at 32; ``benchmarks.kernel_registers``).  IEEE products (float32
#: inputs) took it too at d_v <= 64, where 64 spills (query, value and summary gradients 776 / 496 / 948 bytes
#: on sm 90), until an H100 timed 64 faster all the same (6.94 against 8.39 ms, L = 4096, chunk 256).
FAST_FEATURE_BLOCK_SPILL_FREE = 32
#: Offsets of all-padded key tiles and chunks, and the rows' offsets of queries that see no key, are clamped
#: to this (as ``_very_negative``), so that their factors are 0 and no difference is -inf - (-inf).
FLOOR = -1.0e30
_FLOOR = tl.constexpr(FLOOR)
#: The scans over the chunks in kernels of their own (the offsets over the earlier chunks, the prefix states
#: and their adjoint: one program per sequence and feature block of SCAN_BLOCK features, a loop over the
#: chunks), else by torch operations (cummax; the batched product or the log-depth scan of
#: :func:`montecarlo.nn._prefix_states`: about 8 small launches each way at L = 4096, dozens and
#: (n, N, M, D) temporaries per level at L = 65536).  ``gpu_session.sh`` times both.
SCAN_KERNELS = True
SCAN_BLOCK = 32
SCAN_NUM_WARPS = 4


@triton.jit
def _bf16_bits(x):
    """The bits of x rounded to the nearest bfloat16 (ties to even; float64 through float32; NaN to a quiet
    NaN), as uint32 below 2^16: what a compiled conversion does."""
    bits = x.to(tl.float32).to(tl.uint32, bitcast=True)
    return tl.where(x == x, (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16, 0x7FC0)


@triton.jit
def _bf16_rounded(x):
    """x rounded to the nearest bfloat16 (:func:`_bf16_bits`), as float32: what a compiled conversion does;
    Triton's interpreter truncates instead (the interpreter's stand-in for bfloat16 products, :func:`_mm`)."""
    return (_bf16_bits(x) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _mm(a, b, PREC: tl.constexpr):
    """The matrix product a @ b of float32 tiles with float32 accumulation: operands as they are ("ieee",
    "tf32": ``input_precision``) or rounded to bfloat16 ("bf16": tensor cores at twice TF32's rate, 8-bit
    mantissas; under Triton's interpreter, whose bfloat16 products are wrong, the operands rounded as a compiled
    conversion rounds them are multiplied in float32: the same products, exact in float32)."""
    if PREC == "bf16":
        if _BF16_DOT:
            c = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
        else:
            c = tl.dot(_bf16_rounded(a), _bf16_rounded(b), input_precision="ieee")
    else:
        c = tl.dot(a, b, input_precision=PREC)
    return c


#: Whether the kernels are compiled, not run by Triton's interpreter (``TRITON_INTERPRET=1`` when Triton was
#: imported: its products of bfloat16 tiles return garbage in Triton 3.9, and its conversion to bfloat16
#: truncates): :func:`_mm` multiplies bfloat16 operands, and :func:`_store_value_grads` converts to bfloat16, only
#: then.
_BF16_DOT = tl.constexpr(type(_mm).__name__ != "InterpretedFunction")


@triton.jit
def _tile(P, base, r0, f0, M, T: tl.constexpr, F: tl.constexpr):
    """Rows r0 .. r0 + T, features f0 .. f0 + F of a (b, M) block at ``P + base`` (-inf beyond M)."""
    rows = tl.arange(0, T)
    fs = f0 + tl.arange(0, F)
    return tl.load(P + base + (r0 + rows)[:, None] * M + fs[None, :], mask=(fs < M)[None, :],
                   other=float("-inf"))


@triton.jit
def _rows(R, c, i0, B: tl.constexpr, T: tl.constexpr):
    """The offsets r (T,) of rows i0 .. i0 + T of chunk c (``R``: (b,) per chunk)."""
    return tl.load(R + c * B + i0 + tl.arange(0, T))


@triton.jit
def _qtile(Q, r, bqk, i0, f0, M, T: tl.constexpr, F: tl.constexpr):
    """A query tile's log-features less its rows' offsets r (T,): qr = l(q) - r (T, F)."""
    return _tile(Q, bqk, i0, f0, M, T, F) - r[:, None]


@triton.jit
def _cols(X, base, r0, S, W, T: tl.constexpr, BD: tl.constexpr, R):
    """Rows r0 .. r0 + T (those below R), the first W columns of a block with rows of S entries at ``X + base``
    (0 elsewhere); bfloat16/float16 blocks (the causal operator's values, read in the module's dtype) in
    float32."""
    rows = r0 + tl.arange(0, T)
    ds = tl.arange(0, BD)
    x = tl.load(X + base + rows[:, None] * S + ds[None, :], mask=(rows < R)[:, None] & (ds < W)[None, :],
                other=0.0)
    if x.dtype.is_bf16() or x.dtype.is_fp16():
        x = x.to(tl.float32)
    return x


@triton.jit
def _vtile(V, base, r0, D, T: tl.constexpr, BD: tl.constexpr, R):
    """Rows r0 .. r0 + T (those below R), the first D - 1 columns (the values, not the key mass's column) of an
    (R, D) block at ``V + base`` (0 elsewhere)."""
    return _cols(V, base, r0, D, D - 1, T, BD, R)


@triton.jit
def _values(V, c, r0, D, B: tl.constexpr, T: tl.constexpr, BD: tl.constexpr):
    """Rows r0 .. r0 + T of chunk c's values: a (B, D - 1) block (values only; the key mass's ones are not
    stored: the kernels sum the scores for it) of V (n N, B, D - 1)."""
    return _cols(V, c * B * (D - 1), r0, D - 1, D - 1, T, BD, B)


@triton.jit
def _last(V, base, r0, D, T: tl.constexpr, R):
    """Rows r0 .. r0 + T (those below R) of the last column of an (R, D) block at ``V + base`` (0 elsewhere)."""
    rows = r0 + tl.arange(0, T)
    return tl.load(V + base + rows * D + D - 1, mask=rows < R, other=0.0)


@triton.jit
def _store(P, base, r0, c0, C, x, T: tl.constexpr, W: tl.constexpr):
    """Store x (T, W) at rows r0 .. r0 + T, columns c0 .. c0 + W (below C) of a (b, C) block at ``P + base``."""
    rows = tl.arange(0, T)
    cs = c0 + tl.arange(0, W)
    tl.store(P + base + (r0 + rows)[:, None] * C + cs[None, :], x, mask=(cs < C)[None, :])


@triton.jit
def _store_cols(X, base, r0, S, W, x, T: tl.constexpr, BD: tl.constexpr, R):
    """Store x (T, BD) into the first W columns of rows r0 .. r0 + T (those below R) of a block with rows of S
    entries at ``X + base``."""
    rows = r0 + tl.arange(0, T)
    ds = tl.arange(0, BD)
    tl.store(X + base + rows[:, None] * S + ds[None, :], x, mask=(rows < R)[:, None] & (ds < W)[None, :])


@triton.jit
def _store_values(P, base, r0, D, x, last, T: tl.constexpr, BD: tl.constexpr, R):
    """Store x (T, BD) into the first D - 1 columns and ``last`` (T) into the last column of rows r0 .. r0 + T
    (those below R) of an (R, D) block at ``P + base``: the layout :func:`_vtile` and :func:`_last` read."""
    _store_cols(P, base, r0, D, D - 1, x, T, BD, R)
    rows = r0 + tl.arange(0, T)
    tl.store(P + base + rows * D + D - 1, last, mask=rows < R)


@triton.jit
def _store_value_grads(GV, c, r0, D, x, B: tl.constexpr, T: tl.constexpr, BD: tl.constexpr):
    """Store x (T, BD) as rows r0 .. r0 + T of chunk c's values' gradient (the layout :func:`_values` reads), in
    GV's dtype: rounded once, to nearest (bfloat16 under Triton's interpreter, whose conversion truncates and
    mangles subnormals: the bits of :func:`_bf16_bits` through a 16-bit integer pointer)."""
    if GV.dtype.element_ty == tl.bfloat16 and not _BF16_DOT:
        GV, x = GV.to(tl.pointer_type(tl.uint16)), _bf16_bits(x).to(tl.uint16)
    _store_cols(GV, c * B * (D - 1), r0, D - 1, D - 1, x, T, BD, B)


@triton.jit
def _before(BEF, c, f0, M, F: tl.constexpr):
    """A feature block of chunk c's offsets ``before`` (F,) (-inf beyond M: no contribution)."""
    fs = f0 + tl.arange(0, F)
    return tl.load(BEF + c * M + fs, mask=fs < M, other=float("-inf"))


@triton.jit
def _chunk_block(P, c, f0, M, D, F: tl.constexpr, BD: tl.constexpr):
    """A feature block of chunk c's (M, D) block of P (prefix states, summaries or their cotangents): its
    values' part (F, BD) and its key masses' part (F,)."""
    return _vtile(P, c * M * D, f0, D, F, BD, M), _last(P, c * M * D, f0, D, F, M)


@triton.jit
def _state(P, BEF, c, f0, M, D, F: tl.constexpr, BD: tl.constexpr):
    """A feature block of chunk c's prefix state ((M, D) per chunk): its values (F, BD), its key masses (F,)
    and its offsets ``before`` (F,)."""
    values, masses = _chunk_block(P, c, f0, M, D, F, BD)
    return values, masses, _before(BEF, c, f0, M, F)


@triton.jit
def _program(B: tl.constexpr, M, D, T: tl.constexpr, F: tl.constexpr):
    """This program's tile start, feature-block start, chunk, and the offsets of its chunk in (b, M) and
    (b, D)."""
    c = tl.program_id(0).to(tl.int64)
    return tl.program_id(1) * T, tl.program_id(2) * F, c, c * B * M, c * B * D


@triton.jit
def _key_factor(k):
    """A key tile's per-feature maximum o and its factor e^{k - max(o, floor)} <= 1."""
    o = tl.max(k, 0)
    return o, tl.exp(k - tl.maximum(o, _FLOOR)[None, :])


@triton.jit
def _factors(q, k):
    """The two factors e^{q + o} and e^{k - max(o, floor)} of a key tile (offset o: its per-feature max)."""
    o, ek = _key_factor(k)
    return tl.exp(q + o[None, :]), ek


@triton.jit
def _diagonal(q, k, T: tl.constexpr, KEYS_FIRST: tl.constexpr):
    """E_ijf = e^{q_if + k_jf} for j <= i, 0 above the diagonal: (T, T, F) with queries on the first axis,
    or (with ``KEYS_FIRST``) keys on the first axis, E_jif."""
    rows = tl.arange(0, T)
    if KEYS_FIRST:
        x = k[:, None, :] + q[None, :, :]
        keep = rows[:, None] <= rows[None, :]
    else:
        x = q[:, None, :] + k[None, :, :]
        keep = rows[:, None] >= rows[None, :]
    return tl.exp(tl.where(keep[:, :, None], x, float("-inf")))


@triton.jit
def _causal_mask(x, i0, j0, T: tl.constexpr, KEYS_FIRST: tl.constexpr):
    """x (T, T) of query tile i0 and key tile j0 (queries first, or keys first), 0 where the key is later."""
    rows = tl.arange(0, T)
    if KEYS_FIRST:
        keep = (j0 + rows)[:, None] <= (i0 + rows)[None, :]
    else:
        keep = (i0 + rows)[:, None] >= (j0 + rows)[None, :]
    return tl.where(keep, x, 0.0)


@triton.jit
def _offsets(OFF, c, f0, M, F: tl.constexpr):
    """A feature block of chunk c's key offsets o (the chunk's per-feature key maxima; 0 beyond M)."""
    fs = f0 + tl.arange(0, F)
    return tl.load(OFF + c * M + fs, mask=fs < M, other=0.0)


@triton.jit
def _query_factor(Q, r, OFF, c, bqk, i0, f0, M, T: tl.constexpr, F: tl.constexpr):
    """e^{qr + o} of a query tile of a fast chunk (<= e^GAP; 0 beyond M)."""
    return tl.exp(_qtile(Q, r, bqk, i0, f0, M, T, F) + _offsets(OFF, c, f0, M, F)[None, :])


@triton.jit
def _chunk_key_factor(K, OFF, c, bqk, j0, f0, M, T: tl.constexpr, F: tl.constexpr):
    """e^{lk - o} of a key tile of a fast chunk (<= 1; 0 for padded keys and beyond M)."""
    return tl.exp(_tile(K, bqk, j0, f0, M, T, F) - _offsets(OFF, c, f0, M, F)[None, :])


@triton.jit
def _summary_key_grad(vj, GKS, c, f0, M, D, F: tl.constexpr, BD: tl.constexpr, PREC: tl.constexpr):
    """The summary's cotangent reaching a key tile's feature block, before its factor e^{lk - o}:
    [v_j, 1] . GKS_f (T, F)."""
    values, masses = _chunk_block(GKS, c, f0, M, D, F, BD)
    return _mm(vj, tl.trans(values), PREC) + masses[None, :]


@triton.jit
def _summary_value_grad(K, OFF, GKS, c, bqk, j0, M, D, T: tl.constexpr, F: tl.constexpr, BD: tl.constexpr,
                        PREC: tl.constexpr):
    """The summary's cotangent reaching a key tile's values: sum_f e^{lk_jf - o_f} GKS_f (T, BD)."""
    acc = tl.zeros((T, BD), K.dtype.element_ty)
    for f0 in range(0, M, F):
        values, _ = _chunk_block(GKS, c, f0, M, D, F, BD)
        acc += _mm(_chunk_key_factor(K, OFF, c, bqk, j0, f0, M, T, F), values, PREC)
    return acc


@triton.jit
def _fast_scores(Q, r, K, OFF, c, bqk, i0, j0, M, T: tl.constexpr, F: tl.constexpr, PREC: tl.constexpr,
                 KEYS_FIRST: tl.constexpr = False):
    """Scores (T, T) of query tile i0 and key tile j0 of a fast chunk, masked to j <= i: products of factors
    (queries on the first axis, or with ``KEYS_FIRST`` keys: the transpose formed as such)."""
    s = tl.zeros((T, T), Q.dtype.element_ty)
    for f0 in range(0, M, F):
        eq = _query_factor(Q, r, OFF, c, bqk, i0, f0, M, T, F)
        ek = _chunk_key_factor(K, OFF, c, bqk, j0, f0, M, T, F)
        if KEYS_FIRST:
            s += _mm(ek, tl.trans(eq), PREC)
        else:
            s += _mm(eq, tl.trans(ek), PREC)
    return _causal_mask(s, i0, j0, T, KEYS_FIRST)


@triton.jit
def _earlier(Q, r, P, BEF, c, bqk, i0, M, D, acc, mass, T: tl.constexpr, F: tl.constexpr, BD: tl.constexpr,
             PREC: tl.constexpr):
    """acc, mass plus the earlier chunks' term of a query tile, through the prefix state (offsets `before`
    <= c_if)."""
    for f0 in range(0, M, F):
        values, masses, bef = _state(P, BEF, c, f0, M, D, F, BD)
        e = tl.exp(_qtile(Q, r, bqk, i0, f0, M, T, F) + bef[None, :])
        acc += _mm(e, values, PREC)
        mass += tl.sum(e * masses[None, :], 1)
    return acc, mass


@triton.jit
def _earlier_grad(q, g, gl, P, BEF, c, f0, M, D, F: tl.constexpr, BD: tl.constexpr, PREC: tl.constexpr):
    """The earlier chunks' term's gradient in a query tile's feature block (q: its log-features)."""
    values, masses, bef = _state(P, BEF, c, f0, M, D, F, BD)
    e = tl.exp(q + bef[None, :])
    return e * (_mm(g, tl.trans(values), PREC) + gl * masses[None, :])


# The tile path: programs of fast chunks (FLAG set) do nothing.
@triton.jit
def _forward_kernel(Q, R, K, V, P, BEF, FLAG, O, M, D, B: tl.constexpr, T: tl.constexpr, F: tl.constexpr,
                    BD: tl.constexpr, PREC: tl.constexpr):
    i0, _, c, bqk, bv = _program(B, M, D, T, F)
    if tl.load(FLAG + c) == 0:
        ty = Q.dtype.element_ty
        r = _rows(R, c, i0, B, T)
        acc = tl.zeros((T, BD), ty)
        mass = tl.zeros((T,), ty)
        for j0 in range(0, i0, T):
            s = tl.zeros((T, T), ty)
            for f0 in range(0, M, F):
                eq, ek = _factors(_qtile(Q, r, bqk, i0, f0, M, T, F), _tile(K, bqk, j0, f0, M, T, F))
                s += _mm(eq, tl.trans(ek), PREC)
            acc += _mm(s, _values(V, c, j0, D, B, T, BD), PREC)
            mass += tl.sum(s, 1)
        s = tl.zeros((T, T), ty)
        for f0 in range(0, M, F):
            s += tl.sum(_diagonal(_qtile(Q, r, bqk, i0, f0, M, T, F), _tile(K, bqk, i0, f0, M, T, F), T, False), 2)
        acc += _mm(s, _values(V, c, i0, D, B, T, BD), PREC)
        mass += tl.sum(s, 1)
        acc, mass = _earlier(Q, r, P, BEF, c, bqk, i0, M, D, acc, mass, T, F, BD, PREC)
        _store_values(O, bv, i0, D, acc, mass, T, BD, B)


@triton.jit
def _query_grad_kernel(Q, R, K, V, P, BEF, FLAG, G, GQ, M, D, B: tl.constexpr, T: tl.constexpr,
                       F: tl.constexpr, BD: tl.constexpr, PREC: tl.constexpr):
    i0, f0, c, bqk, bv = _program(B, M, D, T, F)
    if tl.load(FLAG + c) == 0:
        q = _qtile(Q, _rows(R, c, i0, B, T), bqk, i0, f0, M, T, F)
        g = _vtile(G, bv, i0, D, T, BD, B)
        gl = _last(G, bv, i0, D, T, B)[:, None]  # the key mass's cotangent (v's ones column)
        acc = tl.zeros((T, F), Q.dtype.element_ty)
        for j0 in range(0, i0, T):
            dA = _mm(g, tl.trans(_values(V, c, j0, D, B, T, BD)), PREC) + gl
            eq, ek = _factors(q, _tile(K, bqk, j0, f0, M, T, F))
            acc += eq * _mm(dA, ek, PREC)
        # the diagonal tile with keys on the first axis (a reduction over it keeps the registers of the key
        # gradient's; over the middle axis this kernel needed about twice as many)
        dAt = _mm(_values(V, c, i0, D, B, T, BD), tl.trans(g), PREC) + tl.trans(gl)  # (j, i)
        acc += tl.sum(dAt[:, :, None] * _diagonal(q, _tile(K, bqk, i0, f0, M, T, F), T, True), 0)
        acc += _earlier_grad(q, g, gl, P, BEF, c, f0, M, D, F, BD, PREC)
        _store(GQ, bqk, i0, f0, M, acc, T, F)


@triton.jit
def _key_grad_kernel(Q, R, K, V, OFF, GKS, FLAG, G, GK, M, D, B: tl.constexpr, T: tl.constexpr, F: tl.constexpr,
                     BD: tl.constexpr, PREC: tl.constexpr, SUMMARY: tl.constexpr):
    j0, f0, c, bqk, bv = _program(B, M, D, T, F)
    if tl.load(FLAG + c) == 0:
        k = _tile(K, bqk, j0, f0, M, T, F)
        vj = _values(V, c, j0, D, B, T, BD)
        o, ek = _key_factor(k)
        acc = tl.zeros((T, F), Q.dtype.element_ty)
        for i0 in range(j0 + T, B, T):
            dAt = _mm(vj, tl.trans(_vtile(G, bv, i0, D, T, BD, B)), PREC)  # (j, i)
            dAt += _last(G, bv, i0, D, T, B)[None, :]
            eq = tl.exp(_qtile(Q, _rows(R, c, i0, B, T), bqk, i0, f0, M, T, F) + o[None, :])
            acc += _mm(dAt, eq, PREC)
        acc = acc * ek
        dA = _mm(_vtile(G, bv, j0, D, T, BD, B), tl.trans(vj), PREC)  # (i, j)
        dA += _last(G, bv, j0, D, T, B)[:, None]
        qj = _qtile(Q, _rows(R, c, j0, B, T), bqk, j0, f0, M, T, F)  # the queries of the diagonal tile
        acc += tl.sum(dA[:, :, None] * _diagonal(qj, k, T, False), 0)
        if SUMMARY:  # the chunk's summary (its offsets: the chunk's maxima, not the tile's)
            acc += _chunk_key_factor(K, OFF, c, bqk, j0, f0, M, T, F) * _summary_key_grad(vj, GKS, c, f0, M, D, F,
                                                                                         BD, PREC)
        _store(GK, bqk, j0, f0, M, acc, T, F)


@triton.jit
def _value_grad_kernel(Q, R, K, OFF, GKS, FLAG, G, GV, M, D, B: tl.constexpr, T: tl.constexpr, F: tl.constexpr,
                       BD: tl.constexpr, PREC: tl.constexpr, SUMMARY: tl.constexpr):
    j0, _, c, bqk, bv = _program(B, M, D, T, F)
    if tl.load(FLAG + c) == 0:
        ty = Q.dtype.element_ty
        acc = tl.zeros((T, BD), ty)
        if SUMMARY:  # (first, while nothing else is held)
            acc = _summary_value_grad(K, OFF, GKS, c, bqk, j0, M, D, T, F, BD, PREC)
        s = tl.zeros((T, T), ty)  # (i, j) on the diagonal tile
        rj = _rows(R, c, j0, B, T)
        for f0 in range(0, M, F):
            s += tl.sum(_diagonal(_qtile(Q, rj, bqk, j0, f0, M, T, F), _tile(K, bqk, j0, f0, M, T, F), T, False), 2)
        acc += _mm(tl.trans(s), _vtile(G, bv, j0, D, T, BD, B), PREC)
        for i0 in range(j0 + T, B, T):
            s = tl.zeros((T, T), ty)
            r = _rows(R, c, i0, B, T)
            for f0 in range(0, M, F):
                eq, ek = _factors(_qtile(Q, r, bqk, i0, f0, M, T, F), _tile(K, bqk, j0, f0, M, T, F))
                s += _mm(eq, tl.trans(ek), PREC)
            acc += _mm(tl.trans(s), _vtile(G, bv, i0, D, T, BD, B), PREC)
        _store_value_grads(GV, c, j0, D, acc, B, T, BD)


# The fast path (chunks with FLAG set; the others' programs do nothing): factors e^{qr + o}, e^{lk - o} with
# the chunk's offsets o, formed per tile from the log-features; the diagonal tile masked after its product.
@triton.jit
def _fast_forward_kernel(Q, R, K, V, P, BEF, OFF, FLAG, O, M, D, B: tl.constexpr, T: tl.constexpr,
                         F: tl.constexpr, BD: tl.constexpr, PREC: tl.constexpr):
    i0, _, c, bqk, bv = _program(B, M, D, T, F)
    if tl.load(FLAG + c) != 0:
        ty = Q.dtype.element_ty
        r = _rows(R, c, i0, B, T)
        acc = tl.zeros((T, BD), ty)
        mass = tl.zeros((T,), ty)
        for j0 in range(0, i0 + T, T):
            s = _fast_scores(Q, r, K, OFF, c, bqk, i0, j0, M, T, F, PREC)
            acc += _mm(s, _values(V, c, j0, D, B, T, BD), PREC)
            mass += tl.sum(s, 1)
        acc, mass = _earlier(Q, r, P, BEF, c, bqk, i0, M, D, acc, mass, T, F, BD, PREC)
        _store_values(O, bv, i0, D, acc, mass, T, BD, B)


@triton.jit
def _fast_query_grad_kernel(Q, R, K, V, P, BEF, OFF, FLAG, G, GQ, M, D, B: tl.constexpr, T: tl.constexpr,
                            F: tl.constexpr, BD: tl.constexpr, PREC: tl.constexpr):
    """d qr = e^{qr + o} (dA @ e^{lk - o}) over the keys j <= i, plus the earlier chunks' term."""
    i0, f0, c, bqk, bv = _program(B, M, D, T, F)
    if tl.load(FLAG + c) != 0:
        g = _vtile(G, bv, i0, D, T, BD, B)
        gl = _last(G, bv, i0, D, T, B)[:, None]
        acc = tl.zeros((T, F), Q.dtype.element_ty)
        for j0 in range(0, i0 + T, T):
            dA = _mm(g, tl.trans(_values(V, c, j0, D, B, T, BD)), PREC) + gl
            acc += _mm(_causal_mask(dA, i0, j0, T, False), _chunk_key_factor(K, OFF, c, bqk, j0, f0, M, T, F), PREC)
        q = _qtile(Q, _rows(R, c, i0, B, T), bqk, i0, f0, M, T, F)
        acc = acc * tl.exp(q + _offsets(OFF, c, f0, M, F)[None, :])
        acc += _earlier_grad(q, g, gl, P, BEF, c, f0, M, D, F, BD, PREC)
        _store(GQ, bqk, i0, f0, M, acc, T, F)


@triton.jit
def _fast_key_grad_kernel(Q, R, K, V, OFF, GKS, FLAG, G, GK, M, D, B: tl.constexpr, T: tl.constexpr,
                          F: tl.constexpr, BD: tl.constexpr, PREC: tl.constexpr, SUMMARY: tl.constexpr):
    """d lk = e^{lk - o} (dA^T @ e^{qr + o} + [v, 1] . GKS) over the queries i >= j and the chunk's summary."""
    j0, f0, c, bqk, bv = _program(B, M, D, T, F)
    if tl.load(FLAG + c) != 0:
        vj = _values(V, c, j0, D, B, T, BD)
        acc = tl.zeros((T, F), Q.dtype.element_ty)
        if SUMMARY:
            acc = _summary_key_grad(vj, GKS, c, f0, M, D, F, BD, PREC)
        for i0 in range(j0, B, T):
            dAt = _mm(vj, tl.trans(_vtile(G, bv, i0, D, T, BD, B)), PREC)  # (j, i)
            dAt += _last(G, bv, i0, D, T, B)[None, :]
            eq = _query_factor(Q, _rows(R, c, i0, B, T), OFF, c, bqk, i0, f0, M, T, F)
            acc += _mm(_causal_mask(dAt, i0, j0, T, True), eq, PREC)
        acc = acc * _chunk_key_factor(K, OFF, c, bqk, j0, f0, M, T, F)
        _store(GK, bqk, j0, f0, M, acc, T, F)


@triton.jit
def _fast_value_grad_kernel(Q, R, K, OFF, GKS, FLAG, G, GV, M, D, B: tl.constexpr, T: tl.constexpr,
                            F: tl.constexpr, BD: tl.constexpr, PREC: tl.constexpr, SUMMARY: tl.constexpr):
    j0, _, c, bqk, bv = _program(B, M, D, T, F)
    if tl.load(FLAG + c) != 0:
        acc = tl.zeros((T, BD), Q.dtype.element_ty)
        if SUMMARY:  # (first, while nothing else is held: after the loop it spilled)
            acc = _summary_value_grad(K, OFF, GKS, c, bqk, j0, M, D, T, F, BD, PREC)
        for i0 in range(j0, B, T):
            r = _rows(R, c, i0, B, T)
            if PREC == "ieee":  # (j, i) formed keys first: the transpose of (i, j) spilled under IEEE products
                st = _fast_scores(Q, r, K, OFF, c, bqk, i0, j0, M, T, F, PREC, True)
            else:
                st = tl.trans(_fast_scores(Q, r, K, OFF, c, bqk, i0, j0, M, T, F, PREC))
            acc += _mm(st, _vtile(G, bv, i0, D, T, BD, B), PREC)
        _store_value_grads(GV, c, j0, D, acc, B, T, BD)


@triton.jit
def _state_grad_kernel(Q, R, BEF, G, GP, M, D, B: tl.constexpr, T: tl.constexpr, F: tl.constexpr,
                       BD: tl.constexpr, PREC: tl.constexpr):
    """Gradient of chunk c's prefix state, feature block f: sum over the chunk's queries of e^{qr + before}
    times their cotangents."""
    _, f0, c, bqk, bv = _program(B, M, D, T, F)
    bef = _before(BEF, c, f0, M, F)
    ty = Q.dtype.element_ty
    acc = tl.zeros((F, BD), ty)
    accl = tl.zeros((F,), ty)
    for i0 in range(0, B, T):
        e = tl.exp(_qtile(Q, _rows(R, c, i0, B, T), bqk, i0, f0, M, T, F) + bef[None, :])
        acc += _mm(tl.trans(e), _vtile(G, bv, i0, D, T, BD, B), PREC)
        accl += tl.sum(e * _last(G, bv, i0, D, T, B)[:, None], 0)
    _store_values(GP, c * M * D, f0, D, acc, accl, F, BD, M)


# The chunks' own work around the two paths (:func:`causal`): the rows' offsets r and the chunks' summaries for
# the prefix states (tiles and feature blocks of the fast path).
@triton.jit
def _larger(a, b):
    return tl.maximum(a, b)


@triton.jit
def _scan_program(N, M, D, F: tl.constexpr):
    """A scan program's feature block over the chunks: its start f0, its features (F,), which exist, their
    offsets in this sequence's (N, M) block and the start of its (N, M, D) block."""
    f0 = tl.program_id(1) * F
    fs = f0 + tl.arange(0, F)
    s = tl.program_id(0).to(tl.int64)
    return f0, fs, fs < M, s * N * M + fs, s * N * M * D


@triton.jit
def _chunk_offsets_kernel(O, BEF, OFF, N, M, F: tl.constexpr):
    """From the chunks' per-feature key maxima o (n, N, M): the offsets over the earlier chunks, before_c =
    max_{c' < c} o_c' (-inf at the first chunk), and the chunks' own, off_c = max(o_c, floor); one program per
    sequence and feature block, a scan over the chunks (NaN propagates, as in torch's cummax)."""
    _, _, keep, at, _ = _scan_program(N, M, 1, F)
    run = tl.full((F,), float("-inf"), O.dtype.element_ty)
    for c in range(0, N):
        o = tl.load(O + at + c * M, mask=keep, other=float("-inf"))
        tl.store(BEF + at + c * M, run, mask=keep)
        tl.store(OFF + at + c * M, tl.maximum(o, _FLOOR, propagate_nan=tl.PropagateNan.ALL), mask=keep)
        run = tl.maximum(run, o, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _row_offsets_kernel(Q, K, BEF, OFF, R, FLAG, M, D, B: tl.constexpr, T: tl.constexpr, F: tl.constexpr,
                        BD: tl.constexpr, PREC: tl.constexpr, GAP: tl.constexpr):
    """r_i = max_f (l_f(q_i) + c_if) of a query tile (at least the floor), c_if = max(before_f, max_{j <= i}
    l_f(k_j)) the running maximum of the keys (the earlier tiles' maxima, then a scan within the tile).  The
    first tile's program also sets its chunk's flag: fast (1) when o_f - c_0f <= GAP for every feature (o the
    chunk's key maxima ``OFF``; NaN compares False; GAP None: no chunk is fast), as :func:`fast_chunks`."""
    i0, _, c, bqk, _ = _program(B, M, D, T, F)
    r = tl.full((T,), _FLOOR, Q.dtype.element_ty)
    slow = tl.zeros((F,), tl.int32)  # features whose gap exceeds GAP (all, with GAP None)
    if GAP is None:
        slow += 1
    for f0 in range(0, M, F):
        bef = _before(BEF, c, f0, M, F)
        run = bef
        for j0 in range(0, i0, T):
            run = tl.maximum(run, tl.max(_tile(K, bqk, j0, f0, M, T, F), 0))
        ci = tl.maximum(tl.associative_scan(_tile(K, bqk, i0, f0, M, T, F), 0, _larger), run[None, :])
        r = tl.maximum(r, tl.max(_tile(Q, bqk, i0, f0, M, T, F) + ci, 1))
        if GAP is not None:
            fs = f0 + tl.arange(0, F)
            first = tl.load(K + bqk + fs, mask=fs < M, other=float("-inf"))  # the chunk's first key
            c0 = tl.maximum(first, bef, propagate_nan=tl.PropagateNan.ALL)
            gap = tl.load(OFF + c * M + fs, mask=fs < M, other=0.0) - c0  # (inf beyond M: no NaN)
            slow = tl.maximum(slow, tl.where((gap <= GAP) | (fs >= M), 0, 1))
    tl.store(R + c * B + i0 + tl.arange(0, T), r)
    if i0 == 0:
        tl.store(FLAG + c, (tl.max(slow, 0) == 0).to(tl.int32))


@triton.jit
def _states_kernel(KS, OFF, BEF, P, N, M, D, F: tl.constexpr, BD: tl.constexpr):
    """The chunks' exclusive prefix states (M, D per chunk) from their summaries KS (offsets OFF) with offsets
    B = max(before, floor): P_0 = 0, P_c = e^{B_c-1 - B_c} P_c-1 + e^{o_c-1 - B_c} KS_c-1 (= sum_{c' < c}
    e^{o_c' - B_c} KS_c', every factor <= 1: B_c >= B_c-1, o_c-1); one program per sequence and feature
    block, a scan over the chunks, the ones column (the key masses) as the values."""
    f0, _, keep, at, base = _scan_program(N, M, D, F)
    ty = KS.dtype.element_ty
    acc = tl.zeros((F, BD), ty)
    mass = tl.zeros((F,), ty)
    prev = tl.full((F,), _FLOOR, ty)
    _store_values(P, base, f0, D, acc, mass, F, BD, M)
    for c in range(1, N):
        bc = tl.maximum(tl.load(BEF + at + c * M, mask=keep, other=_FLOOR), _FLOOR)
        a = tl.exp(prev - bc)
        w = tl.exp(tl.load(OFF + at + (c - 1) * M, mask=keep, other=_FLOOR) - bc)
        acc = acc * a[:, None] + w[:, None] * _vtile(KS, base + (c - 1) * M * D, f0, D, F, BD, M)
        mass = mass * a + w * _last(KS, base + (c - 1) * M * D, f0, D, F, M)
        _store_values(P, base + c * M * D, f0, D, acc, mass, F, BD, M)
        prev = bc


@triton.jit
def _states_adjoint_kernel(GP, OFF, BEF, GK, N, M, D, F: tl.constexpr, BD: tl.constexpr):
    """The summaries' gradient from the states' cotangent GP (the adjoint of :func:`_states_kernel`): dK_c =
    e^{o_c - B_c+1} T_c with T_c = sum_{c' > c} e^{B_c+1 - B_c'} GP_c' = GP_c+1 + e^{B_c+1 - B_c+2} T_c+1 (a
    scan backwards over the chunks; every factor <= 1), dK_N-1 = 0."""
    f0, _, keep, at, base = _scan_program(N, M, D, F)
    ty = GP.dtype.element_ty
    acc = tl.zeros((F, BD), ty)
    mass = tl.zeros((F,), ty)
    _store_values(GK, base + (N - 1) * M * D, f0, D, acc, mass, F, BD, M)
    nxt = tl.maximum(tl.load(BEF + at + (N - 1) * M, mask=keep, other=_FLOOR), _FLOOR)
    for i in range(1, N):
        c = N - 1 - i
        b1 = tl.maximum(tl.load(BEF + at + (c + 1) * M, mask=keep, other=_FLOOR), _FLOOR)
        a = tl.exp(b1 - nxt)
        acc = acc * a[:, None] + _vtile(GP, base + (c + 1) * M * D, f0, D, F, BD, M)
        mass = mass * a + _last(GP, base + (c + 1) * M * D, f0, D, F, M)
        e = tl.exp(tl.load(OFF + at + c * M, mask=keep, other=_FLOOR) - b1)
        _store_values(GK, base + c * M * D, f0, D, e[:, None] * acc, e * mass, F, BD, M)
        nxt = b1


@triton.jit
def _summary_kernel(K, V, OFF, KS, M, D, B: tl.constexpr, T: tl.constexpr, F: tl.constexpr, BD: tl.constexpr,
                    PREC: tl.constexpr):
    """Chunk c's summary, feature block f: sum_j e^{lk_jf - o_f} [v_j, 1] with the chunk's offsets o."""
    _, f0, c, bqk, bv = _program(B, M, D, T, F)
    ty = K.dtype.element_ty
    acc = tl.zeros((F, BD), ty)
    accl = tl.zeros((F,), ty)
    for j0 in range(0, B, T):
        ek = _chunk_key_factor(K, OFF, c, bqk, j0, f0, M, T, F)
        acc += _mm(tl.trans(ek), _values(V, c, j0, D, B, T, BD), PREC)
        accl += tl.sum(ek, 0)
    _store_values(KS, c * M * D, f0, D, acc, accl, F, BD, M)


# The ratio numerator / key mass of the causal scan's output rows and its cotangent (montecarlo.nn._Ratio's
# forms) in one pass each, for eager mode (under torch.compile the torch forms fuse).
@triton.jit
def _ratio_rows(ND, SEEN, i0, R, L, Lp, D, HAS_SEEN: tl.constexpr, T: tl.constexpr, BD: tl.constexpr):
    """Rows i0 .. i0 + T of the R = n L output rows: their row index, which exist, their rows in ND's (n, Lp, D)
    layout, numerators (T, BD), key masses (1 where the row sees no key) and whether they see a key."""
    rows = (i0 + tl.arange(0, T)).to(tl.int64)
    live = rows < R
    src = (rows // L) * Lp + rows % L
    ds = tl.arange(0, BD)
    num = tl.load(ND + src[:, None] * D + ds[None, :], mask=live[:, None] & (ds < D - 1)[None, :], other=0.0)
    den = tl.load(ND + src * D + D - 1, mask=live, other=1.0)
    seen = live
    if HAS_SEEN:
        seen = tl.load(SEEN + rows, mask=live, other=0) != 0
        den = tl.where(seen, den, 1.0)
    return rows, live, src, num, den, seen


@triton.jit
def _ratio_kernel(ND, SEEN, OUT, R, L, Lp, D, HAS_SEEN: tl.constexpr, T: tl.constexpr, BD: tl.constexpr):
    """out = num / den (0 where the row sees no key), (R, D - 1) in OUT's dtype."""
    rows, live, _, num, den, seen = _ratio_rows(ND, SEEN, tl.program_id(0) * T, R, L, Lp, D, HAS_SEEN, T, BD)
    out = tl.where(seen[:, None], num / den[:, None], 0.0)
    ds = tl.arange(0, BD)
    tl.store(OUT + rows[:, None] * (D - 1) + ds[None, :], out.to(OUT.dtype.element_ty),
             mask=live[:, None] & (ds < D - 1)[None, :])


@triton.jit
def _ratio_grad_kernel(ND, SEEN, G, GND, R, L, Lp, D, HAS_SEEN: tl.constexpr, T: tl.constexpr,
                       BD: tl.constexpr):
    """The cotangent of ND: [g / den, -(g / den) . num / den] (0 where the row sees no key)."""
    rows, live, src, num, den, seen = _ratio_rows(ND, SEEN, tl.program_id(0) * T, R, L, Lp, D, HAS_SEEN, T, BD)
    ds = tl.arange(0, BD)
    cols = (ds < D - 1)[None, :]
    g = tl.load(G + rows[:, None] * (D - 1) + ds[None, :], mask=live[:, None] & cols, other=0.0).to(num.dtype)
    gn = tl.where(seen[:, None], g / den[:, None], 0.0)
    gm = -tl.sum(gn * num, 1) / den
    tl.store(GND + src[:, None] * D + ds[None, :], gn, mask=live[:, None] & cols)
    tl.store(GND + src * D + D - 1, gm, mask=live)


# A positive kind's log-features in their linear form (the record's ``linear_log_features``): l_f(x) =
# x . w_f' + b_f - s |x|^2 / 2 (w' = s^1/2 w) in one pass over x (read in its own dtype: no float32 copy), and
# their gradient in one pass over the cotangent.
@triton.jit
def _rows_tile(X, i0, R, d, T: tl.constexpr, BX: tl.constexpr):
    """Rows i0 .. i0 + T (those below R) of an (R, d) matrix in float32 (0 elsewhere)."""
    rows = (i0 + tl.arange(0, T)).to(tl.int64)
    cols = tl.arange(0, BX)
    return tl.load(X + rows[:, None] * d + cols[None, :], mask=(rows < R)[:, None] & (cols < d)[None, :],
                   other=0.0).to(tl.float32)


@triton.jit
def _linear_features_kernel(X, W, BIAS, LF, R, d, M, HALF_S, T: tl.constexpr, F: tl.constexpr,
                            BX: tl.constexpr, PREC: tl.constexpr):
    """One tile of rows, all the features (blocks of F): x and its norm term are read and formed once."""
    i0 = tl.program_id(0) * T
    x = _rows_tile(X, i0, R, d, T, BX)
    norm = HALF_S * tl.sum(x * x, 1)
    rows = (i0 + tl.arange(0, T)).to(tl.int64)
    for f0 in range(0, M, F):
        fs = f0 + tl.arange(0, F)
        bias = tl.load(BIAS + fs, mask=fs < M, other=0.0)
        wt = tl.trans(_rows_tile(W, f0, M, d, F, BX))
        if PREC == "tf32x2":  # x exact in TF32 (bf16/fp16): w = hi + lo, hi TF32 (10-bit mantissa, nearest)
            hi = (((wt.to(tl.uint32, bitcast=True) + 0x1000) >> 13) << 13).to(tl.float32, bitcast=True)
            lf = tl.dot(x, hi, input_precision="tf32") + tl.dot(x, wt - hi, input_precision="tf32")
        else:
            lf = tl.dot(x, wt, input_precision=PREC)
        lf = lf - norm[:, None]
        tl.store(LF + rows[:, None] * M + fs[None, :], lf + bias[None, :],
                 mask=(rows < R)[:, None] & (fs < M)[None, :])


@triton.jit
def _linear_features_grad_kernel(X, W, G, GX, R, d, M, S, T: tl.constexpr, F: tl.constexpr, BX: tl.constexpr,
                                 PREC: tl.constexpr):
    """d x = G @ w' - s x sum_f G (in GX's dtype)."""
    i0 = tl.program_id(0) * T
    rows = (i0 + tl.arange(0, T)).to(tl.int64)
    acc = tl.zeros((T, BX), tl.float32)
    gs = tl.zeros((T,), tl.float32)
    for f0 in range(0, M, F):
        fs = f0 + tl.arange(0, F)
        g = tl.load(G + rows[:, None] * M + fs[None, :], mask=(rows < R)[:, None] & (fs < M)[None, :], other=0.0)
        acc += tl.dot(g, _rows_tile(W, f0, M, d, F, BX), input_precision=PREC)
        gs += tl.sum(g, 1)
    gx = acc - S * _rows_tile(X, i0, R, d, T, BX) * gs[:, None]
    cols = tl.arange(0, BX)
    tl.store(GX + rows[:, None] * d + cols[None, :], gx.to(GX.dtype.element_ty),
             mask=(rows < R)[:, None] & (cols < d)[None, :])


#: The kernels, their pointer arguments (the rest: M, D and the constexprs B, T, F, BD, PREC, and SUMMARY for the
#: key and value gradients, which add the chunk summaries' gradient in the causal operator) and their path
#: ("tile": TILE, FEATURE_BLOCK; "fast": FAST_TILE, FAST_FEATURE_BLOCK, as the chunks' own kernels), for tools
#: that compile them without launching (tests, ``benchmarks.kernel_registers``).
KERNELS = (("_forward_kernel", "Q R K V P BEF FLAG O", "tile"),
           ("_query_grad_kernel", "Q R K V P BEF FLAG G GQ", "tile"),
           ("_key_grad_kernel", "Q R K V OFF GKS FLAG G GK", "tile"),
           ("_value_grad_kernel", "Q R K OFF GKS FLAG G GV", "tile"),
           ("_state_grad_kernel", "Q R BEF G GP", "tile"),
           ("_fast_forward_kernel", "Q R K V P BEF OFF FLAG O", "fast"),
           ("_fast_query_grad_kernel", "Q R K V P BEF OFF FLAG G GQ", "fast"),
           ("_fast_key_grad_kernel", "Q R K V OFF GKS FLAG G GK", "fast"),
           ("_fast_value_grad_kernel", "Q R K OFF GKS FLAG G GV", "fast"),
           ("_row_offsets_kernel", "Q K BEF OFF R FLAG", "fast"), ("_summary_kernel", "K V OFF KS", "fast"))
#: The features' kernels (compiled apart by the tools: their arguments differ), their tile of rows and
#: feature block (:func:`_feature_meta`).
FEATURE_TILE = 64
FEATURE_KERNEL_BLOCK = 32
#: ``input_precision`` of the features' forward kernel's products, or None (the default): by x's dtype
#: (:func:`feature_products`), "tf32x2" for bfloat16/float16 x, "ieee" (float32 FMA) for float32 x.  "tf32x2":
#: two TF32 products on tensor cores, x (exact in TF32: bfloat16 and float16 have at most TF32's 10-bit
#: mantissa) times w's TF32 part (w rounded to the nearest TF32) and times the remainder (below 2^-11 |w|,
#: truncated to TF32 by the tensor cores: about 2^-21 |w| per product, near float32's 2^-24); not for float32
#: x, which TF32 would truncate (a CUDA test shows the error; :func:`feature_products` gives float32 x
#: "tf32x3" where "tf32x2" is set).  "tf32x3" (Triton's): three TF32 products, both operands split into a
#: TF32 part and a remainder (for half x the third product is of x's zero remainder).  Plain TF32 (1e-3
#: relative in l(x), which the exponentials turn into absolute errors of 1e-3 |l| in the features) is not
#: offered.  On an H100 (bf16, L = 4096, batch x heads 32, d 64, m 128; ``bench_attention
#: --feature-configs``) the forward kernel took 312 us per call with IEEE products, 106-110 with "tf32x3" on 8
#: warps, 65.5 with "tf32x3" on 4 warps and 49.5 with "tf32x2" on 4 warps (the defaults since: 2 x 60 us less
#: per causal training step); the gradient's kernel keeps IEEE products (71 us per call against 140 with
#: "tf32x3").
FEATURE_PRECISION = None
FEATURE_PRECISIONS = ("ieee", "tf32x3", "tf32x2")
#: The features' kernels' launch shapes: rows per program, feature block and warps of the forward kernel
#: (FEATURE_TILE, FEATURE_KERNEL_BLOCK above, FEATURE_NUM_WARPS) and of the gradient's (FEATURE_GRAD_*).  The
#: H100 run above (us per call, forward "tf32x2" / gradient; rows, block, warps): 64, 32, 8: 83.6 / 73.7; 64,
#: 32, 4: 49.5 / 62.4; 128, 32, 8: 49.7 / 64.4; 64, 64, 4: 57.7 / 72.3; 32, 32, 4: 107.8 / 74.1.  The gradient
#: stays on 8 warps: on 4 it spills 132 bytes on sm 80 (``benchmarks.kernel_registers``; none on sm 90).
FEATURE_NUM_WARPS = 4
FEATURE_GRAD_TILE = 64
FEATURE_GRAD_BLOCK = 32
FEATURE_GRAD_NUM_WARPS = 8
FEATURE_KERNELS = ("_linear_features_kernel", "_linear_features_grad_kernel")
#: The ratio's kernels (compiled apart by the tools: ND SEEN OUT / ND SEEN G GND, then R L Lp D and the
#: constexprs HAS_SEEN T BD) and their tile of rows.
RATIO_TILE = 32
RATIO_NUM_WARPS = 4
#: The ratio by its kernels in eager mode (False: by the torch form, as under torch.compile).
RATIO_KERNELS_ON = True
RATIO_KERNELS = ("_ratio_kernel", "_ratio_grad_kernel")
#: The scans over the chunks (:data:`SCAN_KERNELS`; compiled apart by the tools), their pointer arguments
#: (the rest: N, M, D where the kernel has it, and the constexprs F, BD where it has them).
SCAN_KERNEL_ARGS = (("_chunk_offsets_kernel", "O BEF OFF"), ("_states_kernel", "KS OFF BEF P"),
                    ("_states_adjoint_kernel", "GP OFF BEF GK"))


#: Launch each compiled kernel, after its first launch with a given specialisation, through the compiled
#: kernel's runner (Triton's launcher) instead of the JIT entry ``kernel[grid](...)``, whose binder, cache key
#: and globals check cost the host more (on an H100's host: 15.5 against 8.9 us per launch, 21 launches per
#: training step; the causal pass at L = 4096 took 2.75 against 3.64 ms); off: every launch through the JIT
#: entry.  The cache's key (:func:`_launch_key`) is at least as fine as Triton's specialisation (tensors'
#: dtypes and 16-byte alignment; integers' ==1, divisibility by 16 and 32-bit, signed or unsigned 64-bit
#: range; the constexprs and launch options; the device).  A runner that refuses the arguments (another
#: Triton's calling convention: TypeError, IndexError, ValueError or AttributeError before it launches) turns
#: the cache off for the process with a warning, and that launch goes through the JIT entry.  (Cached
#: launches skip the JIT entry's check that the kernels' global constexprs, such as ``_FLOOR``, kept their
#: values: change those only with the cache off, or clear ``_COMPILED``.)
LAUNCH_CACHE = True
_COMPILED = {}


def _arg_key(a):
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() % 16 == 0
    if isinstance(a, bool) or a is None:
        return a
    if isinstance(a, int):  # (Triton: i32 in [-2^31, 2^31), u64 in [2^63, 2^64), else i64)
        return int, a == 1, a % 16 == 0, -2 ** 31 <= a < 2 ** 31, a >= 2 ** 63
    if isinstance(a, float):
        return float
    return type(a), a  # (anything else by its value)


def _launch_key(kernel, args, meta):
    return (kernel, torch.cuda.current_device(), tuple(meta.items()), tuple(map(_arg_key, args)))


def _is_compiled(kernel):
    """Whether ``kernel`` is a kernel that Triton compiles (not the interpreter's function nor a stand-in)."""
    return type(kernel) is triton.runtime.jit.JITFunction


def _launch_cache_off(exc):
    """Turn :data:`LAUNCH_CACHE` off for the process (a runner refused its arguments), with a warning."""
    import warnings

    global LAUNCH_CACHE
    LAUNCH_CACHE = False
    _COMPILED.clear()
    warnings.warn(f"montecarlo.nn._fused: the compiled kernels' runner refused its arguments ({type(exc).__name__}: "
                  f"{exc}); LAUNCH_CACHE is off, launches go through Triton's JIT entry", RuntimeWarning,
                  stacklevel=3)


def _launch(kernel, grid, *args, **meta):
    """``kernel[grid](*args, **meta)``; with :data:`LAUNCH_CACHE` on, for a compiled kernel, the launches after
    the first of a specialisation go to the compiled kernel's runner with the constexprs appended in the
    kernel's parameter order and the grid padded to three sizes (the arguments Triton's JIT entry passes it)."""
    if not (LAUNCH_CACHE and _is_compiled(kernel)):
        kernel[grid](*args, **meta)
        return
    key = _launch_key(kernel, args, meta)
    hit = _COMPILED.get(key)
    if hit is not None:
        compiled, consts = hit
        try:
            compiled[tuple(grid) + (1,) * (3 - len(grid))](*args, *consts)  # (the runner takes three grid sizes)
            return
        except (TypeError, IndexError, ValueError, AttributeError) as exc:
            _launch_cache_off(exc)
    compiled = kernel[grid](*args, **meta)
    if not LAUNCH_CACHE:
        return
    names = kernel.arg_names[len(args):]
    if all(name in meta for name in names):
        _COMPILED[key] = (compiled, tuple(meta[name] for name in names))


def _cdiv(a, b):
    """ceil(a / b) for positive ints, in Python ints as the powers of two (:func:`_pow2`): ``triton.cdiv`` and
    ``triton.next_power_of_2`` are constexpr functions that cost microseconds per host call, dozens of which a
    training step made."""
    return -(-int(a) // int(b))


def products(half):
    """The precision of the matrix products for the module's inputs: :data:`PRECISION` where set, else "tf32"
    for half-precision inputs (``half``: bfloat16 or float16) and "ieee" for float32 ones."""
    return _setting("PRECISION", PRECISION, PRECISIONS) or ("tf32" if half else "ieee")


def _setting(name, value, allowed):
    """A precision setting of this module (``name``, its ``value``): None, or one of ``allowed`` (else a
    ValueError naming the setting and the allowed values)."""
    if value is not None and value not in allowed:
        raise ValueError(f"montecarlo.nn._fused.{name} must be None or one of {allowed}, got {value!r}")
    return value


def feature_products(dtype):
    """The ``input_precision`` of the features' forward kernel for x of ``dtype``: :data:`FEATURE_PRECISION`
    where set ("tf32x2" only for bfloat16/float16: "tf32x3" for float32), else "tf32x2" for bfloat16/float16
    and "ieee" for float32 (the gradient's kernel: IEEE)."""
    chosen = _setting("FEATURE_PRECISION", FEATURE_PRECISION, FEATURE_PRECISIONS)
    if chosen == "tf32x2" and dtype == torch.float32:  # (float32 x is not exact in TF32)
        return "tf32x3"
    return chosen or ("ieee" if dtype == torch.float32 else "tf32x2")


def _value_block(D):
    """The padded width (a power of two, at least 16) of the D - 1 value columns of a (..., D) block whose last
    column is the key mass (D = 1: no values, as the rows' offsets pass)."""
    return max(16, _pow2(max(D - 1, 1)))


def _sizes(b, M, D, fast=False):
    """Tile, feature block and padded value width of the tile path (or of the fast path: ``fast``) for
    chunks of b (a multiple of 16) positions; the fast path's feature block is :data:`FAST_FEATURE_BLOCK`
    for d_v <= 64 (any products: under IEEE products too, where it spills on sm 80/90 but an H100 timed 6.94
    against 8.39 ms with the spill-free block at L = 4096), else :data:`FAST_FEATURE_BLOCK_SPILL_FREE`."""
    BD = _value_block(D)
    if fast:
        T = math.gcd(b, FAST_TILE)
        block = FAST_FEATURE_BLOCK if BD <= 64 else FAST_FEATURE_BLOCK_SPILL_FREE
        F = max(16, min(block, _pow2(M)))
    else:
        T = min(TILE, b)
        F = max(16, min(FEATURE_BLOCK, _pow2(M)))
    return T, F, BD


def fast_chunks(qr, lk4, before, o=None):
    """The chunks' key offsets o (n, N, M: per-feature key maxima, at least -1e30, so that a chunk of padded
    keys has zero factors) and which chunks are fast (:data:`GAP`; flags (n, N) int32).  A chunk whose first
    query sees no key (running maximum -inf) is never fast; neither is one with a NaN.  ``o``: the maxima
    ``lk4.amax(2)`` where the caller has them (``qr`` is not read)."""
    with torch.no_grad():
        if o is None:
            o = lk4.amax(2)
        c0 = torch.maximum(lk4[:, :, 0], before)
        if GAP is None:
            flag = torch.zeros(o.shape[:2], dtype=torch.int32, device=o.device)
        else:
            flag = ((o - c0) <= GAP).all(-1).to(torch.int32)  # NaN compares False
        return o.clamp_min(FLOOR).contiguous(), flag


def _grids(n, N, b, M, D):
    """(grid of one program per tile, grid with feature blocks, meta) of the tile and the fast path (meta
    read-only: one per shape and sizing settings, kept, since a training step asks five times)."""
    return _grids_of(n, N, b, M, D, TILE, FEATURE_BLOCK, NUM_WARPS, FAST_TILE, FAST_FEATURE_BLOCK,
                     FAST_FEATURE_BLOCK_SPILL_FREE, FAST_NUM_WARPS)


@functools.lru_cache(maxsize=64)
def _grids_of(n, N, b, M, D, *settings):
    """:func:`_grids` for the sizing ``settings`` in force (part of the key: tests and benchmarks set them)."""
    out = []
    for fast in (False, True):
        T, F, BD = _sizes(b, M, D, fast)
        meta = types.MappingProxyType(dict(B=b, T=T, F=F, BD=BD, num_warps=FAST_NUM_WARPS if fast else NUM_WARPS))
        out.append(((n * N, b // T), (n * N, b // T, _cdiv(M, F)), meta))
    return tuple(out)


def _launch_forward(qr, r, lk4, v4, P, before, off, flag, precision):
    """The within-chunk part (both paths) from the query log-features ``qr`` less the rows' offsets ``r``."""
    n, N, b, M = qr.shape
    D = v4.shape[-1] + 1  # (numerators and the key mass)
    out = torch.empty((n, N, b, D), dtype=qr.dtype, device=v4.device)
    (tiles, _, meta), (ftiles, _, fmeta) = _grids(n, N, b, M, D)
    _launch(_forward_kernel, tiles, qr, r, lk4, v4, P, before, flag, out, M, D, PREC=precision, **meta)
    _launch(_fast_forward_kernel, ftiles, qr, r, lk4, v4, P, before, off, flag, out, M, D, PREC=precision, **fmeta)
    return out


def _launch_backward(qr, r, lk4, v4, P, before, off, flag, G, precision, summaries=False):
    """The within-chunk part's gradients (gq, gk, gv, gP); with ``summaries`` (the causal operator: the states
    P formed from the chunks' summaries, with the chunks' key offsets ``off``), the summaries' gradient too,
    added to gk and gv by the key and value kernels (the states' gradient and its adjoint first)."""
    n, N, b, M = qr.shape
    D = v4.shape[-1] + 1
    G = G.contiguous()
    gq, gk, gP = torch.empty_like(qr), torch.empty_like(lk4), torch.empty_like(P)
    gv = torch.empty(v4.shape, dtype=v4.dtype, device=v4.device)  # (bf16/fp16 values: rounded once, in the store)
    (tiles, blocks, meta), (ftiles, fblocks, fmeta) = _grids(n, N, b, M, D)
    _launch(_state_grad_kernel, (n * N, 1, blocks[2]), qr, r, before, G, gP, M, D, PREC=precision, **meta)
    summary = summaries and N > 1  # (one chunk: a zero state, no summary read)
    dK = _states_adjoint(gP, off, before, fmeta["BD"]) if summary else gP  # (not read without summaries)
    _launch(_query_grad_kernel, blocks, qr, r, lk4, v4, P, before, flag, G, gq, M, D, PREC=precision, **meta)
    _launch(_key_grad_kernel, blocks, qr, r, lk4, v4, off, dK, flag, G, gk, M, D, PREC=precision, SUMMARY=summary,
            **meta)
    _launch(_value_grad_kernel, tiles, qr, r, lk4, off, dK, flag, G, gv, M, D, PREC=precision, SUMMARY=summary,
            **meta)
    _launch(_fast_query_grad_kernel, fblocks, qr, r, lk4, v4, P, before, off, flag, G, gq, M, D, PREC=precision,
            **fmeta)
    _launch(_fast_key_grad_kernel, fblocks, qr, r, lk4, v4, off, dK, flag, G, gk, M, D, PREC=precision,
            SUMMARY=summary, **fmeta)
    _launch(_fast_value_grad_kernel, ftiles, qr, r, lk4, off, dK, flag, G, gv, M, D, PREC=precision,
            SUMMARY=summary, **fmeta)
    return gq, gk, gv, gP


def _contiguous(*xs):
    return tuple(x.contiguous() for x in xs)


# Registered as torch custom operators, so that torch.compile calls the kernels as opaque operators (and fuses
# the elementwise work around them) instead of tracing into Triton's launcher.
@torch.library.custom_op("simplex_rf::causal_chunk", mutates_args=())
def _within_op(qr: torch.Tensor, lk4: torch.Tensor, v4: torch.Tensor, P: torch.Tensor,
               before: torch.Tensor, precision: str) -> torch.Tensor:
    qr, lk4, v4, P, before = _contiguous(qr, lk4, v4, P, before)
    off, flag = fast_chunks(qr, lk4, before)
    return _launch_forward(qr, torch.zeros(qr.shape[:3], dtype=qr.dtype, device=qr.device), lk4, v4, P, before,
                           off, flag, precision)


@_within_op.register_fake
def _(qr, lk4, v4, P, before, precision):
    return torch.empty((*v4.shape[:-1], v4.shape[-1] + 1), dtype=v4.dtype, device=v4.device)


@torch.library.custom_op("simplex_rf::causal_chunk_backward", mutates_args=())
def _within_backward_op(qr: torch.Tensor, lk4: torch.Tensor, v4: torch.Tensor, P: torch.Tensor,
                        before: torch.Tensor, G: torch.Tensor, precision: str
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    qr, lk4, v4, P, before = _contiguous(qr, lk4, v4, P, before)
    off, flag = fast_chunks(qr, lk4, before)
    return _launch_backward(qr, torch.zeros(qr.shape[:3], dtype=qr.dtype, device=qr.device), lk4, v4, P, before,
                            off, flag, G, precision)


@_within_backward_op.register_fake
def _(qr, lk4, v4, P, before, G, precision):
    return tuple(torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (qr, lk4, v4, P))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:5])
    ctx.precision = inputs[5]


def _backward(ctx, G):
    # the offsets `before` are constants; the precision is no tensor
    return (*_within_backward_op(*ctx.saved_tensors, G, ctx.precision), None, None)


_within_op.register_autograd(_backward, setup_context=_setup_context)


def _eager(*tensors):
    """Whether the operators below run as plain functions (with an autograd.Function where they have a
    gradient): in eager mode on plain tensors, where the custom operators' dispatch cost about 45 us of host
    time per call (7 calls per causal training step, a quarter of the host's work: benchmarks/README); not
    under torch.compile or other tracing, nor for tensor subclasses (fake tensors), which need the registered
    operators (their fake implementations; opaque calls instead of traces into Triton's launcher)."""
    return not _probes._compiling() and all(type(t) is torch.Tensor for t in tensors)


def _chunk_offsets_impl(lq4: torch.Tensor, lk4: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    lq4, lk4 = _contiguous(lq4, lk4)
    n, N, b, M = lq4.shape
    o = lk4.amax(2)
    if SCAN_KERNELS:
        before, off = torch.empty_like(o), torch.empty_like(o)
        _launch(_chunk_offsets_kernel, (n, _cdiv(M, SCAN_BLOCK)), o, before, off, N, M, F=SCAN_BLOCK,
                num_warps=SCAN_NUM_WARPS)
    else:
        before, off = _ops._exclusive_cummax(o, 1, -math.inf), o.clamp_min(FLOOR)
    r = torch.empty((n, N, b), dtype=lq4.dtype, device=lq4.device)
    flag = torch.empty((n, N), dtype=torch.int32, device=lq4.device)
    tiles, _, meta = _grids(n, N, b, M, 1)[1]  # (the fast path's tiles; no values)
    _launch(_row_offsets_kernel, tiles, lq4, lk4, before, off, r, flag, M, 1, PREC="ieee", GAP=GAP, **meta)
    return r, before, off, flag


_chunk_offsets_op = torch.library.custom_op("simplex_rf::chunk_offsets", mutates_args=())(_chunk_offsets_impl)


@_chunk_offsets_op.register_fake
def _(lq4, lk4):
    n, N, b, M = lq4.shape
    stats = torch.empty((n, N, M), dtype=lk4.dtype, device=lk4.device)
    return (torch.empty((n, N, b), dtype=lq4.dtype, device=lq4.device), stats, torch.empty_like(stats),
            torch.empty((n, N), dtype=torch.int32, device=lq4.device))


def _states(lk4, v4, off, before, precision):
    """The chunks' prefix states (n, N, M, D), offsets ``before`` (at least the floor), from their summaries."""
    n, N, b, M = lk4.shape
    D = v4.shape[-1] + 1
    K = torch.empty((n, N, M, D), dtype=lk4.dtype, device=lk4.device)
    if N == 1:
        return K.zero_()
    _, blocks, meta = _grids(n, N, b, M, D)[1]  # (fast path's shapes, by feature block)
    _launch(_summary_kernel, (n * N, 1, blocks[2]), lk4, v4, off, K, M, D, PREC=precision, **meta)
    return _prefix_states(K, off, before, meta["BD"])


def _prefix_states(K, off, before, BD):
    """The exclusive prefix states (n, N, M, D) of the chunk summaries K (offsets ``off``) with offsets
    ``before`` (at least the floor): by the scan kernel, else (:data:`SCAN_KERNELS` off) by
    :func:`montecarlo.nn._prefix_states`."""
    if not SCAN_KERNELS:
        return _scan._prefix_states(K, off, before, FLOOR).contiguous()  # (the kernels index raw memory)
    n, N, M, D = K.shape
    P = torch.empty_like(K)
    _launch(_states_kernel, (n, _cdiv(M, SCAN_BLOCK)), K, off, before, P, N, M, D, F=SCAN_BLOCK, BD=BD,
            num_warps=SCAN_NUM_WARPS)
    return P


def _states_adjoint(gP, off, before, BD):
    """The summaries' cotangent (n, N, M, D) from the states' ``gP`` (the adjoint of :func:`_prefix_states`)."""
    if not SCAN_KERNELS:
        return _scan._prefix_states_adjoint(gP, off, before, FLOOR).contiguous()
    n, N, M, D = gP.shape
    gP, dK = gP.contiguous(), torch.empty_like(gP)
    _launch(_states_adjoint_kernel, (n, _cdiv(M, SCAN_BLOCK)), gP, off, before, dK, N, M, D, F=SCAN_BLOCK,
            BD=BD, num_warps=SCAN_NUM_WARPS)
    return dK


def _causal_impl(lq4: torch.Tensor, lk4: torch.Tensor, v4: torch.Tensor, r: torch.Tensor, before: torch.Tensor,
                 off: torch.Tensor, flag: torch.Tensor, precision: str) -> tuple[torch.Tensor, torch.Tensor]:
    lq4, lk4, v4, r, before = _contiguous(lq4, lk4, v4, r, before)
    P = _states(lk4, v4, off, before, precision)
    return _launch_forward(lq4, r, lk4, v4, P, before, off, flag, precision), P


_causal_op = torch.library.custom_op("simplex_rf::causal", mutates_args=())(_causal_impl)


@_causal_op.register_fake
def _(lq4, lk4, v4, r, before, off, flag, precision):
    n, N, b, M = lq4.shape
    D = v4.shape[-1] + 1
    return (torch.empty((n, N, b, D), dtype=lq4.dtype, device=v4.device),
            torch.empty((n, N, M, D), dtype=lq4.dtype, device=v4.device))


def _causal_backward_impl(lq4: torch.Tensor, lk4: torch.Tensor, v4: torch.Tensor, r: torch.Tensor,
                          before: torch.Tensor, off: torch.Tensor, flag: torch.Tensor, P: torch.Tensor,
                          G: torch.Tensor, precision: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lq4, lk4, v4, r, before = _contiguous(lq4, lk4, v4, r, before)
    gq, gk, gv, _ = _launch_backward(lq4, r, lk4, v4, P, before, off, flag, G, precision, summaries=True)
    return gq, gk, gv


_causal_backward_op = torch.library.custom_op("simplex_rf::causal_backward", mutates_args=())(_causal_backward_impl)


@_causal_backward_op.register_fake
def _(lq4, lk4, v4, r, before, off, flag, P, G, precision):
    return tuple(torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (lq4, lk4, v4))


def _causal_setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:7], output[1])
    ctx.precision = inputs[7]
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)  # (no zero-filled cotangent for the states)


def _causal_grads(ctx, G, backward):
    """The causal operator's gradients by ``backward`` (the backward operator, or its implementation in eager
    mode): r, before, off and flag are constants (the offsets cancel, and r is the caller's: see causal())."""
    if G is None:
        return (None,) * 8
    if torch.is_grad_enabled():  # backward(create_graph=True): through the torch levels, differentiable again
        lq4, lk4, v4 = ctx.saved_tensors[:3]
        neg = _ops._very_negative(lq4.dtype)
        grads = _ops._differentiable_vjp(lambda a, b, c: _scan._unfused(a, b, _ops._with_ones(c.to(a.dtype)), neg,
                                                                        True, True),
                                         (lq4, lk4, v4), G, ctx.needs_input_grad[:3])
        return (*grads, None, None, None, None, None)
    return (*backward(*ctx.saved_tensors, G, ctx.precision), None, None, None, None, None)


def _causal_backward(ctx, G, _):
    return _causal_grads(ctx, G, _causal_backward_op)


_causal_op.register_autograd(_causal_backward, setup_context=_causal_setup_context)


class _CausalEager(torch.autograd.Function):
    """The causal operator in eager mode (:func:`_eager`): the chunks' offsets, then the same implementation,
    context and gradients (the offsets inside forward, where autograd records nothing: no detached copies)."""

    # (the context is set up inside forward: a separate setup_context cost about 25 us more per call)
    @staticmethod
    def forward(ctx, lq4, lk4, v4, precision):
        inputs = (lq4, lk4, v4, *_chunk_offsets_impl(lq4, lk4), precision)
        out = _causal_impl(*inputs)
        _causal_setup_context(ctx, inputs, out)
        return out

    @staticmethod
    def backward(ctx, G, _):
        return (*_causal_grads(ctx, G, _causal_backward_impl)[:3], None)


def _check_precision(precision):
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


def _check_like(ref, tensors):
    """Each of the ``tensors`` (name, tensor) has the dtype and device of ``ref`` (name, tensor): ValueError."""
    what, like = ref
    for name, x in tensors:
        if x.dtype != like.dtype or x.device != like.device:
            raise ValueError(f"{name} must have {what}'s dtype and device ({like.dtype}, {like.device}), got "
                             f"{x.dtype}, {x.device}")


def _check_shapes(first, v4, shapes, tensors=()):
    """The kernels index raw memory: every shape is checked against the first log-features' and v4's, and the
    ``tensors`` (name, tensor) against v4's dtype and device (one kernel reads them all with one type)."""
    _check_like(("v4", v4), tensors)
    for name, (got, want) in shapes.items():
        if tuple(got) != want:
            raise ValueError(f"{name} must have shape {want} ({first[0]} is {tuple(first[1])}, v4 "
                             f"{tuple(v4.shape)}), got {tuple(got)}")


def _half_values(lq4, v4):
    """Whether the causal operator reads v4 in bfloat16/float16 (the module's dtype: no float32 copy) beside
    float32 log-features, on their device."""
    return lq4.dtype == torch.float32 and v4.dtype in (torch.bfloat16, torch.float16) and v4.device == lq4.device


def chunk_offsets(lq4, lk4):
    """The chunks' offsets of the causal scan, (r, before, off, flag), none with a gradient: the rows' offsets r
    (n, N, b), ``r_i = max_f(lq_if + c_if)``, at least -1e30, with c_if = max(before_f, max_{j <= i} lk_jf)
    the running maximum of the keys, so that ``lq - r + lk <= 0`` for every key a query reads; ``before``
    (n, N, M) the per-feature maxima over the earlier chunks (-inf at the first); ``off`` the chunks' own
    key maxima, at least -1e30; ``flag`` (n, N) int32 which chunks are fast (:func:`fast_chunks`).  Two
    kernels after the maxima (:data:`SCAN_KERNELS`: the offsets over the chunks by a scan kernel, else by
    torch's cummax); the flag and r by one."""
    n, N, b, M = lq4.shape
    _check_shapes(("lq4", lq4.shape), lk4, {"lk4": (lk4.shape, (n, N, b, M))})
    lq4, lk4 = lq4.detach(), lk4.detach()
    return (_chunk_offsets_impl if _eager(lq4, lk4) else _chunk_offsets_op)(lq4, lk4)


def causal(lq4, lk4, v4, precision="ieee"):
    r"""The unnormalised causal scan in one operator: numerators and key masses (n, N, b, D) of
    :math:`\sum_{j \le i} \sum_f e^{\ell_f(q_i) - r_i + \ell_f(k_j)} [v_j, 1]` over every key up to the query
    (earlier chunks through their prefix states), from the log-features ``lq4``, ``lk4`` (n, N, b, M; padded
    keys -inf) and the values ``v4`` (n, N, b, D - 1; no ones column: the kernels sum the scores for the key
    mass; in the log-features' dtype, or bfloat16/float16 beside float32 ones, read as it is: no float32
    copy), with the rows' offsets r of :func:`chunk_offsets`.  Inside: the chunks' key maxima, the offsets
    over the earlier chunks, which chunks are fast (:func:`fast_chunks`) and r (constants: every offset but
    r cancels, and r cancels in the ratio numerator / mass that the caller forms), the chunks' summaries (a
    kernel), their prefix states (a scan kernel, :data:`SCAN_KERNELS`) and the two paths' kernels; the
    backward the same kernels plus the states' adjoint, and the summaries' gradient in the key and value
    kernels, so that no (n, L, m) tensor is formed outside the kernels but the maxima's reads.  Differentiable
    in lq4, lk4 and v4 (r held constant); ``precision`` as in :func:`within`."""
    _check_precision(precision)
    n, N, b, M = lq4.shape
    _check_shapes(("lq4", lq4.shape), v4, {"lk4": (lk4.shape, (n, N, b, M)),
                                           "v4": (v4.shape, (n, N, b, v4.shape[-1]))})
    _check_like(("lq4", lq4), [("lk4", lk4)])
    if not (_half_values(lq4, v4) or (v4.dtype == lq4.dtype and v4.device == lq4.device)):
        raise ValueError(f"v4 must have lq4's dtype and device ({lq4.dtype}, {lq4.device}), or be bfloat16/float16 "
                         f"beside float32 log-features, got {v4.dtype}, {v4.device}")
    if _eager(lq4, lk4, v4):
        return _CausalEager.apply(lq4, lk4, v4, precision)[0]
    return _causal_op(lq4, lk4, v4, *chunk_offsets(lq4, lk4), precision)[0]


def within(qr, lk4, v4, P=None, before=None, precision="ieee"):
    """Numerators and key masses (n, N, b, D) of each query's chunk and, with the prefix states ``P``
    (n, N, M, D; offsets ``before`` (n, N, M), the per-feature maxima over the earlier chunks), of the earlier
    chunks: ``sum_{j <= i in the chunk} sum_f e^{qr_if + lk_jf} v_j + sum_f e^{qr_if + before_f} P_f``.  From
    ``qr`` = l(q) - r, ``lk4`` (n, N, b, M) and the values ``v4`` (n, N, b, D - 1; the key mass, the last
    column of the result, is the row sums of the scores: no ones column is stored); differentiable in qr,
    lk4, v4 and P (``before`` is a constant).  P None: a zero state (no earlier chunks); before None: -inf.
    ``precision``: the matrix products' ``input_precision``, one of :data:`PRECISIONS`.  The kernels' entry
    with the states given (tests); :func:`causal` forms them."""
    _check_precision(precision)
    n, N, b, M = qr.shape
    D = v4.shape[-1] + 1
    if P is None:
        P = torch.zeros((n, N, M, D), dtype=v4.dtype, device=v4.device)
    if before is None:
        before = torch.full((n, N, M), -torch.inf, dtype=qr.dtype, device=qr.device)
    _check_shapes(("qr", qr.shape), v4, {"lk4": (lk4.shape, (n, N, b, M)), "v4": (v4.shape, (n, N, b, D - 1)),
                                         "P": (P.shape, (n, N, M, D)), "before": (before.shape, (n, N, M))},
                  (("qr", qr), ("lk4", lk4), ("P", P), ("before", before)))
    return _within_op(qr, lk4, v4, P, before, precision)


def _feature_meta(d, M, precision, grad=False):
    """Tile, feature block, padded width, warps and products of the features' kernels (``precision`` one of
    :data:`FEATURE_PRECISIONS`): the forward's rows 64 x features 32 (:data:`FEATURE_KERNEL_BLOCK`) on 4 warps
    spill nothing on sm 80/90 at d = 64 (``benchmarks.kernel_registers``: 159 / 238 registers per thread with
    "tf32x2", 128 / 255 with IEEE products, sm 90 / 80; earlier, on 8 warps, features 64 spilled under IEEE on
    sm 80 and 372 bytes under "tf32x3", 128 on both); the gradient's kernel (``grad``) by the FEATURE_GRAD_*
    settings (rows 64 x features 32 on 8 warps: about 100 registers, no spill; on 4 warps 132 bytes on sm 80)."""
    tile, block, warps = ((FEATURE_GRAD_TILE, FEATURE_GRAD_BLOCK, FEATURE_GRAD_NUM_WARPS) if grad else
                          (FEATURE_TILE, FEATURE_KERNEL_BLOCK, FEATURE_NUM_WARPS))
    return dict(T=tile, F=max(16, min(block, _pow2(M))), BX=max(16, _pow2(d)), num_warps=warps, PREC=precision)


def _linear_features_impl(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    x, w, bias = _contiguous(x, w, bias)
    d, M = x.shape[-1], w.shape[0]
    lf = torch.empty((*x.shape[:-1], M), dtype=torch.float32, device=x.device)  # (no views: x's leading shape)
    R = lf.numel() // M if M else 0
    if R == 0:  # (no programs to launch)
        return lf
    meta = _feature_meta(d, M, feature_products(x.dtype))
    _launch(_linear_features_kernel, (_cdiv(R, meta["T"]),), x, w, bias, lf, R, d, M, 0.5 * scale, **meta)
    return lf


_linear_features_op = torch.library.custom_op("simplex_rf::linear_log_features", mutates_args=())(
    _linear_features_impl)


@_linear_features_op.register_fake
def _(x, w, bias, scale):
    return torch.empty((*x.shape[:-1], w.shape[0]), dtype=torch.float32, device=x.device)


def _linear_features_backward_impl(x: torch.Tensor, w: torch.Tensor, G: torch.Tensor, scale: float) -> torch.Tensor:
    x, w, G = _contiguous(x, w, G)
    d = x.shape[-1]
    R = x.numel() // d if d else 0
    gx = torch.empty_like(x)
    if R == 0:
        return gx
    meta = _feature_meta(d, w.shape[0], "ieee", grad=True)  # (an H100 timed "tf32x3" here at twice IEEE's)
    _launch(_linear_features_grad_kernel, (_cdiv(R, meta["T"]),), x, w, G, gx, R, d, w.shape[0], scale, **meta)
    return gx


_linear_features_backward_op = torch.library.custom_op("simplex_rf::linear_log_features_backward",
                                                       mutates_args=())(_linear_features_backward_impl)


@_linear_features_backward_op.register_fake
def _(x, w, G, scale):
    return torch.empty_like(x)


def _linear_features_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.scale = inputs[3]


def _linear_features_grads(ctx, G, backward):
    """The features' gradient in x by ``backward`` (the backward operator, or its implementation in eager
    mode); with create_graph by torch operations."""
    x, w = ctx.saved_tensors
    if torch.is_grad_enabled():  # backward(create_graph=True): the same gradient by torch operations
        return (G @ w - ctx.scale * G.sum(-1, keepdim=True) * x.float()).to(x.dtype), None, None, None
    return backward(x, w, G, ctx.scale), None, None, None


def _linear_features_backward(ctx, G):
    return _linear_features_grads(ctx, G, _linear_features_backward_op)


_linear_features_op.register_autograd(_linear_features_backward, setup_context=_linear_features_setup)


class _LinearFeaturesEager(torch.autograd.Function):
    """The features' operator in eager mode (:func:`_eager`)."""

    @staticmethod
    def forward(ctx, x, w, bias, scale):
        out = _linear_features_impl(x, w, bias, scale)
        _linear_features_setup(ctx, (x, w, bias, scale), out)
        return out

    @staticmethod
    def backward(ctx, G):
        return _linear_features_grads(ctx, G, _linear_features_backward_impl)


def linear_log_features(x, w, bias, scale):
    r"""A positive kind's log-features of the softmax kernel in their linear form (the kind record's
    ``linear_log_features`` hook gives w and b; the map at :math:`x' = s^{1/2} x`): :math:`\ell_f(x) =
    s^{1/2} w_f \cdot x + b_f - s\|x\|^2/2`, float32 (..., L, m), from x (..., L, d) in float32, bfloat16 or
    float16 (read as it is: no float32 copy), the rows w (m, d) float32 and the constants b (a number or float32
    broadcastable to (m,)), in one kernel; differentiable in x (the gradient in x's dtype), not in w or b."""
    return linear_log_features_of((x,), w, bias, scale)[0]


def linear_log_features_of(xs, w, bias, scale):
    """:func:`linear_log_features` of each tensor of ``xs`` (queries and keys) with one set of rows and
    constants, which are scaled and laid out once (a tuple of results): :func:`scaled_log_features` with
    :func:`feature_rows`."""
    return scaled_log_features(xs, *feature_rows(w, bias, scale), scale)


def feature_rows(w, bias, scale):
    """The features' kernel's rows :math:`s^{1/2} w` (m, d) and constants b (m,), float32 and detached, from a
    kind's linear form: w (m, d) float32 and b (a number or float32 broadcastable to (m,)).  Two torch operators;
    a caller whose w and b stay put (a module between redraws) keeps them for :func:`scaled_log_features`."""
    if not isinstance(w, torch.Tensor) or w.dtype != torch.float32 or w.dim() != 2:
        raise ValueError(f"w must be a float32 (m, d) tensor, got {describe(w)}")
    M = w.shape[0]
    if isinstance(bias, torch.Tensor):
        if bias.dtype != torch.float32 or bias.device != w.device:
            raise ValueError(f"bias must be float32 on {w.device}, got {bias.dtype} on {bias.device}")
        b = torch.broadcast_to(bias.detach(), (M,))
    else:
        b = torch.full((M,), float(bias), dtype=torch.float32, device=w.device)
    return w.detach() * math.sqrt(scale), b


def scaled_log_features(xs, ws, b, scale):
    """:func:`linear_log_features` of each tensor of ``xs`` from the rows and constants of
    :func:`feature_rows` (``ws`` = s^{1/2} w, ``b``): one kernel per tensor, no other torch operator (the
    results have the inputs' leading shapes; a tuple)."""
    xs = tuple(xs)
    for x in xs:
        if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
        if x.dim() < 1 or x.shape[-1] != ws.shape[-1] or x.device != ws.device:
            raise ValueError(f"x (..., d) and w (m, d) must share d and the device, got {tuple(x.shape)} on "
                             f"{x.device} and {tuple(ws.shape)} on {ws.device}")
    if b.shape != (ws.shape[0],) or b.dtype != torch.float32:
        raise ValueError(f"b must be float32 of shape ({ws.shape[0]},) (feature_rows), got {b.dtype} "
                         f"{tuple(b.shape)}")
    op = _LinearFeaturesEager.apply if _eager(*xs, ws, b) else _linear_features_op
    return tuple(op(x, ws, b, float(scale)) for x in xs)


def _ratio_launch(nd, seen, L):
    """(grid, arguments after the pointers, constexprs) of the ratio's kernels for nd (n, Lp, D) or (n, N, b, D)."""
    n, D = nd.shape[0], nd.shape[-1]
    Lp = nd.numel() // (n * D)
    meta = dict(HAS_SEEN=seen is not None, T=RATIO_TILE, BD=_value_block(D), num_warps=RATIO_NUM_WARPS)
    return (_cdiv(n * L, RATIO_TILE),), (n * L, L, Lp, D), meta


def _seen_rows(seen, n, L):
    return None if seen is None else seen.expand(n, L, 1).reshape(n * L).contiguous().view(torch.uint8)


class _RatioEager(torch.autograd.Function):
    """:class:`montecarlo.nn._Ratio` of the causal scan's rows by the ratio's kernels (eager mode)."""

    @staticmethod
    def forward(ctx, nd, seen, L, dtype, shape):
        out = torch.empty(shape, dtype=dtype, device=nd.device)
        grid, sizes, meta = _ratio_launch(nd, seen, L)
        rows = _seen_rows(seen, nd.shape[0], L)
        _launch(_ratio_kernel, grid, nd, rows, out, *sizes, **meta)
        ctx.save_for_backward(nd, seen, rows)  # (the bool mask for create_graph, its rows for the kernel)
        ctx.L = L
        return out

    @staticmethod
    def backward(ctx, g):
        nd, seen, rows = ctx.saved_tensors
        L = ctx.L
        if torch.is_grad_enabled():  # backward(create_graph=True): the torch form, differentiable again
            n, D = nd.shape[0], nd.shape[-1]
            nd3 = nd.reshape(n, -1, D)
            G = _ops._Ratio.cotangent(nd3[:, :L], seen, g.reshape(n, L, D - 1).to(nd.dtype))
            return torch.nn.functional.pad(G, (0, 0, 0, nd3.shape[1] - L)).reshape(nd.shape), None, None, None, None
        grid, sizes, meta = _ratio_launch(nd, seen, L)
        Lp = sizes[2]
        gnd = (torch.empty_like if Lp == L else torch.zeros_like)(nd)  # (padded rows: zero)
        _launch(_ratio_grad_kernel, grid, nd, rows, g.contiguous(), gnd, *sizes, **meta)
        return gnd, None, None, None, None


def ratio(nd, seen, L, dtype, shape=None):
    """num / den of the causal scan's output rows (montecarlo.nn._Ratio) for nd (n, Lp, D) or (n, N, b, D)
    float32, the first L of each sequence's Lp = N b rows, ``seen`` (n, L, 1) bool or None (rows that see no
    key: 0, zero gradient), in ``dtype``, of ``shape`` (n L (D - 1) entries; None: (n, L, D - 1)); in eager
    mode by the ratio's kernels (:data:`RATIO_KERNELS_ON`), which write that shape directly, else by the torch
    form."""
    n, D = nd.shape[0], nd.shape[-1]
    shape = (n, L, D - 1) if shape is None else tuple(shape)
    if math.prod(shape) != n * L * (D - 1):
        raise ValueError(f"shape must hold n L (D - 1) = {n * L * (D - 1)} entries, got {shape}")
    if not (RATIO_KERNELS_ON and _eager(nd)):
        return _ops._Ratio.apply(nd.reshape(n, -1, D)[:, :L], seen).to(dtype).reshape(shape)
    return _RatioEager.apply(nd.contiguous(), seen, L, dtype, shape)
