r"""Kernel-estimator MSEs, MSE ratios and orthogonality gaps (Secs. 3-5).

The formulas and how small differences are evaluated: :ref:`guide-theory.mse`
(``docs/guide/derivations.rst``).
"""

from __future__ import annotations

import math
from fractions import Fraction

from ._context import mp

from .errors import ConvergenceError
from ._checks import (
    PRF_COUPLINGS,
    call_hook,
    check_coupling,
    check_dimension,
    check_int,
    check_norms_and_v,
    guarded,
    half_square,
    rational,
    square,
)
from ._context import check_time
from ._series import sum_ratio_series
from .conformities import (
    _rff_at_angle,
    _sin_moment_first,
    check_v,
    conformity,
    coupling_conformity_v2_coefficient,
    coupling_conformity_v4_excess,
)
from ._hypergeometric import hyp1f1_neg, laguerre_scan
from .distributions import coupling_cos, dimension_bits, simplex_cos
from . import feature_kinds as kinds
from .kernels import coupled_pairs, norm_exponent
from .registry import MissingHookError, block_pair_split, get as get_coupling, has_hook, names, register
from .validation import show_int


#: Extra bits that :func:`_small_arg_bits` grants beyond twice the working precision p: t down to about
#: :math:`2^{-16384 - p/2}` (:math:`10^{-4932}` at 15 digits).  With mpmath's pure-Python backend one
#: constant at the precision reached costs, measured: pi 0.05 s and exp 0.12 s at :math:`2^{16}` bits, but
#: 1.6 s and 7.5 s at :math:`2^{19}`, in one call that no budget check can interrupt (pi at 1.3 million bits,
#: v = 1e-100000, ran 7.2 s: mse_ratio overran budget(3) by 5 s).
SMALL_ARG_MAX_BITS = 65536


def _small_arg_bits(t, what=None):
    """Extra bits needed to resolve a difference of order t**4 against 1 (t may be far below
    the smallest float: the exponent is read from the mpf, never through a float).

    More than :data:`SMALL_ARG_MAX_BITS` + 2 p raise ConvergenceError at once, naming t (``what`` names the
    quantity): the evaluation would outrun the work budget inside one mpmath call.  The differences of this
    module take such t from their Taylor series first (``_series_excess``), which leaves at most
    about 2(p + log2 d) + 32 bits to this route."""
    if t == 0:
        return 0
    bits = max(0, -4 * int(mp.mag(t))) + 8
    if bits > SMALL_ARG_MAX_BITS + 2 * mp.prec:
        with mp.workprec(64):  # (nstr of the exact mantissa of "1e-100000" exceeds Python's int-to-str limit)
            shown = mp.nstr(+t, 5)
        raise ConvergenceError(
            f"{what or 'a difference of order v^4 against 1'} at v = {shown} needs {bits} extra bits, beyond "
            f"{SMALL_ARG_MAX_BITS} + 2 x the working precision (v >= about 1e-4932 at 15 digits): one "
            "evaluation at that precision outruns the work budget; use v = 0 (the MSE ratios return their "
            "limit v -> 0 there) or a larger v")
    return bits


def _series_excess(coupling, d, x, odd):
    r"""A pair excess at a tiny argument from its leading Taylor terms; None where they do not give it to
    the working precision p (or no closed form of the coefficients is known).

    ``odd=True``: the PRF excess :math:`\rho_c(v) - e^{v^2} = \sum_{k\ge1}e_kx^k`, :math:`x = v^2`, from
    :math:`e_1 = a - 1` (hook ``prf_conformity_v2``) and :math:`e_2`
    (:func:`theory.conformities.coupling_conformity_v4_excess`).  ``odd=False``: its even part under
    :math:`w_j \to -w_j`, whose x term vanishes (exact marginals): the RFF excess
    :math:`\rho^{\mathrm{RFF}}_c - e^{-z^2}` at :math:`x = z^2` (signs alternating, :math:`+bx^2` first) and
    the hyperbolic pair excess at :math:`x = v^2`, b from the hook ``rff_conformity_z4``.

    Remainder, proved for exact isotropic pairs: :math:`s = \|w_i \pm w_j\|^2 \le 2(\|w_i\|^2 + \|w_j\|^2)`,
    so by convexity :math:`\mathbb E[s^k] \le 2^k2^{k-1}(\mathbb E\|w_i\|^{2k} + \mathbb E\|w_j\|^{2k}) =
    8^k(\frac d2)_k` and the conformity's :math:`x^k` coefficient :math:`\mathbb E[s^k]/(4^kk!(\frac d2)_k)` lies
    in :math:`[0, 2^k/k!]`; that of :math:`e^{\pm x}` is :math:`\pm1/k!`, so :math:`|e_k| \le (2^k+1)/k!`.  For
    :math:`x \le 1/4` the ratios of :math:`(2x)^k/k!` are at most :math:`2x/(k+1)`, whence
    :math:`\sum_{k\ge2}|e_k|x^k \le \frac54\cdot\frac65\cdot2x^2 = 3x^2` and
    :math:`\sum_{k\ge3}|e_k|x^k \le \frac98\cdot\frac87\cdot\frac43x^3 \le 2x^3`.  The kept terms are returned
    where this bound is below :math:`2^{-p-8}` of them: SimRFs (:math:`e_1 = -R_1/(d-1)`) from
    :math:`x^2 \le 2^{-p-9}|e_1|`, ORFs (:math:`e_1 = 0`, :math:`e_2 = -\frac1{2(d+2)}`) from
    :math:`x \le 2^{-p-9}|e_2|` (mse_ratio at 15 digits, d = 64, p = 101 here: from v = 1e-9 and 1e-18).
    Above, the difference formed with :math:`4\log_2(1/v)` more bits needs at most
    :math:`2(p + 9 + \log_2(1/|e|)) + 8` of them.
    """
    prec = mp.prec
    tol = mp.mpf(2) ** -(prec + 8)
    # |e_1| <= 3, |e_2| <= 5/2: no branch below can hold unless x^2 <= 2^(-p-7) (and x <= 1/4)
    if x == 0 or x * x > 4 * tol:
        return None
    rec = get_coupling(coupling)
    if not (rec.exact and rec.isotropic):
        return None
    with mp.workprec(prec + dimension_bits(d, "the small-argument series of the pair excess")):
        if odd:
            e1 = coupling_conformity_v2_coefficient(coupling, d) - 1  # (1 - 1/d against 1: d-dependent bits)
            e2 = coupling_conformity_v4_excess(coupling, d)
        else:
            e1, e2 = mp.mpf(0), _rff_z4_coefficient(coupling, d)
        if e1:
            value = e1 * x + (e2 * x * x if e2 is not None else 0)
            bound = 2 * x ** 3 if e2 is not None else 3 * x * x
        elif e2:
            value, bound = e2 * x * x, 2 * x ** 3
        else:
            return None
        if bound <= tol * abs(value):
            return value
    return None


def _prf_excess(coupling, d, vv):
    r""":math:`\rho_c - e^{v^2}` without cancellation loss at small v and large d (the difference
    is of order :math:`v^4e^{v^2}/d`: :func:`theory.distributions.dimension_bits` more bits).

    0 for IID pairs (Lemma 4.1: :math:`\rho = e^{v^2}` exactly); at tiny v the leading Taylor terms
    (``_series_excess``), so that v = 1e-100000 costs no 1.3 million-bit constants (before: 7.8 s past
    a 3 s budget, then ConvergenceError); else the difference with :func:`_small_arg_bits` more bits."""
    return _excess(coupling, d, vv, True, "the PRF conformity excess",
                   lambda: call_hook(coupling, "prf_conformity", d, vv) - mp.exp(square(vv)))


def _excess(coupling, d, t, odd, what, difference):
    """The pair excess ``what`` of :func:`_prf_excess` (``odd``) or :func:`_rff_excess` at argument t: 0 for
    IID pairs, the coupling's registry hook ``prf_conformity_excess`` / ``rff_conformity_excess`` where it has
    one (pnc_orthogonal: an expectation of the excess itself, to the working precision at every t), else
    ``_series_excess`` at tiny t, else ``difference()`` with :func:`_small_arg_bits` and
    :func:`theory.distributions.dimension_bits` more bits."""
    if coupling == "iid":
        return mp.mpf(0)
    direct = "prf_conformity_excess" if odd else "rff_conformity_excess"
    if has_hook(coupling, direct):  # the coupling's own route, to the working precision (pnc_orthogonal)
        return call_hook(coupling, direct, d, t)
    small = _series_excess(coupling, d, square(t), odd)
    if small is not None:
        return small
    with mp.workprec(mp.prec + _small_arg_bits(t, what) + dimension_bits(d, what)):
        return difference()


def _rff_conformity_raw(coupling, d, zz):
    return call_hook(coupling, "rff_conformity", d, zz)


register("iid", "rff_conformity", lambda d, zz: mp.exp(-square(zz)))
register("orthogonal", "rff_conformity", lambda d, zz: _rff_at_angle(d, zz, mp.mpf(0)))
register("simplex", "rff_conformity", lambda d, zz: _rff_at_angle(d, zz, simplex_cos(d)))


def _rff_z4_coefficient(coupling, d):
    r"""b in :math:`\rho^{\mathrm{RFF}} - e^{-z^2} = b z^4 + O(z^6)` (registry hook ``rff_conformity_z4``)."""
    return call_hook(coupling, "rff_conformity_z4", d)


def _z4_fixed_angle(coupling):
    r""":math:`(d\cos^2\theta - 1)/(2(d+2))` at a fixed angle (0 for IID).

    From :math:`M(d,\frac d2,t) = 1 + 2t + \frac{2(d+1)}{d+2}t^2 + O(t^3)`, the even
    part in :math:`\cos\theta` and :math:`\mathbb{E}_\phi[\sin^2\phi] = d/(d+1)`."""

    def coefficient(d):
        c = coupling_cos(coupling, d)
        return (d * c * c - 1) / (2 * mp.mpf(d + 2))

    return coefficient


register("iid", "rff_conformity_z4", lambda d: mp.mpf(0))
register("orthogonal", "rff_conformity_z4", _z4_fixed_angle("orthogonal"))
register("simplex", "rff_conformity_z4", _z4_fixed_angle("simplex"))


def _rff_excess(coupling, d, zz):
    r""":math:`\rho^{\mathrm{RFF}}_c - e^{-z^2}` without cancellation loss at small z and large d: 0 for IID
    pairs (exactly :math:`e^{-z^2}`), the leading Taylor term :math:`bz^4` at tiny z (``_series_excess``),
    else the difference with :func:`_small_arg_bits` more bits."""
    return _excess(coupling, d, zz, False, "the RFF conformity excess",
                   lambda: _rff_conformity_raw(coupling, d, zz) - mp.exp(-square(zz)))


def _pair_weight(d, m):
    """P/m: coupled ordered pairs per feature (m - 1 when m <= d)."""
    return mp.mpf(coupled_pairs(d, m)) / m


def _pair_kinds(coupling, d, m):
    """[(kind, weight)]: the pair kinds of m features of ``coupling`` and their weights per feature.

    Every coupling of the paper has one kind of coupled pair, weight P/m.  A
    coupling whose blocks mix two kinds (registry hook ``block_pair_weights``)
    adds ORF-like pairs with their own weight; blocks are counted in closed form.
    """
    q, r = divmod(m, d)
    n_c, n_o = (q * x for x in block_pair_split(coupling, d, d))
    if r:
        c2, o2 = block_pair_split(coupling, d, r)
        n_c, n_o = n_c + c2, n_o + o2
    kinds = [(coupling, mp.mpf(n_c) / m)]
    if n_o:
        kinds.append(("orthogonal", mp.mpf(n_o) / m))
    return kinds


def _weighted_pairs(coupling, d, m, term):
    """Sum over pair kinds of weight * term(kind)."""
    return mp.fsum(w * term(kind) for kind, w in _pair_kinds(coupling, d, m) if w)


def _features(m, d, minimum=1, context=""):
    """m as an int (d when None); the default m = d is held to ``minimum`` too (ValueError naming m and d)."""
    if m is None:
        if d < minimum:
            why = f" {context}" if context else ""
            raise ValueError(f"m must be an integer >= {minimum}{why}, got the default m = d = {d}: pass "
                             f"m >= {minimum} (independent blocks of d rows) or use d >= {minimum}")
        return d
    return check_int(m, "m", minimum, context)


# ---------------------------------------------------------------------------
# Every feature kind (theory.feature_kinds): one MSE form


def kind_couplings(kind):
    """Couplings with a closed-form pair term for feature kind ``kind`` (registry order)."""
    kinds.check_kind(kind, has="pair_couplings")
    return tuple(kinds.hook(kind, "pair_couplings")())


def _kind_coupling(kind, coupling, argname="coupling"):
    """``coupling`` if it names a coupling with a closed-form pair term for ``kind``; else raise."""
    get_coupling(coupling, argname)
    ok = kind_couplings(kind)
    if coupling not in ok:
        raise MissingHookError(f"{argname} must be one of {', '.join(map(repr, ok))} for kind={kind!r} (no closed "
                               f"form for {coupling!r}: estimate it with montecarlo.empirical_mse), got "
                               f"{coupling!r} (str)")
    return coupling


def _kind_log_prefactor(rec, x_norm, y_norm, v, kernel):
    """(v as mpf, log of the squared kernel prefactor :math:`P^2 = e^{2a(|x|^2+|y|^2)}`, a the record's
    ``prefactor_exponent(kernel)``) for a kind, with the norms it needs checked (none where a = 0)."""
    a = rec.prefactor_exponent(kernel)
    if not a:
        for name, value in (("x_norm", x_norm), ("y_norm", y_norm)):
            if value is not None:
                raise ValueError(f"{name} must be None for kind={rec.name!r} (its MSE depends on "
                                 f"{rec.argument} = |x {'+' if rec.argument == 'v' else '-'} y| only), got {value!r}")
        return check_v(v, rec.argument), mp.mpf(0)
    if x_norm is None or y_norm is None:
        raise ValueError(f"x_norm and y_norm are required for kind={rec.name!r} (the kernel prefactor "
                         f"e^{{{2 * a:g}(|x|^2 + |y|^2)}}), got None")
    xn, yn, vv = check_norms_and_v(x_norm, y_norm, v, rec.argument)
    check_v(vv, rec.argument)
    return vv, norm_exponent(xn, yn, 2 * a)  # exactly (a is a binary float)


def _kind_params(rec, coupling, d, m, vv, given):
    """The kind's parameters for this call: validated, defaults resolved (hook ``parameters``); a kind
    without parameters refuses any."""
    if not rec.parameters:
        if given:
            raise TypeError(f"kind={rec.name!r} takes no parameters, got {', '.join(sorted(given))}")
        return {}
    unknown = set(given) - set(rec.parameters)
    if unknown:
        raise TypeError(f"kind={rec.name!r} takes the parameters {', '.join(rec.parameters)}, got "
                        f"{', '.join(sorted(unknown))}")
    return kinds.hook(rec.name, "parameters")(coupling, d, vv, m, **given)


def _kind_inner(kind, coupling, d, m, vv, params=None):
    """m MSE / prefactor^2 = Var[b] + sum over pair kinds of (n / m) (E[b_i b_j] - (E b)^2).

    The sum cancels where n / m is of order d and the excess of order -Var/d (SimRFs at m = d: the SimRF/IIDRF
    ratio is about max(v^2/12, 1/(2d)) for hyperbolic PRFs): the bits it loses are measured and the terms formed
    again with that many more (at the working precision the ratio lost log2(d) bits, relative error 1e-3 at
    d = 1e20, v = 1e-6).  Up to :data:`_GUARD_LOSS` bits come from the guard bits (no second evaluation: the pnc
    quadratures)."""
    params = params or {}
    excess = kinds.hook(kind, "pair_excess")
    variance = kinds.hook(kind, "variance")
    extra = 0
    for _ in range(_MAX_RAISES):
        with mp.workprec(mp.prec + extra):
            terms = [variance(d, vv, **params)] + [w * excess(c, d, vv, **params)
                                                   for c, w in _pair_kinds(coupling, d, m) if w]
            total = mp.fsum(terms)
        size = max(abs(t) for t in terms)
        if not size:
            return total
        lost = int(mp.mag(size)) - int(mp.mag(total)) if total else mp.prec + extra
        if lost <= extra + _GUARD_LOSS:
            return total
        extra = max(lost + 16, 2 * extra)
    raise ConvergenceError(f"the {kind} MSE of {coupling!r} at d = {show_int(d)}, m = {show_int(m)}: Var + pair terms "
                           f"cancel beyond {_MAX_RAISES} increases of the precision (last: {extra} bits); lower the "
                           "working precision")


#: Times :func:`_kind_inner` raises its precision when the sum of its terms cancels.
_MAX_RAISES = 8

#: Bits the sum of :func:`_kind_inner` may lose into the guard bits (theory._checks.GUARD_BITS = 24) without a
#: second evaluation: its terms are each within a few units (< 16) of the working precision p, so after a loss of
#: 12 bits the sum is within 2^(16 - p) relative, 8 of the 24 guard bits still beyond the caller's precision.
#: (8 before: the RFF sum under pnc_orthogonal at d = 1024 and small z loses 9, and its second evaluation at 25
#: more bits built the pnc rule again at the next precision tier: 2x the call.)
_GUARD_LOSS = 12


def _kind_scaled(kind, coupling, d, m, vv, params=None):
    """:func:`_kind_inner`; at v = 0 the limit of its ratio to the leading power of v (hook ``small_v``)."""
    params = params or {}
    if vv == 0:
        small = kinds.hook(kind, "small_v")
        # the sum cancels to order 1/d (SimRFs at m = d: 1 - R_1 ~ 1/(2d)): d-dependent guard bits
        with mp.workprec(mp.prec + dimension_bits(d, f"the v -> 0 limit of the {kind} MSE")):
            var_coef = small("iid", d, **params)[0]
            return +(var_coef + _weighted_pairs(coupling, d, m, lambda c: small(c, d, **params)[1]))
    return _kind_inner(kind, coupling, d, m, vv, params)


@guarded(grid=("d", "v", "m", "x_norm", "y_norm"))
def kernel_mse(coupling, d, v, *, kind="prf", x_norm=None, y_norm=None, m=None, kernel="gaussian", **params):
    r"""MSE of the kernel estimator of any feature kind under a named coupling.

    .. math::
        \mathrm{MSE} = \frac{P^2}{m}\Big(\mathrm{Var}[b] + \sum_{\text{pair kinds}}
        \frac nm\big(\mathbb E[b_ib_j] - (\mathbb E b)^2\big)\Big)

    with the per-direction statistic b of the kind (:mod:`theory.feature_kinds`):
    PRFs (Thm 3.2) :math:`\mathrm{Var} = e^{v^2}(e^{v^2}-1)`, pair term the
    conformity; RFFs (App. A.5) :math:`\mathrm{Var} = (1-e^{-z^2})^2/2`; hyperbolic
    PRFs :math:`\mathrm{Var} = (e^{v^2}-1)^2/2` (:mod:`theory.hyperbolic`).
    :math:`P^2 = e^{-2\|x\|^2-2\|y\|^2}` (Gaussian kernel),
    :math:`e^{-\|x\|^2-\|y\|^2}` (softmax), 1 for RFFs; for m > d, n counts the
    coupled ordered pairs of the independent blocks (:mod:`theory.kernels`).

    Parameters
    ----------
    coupling : str
        A coupling with a closed form for ``kind`` (:func:`kind_couplings`).
    d : int or array_like
    v : real >= 0 or array_like
        :math:`\|x + y\|` for the positive kinds, :math:`z = \|x - y\|` for RFFs.  Any v down to 0 for
        every kind (a tiny v takes the leading Taylor terms of the pair excess, with a bounded remainder:
        ``_series_excess``).
    kind : str, keyword-only
        A feature kind (``theory.feature_kinds.names()``): 'prf', 'rff', 'hyperbolic'.
    x_norm, y_norm : real >= 0 or array_like, keyword-only
        :math:`\|x\|`, :math:`\|y\|`: required for the positive kinds (with v they
        must satisfy the triangle inequality), None for RFFs.
    m : int >= 1, optional, keyword-only
        Number of random directions (default d); the output width is
        ``width * m`` for kinds with several features per direction.
    kernel : {'gaussian', 'softmax'}, keyword-only
        The target kernel (RFFs: 'gaussian' only).
    **params
        The kind's parameters (``theory.feature_kind(kind).parameters``): ``A``
        for OPRFs (default None: the A minimising this coupling's MSE at v, see
        :mod:`theory.oprf`).  Other kinds take none.

    Returns
    -------
    mpf, or numpy object array of mpf
    """
    rec = kinds.get(kind)
    coupling = _kind_coupling(kind, coupling)
    d = check_dimension(d, coupling)
    m = _features(m, d)
    vv, log_pref = _kind_log_prefactor(rec, x_norm, y_norm, v, kernel)
    params = _kind_params(rec, coupling, d, m, vv, params)
    if vv == 0 and rec.argument == "z":  # b_i = cos(w_i . 0) = 1 for every draw
        return mp.mpf(0)
    return mp.exp(log_pref) * _kind_inner(kind, coupling, d, m, vv, params) / m


@guarded(grid=("d", "v", "m"))
def kernel_mse_ratio(coupling, baseline, d, v, *, kind="prf", m=None, **params):
    r"""Ratio of the MSEs of two couplings for one feature kind, :math:`\mathrm{MSE}_c/\mathrm{MSE}_b`.

    The ratio depends on the data only through v (:math:`\|x+y\|`, or
    :math:`z = \|x - y\|` for RFFs) and not on the target kernel.  At v = 0
    both MSEs vanish; the limit :math:`v \to 0` is returned (hook ``small_v``:
    the leading coefficients, :math:`v^2` for PRFs, :math:`v^4` for RFFs and
    hyperbolic PRFs).

    Parameters
    ----------
    coupling, baseline : str
        Couplings with a closed form for ``kind``.
    d : int or array_like
    v : real >= 0 or array_like
        From 0 (the limit) up, any v > 0 (differences of order :math:`v^2` or :math:`v^4` against 1:
        at tiny v their leading Taylor terms with a bounded remainder, ``_series_excess``, above
        with :math:`4\log_2(1/v)` extra bits, at most about :math:`2(p + \log_2 d) + 32`).
    kind : str, keyword-only
    m : int >= 1, optional, keyword-only
        Default d.
    **params
        The kind's parameters (``A`` for OPRFs; A=None gives each coupling its own
        optimal A, so the ratio compares the best OPRFs of the two couplings).

    Returns
    -------
    mpf, or numpy object array of mpf
    """
    rec = kinds.get(kind)
    coupling = _kind_coupling(kind, coupling)
    baseline = _kind_coupling(kind, baseline, "baseline")
    d = check_dimension(d, coupling)
    d = check_dimension(d, baseline)
    m = _features(m, d)
    vv = check_v(v, rec.argument)
    pc = _kind_params(rec, coupling, d, m, vv, params)
    pb = _kind_params(rec, baseline, d, m, vv, params)
    return _kind_scaled(kind, coupling, d, m, vv, pc) / _kind_scaled(kind, baseline, d, m, vv, pb)


@guarded(grid=("d", "v", "m"))
def mean_conformity(coupling, d, v, *, m=None, kind="prf", **params):
    r"""Pair-averaged :math:`\frac{1}{m(m-1)}\sum_{i\ne j}\mathbb E[b_ib_j]` of m directions.

    :math:`b_i = e^{w_i^\top v}` (``kind='prf'``, the conformity of eq.
    ``def_rf_conformity``), :math:`\cos(w_i^\top z)` (``kind='rff'``) or the
    statistic of another feature kind (:mod:`theory.feature_kinds`;
    :math:`\cosh(w_i^\top v)` for hyperbolic PRFs).  Pairs inside a block take
    the coupling's pair term (or, for a coupling whose blocks mix two kinds of
    pairs, each kind its own), pairs across blocks the independent value
    :math:`(\mathbb E b)^2`.  This is what :func:`montecarlo.empirical_conformity`
    estimates.

    Parameters
    ----------
    coupling : str
        A coupling with a closed form for ``kind``.
    d : int
    v : real >= 0
        :math:`\|x + y\|` (positive kinds) or :math:`\|x - y\|` (RFF).
    m : int >= 2, optional, keyword-only
        Number of directions (default d: one block, so d >= 2 unless m is given; ValueError naming m otherwise).
    kind : str, keyword-only
    **params
        The kind's parameters (``A`` for OPRFs).

    Returns
    -------
    mpf, or numpy object array of mpf for grids of d, v, m
    """
    rec = kinds.get(kind)
    coupling = _kind_coupling(kind, coupling)
    d = check_dimension(d, coupling)
    m = _features(m, d, 2, "(the conformity averages over pairs of features)")
    vv = check_v(v, rec.argument)
    params = _kind_params(rec, coupling, d, m, vv, params)
    excess = kinds.hook(kind, "pair_excess")
    # _weighted_pairs sums (n / m) excess over the coupled ordered pairs n; the average is over m (m - 1)
    return kinds.hook(kind, "mean_square")(d, vv, **params) + _weighted_pairs(
        coupling, d, m, lambda c: excess(c, d, vv, **params)) / (m - 1)


# ---------------------------------------------------------------------------
# PRF (the paper's kind): hooks of theory.feature_kinds and the named forms

kinds.register("prf", "variance", lambda d, vv: mp.exp(square(vv)) * mp.expm1(square(vv)))
kinds.register("prf", "mean_square", lambda d, vv: mp.exp(square(vv)))
kinds.register("prf", "pair_excess", lambda c, d, vv: _prf_excess(c, d, vv))
kinds.register("prf", "pair_couplings", lambda: names(has="prf_conformity"))
kinds.register("prf", "small_v", lambda c, d: (mp.mpf(1), coupling_conformity_v2_coefficient(c, d) - 1))


@guarded(grid=("d", "v", "m", "x_norm", "y_norm"))
def prf_mse(coupling, d, v, *, x_norm, y_norm, m=None, kernel="gaussian"):
    r"""MSE of the PRF kernel estimator (Thm 3.2): :func:`kernel_mse` with ``kind='prf'``.

    .. math::
        \mathrm{MSE} = \frac{e^{-2\|x\|^2-2\|y\|^2}}{m}\Big(e^{v^2}(e^{v^2}-1)
        + \frac Pm(\rho_c - e^{v^2})\Big)

    (the softmax kernel's MSE carries :math:`e^{-\|x\|^2-\|y\|^2}` instead).

    Parameters
    ----------
    coupling : str
        A coupling with a PRF closed form ('iid', 'orthogonal', 'simplex', ...).
    d : int or array_like
        Dimensionality (>= 2 for the simplex coupling).
    v : real >= 0 or array_like
        :math:`v=\|x+y\|`.
    x_norm, y_norm : real >= 0 or array_like, keyword-only
        :math:`\|x\|`, :math:`\|y\|` (with v they must satisfy the triangle inequality).
    m : int >= 1, optional, keyword-only
        Number of random features (default d); m > d uses independent blocks
        (last one truncated when d does not divide m); any m (the pair count
        is a closed form).
    kernel : {'gaussian', 'softmax'}, keyword-only

    Returns
    -------
    mpf, or numpy object array of mpf (broadcast shape of the array arguments)
    """
    return kernel_mse(coupling, d, v, kind="prf", x_norm=x_norm, y_norm=y_norm, m=m, kernel=kernel)


@guarded(grid=("d", "v", "m"))
def mse_ratio(coupling, baseline, d, v, *, m=None):
    r"""Ratio of PRF MSEs of two couplings, :math:`\mathrm{MSE}_c/\mathrm{MSE}_b` (Fig. 6):
    :func:`kernel_mse_ratio` with ``kind='prf'``.

    The ratio depends on the data only through :math:`v = \|x+y\|`.  At
    v = 0 both MSEs vanish; the ratio returned there is its limit
    :math:`v\to0`, :math:`(1 + \frac Pm(a_c-1))/(1+\frac Pm(a_b-1))` with
    :math:`\rho = 1 + a v^2 + O(v^4)` (see :func:`simplex_v2_prefactor`).

    Parameters
    ----------
    coupling, baseline : str
        Couplings with a PRF closed form ('iid', 'orthogonal', 'simplex', ...).
    d : int or array_like
        Any d below :math:`2^{16384}` at v = 0 (the limit, about :math:`1/(2d)` for SimRFs
        against IIDRFs, keeps every digit: see the module notes); for v > 0 up to the reach of
        :func:`theory.conformity`.
    v : real >= 0 or array_like
        From 0 (the limit) up to the reach of :func:`theory.conformity`, any v > 0 below it: the
        differences :math:`\rho_c - e^{v^2} = O(v^2)` take their leading Taylor terms
        :math:`(a-1)v^2 + e\,v^4` at tiny v (remainder at most :math:`2v^6`, proved in
        ``_series_excess``; every digit and 0.15 s at v = 1e-100000, which ran 7.8 s past a 3 s budget
        before), and are formed with :math:`4\log_2(1/v)` extra bits above (at most about
        :math:`2(p + \log_2 d) + 32`).
    m : int >= 1, optional, keyword-only
        Number of features; defaults to d (one full block).

    Returns
    -------
    mpf, or numpy object array of mpf
    """
    return kernel_mse_ratio(coupling, baseline, d, v, kind="prf", m=m)


@guarded(grid=("d", "v", "m", "x_norm", "y_norm"))
def orthogonality_gap(d, v, *, x_norm, y_norm, m=None):
    r"""PRF orthogonality gap :math:`\mathrm{MSE}_{\mathrm{IID}} - \mathrm{MSE}_{\mathrm{ORF}}` (Cor 4.4).

    .. math::
        \Delta\mathrm{MSE} = e^{-2\|x\|^2-2\|y\|^2}\frac{P}{m^2}
        \Big(e^{v^2} - \frac{\Gamma(d/2)}{\Gamma(d)}\sum_k\frac{v^{2k}}{2^kk!}
        \frac{\Gamma(k+d)}{\Gamma(k+d/2)}\Big)

    with :math:`P/m^2 = (m-1)/m` for m <= d.  Note the :math:`2^k`: the main
    text's eq. ``prf_orth_gap`` omits it (an erratum recorded in
    ``paper_checks``); the appendix and eq. ``orf_conformity`` have it.

    Parameters
    ----------
    d : int or array_like
        Any d below :math:`2^{16384}` (the difference, of order :math:`v^4e^{v^2}/d`, is
        formed with :math:`2\log_2d + 16` more bits: :math:`5\times10^{-31}` at
        :math:`d = 10^{30}`, v = 1, x = y = 1/2); beyond, ConvergenceError.
    v : real >= 0 or array_like
    x_norm, y_norm : real >= 0 or array_like, keyword-only
    m : int >= 1, optional, keyword-only
        Default d.
    """
    d = check_dimension(d)
    m = _features(m, d)
    xn, yn, vv = check_norms_and_v(x_norm, y_norm, v)
    check_v(vv)
    return -mp.exp(norm_exponent(xn, yn, -2)) * _pair_weight(d, m) / m * _prf_excess("orthogonal", d, vv)


@guarded(grid=("d", "v", "m", "x_norm", "y_norm"))
def orthogonality_gap_series(d, v, *, x_norm, y_norm, m=None):
    r"""PRF orthogonality gap from the positive series of App. A.8 (second line).

    .. math::
        \Delta\mathrm{MSE} = e^{-2x^2-2y^2}\frac{P}{m^2}\sum_{k\ge0}\frac{v^{2k}}{k!}
        \Big(1 - \frac{(k+d-1)!}{(d-1)!}\frac{(d-2)!!}{(2k+d-2)!!}\Big),\qquad
        \frac{(k+d-1)!}{(d-1)!}\frac{(d-2)!!}{(2k+d-2)!!} = \prod_{j<k}\frac{d+j}{d+2j}

    Every term is >= 0 (the product is <= 1), which is the paper's proof that
    the gap is positive.  The k-th term is at most :math:`v^{2k}/k!`, so the
    exponential-series remainder bounds the tail.  About :math:`ev^2` terms:
    a check route for :math:`v^2 \le 10^4` (beyond, ConvergenceError at once).
    :math:`1 - \prod` is accumulated as a sum of non-negative increments,
    :math:`q_{k+1} = q_k + \prod_{j<k}\frac{d+j}{d+2j}\cdot\frac{k}{d+2k}`, never as a
    difference, so every d keeps every digit (:math:`1/(2d)` at v = 1, x = y = 1/2 for
    large d; forming :math:`1 - \prod` lost all of them from :math:`d \approx 10^{20}`).
    """
    d = check_dimension(d)
    m = _features(m, d)
    xn, yn, vv = check_norms_and_v(x_norm, y_norm, v)
    v2 = square(check_v(vv))
    if v2 > 10_000:
        raise ConvergenceError(f"orthogonality_gap_series at v^2 = {mp.nstr(v2, 6)} needs about "
                               f"{int(mp.e * v2)} terms (domain v^2 <= 10000); use orthogonality_gap")
    eps = mp.mpf(2) ** (-mp.prec)
    total = mp.mpf(0)
    power = mp.mpf(1)  # v^{2k} / k!
    prod = mp.mpf(1)  # prod_{j<k} (d+j)/(d+2j)
    gap = mp.mpf(0)  # 1 - prod, as a sum of non-negative increments (no cancellation whatever d)
    k = 0
    with mp.workprec(mp.prec + 16):  # every term >= 0: a few bits for the roundings of the sum
        while True:
            if k % 64 == 0:
                check_time("orthogonality_gap_series", units=64)
            total += power * gap
            # remainder after k: sum_{j>k} v^{2j}/j! <= power * q/(1-q), q = v^2/(k+2) once < 1
            nxt = power * v2 / (k + 1)
            q = v2 / (k + 2)
            if total > 0 and q < 1 and nxt <= eps * total * (1 - q):
                break
            if total == 0 and v2 == 0:
                break
            # 1 - prod (d+k)/(d+2k) = (1 - prod) + prod k/(d+2k)
            gap += prod * k / (d + 2 * k)
            prod = prod * (d + k) / (d + 2 * k)
            power = nxt
            k += 1
    return mp.exp(norm_exponent(xn, yn, -2)) * _pair_weight(d, m) / m * total


@guarded(grid=("d", "m"))
def simplex_v2_prefactor(d, *, m=None):
    r"""Coefficient of :math:`v^2` in the SimRF MSE relative to IIDRFs (Sec. 5.1).

    :math:`\mathrm{MSE}_{\mathrm{SimRF}} = \frac{e^{-2x^2-2y^2}}{m}\,C\,v^2 + O(v^4)`
    while :math:`\mathrm{MSE}_{\mathrm{IIDRF}} = \frac{e^{-2x^2-2y^2}}{m}v^2 + O(v^4)`, with

    .. math::
        C = 1 - \frac{P}{m}\,\frac{R_1}{d-1},\qquad
        R_1 = \frac{\Gamma(\frac{d+1}{2})^2}{\Gamma(\frac d2)\Gamma(\frac d2+1)}
            = \frac{\sqrt\pi\,\Gamma(d+1)\Gamma(\frac d2+\frac12)}{\Gamma(\frac d2)\Gamma(\frac d2+1)^2 2^d}.

    For m = d (the paper's case) :math:`P/m = d-1` and :math:`C = 1 - R_1`,
    0.00778... at d = 64, :math:`\approx 1/(2d)` for large d.  Evaluated as
    :math:`(1 - f) + f(1 - R_1)`, :math:`f = P/(m(d-1)) \le 1` exact, with :math:`1 - R_1`
    formed at :math:`2\log_2d + 16` more bits (:func:`theory.distributions.dimension_bits`),
    so every d keeps every digit (the plain form lost :math:`\log_2 d` bits: 100% off
    from :math:`d = 10^{25}`).

    Parameters
    ----------
    d : int >= 2 or array_like
        Any d below :math:`2^{16384}` (a few seconds at the top); beyond, ConvergenceError.
    m : int >= 1, optional, keyword-only
        Defaults to d.
    """
    d = check_dimension(d, "simplex")
    m = _features(m, d)
    f = Fraction(coupled_pairs(d, m), m * (d - 1))
    with mp.workprec(mp.prec + dimension_bits(d, "simplex_v2_prefactor")):
        one_minus_r1 = 1 - _sin_moment_first(d)
        return rational(1 - f) + rational(f) * one_minus_r1


@guarded(grid=("d",))
def simplex_v2_prefactor_printed(d):
    r"""The Sec. 5.1 expression as printed (m = d):
    :math:`1 - \frac{\sqrt\pi\,\Gamma(d+1)\Gamma(\frac d2+\frac12)}{\Gamma(\frac d2)\Gamma(\frac d2+1)^2 2^d}`.

    The difference, :math:`\approx 1/(2d)`, is formed at :math:`2\log_2d + 16` more bits
    (:func:`theory.distributions.dimension_bits`): every d below :math:`2^{16384}` (2 s at
    the top); beyond, ConvergenceError."""
    d = check_dimension(d, "simplex")
    with mp.workprec(mp.prec + dimension_bits(d, "simplex_v2_prefactor_printed")):
        h = mp.mpf(d) / 2
        return 1 - mp.sqrt(mp.pi) * mp.gammaprod([d + 1, h + mp.mpf(1) / 2], [h, h + 1, h + 1]) / mp.mpf(2) ** d


# ---------------------------------------------------------------------------
# RFF


@guarded(grid=("d", "z"))
def rff_conformity(coupling, d, z):
    r"""RFF analogue of the conformity, :math:`\mathbb{E}[\cos(w_i^\top z)\cos(w_j^\top z)]`.

    :math:`e^{-z^2}` for IID pairs; :math:`{}_1F_1(d;\frac d2;-\frac{z^2}{2})`
    for orthogonal pairs (App. A.5: the PRF form with :math:`v\to -iz`); for
    simplex pairs (beyond the paper) :func:`theory.rff_conformity_at_angle` at
    :math:`\cos\theta = -1/(d-1)`, where :math:`w_i \pm w_j` have different laws.

    The value is returned with relative accuracy even where it is tiny (e.g.
    :math:`-8.196\times10^{-205}` at d = 1024, z = 20) or changes sign; at an
    exact zero no relative accuracy exists and ConvergenceError is raised.

    Domain (routes: :ref:`theory._hypergeometric <guide-theory._hypergeometric>` and
    :func:`theory.rff_conformity_at_angle`; measured at 30 digits, 10 s per call, by
    ``python -m benchmarks.bench_theory --domain``):

    * orthogonal: even d, any :math:`0 \le z \le 10^{300}`; odd d,
      :math:`z^2/2 \le 7000 + d` and :math:`z^2/2 \ge 4(d+1)^2 + 2p` (asymptotic
      expansion).  In between, the half-integer-degree 1F1 needs about
      :math:`1.45z^2/2` guard bits per evaluation.
    * simplex: :math:`z \le 10` for every d up to 65536, and :math:`z = 10^{10}`
      (far asymptotic range) for every d tried; for d <= 64 also every
      :math:`z \le 10^5` (odd d: :math:`z^2/2 \le \max(d, 2000)` or the asymptotic
      range).  For large d the Taylor terms are 1F1 values whose cost grows with d and
      :math:`z^2` (the series stops on a remainder bound that follows the size of the
      value, ``theory.conformities._recurrence_tail``; the value is tiny there:
      :math:`1.3\times10^{-2066}` at d = 65536, z = 67.6).  Measured at 30 digits:
      d = 1024: z = 100 in 0.5 s, z = 300 in 7 s, z = 1000 not within 60 s (one 1F1 of
      argument :math:`5\times10^5` alone); d = 4096: z = 100 in 1 s, z = 300 in 4 s;
      d = 65536: z = 67.6 and 100 in 9 s (28 s at 120 digits).  From
      :math:`z \approx 10^{30}` (d = 2) or :math:`10^{100}` the quadrature route exhausts
      the budget.

    Outside: ConvergenceError within the work budget (:func:`theory.budget`).
    """
    coupling = check_coupling(coupling, has="rff_conformity")
    d = check_dimension(d, coupling)
    zz = check_v(z, "z")
    return _rff_conformity_raw(coupling, d, zz)


@guarded(grid=("d", "z"))
def rff_orf_conformity_series(d, z):
    r"""The ORF RFF conformity summed as printed in Thm 4.5,
    :math:`\frac{\Gamma(d/2)}{\Gamma(d)}\sum_k\frac{(-z^2)^k}{2^kk!}\frac{\Gamma(k+d)}{\Gamma(k+d/2)}`,
    with cancellation control (the terms alternate; about :math:`2.9z^2/2`
    bits are lost, so this check route is meant for moderate z)."""
    d = check_dimension(d)
    zz = check_v(z, "z")
    h = mp.mpf(d) / 2
    return sum_ratio_series(lambda k: (k + d) / ((k + h) * (k + 1)), -half_square(zz),
                            what="rff_orf_conformity_series")


kinds.register("rff", "variance", lambda d, zz: mp.expm1(-square(zz)) ** 2 / 2)
kinds.register("rff", "mean_square", lambda d, zz: mp.exp(-square(zz)))
kinds.register("rff", "pair_excess", lambda c, d, zz: _rff_excess(c, d, zz))
kinds.register("rff", "pair_couplings", lambda: names(has="rff_conformity"))
kinds.register("rff", "small_v", lambda c, d: (mp.mpf(1) / 2, _rff_z4_coefficient(c, d)))


@guarded(grid=("d", "z", "m"))
def rff_mse(coupling, d, z, *, m=None):
    r"""MSE of the RFF kernel estimator (App. A.5; the simplex case is beyond the paper):
    :func:`kernel_mse` with ``kind='rff'``.

    .. math::
        \mathrm{MSE} = \frac1m\Big(\frac{(1-e^{-z^2})^2}{2} + \frac Pm(\rho^{\mathrm{RFF}}_c - e^{-z^2})\Big)

    Parameters
    ----------
    coupling : str
        A coupling with an RFF closed form.
    d : int >= 1 or array_like
    z : real >= 0 or array_like
        :math:`z = \|x - y\|`.
    m : int >= 1, optional, keyword-only
        Default d.
    """
    return kernel_mse(coupling, d, z, kind="rff", m=m)


@guarded(grid=("d", "z", "m"))
def rff_mse_ratio(coupling, baseline, d, z, *, m=None):
    r"""Ratio of RFF MSEs, :math:`\mathrm{MSE}_c/\mathrm{MSE}_b` (:func:`kernel_mse_ratio`, ``kind='rff'``);
    m (keyword-only) defaults to d.

    At z = 0 both vanish like :math:`z^4`; the limit
    :math:`(\frac12 + \frac Pm b_c)/(\frac12 + \frac Pm b_b)` is returned, with
    :math:`\rho^{\mathrm{RFF}} - e^{-z^2} = b z^4 + O(z^6)`,
    :math:`b_\theta = \frac{d\cos^2\theta-1}{2(d+2)}` (:math:`b_{\mathrm{ORF}} = -\frac{1}{2(d+2)}`,
    :math:`b_{\mathrm{IID}} = 0`; for SimRFs :math:`b > b_{\mathrm{ORF}}`, so ORFs win at small z).
    """
    return kernel_mse_ratio(coupling, baseline, d, z, kind="rff", m=m)


@guarded(grid=("d", "z", "m"))
def rff_orthogonality_gap(d, z, *, m=None):
    r"""RFF orthogonality gap :math:`\mathrm{MSE}_{\mathrm{IID}}-\mathrm{MSE}_{\mathrm{ORF}}` (Thm 4.5).

    .. math::
        \Delta\mathrm{MSE} = \frac{P}{m^2}\Big(e^{-z^2} - \frac{\Gamma(d/2)}{\Gamma(d)}
        \sum_k\frac{(-z^2)^k}{2^kk!}\frac{\Gamma(k+d)}{\Gamma(k+d/2)}\Big)

    (:math:`P/m^2 = (m-1)/m` for m <= d; m keyword-only, default d).
    Positive for z below :func:`z_crit`, with sign changes beyond it; the
    sign is exact wherever a value is returned (the 1F1 carries relative
    accuracy, e.g. :math:`-1.36\times10^{-148}` at d = 512, z = 18.43).
    """
    d = check_dimension(d)
    m = _features(m, d)
    zz = check_v(z, "z")
    return -_pair_weight(d, m) / m * _rff_excess("orthogonal", d, zz)


@guarded(grid=("d", "z", "m"))
def rff_asymptotic_ratio(d, z, *, m=None):
    r"""Leading 1/d form of the ORF/IID RFF MSE ratio (Cor 4.6, eq. ``asymptotic_ratio``).

    .. math:: 1 - \frac Pm\,\frac{e^{-z^2}z^4}{d(1-e^{-z^2})^2}

    (the paper's :math:`m-1` is :math:`P/m` for m <= d; m keyword-only,
    default d); the exact ratio is :func:`rff_mse_ratio`.  The difference is
    :math:`O(P/(m d^2))`: :math:`O(1/d^2)` for fixed m (about :math:`4.5/d^2` at m = 4,
    z <= 3) but :math:`O(1/d)` at m = d, where the dropped terms carry the same
    :math:`P/m \approx d` factor (about :math:`1.5/d` for z <= 3; 0.0015 at d = 1024).
    At z = 0 the limit :math:`1 - \frac{P}{m d}` is returned (:math:`1/d` at m = d: the
    difference is formed with :math:`2\log_2d + 16` more bits, so every d below
    :math:`2^{16384}` keeps every digit; beyond, ConvergenceError).
    """
    d = check_dimension(d)
    m = _features(m, d)
    zz = check_v(z, "z")
    # 1 - (P/m)/d is of order 1/d at m = d (and small z): P/m formed with d-dependent guard bits
    # (at the working precision it rounded to d: 0.0 instead of 1e-30 at d = 1e30, z = 0)
    prec = mp.prec
    with mp.workprec(prec + dimension_bits(d, "rff_asymptotic_ratio")):
        w = _pair_weight(d, m)
        base = 1 - w / d  # >= 1/d: P/m <= d - 1
        if zz == 0:
            return base
        # the ratio is base + (w/d)(1 - f), f = e^{-z^2}z^4/(1 - e^{-z^2})^2 = (u/sinh u)^2, u = z^2/2, both terms
        # >= 0; sinh(u)/u <= 1 + (u^2/6)/(1 - u^2/20) gives 0 <= 1 - f <= (u^2/3)/(1 - u^2/20) <= u^2/2 (u <= 1):
        # at tiny z base alone (z = 1e-100000 cost exp at 1.3 million bits, seconds past the budget)
        u = half_square(zz)
        if u <= 1 and w * u * u / (2 * d) <= mp.mpf(2) ** -(prec + 8) * base:
            return base
    with mp.workprec(prec + _small_arg_bits(zz, "rff_asymptotic_ratio") + dimension_bits(d, "rff_asymptotic_ratio")):
        w = _pair_weight(d, m)
        z2 = square(zz)
        return 1 - w * mp.exp(-z2) * z2 * z2 / (d * mp.expm1(-z2) ** 2)


# ---------------------------------------------------------------------------
# z_crit

#: Depth of cell subdivision before z_crit gives up deciding whether a lobe touches the threshold.
ZCRIT_MAX_DEPTH = 48

#: Largest z the double-precision scan of z_crit reaches (y = z^2/2 and the Laguerre recurrence,
#: rescaled every 8 steps, stay in range); a larger z_max is searched up to here, then ConvergenceError.
ZCRIT_SCAN_MAX = 1e12

#: Largest d of z_crit.  Its scan runs the Laguerre recurrence (d/2 steps) over a grid of about 2d
#: points up to the first sign change, about d^2/5 steps in all: measured 5 s at d = 4096 and 30 s at
#: 16384 (the default budget's limit), so about 8 minutes at this cap under a raised budget.  Larger d
#: are refused at once (ValueError) rather than left to the budget: the grid alone outgrows memory
#: (16 TiB at d = 2^40).
ZCRIT_MAX_D = 2**16


@guarded(grid=("d",))
def z_crit(d, z_max=None):
    r"""Threshold :math:`z_{\mathrm{crit}}(d)`: ORFs beat IIDRFs for RFFs when
    :math:`z = \|x-y\| < z_{\mathrm{crit}}` (Sec. 4.2).

    Defined as the smallest z > 0 where the RFF orthogonality gap (Thm 4.5)
    changes sign.  Near 0 the gap is :math:`\frac{m-1}{m}\frac{z^4}{2(d+2)} > 0`.

    Parameters
    ----------
    d : int in [2, ``ZCRIT_MAX_D``] (= 65536), or array_like of them
        A larger d raises ValueError (the scan's work grows as :math:`d^2`).
    z_max : real > 0, optional
        Search limit (default :math:`4\sqrt d + 10`).  Any larger z_max gives the same
        answer (the range up to the default is scanned first); beyond it the scan continues
        up to ``ZCRIT_SCAN_MAX`` = :math:`10^{12}` (double precision), and a z_max above
        that with no sign change below raises ConvergenceError naming z_max.

    Returns
    -------
    mpf
        :math:`z_{\mathrm{crit}}`, correct to the working precision;
        ``mpmath.inf`` for d = 2, where the gap is
        :math:`\frac{m-1}{m}e^{-y}(e^{-y}-1+y) > 0` for all :math:`y = z^2/2 > 0`.

    Raises
    ------
    theory.errors.ConvergenceError
        No sign change below ``z_max`` (the message names it), or past the time
        budget (d up to 4096 takes seconds; see ``benchmarks/bench_theory.py``).

    Notes
    -----
    **How the first sign change is bracketed.**  With :math:`y = z^2/2`, the
    gap is :math:`e^{-y}(e^{-y} - L(y))` with :math:`L(y) = e^yM(d,\frac d2,-y)`,
    so it is negative exactly where :math:`h(y) = e^yL(y) > 1`.  For even d,
    :math:`L` is a positive multiple of the Laguerre polynomial
    :math:`L^{(d/2-1)}_{d/2}`, whose zeros are real and simple, so (i)
    :math:`\log|L|` is strictly concave between consecutive zeros, hence so is
    :math:`\log h`; (ii) on the first lobe :math:`(0, y_1)`,
    :math:`(\log h)'(0) = 0` makes :math:`h < 1`; (iii) on negative lobes the
    gap is positive.  A sign change can therefore only occur on a positive
    lobe, at most twice per lobe, and only if the lobe's maximum of
    :math:`\log h` is >= 0.  The search scans y, keeping every cell free of
    more than one zero of L by the Sturm count of the Laguerre recurrence
    (``theory._hypergeometric.laguerre_scan``), bounds the maximum of the
    concave :math:`\log h` on each positive cell by the tangents at its ends,
    and subdivides only cells whose bound reaches 0; the first cell holding a
    point with :math:`h > 1` brackets the first sign change, which is then
    refined at the working precision (Illinois iteration with the 1F1 of
    relative accuracy, each end's sign checked).  For odd d the same search
    is used with the count of the half-integer-degree recurrence, checked
    against dense high-precision scans (every odd d <= 129, d = 513, 1025).

    Measured: :math:`z_{\mathrm{crit}}/\sqrt d` falls from 1.91 (d = 3) to
    0.814 (d = 512) and 0.808 (d = 2048 and 4096).
    """
    d = check_int(d, "d", 2, "(z_crit compares coupled pairs; its scan costs about d^2/5 recurrence steps, "
                  "see theory.mse.ZCRIT_MAX_D)", maximum=ZCRIT_MAX_D)
    if d == 2:
        return mp.inf
    default = 4 * mp.sqrt(d) + 10
    top = default if z_max is None else check_v(z_max, "z_max")
    if top == 0:
        raise ValueError(f"z_max must be > 0 (the search range is 0 < z < z_max), got {z_max!r}")
    y_lo, y_hi = _zcrit_bracket(d, top, default)
    return _zcrit_refine(d, y_lo, y_hi)


class _Sample:
    __slots__ = ("y", "count", "log_h", "sign", "slope")

    def __init__(self, y, count, log_abs, sign, ratio, d):
        self.y = y
        self.count = int(count)
        self.sign = int(sign)
        self.log_h = y + log_abs if sign > 0 else -math.inf
        # (log h)' = 1 + S'/S with y S' = -(d/2)(S_{K-1} - S_K)
        self.slope = 1 - (d / 2) * (ratio - 1) / y if y > 0 else 0.0


def _scan(d, ys):
    import numpy as np

    count, log_abs, sign, ratio = laguerre_scan(d, np.asarray(ys, dtype=float))
    return [_Sample(float(y), c, la, s, r, d) for y, c, la, s, r in zip(ys, count, log_abs, sign, ratio)]


def _zcrit_bracket(d, top, default):
    """(y_lo, y_hi): h(y_lo) < 1 <= h(y_hi) on one concave stretch, no sign change of the gap before y_lo.

    The z grid (about 2 points per zero of L, uniform in z) up to min(top, default) is scanned chunk
    by chunk, so the work stops at the first sign change; a top beyond the default range adds
    windows [Z, 2Z] (the same uniform grid in each) up to min(top, ZCRIT_SCAN_MAX) (the zeros of L
    lie below the default range for even d; the Sturm count subdivides any cell that holds two)."""
    import numpy as np

    n_pts = 4 * (d // 2) + 64
    z1 = float(min(top, default))
    grids = [np.linspace(0, z1, n_pts + 1)[1:]]
    z_end = float(min(top, mp.mpf(ZCRIT_SCAN_MAX)))
    while z1 < z_end:  # beyond the default range (scanned only if it holds no sign change)
        z2 = min(2 * z1, z_end)
        grids.append(np.linspace(z1, z2, n_pts + 1)[1:])
        z1 = z2
    chunks = (zs[start:start + 256] for zs in grids for start in range(0, len(zs), 256))  # (lazily)
    prev = None
    for chunk in chunks:
        samples = _separated(d, _scan(d, chunk * chunk / 2), prev)
        for s in samples:
            if s.sign != 0 and s.sign != (-1) ** s.count:
                raise ConvergenceError(f"z_crit: Sturm count and sign disagree at y = {s.y:g} (d = {d}); "
                                       "this d is outside the validated range")
            if prev is None:
                if s.count >= 2:
                    raise ConvergenceError("z_crit: the first scan cell already holds two zeros")
            else:
                found = _cell(d, prev, s, 0)
                if found is not None:
                    return found
            prev = s
    if top > ZCRIT_SCAN_MAX:
        raise ConvergenceError(f"z_crit: no sign change of the RFF gap for z < {ZCRIT_SCAN_MAX:g} (d = {d}); "
                               f"z_max = {mp.nstr(top, 6)} exceeds the reach of the double-precision scan "
                               f"(z_max <= {ZCRIT_SCAN_MAX:g})")
    raise ConvergenceError(f"z_crit: no sign change of the RFF gap for 0 < z < z_max = {mp.nstr(top, 6)} "
                           f"(d = {d}); raise z_max")


def _separated(d, samples, prev):
    """Insert scan points until no cell (including the one from ``prev``) holds two or more zeros of L."""
    for _ in range(ZCRIT_MAX_DEPTH):
        check_time("z_crit (scan)", units=8)
        chain = ([prev] if prev is not None else []) + samples
        new = [(a.y + b.y) / 2 for a, b in zip(chain, chain[1:]) if b.count - a.count >= 2]
        if prev is None and samples[0].count >= 2:
            new.append(samples[0].y / 2)
        if not new:
            return samples
        samples = sorted(samples + _scan(d, new), key=lambda s: s.y)
    raise ConvergenceError("z_crit: zeros of the 1F1 could not be separated; lower d")


def _tangent_bound(a, b):
    """Upper bound of a concave function on [a.y, b.y] from its values and slopes at both ends."""
    la, lb, sa, sb = a.log_h, b.log_h, a.slope, b.slope
    if sa <= 0:
        return la
    if sb >= 0:
        return lb
    y = (lb - la + sa * a.y - sb * b.y) / (sa - sb)
    return la + sa * (y - a.y)


def _cell(d, a, b, depth):
    """None if the gap keeps its sign on (a.y, b.y]; else a bracket (y_lo, y_hi) of its first change."""
    check_time("z_crit (lobes)")
    jumps = b.count - a.count
    positive_a = a.count % 2 == 0 and a.count > 0
    positive_b = b.count % 2 == 0 and b.count > 0
    if jumps == 0:
        if not positive_a:
            return None  # first lobe (h < 1) or a negative lobe (gap > 0)
        if b.log_h >= 0:
            if a.log_h < 0:
                return a.y, b.y
            raise ConvergenceError(f"z_crit: lost track of a lobe near y = {a.y:g}")
        if _tangent_bound(a, b) < -1e-9:
            return None
    elif jumps == 1:
        if positive_a:
            bound = a.log_h + max(0.0, a.slope) * (b.y - a.y)
        elif positive_b:
            if b.log_h >= 0:
                bound = 0.0  # a crossing lies between the zero and b: find a point below 1 on the lobe
            else:
                bound = b.log_h + max(0.0, -b.slope) * (b.y - a.y)
        else:
            return None
        if bound < -1e-9:
            return None
    if depth >= ZCRIT_MAX_DEPTH:
        raise ConvergenceError(f"z_crit: a lobe of the RFF gap nearly touches zero near z = {math.sqrt(2 * a.y):.9g}; "
                               "its sign cannot be decided in double precision")
    mid = _scan(d, [(a.y + b.y) / 2])[0]
    return _cell(d, a, mid, depth + 1) or _cell(d, mid, b, depth + 1)


def _gap_sign_value(d, z):
    """e^{-z^2} - M(d, d/2, -z^2/2) (the RFF gap over P/m^2) at the working precision."""
    y = half_square(z)
    return mp.exp(-2 * y) - hyp1f1_neg(mp.mpf(d), mp.mpf(d) / 2, y, "z_crit")


def _zcrit_refine(d, y_lo, y_hi):
    """The root of the gap in [sqrt(2 y_lo), sqrt(2 y_hi)] to the working precision (Illinois)."""
    a, b = mp.sqrt(2 * mp.mpf(y_lo)), mp.sqrt(2 * mp.mpf(y_hi))
    fa, fb = _gap_sign_value(d, a), _gap_sign_value(d, b)
    for _ in range(40):  # the double-precision bracket may be off by rounding: widen until the signs agree
        if fa > 0 and fb < 0:
            break
        width = b - a
        if not fa > 0:
            a -= width
            fa = _gap_sign_value(d, a)
        if not fb < 0:
            b += width
            fb = _gap_sign_value(d, b)
    else:
        raise ConvergenceError("z_crit: the bracket of the first sign change could not be confirmed")
    tol = mp.mpf(2) ** (2 - mp.prec) * b
    side = 0
    for _ in range(4 * mp.prec + 100):
        check_time("z_crit (refinement)", units=16)
        if b - a <= tol:
            break
        c = (a * fb - b * fa) / (fb - fa)
        if not a < c < b:
            c = (a + b) / 2
        fc = _gap_sign_value(d, c)
        if fc > 0:
            a, fa = c, fc
            if side == -1:
                fb /= 2
            side = -1
        elif fc < 0:
            b, fb = c, fc
            if side == 1:
                fa /= 2
            side = 1
        else:
            return c
    else:
        raise ConvergenceError("z_crit: refinement did not converge")
    return (a + b) / 2


__all__ = [
    "PRF_COUPLINGS",
    "kernel_mse",
    "kernel_mse_ratio",
    "kind_couplings",
    "mean_conformity",
    "mse_ratio",
    "orthogonality_gap",
    "orthogonality_gap_series",
    "prf_mse",
    "rff_asymptotic_ratio",
    "rff_conformity",
    "rff_mse",
    "rff_mse_ratio",
    "rff_orf_conformity_series",
    "rff_orthogonality_gap",
    "simplex_v2_prefactor",
    "simplex_v2_prefactor_printed",
    "z_crit",
]
