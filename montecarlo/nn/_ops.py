"""The torch operations every attention path of :mod:`montecarlo.nn` shares: the stabilised bidirectional
attention, the ratio of numerators to key masses, squared norms, and the autograd helpers (forward-mode
twins, differentiable vector-Jacobian products)."""

from __future__ import annotations

import torch

from montecarlo.nn._probes import _compiling, _transformed


def _very_negative(dtype):
    """A finite stand-in for -inf in offsets (a few of them still add up without overflow)."""
    return torch.finfo(dtype).min / 8


class _SquaredNorm(torch.autograd.Function):
    """|x|^2 over the last axis (keepdim) with the backward 2 x g as one product (autograd's for x * x: two
    products and a sum over (..., L, d)); differentiable again (create_graph)."""

    generate_vmap_rule = True  # (torch.func transforms: vmap, grad, vjp, jvp, jacrev, jacfwd, hessian)

    @staticmethod
    def forward(x):
        return (x * x).sum(-1, keepdim=True)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return x * (2.0 * g)


class _SquaredNormJvp(_SquaredNorm):
    """:class:`_SquaredNorm` with its forward-mode rule (:func:`_with_jvp`)."""

    @staticmethod
    def jvp(ctx, dx):
        x, = ctx.saved_tensors
        return 2.0 * (x * dx).sum(-1, keepdim=True)


def _with_jvp(fn, with_jvp):
    """The autograd.Function ``fn``, or its twin ``with_jvp`` that adds a forward-mode rule where one may be
    asked for: under a torch.func transform (jvp, jacfwd, hessian) or in forward-mode AD.  Two classes, since
    Dynamo does not trace a Function that defines jvp (torch.compile would break its graph there)."""
    level = getattr(getattr(torch.autograd, "forward_ad", None), "_current_level", -1)
    return with_jvp if _transformed() or level >= 0 else fn


def _call(fn, with_jvp, *args):
    """``fn.apply(*args)`` (or its twin's, :func:`_with_jvp`), or its forward alone where no derivative can be
    asked for (grad mode off, no forward-mode AD, no torch.func transform, not tracing): an autograd.Function's
    apply binds its arguments by signature, tens of microseconds per call that decoding token by token pays
    three times per step."""
    level = getattr(getattr(torch.autograd, "forward_ad", None), "_current_level", -1)
    if not torch.is_grad_enabled() and level < 0 and not _transformed() and not _compiling():
        return fn.forward(*args)
    return _with_jvp(fn, with_jvp).apply(*args)


def _ratio(nd, seen):
    """Split (..., d_v + 1) numerator/denominator; rows that see no key (``seen`` False) get 0, zero gradient."""
    return _call(_Ratio, _RatioJvp, nd, seen)


class _Ratio(torch.autograd.Function):
    """num / den with a hand-written backward, one (..., d_v + 1) cotangent ``[g / den, -(g / den) . num / den]``
    (autograd's would fill a zero tensor of that shape per slice and add them: about ten passes over the
    outputs instead of four); differentiable again (create_graph) since the backward is torch operations."""

    generate_vmap_rule = True

    @staticmethod
    def forward(nd, seen):
        out = nd[..., :-1] / _Ratio._denominator(nd, seen)
        return out if seen is None else out.masked_fill_(~seen, 0.0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)  # (the input alone: no second (n, L, d_v) tensor held for the backward)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def _denominator(nd, seen):
        den = nd[..., -1:]
        return den if seen is None else torch.where(seen, den, torch.ones_like(den))

    @staticmethod
    def cotangent(nd, seen, g):
        """The cotangent of ``nd`` for the outputs' ``g`` (torch operations: differentiable again)."""
        den = _Ratio._denominator(nd, seen)
        gn = g / den
        G = torch.cat([gn, (gn * nd[..., :-1]).sum(-1, keepdim=True).div_(den).neg_()], -1)  # d/d den: -gn.out
        return G if seen is None else G.masked_fill(~seen, 0.0)

    @staticmethod
    def backward(ctx, g):
        return _Ratio.cotangent(*ctx.saved_tensors, g), None


class _RatioJvp(_Ratio):
    """:class:`_Ratio` with its forward-mode rule (:func:`_with_jvp`)."""

    @staticmethod
    def jvp(ctx, dnd, _):
        """The outputs' tangent ``(dnum - out dden) / den`` (rows that see no key: 0)."""
        nd, seen = ctx.saved_tensors
        den = _Ratio._denominator(nd, seen)
        d = (dnd[..., :-1] - nd[..., :-1] / den * dnd[..., -1:]) / den
        return d if seen is None else d.masked_fill(~seen, 0.0)


def _with_ones(v):
    """[v, 1]: one product then gives the numerator and the denominator (the key mass)."""
    return torch.nn.functional.pad(v, (0, 1), value=1.0)  # (one operator; a ones tensor and a cat made two)


def _bidirectional(lq, lk, v, seen=None):
    """Stabilised bidirectional attention.  ``lq`` and ``lk`` are fresh log-features (overwritten in place);
    padded keys have ``lk = -inf``; ``seen`` (broadcastable to (..., 1, 1)) is False for sequences whose keys
    are all padded (None: no mask)."""
    neg = _very_negative(lk.dtype)
    o = lk.detach().amax(-2, keepdim=True)  # (..., 1, M): per sequence and feature
    if seen is not None:
        o = o.clamp_min(neg)  # a sequence with every key padded
    ek = lk.sub_(o).exp_()  # padded keys: exp(-inf) = 0
    S = ek.transpose(-1, -2) @ _with_ones(v)  # (..., M, d_v + 1); last column: z >= 1
    z = S[..., -1:]
    if seen is not None:
        z = z.clamp_min(torch.finfo(z.dtype).tiny)
    off = o + torch.log(z).transpose(-1, -2)
    if _broadcast_shapes(lq.shape, off.shape) == tuple(lq.shape):
        t = lq.add_(off)  # l(q) + o + log z, in place
    else:  # keys with more leading axes than the queries
        t = lq + off
    r = t.detach().amax(-1, keepdim=True)
    eq = t.sub_(r).exp_()  # max over features exactly 1
    return _ratio(eq @ (S / z), seen)  # S / z: key-mass-weighted means of v (last column 1)


def _broadcast_shapes(*shapes):
    """``torch.broadcast_shapes`` as a tuple, without its cost (tens of microseconds of Python per call) where the
    shapes are equal, as they mostly are (RuntimeError where they do not broadcast)."""
    first = shapes[0]
    if all(s == first for s in shapes[1:]):
        return tuple(first)
    return tuple(torch.broadcast_shapes(*shapes))


def _exclusive_cummax(x, dim, fill):
    """max over the entries before each position along ``dim`` (``fill`` at the first)."""
    inc = torch.cummax(x, dim=dim).values
    first = torch.full_like(inc.narrow(dim, 0, 1), fill)
    return torch.cat([first, inc.narrow(dim, 0, inc.shape[dim] - 1)], dim=dim)


def _differentiable_vjp(fn, inputs, G, needs):
    r"""The vector-Jacobian product of ``fn`` at ``inputs`` for the cotangent ``G`` by autograd through fn's own
    torch operations, with ``create_graph``: what a hand-written backward (or a kernel) computes, as a gradient
    that is itself differentiable (``backward(create_graph=True)``: Hessian-vector products, gradient
    penalties).  ``needs``: which inputs want a gradient (``ctx.needs_input_grad``); None for the others."""
    with torch.enable_grad():
        out = fn(*inputs)
    wanted = [x for x, need in zip(inputs, needs) if need]
    grads = iter(torch.autograd.grad(out, wanted, G, create_graph=True, allow_unused=True) if wanted else ())
    return tuple(next(grads) if need else None for need in needs)
