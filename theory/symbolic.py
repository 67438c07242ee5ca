r"""Derivations of the paper as sympy functions returning the expressions they derive.

Each function performs the algebra of one step of the paper and returns the
resulting expressions, so that tests (and ``paper_checks``) can compare them
with the printed closed forms by ``simplify(a - b) == 0`` plus numeric spot
checks.  Nothing here uses mpmath: it is an independent route.
"""

from __future__ import annotations

import sympy as sp

from .validation import check_int

d = sp.Symbol("d", positive=True)
k = sp.Symbol("k", integer=True, nonnegative=True)
p = sp.Symbol("p", integer=True, nonnegative=True)
z = sp.Symbol("z", positive=True)
v = sp.Symbol("v", positive=True)
x = sp.Symbol("x")
m = sp.Symbol("m", positive=True)
eps = sp.Symbol("epsilon", positive=True)  # 1/d


def _g(n):
    r""":math:`\Gamma(\frac{d+n}{2})/\Gamma(\frac{d+n+1}{2})`, the sine integral ratio."""
    return sp.gamma((d + n) / 2) / sp.gamma((d + n + 1) / 2)


def simrf_series_term(kk):
    r"""The k-th outer term of eq. ``simrf_conformity`` as printed (k a concrete integer >= 0)."""
    kk = check_int(kk, "kk", 0)
    c = -1 / (d - 1)
    inner = sum(c**pp * _g(pp) / (sp.factorial(kk - pp) * sp.factorial(pp)) for pp in range(kk + 1))
    pref = sp.sqrt(sp.pi) / (sp.gamma(d / 2) * 2 ** (d - 1))
    return pref * sp.gamma(kk + d) / sp.gamma(kk + d / 2) * v ** (2 * kk) / 2**kk * inner


def v2_prefactor_derivation():
    r"""Sec. 5.1: the :math:`v^2` coefficient of the SimRF MSE from the k = 1 term.

    Returns
    -------
    dict
        ``k0``: the k = 0 term of eq. ``simrf_conformity`` (simplifies to 1);
        ``a``: the coefficient of :math:`v^2` in :math:`\rho_{\mathrm{SimRF}}`;
        ``prefactor_general``: :math:`1 + \frac{P}{m}(a-1)`, as a function of the
        symbol ``P_over_m`` (= m - 1 for m <= d);
        ``prefactor``: the m = d value :math:`1 + (d-1)(a-1)`;
        ``printed``: Sec. 5.1's
        :math:`1-\frac{\sqrt\pi\Gamma(d+1)\Gamma(\frac d2+\frac12)}{\Gamma(\frac d2)\Gamma(\frac d2+1)^22^d}`;
        ``sin_moment``: :math:`R_1=\Gamma(\frac{d+1}{2})^2/(\Gamma(\frac d2)\Gamma(\frac d2+1))`,
        with ``prefactor == 1 - R_1``.
    """
    k0 = sp.gammasimp(simrf_series_term(0))
    a = sp.gammasimp(simrf_series_term(1) / v**2)
    w = sp.Symbol("P_over_m", positive=True)
    # MSE * m e^{2x^2+2y^2} = (e^{2v^2}-e^{v^2}) + (P/m)(rho - e^{v^2}) = v^2 (1 + (P/m)(a - 1)) + O(v^4)
    general = 1 + w * (a - 1)
    prefactor = sp.gammasimp(general.subs(w, d - 1))
    printed = 1 - sp.sqrt(sp.pi) * sp.gamma(d + 1) * sp.gamma(d / 2 + sp.Rational(1, 2)) / (
        sp.gamma(d / 2) * sp.gamma(d / 2 + 1) ** 2 * 2**d
    )
    r1 = sp.gamma((d + 1) / 2) ** 2 / (sp.gamma(d / 2) * sp.gamma(d / 2 + 1))
    return {
        "k0": k0,
        "a": a,
        "prefactor_general": general,
        "P_over_m": w,
        "prefactor": prefactor,
        "printed": printed,
        "sin_moment": r1,
    }


def legendre_duplication_steps():
    r"""The Legendre-duplication steps of App. A.6 and A.7, each as an expression
    that must vanish.

    Returns
    -------
    dict of sympy expressions (each equal to 0)
        ``duplication``: :math:`\sqrt\pi\Gamma(2u) - 2^{2u-1}\Gamma(u)\Gamma(u+\frac12)`;
        ``orf_prefactor``: :math:`\frac{\sqrt\pi}{\Gamma(\frac d2+\frac12)} -
        2^{d-1}\frac{\Gamma(d/2)}{\Gamma(d)}` (App. A.7, ORF case);
        ``chi2d_constant``: :math:`\frac{\sqrt\pi}{2^{2d-2}\Gamma(\frac d2)\Gamma(\frac d2+\frac12)}
        - \frac{1}{2^{d-1}\Gamma(d)}` (eq. ``reducestochi2d`` to ``chi_2d_dist``);
        ``sine_integral``: :math:`\int_0^\pi\sin^{d-1}\phi\,d\phi\cdot\frac{1}{\Gamma(d/2)}`
        from the Beta function minus :math:`\sqrt\pi/\Gamma(\frac d2+\frac12)`.
    """
    u = sp.Symbol("u", positive=True)
    dup = sp.sqrt(sp.pi) * sp.gamma(2 * u) - 2 ** (2 * u - 1) * sp.gamma(u) * sp.gamma(u + sp.Rational(1, 2))
    orf = sp.sqrt(sp.pi) / sp.gamma(d / 2 + sp.Rational(1, 2)) - 2 ** (d - 1) * sp.gamma(d / 2) / sp.gamma(d)
    chi = sp.sqrt(sp.pi) / (2 ** (2 * d - 2) * sp.gamma(d / 2) * sp.gamma(d / 2 + sp.Rational(1, 2))) - 1 / (
        2 ** (d - 1) * sp.gamma(d)
    )
    # int_0^pi sin^{d-1} = B(d/2, 1/2) (Beta function), a fact independent of the duplication formula
    sine = sp.beta(d / 2, sp.Rational(1, 2)) / sp.gamma(d / 2) - sp.sqrt(sp.pi) / sp.gamma(d / 2 + sp.Rational(1, 2))
    return {
        "duplication": dup,
        "orf_prefactor": orf,
        "chi2d_constant": chi,
        "sine_integral": sine,
    }


def vanishes(expr):
    """True if ``expr`` simplifies to zero (tries gammasimp, expand_func + simplify, combsimp)."""
    for simplifier in (sp.gammasimp, lambda e: sp.simplify(sp.expand_func(e)), sp.combsimp):
        if sp.simplify(simplifier(expr)) == 0:
            return True
    return False


def chi2d_reduction(concrete_d=None):
    r"""Eq. ``theta_proby_dist`` at :math:`\theta=\pi/2` reduces to :math:`\chi_{2d}` (eq. ``chi_2d_dist``).

    Parameters
    ----------
    concrete_d : int, optional
        If given, the angular integral is done by sympy for this d (an
        independent check of the Beta-function step).

    Returns
    -------
    dict
        ``angular``: :math:`\int_0^{\pi/2}(\sin\phi\cos\phi)^{d-1}d\phi` evaluated
        (for symbolic d through :math:`\frac12B(\frac d2,\frac d2)`);
        ``pdf``: the reduced density; ``chi2d``: the :math:`\chi_{2d}` density;
        ``difference``: ``pdf - chi2d`` (simplifies to 0).
    """
    w = sp.Symbol("w", positive=True)
    phi = sp.Symbol("phi", positive=True)
    dd = d if concrete_d is None else sp.Integer(check_int(concrete_d, "concrete_d", 1))  # (2.7 was taken as 2)
    if concrete_d is None:
        angular = sp.beta(d / 2, d / 2) / 2
    else:
        angular = sp.integrate((sp.sin(phi) * sp.cos(phi)) ** (dd - 1), (phi, 0, sp.pi / 2))
    pdf = w ** (2 * dd - 1) / (2 ** (dd - 2) * sp.gamma(dd / 2) ** 2) * angular * sp.exp(-(w**2) / 2)
    chi = w ** (2 * dd - 1) * sp.exp(-(w**2) / 2) / (2 ** (dd - 1) * sp.gamma(dd))
    diff = sp.simplify(sp.gammasimp(sp.expand_func(pdf - chi)))
    return {"angular": angular, "pdf": pdf, "chi2d": chi, "difference": diff}


def simplex_gram_cases():
    r"""Inner products of the simplex vectors (eq. ``simplex_vectors``) for symbolic d.

    With :math:`a=\sqrt{d/(d-1)}`, :math:`b=(\sqrt d+1)/(d-1)^{3/2}`,
    :math:`u=(1,\ldots,1,0)`, :math:`\|u\|^2=d-1`, :math:`e_i^\top u = 1` (i<d):

    Returns
    -------
    dict
        ``same_i<d``, ``distinct_i,j<d``, ``i<d_with_d``, ``d_with_d``,
        ``row_sum_norm2`` (:math:`\|\sum_is_i\|^2`), each simplified; the
        expected values are 1, -1/(d-1), -1/(d-1), 1 and 0.
    """
    a = sp.sqrt(d / (d - 1))
    b = (sp.sqrt(d) + 1) / (d - 1) ** sp.Rational(3, 2)
    c = 1 / sp.sqrt(d - 1)
    same = a**2 - 2 * a * b + b**2 * (d - 1)
    distinct = -2 * a * b + b**2 * (d - 1)
    with_d = c * (a - b * (d - 1))
    dd = c**2 * (d - 1)
    # sum_i s_i: coordinates j<d get a - (d-1) b + c, coordinate d gets 0
    coord = a - (d - 1) * b + c
    row_sum = (d - 1) * coord**2
    # d >= 2: write d = n + 1 with n > 0 so that sympy may combine sqrt(d - 1)
    n = sp.Symbol("n", positive=True)
    out = {
        "same_i<d": same,
        "distinct_i,j<d": distinct,
        "i<d_with_d": with_d,
        "d_with_d": dd,
        "row_sum_norm2": row_sum,
    }
    return {key: sp.simplify(sp.radsimp(sp.simplify(val.subs(d, n + 1)))).subs(n, d - 1)
            for key, val in out.items()}


#: Largest n of :func:`simplex_gram_matrix`: its symbolic work grows as about n^2 (1 s at n = 40 on a 2-core
#: machine, 14 s at 128; n = 10^4 would have built 10^8 sympy expressions).
GRAM_MAX_N = 128


def simplex_gram_matrix(n):
    """Exact S S^T for a concrete dimension 2 <= n <= :data:`GRAM_MAX_N` (an int: 2.7 and "3" are refused,
    TypeError naming n; ``int(n)`` used to truncate 2.7 to 2 silently; a larger n a ValueError), built from eq.
    ``simplex_vectors``."""
    n = check_int(n, "n", 2, maximum=GRAM_MAX_N)
    a = sp.sqrt(sp.Rational(n, n - 1))
    b = (sp.sqrt(n) + 1) / sp.Integer(n - 1) ** sp.Rational(3, 2)
    rows = []
    for i in range(n - 1):
        rows.append([(a if j == i else 0) - (b if j < n - 1 else 0) for j in range(n)])
    rows.append([1 / sp.sqrt(n - 1) if j < n - 1 else 0 for j in range(n)])
    s = sp.Matrix(rows)
    return (s * s.T).applyfunc(lambda e: sp.nsimplify(sp.radsimp(sp.expand(e))))


def kk1_identity():
    r""":math:`\sum_{k\ge0}k(k-1)x^k/k!` evaluated by sympy; equals :math:`x^2e^x`."""
    return sp.simplify(sp.summation(k * (k - 1) * x**k / sp.factorial(k), (k, 0, sp.oo)))


def cor46_expansion():
    r"""The 1/d expansion behind Cor 4.6 (App. A.9), step by step.

    With :math:`\epsilon = 1/d`:

    Returns
    -------
    dict
        ``sqrt_factor``, ``power_factor``, ``exp_factor``: first-order
        expansions of the three factors of the Stirling form (the paper states
        :math:`1-\frac{k}{2d}`, :math:`1-\frac{k(k-1)}{d}`, :math:`1+\frac{k^2}{2d}`);
        ``ratio_k``: their product to first order (paper:
        :math:`1-\frac{k(k-1)}{2d}`);
        ``ratio_k_exact_check``: first-order coefficient of the exact
        :math:`\prod_{j<k}\frac{d+j}{d+2j}` for k = 0..6, to compare;
        ``series_sum``: :math:`\sum_k\frac{(-z^2)^k}{k!}(-\frac{k(k-1)}{2d})`
        (paper: :math:`-\frac{z^4}{2d}e^{-z^2}`);
        ``mse_ratio``: :math:`1 + \frac{2(m-1)}{(1-e^{-z^2})^2}\cdot` ``series_sum``
        (paper's eq. ``asymptotic_ratio``); ``mse_ratio_printed_appendix``:
        the same with the appendix's :math:`(1+e^{-z^2})^2` denominator (eq.
        ``appendix_ratio``, a typo).
    """
    dd = 1 / eps

    def first_order(expr):
        ser = sp.series(expr, eps, 0, 2).removeO()
        return sp.simplify(sp.expand(ser))

    sqrt_factor = first_order(sp.sqrt((k + dd - 1) * (dd / 2 - 1) / ((k + dd / 2 - 1) * (dd - 1))))
    # ((k+d-1)/(k+d/2-1))^k / 2^k = ((2k+2d-2)/(2k+d-2))^k / 2^k
    power_factor = first_order(((2 * k + 2 * dd - 2) / (2 * k + dd - 2)) ** k / 2**k)
    exp_factor = first_order((1 + k / (dd - 1)) ** (dd - 1) / (1 + k / (dd / 2 - 1)) ** (dd / 2 - 1))
    ratio_k = first_order(sqrt_factor * power_factor * exp_factor)
    exact_checks = {}
    for kk in range(7):
        prod = sp.Integer(1)
        for j in range(kk):
            prod *= (dd + j) / (dd + 2 * j)
        exact_checks[kk] = sp.simplify(sp.diff(sp.series(prod, eps, 0, 2).removeO(), eps))
    coeff = sp.simplify((ratio_k - 1) / eps)  # -k(k-1)/2
    y = sp.Symbol("y")
    s = sp.summation(coeff * y**k / sp.factorial(k), (k, 0, sp.oo))
    series_sum = sp.simplify(s.subs(y, -(z**2)) * eps)
    mse_ratio = 1 + 2 * (m - 1) / (1 - sp.exp(-(z**2))) ** 2 * series_sum
    printed_appendix = 1 + 2 * (m - 1) / (1 + sp.exp(-(z**2))) ** 2 * series_sum
    return {
        "sqrt_factor": sqrt_factor,
        "power_factor": power_factor,
        "exp_factor": exp_factor,
        "ratio_k": ratio_k,
        "ratio_k_exact_check": exact_checks,
        "series_sum": series_sum,
        "mse_ratio": sp.simplify(mse_ratio.subs(eps, 1 / d)),
        "mse_ratio_printed_appendix": sp.simplify(printed_appendix.subs(eps, 1 / d)),
    }
