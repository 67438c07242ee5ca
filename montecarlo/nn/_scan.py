"""The causal scan of :mod:`montecarlo.nn` by torch operations: the chunks' prefix states (a batched product,
a log-depth scan or a loop over the chunks) and the dyadic levels within each chunk, with their hand-written
backward passes."""

from __future__ import annotations

import math

import torch

from montecarlo.nn._ops import _call, _differentiable_vjp, _exclusive_cummax, _with_jvp
from montecarlo.nn._probes import _transformed


#: Largest block length whose within-chunk scores are formed directly (s x s); longer blocks are summarised as
#: an (m, d_v) state (cheaper from about s = m d_v / (m + d_v)).
DIRECT_BLOCK = 32
#: Off the CPU the earlier chunks' prefix states come from one batched product while the number of chunks N is
#: at most this times d_v + 1 (its (n, m, N, N) factors then hold no more entries than the chunk summaries),
#: else from the log-depth scan.
PRODUCT_STATES = 1.0
#: Inference on the CPU works through the chunks in groups of about this many log-feature entries (the
#: temporaries of the within-chunk levels are a few times a group; the result is the same for any group).
GROUP_ENTRIES = 1 << 22


def _scan_states(K, oc):
    r"""Exclusive prefix states of the chunk summaries by a log-depth scan (no loop over the chunks).

    ``K`` (n, N, M, D) holds each chunk's keys summarised with the chunk's own per-feature offset ``oc``
    (n, N, M).  The pairs (offset O, state P) combine associatively as
    :math:`(O_1, P_1)\oplus(O_2, P_2) = (O, P_1 e^{O_1 - O} + P_2 e^{O_2 - O})`, :math:`O = \max(O_1, O_2)`
    (every factor <= 1); ceil(log2 N) Hillis-Steele steps give the inclusive states, shifted by one chunk to
    the exclusive ones, whose offsets are the maxima over the earlier chunks (``before``).  Offsets are
    detached constants; the states carry the gradient.  Used on accelerators and under ``torch.compile``:
    a handful of launches per step instead of one per chunk."""
    N = K.shape[1]
    O, P = oc, K
    s = 1
    while s < N:
        with torch.no_grad():
            Onew = torch.maximum(O[:, :-s], O[:, s:])
            fa = torch.exp(O[:, :-s] - Onew).unsqueeze(-1)
            fb = torch.exp(O[:, s:] - Onew).unsqueeze(-1)
            O = torch.cat([O[:, :s], Onew], 1)
        P = torch.cat([P[:, :s], P[:, :-s] * fa + P[:, s:] * fb], 1)
        s *= 2
    return torch.cat([torch.zeros_like(P[:, :1]), P[:, :-1]], 1)


def _product_states(K, oc, before, neg):
    r"""The same exclusive prefix states as :func:`_scan_states` by one batched matrix product over the chunks:
    :math:`P_c = \sum_{c' < c} e^{O_{c'} - B_c} K_{c'}` with :math:`O` = ``oc`` and :math:`B_c` = ``before``
    (the maximum of the earlier chunks' offsets; at least ``neg``, as ``oc``), so every factor is <= 1.  The
    (n, M, N, N) factors hold N / D times K's entries: used while N <= :data:`PRODUCT_STATES` D (a few launches
    instead of the scan's dozens of small ones)."""
    return (_product_weights(oc, before, neg) @ K.transpose(1, 2)).transpose(1, 2)


def _product_weights(oc, before, neg):
    """The factors (n, M, c, c') of :func:`_product_states`: e^{O_c' - B_c} for c' < c, else 0."""
    N = oc.shape[1]
    with torch.no_grad():
        B = before.clamp_min(neg).transpose(1, 2).unsqueeze(-1)  # (n, M, N, 1)
        earlier = torch.ones(N, N, dtype=torch.bool, device=oc.device).tril(-1)  # c' < c
        return torch.where(earlier, oc.transpose(1, 2).unsqueeze(-2) - B, -math.inf).exp_()


def _by_product(x):
    """Whether the prefix states of x's chunks ((n, N, M, D): summaries or their cotangents) are formed by the
    batched product: N <= :data:`PRODUCT_STATES` D."""
    return x.shape[1] <= PRODUCT_STATES * x.shape[-1]


def _prefix_states(K, oc, before, neg):
    """The exclusive prefix states of the chunk summaries K (offsets ``oc``) with offsets ``before``: by the
    product (:func:`_product_states`) while :func:`_by_product`, else by the scan."""
    if _by_product(K):
        return _product_states(K, oc, before, neg)
    return _scan_states(K, oc)


def _prefix_states_adjoint(dP, oc, before, neg):
    r"""The gradient of :func:`_prefix_states` (a linear map of K) for the states' cotangent ``dP``:
    :math:`dK_{c'} = \sum_{c > c'} e^{O_{c'} - B_c} dP_c`.  By the product's transpose, or by the scan run
    backwards over the chunks with offsets :math:`-B` (non-increasing: the reversed scan's offset over the
    chunks after c' is :math:`-B_{c'+1}`), scaled by :math:`e^{O_{c'} - B_{c'+1}} \le 1`."""
    if _by_product(dP):
        return (_product_weights(oc, before, neg).transpose(-1, -2) @ dP.transpose(1, 2)).transpose(1, 2)
    with torch.no_grad():
        B = before.clamp_min(neg)
        S = _scan_states(dP.flip(1), (-B).flip(1)).flip(1)  # sum_{c > c'} e^{B_{c'+1} - B_c} dP_c
        scale = torch.exp(oc[:, :-1] - B[:, 1:]).unsqueeze(-1)
        return torch.cat([S[:, :-1] * scale, torch.zeros_like(S[:, -1:])], 1)


def _loop_states(K, decay):
    """The same exclusive prefix states by the recursion over chunks, P_{c+1} = P_c decay_c + K_c: one
    step per chunk, with autograd through :class:`_LoopStates` (whose backward is the recursion run backwards:
    linear in the number of chunks)."""
    return _call(_LoopStates, _LoopStatesJvp, K, decay)


def _loop_recursion(K, decay):
    """The recursion of :func:`_loop_states` by torch operations (differentiable: autograd, torch.func)."""
    states = [torch.zeros_like(K[:, 0])]
    for i in range(K.shape[1] - 1):
        states.append(torch.addcmul(K[:, i], states[-1], decay[:, i].unsqueeze(-1)))
    return torch.stack(states, dim=1)


class _LoopStates(torch.autograd.Function):
    r"""The exclusive prefix states :math:`P_0 = 0`, :math:`P_{c+1} = P_c\,\delta_c + K_c` (K (n, N, M, D),
    ``decay`` :math:`\delta` (n, N, M), a constant) written into one buffer, with the backward by the recursion
    run backwards into one gradient buffer: :math:`A_{N-1} = dP_{N-1}`, :math:`A_c = dP_c + A_{c+1}\delta_c`,
    :math:`dK_c = A_{c+1}` (:math:`dK_{N-1} = 0`).  Autograd's own backward of the loop zero-filled a full-size
    gradient of K at every chunk's select, which made the causal backward quadratic in L.  A backward with
    ``create_graph`` or under torch.func runs through autograd of :func:`_loop_recursion` instead."""

    generate_vmap_rule = True

    @staticmethod
    def forward(K, decay):
        P = torch.empty_like(K)
        P[:, 0] = 0.0
        for c in range(K.shape[1] - 1):
            torch.addcmul(K[:, c], P[:, c], decay[:, c].unsqueeze(-1), out=P[:, c + 1])
        return P

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, dP):
        K, decay = ctx.saved_tensors
        if _transformed() or torch.is_grad_enabled():  # (torch.func, or create_graph: differentiable again)
            return _loop_adjoint(dP, decay), None
        N = dP.shape[1]
        dK = torch.empty_like(dP)
        dK[:, N - 1] = 0.0
        A = dP[:, N - 1].clone()
        for c in range(N - 2, -1, -1):
            dK[:, c] = A
            A.mul_(decay[:, c].unsqueeze(-1)).add_(dP[:, c])
        return dK, None


def _loop_adjoint(dP, decay):
    """The backward of :class:`_LoopStates` by out-of-place torch operations (differentiable again; the map is
    linear in K, so this is its whole vector-Jacobian product)."""
    N = dP.shape[1]
    A = dP[:, N - 1]
    grads = [torch.zeros_like(A)]
    for c in range(N - 2, -1, -1):
        grads.append(A)
        A = torch.addcmul(dP[:, c], A, decay[:, c].unsqueeze(-1))
    return torch.stack(grads[::-1], dim=1)


class _LoopStatesJvp(_LoopStates):
    """:class:`_LoopStates` with its forward-mode rule (:func:`_with_jvp`): the map is linear in K."""

    @staticmethod
    def jvp(ctx, dK, _):
        K, decay = ctx.saved_tensors
        return _loop_recursion(torch.zeros_like(K) if dK is None else dK, decay)


def _loop_in_place(qr, lk4, v4, nd, oc, before, decay, gain, run):
    """Inference on the CPU: the recursion over chunks with each chunk's summary formed inside the loop, so
    that only one (n, m, d_v + 1) state is held (not the states of all chunks); ``qr`` and ``lk4`` are
    overwritten chunk by chunk, ``nd`` receives the earlier chunks' contributions; ``run`` is the state
    before the first of these chunks (None: none yet), and the state after the last is returned."""
    for i in range(qr.shape[1]):
        if run is not None:
            nd[:, i].add_(qr[:, i].add_(before[:, i].unsqueeze(1)).exp_() @ run)
        Ki = lk4[:, i].sub_(oc[:, i].unsqueeze(1)).exp_().transpose(-1, -2) @ v4[:, i]
        Ki.mul_(gain[:, i].unsqueeze(-1))
        run = Ki if run is None else Ki.addcmul_(run, decay[:, i].unsqueeze(-1))
    return run


def _halves(x, s, half):
    """The first (0) or second (1) half of every block of 2s positions along dim 2 of x (n, N, b, C)."""
    n, N, b, C = x.shape
    return x.view(n, N, b // (2 * s), 2, s, C)[:, :, :, half]


def _levels(qr, lk4, v4, offsets, neg):
    """Numerators and key masses (n, N, b, D) of the keys of each query's own chunk: the key at the query's
    position, then at level s the second half of each block of 2s positions reading the first half."""
    nd = (qr + lk4).exp_().sum(-1, keepdim=True) * v4
    for oF in offsets:
        s = _level_size(oF, qr)
        qS, kF, vF = _halves(qr, s, 1), _halves(lk4, s, 0), _halves(v4, s, 0)
        if s == 1:  # one key: its own features, elementwise
            part = (qS + kF).exp_().sum(-1, keepdim=True) * vF
        else:
            eqS = (qS + oF).exp_()  # <= 1: oF <= c_if for every query of the second half
            eF = (kF - oF.clamp_min(neg)).exp_()
            if s <= DIRECT_BLOCK:
                part = (eqS @ eF.transpose(-1, -2)) @ vF
            else:
                part = eqS @ (eF.transpose(-1, -2) @ vF)
        _halves(nd, s, 1).add_(part)
    return nd


def _level_size(oF, x):
    """The block length s of a level from its offsets (n, N, b / 2s, 1 or s, M)."""
    return x.shape[2] // (2 * oF.shape[2])


class _Levels(torch.autograd.Function):
    """:func:`_levels` with a hand-written backward: the exponentials are recomputed level by level and the
    gradients accumulated in place into one buffer per input (autograd would zero-fill a full-size gradient
    for every half-block view, several per level).  The offsets are constants (detached), as in the
    forward's construction."""

    generate_vmap_rule = True

    @staticmethod
    def forward(qr, lk4, v4, neg, *offsets):
        with torch.no_grad():
            return _levels(qr, lk4, v4, offsets, neg)

    @staticmethod
    def setup_context(ctx, inputs, output):
        qr, lk4, v4, ctx.neg, *offsets = inputs
        ctx.save_for_backward(qr, lk4, v4, *offsets)
        ctx.save_for_forward(qr, lk4, v4, *offsets)

    @staticmethod
    def backward(ctx, G):
        qr, lk4, v4, *offsets = ctx.saved_tensors
        nones = (None,) * (1 + len(offsets))
        if _transformed():  # under torch.func (grad, vjp, jacrev, vmap): the levels' vjp by torch.func itself
            grads = torch.func.vjp(lambda *x: _levels(*x, offsets, ctx.neg), qr, lk4, v4)[1](G)
            return (*(gr if need else None for gr, need in zip(grads, ctx.needs_input_grad)), *nones)
        if torch.is_grad_enabled():  # backward(create_graph=True): a gradient that is differentiable again
            grads = _differentiable_vjp(lambda *x: _levels(*x, offsets, ctx.neg), (qr, lk4, v4), G,
                                        ctx.needs_input_grad[:3])
            return (*grads, *nones)
        gq, gk = torch.zeros_like(qr), torch.zeros_like(lk4)
        e = (qr + lk4).exp_()
        w = e.sum(-1, keepdim=True)
        gv = w * G
        e.mul_((G * v4).sum(-1, keepdim=True))
        gq.add_(e)
        gk.add_(e)
        del e
        for oF in offsets:
            s = _level_size(oF, qr)
            qS, kF, vF, GS = _halves(qr, s, 1), _halves(lk4, s, 0), _halves(v4, s, 0), _halves(G, s, 1)
            if s == 1:
                e = (qS + kF).exp_()
                _halves(gv, s, 0).addcmul_(e.sum(-1, keepdim=True), GS)
                e.mul_((GS * vF).sum(-1, keepdim=True))
                _halves(gq, s, 1).add_(e)
                _halves(gk, s, 0).add_(e)
                continue
            eqS = (qS + oF).exp_()
            eF = (kF - oF.clamp_min(ctx.neg)).exp_()
            if s <= DIRECT_BLOCK:
                A = eqS @ eF.transpose(-1, -2)  # (.., s, s)
                dA = GS @ vF.transpose(-1, -2)
                _halves(gv, s, 0).add_(A.transpose(-1, -2) @ GS)
                d_eq, d_ef = dA @ eF, dA.transpose(-1, -2) @ eqS
            else:
                S = eF.transpose(-1, -2) @ vF  # (.., M, D)
                dS = eqS.transpose(-1, -2) @ GS
                _halves(gv, s, 0).add_(eF @ dS)
                d_eq, d_ef = GS @ S.transpose(-1, -2), vF @ dS.transpose(-1, -2)
            _halves(gq, s, 1).addcmul_(d_eq, eqS)
            _halves(gk, s, 0).addcmul_(d_ef, eF)
        return (gq, gk, gv, *nones)


class _LevelsJvp(_Levels):
    """:class:`_Levels` with its forward-mode rule (:func:`_with_jvp`)."""

    @staticmethod
    def jvp(ctx, dq, dk, dv, *_):
        """The levels' tangent by torch.func.jvp of :func:`_levels` (the offsets constants: they cancel)."""
        qr, lk4, v4, *offsets = ctx.saved_tensors
        tangents = tuple(torch.zeros_like(x) if t is None else t for x, t in zip((qr, lk4, v4), (dq, dk, dv)))
        return torch.func.jvp(lambda *x: _levels(*x, offsets, ctx.neg), (qr, lk4, v4), tangents)[1]


def _within_chunks(lq4, lk4, v4, before, neg, grad):
    r"""The part of causal attention inside each chunk, and the query offsets: ``lq4``, ``lk4`` (n, N, b, M),
    ``v4`` (n, N, b, D) and ``before`` (n, N, M), the per-feature maxima over the earlier chunks (None: there
    are none, -inf).  Returns
    ``qr`` = l(q) - r (row offsets r_i = max_f(l_f(q_i) + c_if); ``lq4`` itself, overwritten, without
    autograd) and ``nd`` (n, N, b, D), the numerators and key masses of the keys of each query's own chunk
    (with autograd through :class:`_Levels`).  (The fused kernels do all of it in
    :func:`montecarlo.nn._fused.causal`.)"""
    b = lq4.shape[2]
    with torch.no_grad():
        kd = lk4.detach()
        sizes = [1 << e for e in range(max(0, b.bit_length() - 1))]  # block lengths s = 1, 2, ..., b / 2
        # maxima of the first halves (a single key at s = 1: a view, no copy)
        offsets = [_halves(kd, s, 0) if s == 1 else _halves(kd, s, 0).amax(-2, keepdim=True) for s in sizes]
        c = kd.clone() if before is None else torch.maximum(kd, before.unsqueeze(2))  # c_if, over the dyadic blocks
        for s, oF in zip(sizes, offsets):
            _halves(c, s, 1).clamp_min_(oF)
        r = c.add_(lq4.detach()).amax(-1, keepdim=True).clamp_min_(neg)  # (n, N, b, 1)
        del c
    qr = lq4 - r if grad else lq4.sub_(r)  # l_f(q_i) - r_i, shared by every term
    if not grad:
        return qr, _levels(qr, lk4, v4, offsets, neg)
    return qr, _with_jvp(_Levels, _LevelsJvp).apply(qr, lk4, v4, neg, *offsets)


def _unfused(lq4, lk4, v4, neg, grad, scan):
    """:func:`_causal`'s numerators and key masses (n, N, b, D) by torch operations: the chunks' prefix states
    (scan, product or loop), the dyadic levels within each chunk; in place and in groups of chunks for
    inference on the CPU."""
    n, N, b, M = lq4.shape
    D = v4.shape[-1]
    if N == 1 and (grad or scan):  # one chunk: no earlier chunks, no states (and no offsets over them, whose
        # no-grad region, with nothing between it and the levels' own, made torch.export write an empty region
        # of autocast that a saved program failed to load with)
        return _within_chunks(lq4, lk4, v4, None, neg, grad)[1]
    with torch.no_grad():
        ochunk = lk4.detach().amax(2)  # (n, N, M): each chunk's maximum per feature
        before = _exclusive_cummax(ochunk, 1, -math.inf)  # maximum over the earlier chunks
        oc = ochunk.clamp_min(neg)
        if not scan:  # the recursion over chunks: P_{c+1} = P_c decay_c + K_c gain_c
            after = torch.cummax(oc, dim=1).values  # offset of the state after chunk c
            decay = torch.exp(torch.cat([torch.full_like(after[:, :1], neg), after[:, :-1]], 1) - after)
            gain = torch.exp(oc - after)
    # earlier chunks: per-chunk summaries with the chunk's offset, combined by a scan whose offsets are the
    # maxima over all earlier chunks (all in the past of every query that reads them)
    if grad or scan:
        P = None
        if N > 1:
            K = (lk4 - oc.unsqueeze(2)).exp_().transpose(-1, -2) @ v4  # (n, N, M, D), offsets oc
            # states with offsets `before`
            P = _prefix_states(K, oc, before, neg) if scan else _loop_states(K * gain.unsqueeze(-1), decay)
            del K
        qr, nd = _within_chunks(lq4, lk4, v4, before, neg, grad)
        if P is not None:
            nd.add_((qr + before.unsqueeze(2)).exp_() @ P)
        del P
    else:  # inference on the CPU: groups of chunks, in place, one state carried along
        nd = torch.empty((n, N, b, D), dtype=v4.dtype, device=v4.device)
        group = max(1, GROUP_ENTRIES // (n * b * M))
        run = None
        for g in range(0, N, group):
            sl = slice(g, g + group)
            qr, nd_g = _within_chunks(lq4[:, sl], lk4[:, sl], v4[:, sl], before[:, sl], neg, False)
            run = _loop_in_place(qr, lk4[:, sl], v4[:, sl], nd_g, oc[:, sl], before[:, sl], decay[:, sl],
                                 gain[:, sl], run)
            nd[:, sl] = nd_g
            del qr, nd_g
    return nd
