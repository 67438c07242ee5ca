r"""Audit any projection-matrix sampler against the theory (beyond the paper).

What the audit finds in real samplers, its tests and their power, with examples: :ref:`guide-montecarlo.audit`
(``docs/guide/sampling.rst``).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from scipy import special, stats

from theory import feature_kinds as fk
from theory.registry import get as get_coupling, names as coupling_names
from theory.validation import show_int

from ._backend import to_numpy
from ._checks import check_budget, check_int, check_positive_float, check_rng
from .estimators import _Progress
from .diagnostics import standard_directions

#: Couplings a sampler may claim: exact (Gaussian rows) with PRF and RFF closed forms (read from the registry).
CLAIMABLE_COUPLINGS = coupling_names(has=("prf_conformity", "rff_conformity"), exact=True)
#: The checks, in report order.
CHECKS = ("marginals", "row_norms", "moments", "norm_independence",
          *(f"{rec.name}_unbiased" for rec in fk.RECORDS if not rec.parameters), "conformity", "structure",
          "fixed_norm")
#: Default overall false-alarm probability.
DEFAULT_ALPHA = 1e-4
#: Default number of draws.
DEFAULT_N = 5000
#: Smallest number of draws accepted (and kept when a time budget cuts a run short).
MIN_N = 50
#: Call tokens of the ``call`` convention strings.
CALL_TOKENS = ("d", "m", "rng", "seed")

_DESCRIPTIONS = {
    "marginals": "KS of every row's projections w_i.u against N(0, 1)",
    "row_norms": "KS of every |w_i|^2 against chi^2_d",
    "moments": "z-tests of mean_i w_i.u = 0 and mean_i (w_i.u)^2 = 1 per direction",
    "norm_independence": "Spearman: |w_i| independent of its direction (and of the next row's norm)",
    **{f"{rec.name}_unbiased": f"z-tests of the {rec.label} kernel estimate against exp(-|x-y|^2/2)"
       for rec in fk.RECORDS},
    "conformity": "z-tests of the empirical RF-conformity against theory",
    "fixed_norm": "rows of one norm sqrt(d): PRF/RFF bias against theory.fixed_norm's closed form",
    "structure": "within-block angles of the claimed coupling",
}


# ---------------------------------------------------------------------------
# Report


@dataclass(frozen=True)
class TestResult:
    """One test of a check.

    Attributes
    ----------
    label : str
        What was tested (``"row 3, e_1"``, ``"v = 1 e_1"``).
    statistic : float
        KS distance, z-score, Spearman correlation, or (deterministic tests)
        the largest deviation.
    pvalue : float or None
        None for a deterministic test (then ``tolerance`` applies).
    tolerance : float or None
        Largest deviation accepted by a deterministic test.
    detail : str
        Human-readable estimate (e.g. ``"ratio 0.957 +- 0.004"``).
    """

    __test__ = False  # not a pytest class

    label: str
    statistic: float
    pvalue: float | None = None
    tolerance: float | None = None
    detail: str = ""

    def failed(self, threshold):
        """True if the p-value is below ``threshold`` (or the deviation above the tolerance)."""
        if self.pvalue is None:
            return not (self.statistic <= self.tolerance)
        return not (self.pvalue >= threshold)


@dataclass(frozen=True)
class CheckResult:
    """A family of tests with one false-alarm budget.

    Attributes
    ----------
    name : str
        One of :data:`CHECKS`.
    description : str
    statistic : str
        Name of the per-test statistic ("KS D", "z", "Spearman rho", ...).
    alpha : float
        False-alarm probability allotted to this check; each of its ``k``
        statistical tests fails at p < alpha / k (0 when it has none).
    tests : tuple of TestResult
    passed : bool or None
        None when the check was skipped (see ``note``).
    note : str
    """

    name: str
    description: str
    statistic: str
    alpha: float
    tests: tuple = ()
    passed: bool | None = None
    note: str = ""

    @property
    def n_statistical(self):
        """Number of tests with a p-value."""
        return sum(t.pvalue is not None for t in self.tests)

    @property
    def threshold(self):
        """Per-test p-value threshold (Bonferroni)."""
        k = self.n_statistical
        return self.alpha / k if k else 0.0

    @property
    def failures(self):
        """The failed tests, worst first."""
        thr = self.threshold
        return sorted((t for t in self.tests if t.failed(thr)), key=_severity)

    @property
    def worst(self):
        """The test closest to failing (smallest p-value; deterministic failures first)."""
        return min(self.tests, key=_severity) if self.tests else None

    @property
    def adjusted_pvalue(self):
        """Bonferroni-adjusted p-value of the check: min(1, k * smallest p)."""
        ps = [t.pvalue for t in self.tests if t.pvalue is not None]
        return min(1.0, len(ps) * min(ps)) if ps else None


def _strict_json(obj):
    """``obj`` with every non-finite float replaced as :meth:`AuditReport.to_dict` documents (NaN -> None,
    +-inf -> ``"inf"`` / ``"-inf"``); numpy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {k: _strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict_json(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    return obj


def _severity(t):
    if t.pvalue is None:
        return (0 if t.failed(0.0) else 2, -t.statistic)
    return (1, t.pvalue)


@dataclass(frozen=True)
class Structure:
    """What the sampler's blocks look like (informative, no pass/fail).

    Attributes
    ----------
    looks_like : str
        'orthogonal', 'simplex', 'iid', 'single row' or 'unrecognised'.
    cos_mean, cos_sd, cos_min, cos_max : float
        Within-block pair cosines :math:`w_i^\\top w_j/(\\|w_i\\|\\|w_j\\|)`
        over all draws (blocks of d rows).
    max_dev_orthogonal, max_dev_simplex : float
        Largest :math:`|\\cos\\theta_{ij}|` and :math:`|\\cos\\theta_{ij} + 1/(d-1)|`.
    tolerance : float
        :math:`\\sqrt{\\epsilon}` of the sampler's floating dtype.
    norm_direction_rho : float
        Largest :math:`|\\rho|` (Spearman) between a row's norm and its
        squared direction cosines; 0 in expectation for Gaussian rows.
    norm_norm_rho : float
        Largest :math:`|\\rho|` between the norms of consecutive rows of a block.
    dtype : str
        dtype the sampler returned.
    """

    looks_like: str
    cos_mean: float = math.nan
    cos_sd: float = math.nan
    cos_min: float = math.nan
    cos_max: float = math.nan
    max_dev_orthogonal: float = math.nan
    max_dev_simplex: float = math.nan
    tolerance: float = math.nan
    norm_direction_rho: float = math.nan
    norm_norm_rho: float = math.nan
    dtype: str = ""


@dataclass(frozen=True)
class AuditReport:
    """Result of :func:`audit`.

    Attributes
    ----------
    sampler : str
        Name of the sampler.
    d, m : int
    coupling : str or None
        The claimed coupling.
    n : int
        Draws used; ``n_requested`` were asked for (fewer when ``time_budget`` ran out).
    alpha : float
        Overall false-alarm probability (Bonferroni bound over ``checks``).
    seconds : float
    checks : tuple of CheckResult
    structure : Structure
    v, z : float
        Norms of :math:`x + y` (PRF) and :math:`x - y` (RFF) used by the kernel and conformity tests.
    """

    sampler: str
    d: int
    m: int
    coupling: str | None
    n: int
    n_requested: int
    alpha: float
    seconds: float
    checks: tuple
    structure: Structure
    v: float
    z: float
    call: str = "d,m,rng"
    seed: str = ""
    notes: tuple = field(default_factory=tuple)

    @property
    def passed(self):
        """True when no check failed (skipped checks do not count)."""
        return all(c.passed is not False for c in self.checks)

    @property
    def failed(self):
        """Names of the failed checks."""
        return tuple(c.name for c in self.checks if c.passed is False)

    def check(self, name):
        """The :class:`CheckResult` called ``name``."""
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; checks are {', '.join(CHECKS)}")

    def to_dict(self):
        """A dict of the report that strict JSON can hold (``json.dumps(..., allow_nan=False)``).

        Numbers that JSON cannot write are replaced: NaN (a quantity that does
        not apply, e.g. ``norm_norm_rho`` of a sampler with one row per block)
        by ``None`` (JSON ``null``), and an infinite value (e.g. the ``statistic``
        of a z-test whose draws were all equal but off the expected value) by
        the string ``"inf"`` or ``"-inf"`` (``float()`` reads both back).
        """
        def test(t):
            return {"label": t.label, "statistic": t.statistic, "pvalue": t.pvalue, "tolerance": t.tolerance,
                    "detail": t.detail}

        out = {
            "sampler": self.sampler, "d": self.d, "m": self.m, "coupling": self.coupling, "n": self.n,
            "n_requested": self.n_requested, "alpha": self.alpha, "seconds": self.seconds, "v": self.v,
            "z": self.z, "call": self.call, "seed": self.seed, "passed": self.passed, "failed": list(self.failed),
            "notes": list(self.notes),
            "structure": dict(self.structure.__dict__),
            "checks": [{"name": c.name, "description": c.description, "statistic": c.statistic, "alpha": c.alpha,
                        "threshold": c.threshold, "passed": c.passed, "note": c.note,
                        "adjusted_pvalue": c.adjusted_pvalue, "tests": [test(t) for t in c.tests]}
                       for c in self.checks],
        }
        return _strict_json(out)

    def render(self, verbose=False):
        """The report as text; ``verbose`` lists up to 5 failed tests of each failed check."""
        s = self.structure
        claim = self.coupling if self.coupling is not None else "none (conformity and structure skipped)"
        ran = [c for c in self.checks if c.alpha > 0]
        lines = [
            f"Audit of {self.sampler}: d = {self.d}, m = {self.m}, claimed coupling: {claim}",
            f"{self.n} draws" + (f" of {self.n_requested} requested (time budget)" if self.n < self.n_requested
                                  else "")
            + f" in {self.seconds:.1f} s; call convention {self.call!r}; seed {self.seed}",
            f"false-alarm probability <= {self.alpha:.2g} overall (Bonferroni over {len(ran)} checks, "
            f"{self.alpha / max(1, len(ran)):.2g} each); PRF |x+y| = {self.v:g}, RFF |x-y| = {self.z:g}",
        ]
        if s.looks_like == "single row":
            lines.append(f"structure: one row per draw (no pairs); dtype {s.dtype}")
        else:
            lines.append(
                f"structure: within-block cos: mean {s.cos_mean:+.4f}, sd {s.cos_sd:.3g}, "
                f"range [{s.cos_min:+.4f}, {s.cos_max:+.4f}] (iid: mean 0, sd {1 / math.sqrt(self.d):.3g}; "
                f"simplex: {-1 / (self.d - 1):+.4f}); looks like: {s.looks_like}; dtype {s.dtype}")
        lines.append(f"           max |Spearman rho| norm-direction {s.norm_direction_rho:.3g}, "
                     f"norm-norm {s.norm_norm_rho:.3g}")
        lines.append("")
        wn = max([18] + [len(c.name) for c in self.checks])
        head = f"{'check':<{wn}} {'result':<6} {'tests':>5}  {'worst test':<30} {'statistic':>16} {'p-value':>9} " \
               f"{'threshold':>9}"
        lines += [head, "-" * len(head)]
        for c in self.checks:
            if c.passed is None:
                lines.append(f"{c.name:<{wn}} {'skip':<6} {'':>5}  {c.note}")
                continue
            w = c.worst
            stat = f"{c.statistic} {w.statistic:.3g}" if w is not None else ""
            p = _fmt_p(w.pvalue) if w is not None and w.pvalue is not None else "exact"
            thr = f"{c.threshold:.2g}" if c.n_statistical else f"tol {w.tolerance:.1g}"
            label = w.label if w is not None else ""
            lines.append(f"{c.name:<{wn}} {'PASS' if c.passed else 'FAIL':<6} {len(c.tests):>5}  {label:<30.30} "
                         f"{stat:>16} {p:>9} {thr:>9}")
            if c.name == "fixed_norm" and c.note:
                lines.append(f"{'':<{wn + 2}}{c.note}")
            if verbose and not c.passed:
                for t in c.failures[:5]:
                    pp = _fmt_p(t.pvalue) if t.pvalue is not None else "exact"
                    lines.append(f"{'':<{wn + 9}}{t.label:<30.30} {c.statistic} {t.statistic:.4g}  p {pp}  {t.detail}")
        for note in self.notes:
            lines.append(f"note: {note}")
        lines.append("")
        verdict = "PASS" if self.passed else f"FAIL ({', '.join(self.failed)})"
        lines.append(f"verdict: {verdict}")
        return "\n".join(lines)

    def __str__(self):
        return self.render()


def _fmt_p(p):
    if p < 1e-300:
        return "<1e-300"
    return f"{p:.2g}"


# ---------------------------------------------------------------------------
# Loading and calling the sampler


def load_sampler(spec):
    """Import a sampler from ``"MODULE:FUNCTION"`` or ``"path/to/file.py:FUNCTION"``.

    Parameters
    ----------
    spec : str
        ``MODULE`` is a dotted module name importable from ``sys.path``
        (``python -m`` puts the current directory first) or the path of a
        ``.py`` file; ``FUNCTION`` may be dotted (``Class.method``).

    Returns
    -------
    callable

    Raises
    ------
    ValueError
        Naming ``spec`` when it is malformed, the module cannot be imported,
        or the attribute is missing.
    TypeError
        When the attribute is not callable.
    """
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"spec must be 'MODULE:FUNCTION' or 'path/to/file.py:FUNCTION', got {spec!r}")
    modname, _, attr = spec.rpartition(":")
    if not modname or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise ValueError(f"spec must be 'MODULE:FUNCTION' or 'path/to/file.py:FUNCTION', got {spec!r}")
    try:
        if modname.endswith(".py") or os.sep in modname or "/" in modname:
            path = os.path.abspath(modname)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"no such file: {path}")
            name = "_montecarlo_audit_" + os.path.splitext(os.path.basename(path))[0]
            loader_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = module
            loader_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(modname)
    except Exception as exc:  # any import-time failure is a bad spec for the caller
        raise ValueError(f"spec {spec!r}: cannot import {modname!r} ({type(exc).__name__}: {exc})") from exc
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"spec {spec!r}: {modname!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise TypeError(f"spec {spec!r}: {attr!r} is a {type(obj).__name__}, not callable")
    return obj


def _parse_call(call):
    """Validate a call convention; returns the tuple of tokens (or the callable)."""
    if callable(call):
        return call
    if not isinstance(call, str):
        raise TypeError(f"call must be a convention string such as 'd,m,rng' or a callable "
                        f"adapter(sampler, d, m, rng), got {type(call).__name__}")
    tokens = tuple(t.strip() for t in call.split(","))
    bad = [t for t in tokens if t not in CALL_TOKENS]
    if bad or tokens.count("d") != 1 or tokens.count("m") != 1 or ("rng" in tokens) + ("seed" in tokens) > 1 \
            or len(set(tokens)) != len(tokens):
        raise ValueError("call must list 'd' and 'm' once each and at most one of 'rng', 'seed' "
                         f"(comma-separated, e.g. 'd,m,rng', 'm,d,seed', 'm,d'), got {call!r}")
    return tokens


def _make_caller(sampler, call, d, m, gen):
    """A function of no arguments drawing one matrix from the sampler."""
    if callable(call):
        return lambda: call(sampler, d, m, gen)
    tokens = call
    if "rng" not in tokens and "seed" not in tokens:
        _seed_global_state(gen)

    def caller():
        args = []
        for t in tokens:
            if t == "d":
                args.append(d)
            elif t == "m":
                args.append(m)
            elif t == "rng":
                args.append(gen)
            else:
                args.append(int(gen.integers(2**63 - 1)))
        return sampler(*args)

    return caller


def _seed_global_state(gen):
    """Seed numpy's legacy global generator and, if imported, torch's, for samplers without an rng argument."""
    np.random.seed(int(gen.integers(2**32 - 1)))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(int(gen.integers(2**63 - 1)))


def _as_matrix(out, d, m, draw):
    """Validate one sampler output and return it as a float64 (m, d) numpy array (and its dtype)."""
    where = f"sampler (draw {draw})"
    if out is None or isinstance(out, (str, bytes, dict)):
        raise TypeError(f"{where} must return an (m, d) = ({m}, {d}) array, got {type(out).__name__}")
    try:
        arr = to_numpy(out) if hasattr(out, "detach") or hasattr(out, "get") else np.asarray(out)
    except Exception as exc:
        raise TypeError(f"{where} must return an (m, d) array (numpy, torch or array-like), "
                        f"got {type(out).__name__}") from exc
    if arr.dtype.kind not in "f":
        raise TypeError(f"{where} must return real floating-point values, got dtype {arr.dtype}")
    if arr.shape != (m, d):
        hint = " (transposed? the rows must be the m projections w_i in R^d)" if arr.shape == (d, m) else ""
        raise ValueError(f"{where} must return an array of shape (m, d) = ({m}, {d}), got shape "
                         f"{arr.shape}{hint}")
    bad = int(np.count_nonzero(~np.isfinite(arr)))
    if bad:
        raise ValueError(f"{where} returned {bad} NaN or inf entries")
    return np.asarray(arr, dtype=np.float64), arr.dtype


def _sampler_name(sampler):
    mod = getattr(sampler, "__module__", None)
    qual = getattr(sampler, "__qualname__", None) or getattr(sampler, "__name__", None) or type(sampler).__name__
    return f"{mod}:{qual}" if mod else str(qual)


# ---------------------------------------------------------------------------
# Directions and the draw loop


def audit_directions(d, max_axes=32):
    """The unit vectors every row is projected on: dict name -> (d,) array.

    Every coordinate axis ``e_1 .. e_d`` when d <= ``max_axes`` (else the first
    and last ``max_axes // 2``), the diagonal and two fixed random directions
    (``random`` from :func:`montecarlo.diagnostics.standard_directions`,
    ``random_2`` from seed 1).
    """
    d = check_int(d, "d", 1)
    max_axes = check_int(max_axes, "max_axes", 2)
    base = standard_directions(d)
    half = max_axes // 2
    axes = range(d) if d <= max_axes else [*range(half), *range(d - half, d)]
    dirs = {}
    for i in axes:
        e = np.zeros(d)
        e[i] = 1.0
        dirs[f"e_{i + 1}"] = e
    dirs["diagonal"] = base["diagonal"]
    dirs["random"] = base["random"]
    g = np.random.default_rng(1).standard_normal(d)
    dirs["random_2"] = g / np.linalg.norm(g)
    return dirs


def _kernel_directions(d):
    return ("e_1", f"e_{d}", "diagonal", "random")


class _Draws:
    """Accumulates projections, squared norms and within-block cosines of the draws."""

    def __init__(self, n, d, m, U):
        self.d, self.m, self.U = d, m, U
        self.proj = np.empty((n, m, U.shape[1]))
        self.r2 = np.empty((n, m))
        self.count = 0
        self.blocks = [(lo, min(lo + d, m)) for lo in range(0, m, d)]
        self.cos01 = np.empty(n) if m >= 2 else None
        self.cos_cross = np.empty(n) if m > d else None
        self.n_pairs = 0
        self.cos_shift = None  # sums of (cos - shift): no cancellation when every cos is the same
        self.cos_sum = self.cos_sq = 0.0
        self.cos_min, self.cos_max = math.inf, -math.inf
        self.dev0 = self.devs = 0.0
        self.dev_max = {}  # max |cos - c| for claimed cosines c other than 0 and -1/(d-1)
        self._claims = ()

    def add(self, W):
        k = W.shape[0]
        sl = slice(self.count, self.count + k)
        self.proj[sl] = W @ self.U
        r2 = np.einsum("kmd,kmd->km", W, W)
        self.r2[sl] = r2
        if self.m >= 2:
            r = np.sqrt(r2)
            Wn = W / np.where(r > 0, r, 1.0)[:, :, None]
            target = -1.0 / (self.d - 1)
            for lo, hi in self.blocks:
                b = hi - lo
                if b < 2:
                    continue
                C = Wn[:, lo:hi] @ np.swapaxes(Wn[:, lo:hi], 1, 2)
                iu = np.triu_indices(b, 1)
                c = C[:, iu[0], iu[1]]
                self.n_pairs += c.size
                if self.cos_shift is None:
                    self.cos_shift = float(c.flat[0])
                c0 = c - self.cos_shift
                self.cos_sum += float(c0.sum())
                self.cos_sq += float((c0 * c0).sum())
                self.cos_min = min(self.cos_min, float(c.min()))
                self.cos_max = max(self.cos_max, float(c.max()))
                self.dev0 = max(self.dev0, float(np.abs(c).max()))
                self.devs = max(self.devs, float(np.abs(c - target).max()))
                for t in self._claims:
                    self.dev_max[t] = max(self.dev_max.get(t, 0.0), float(np.abs(c - t).max()))
            self.cos01[sl] = np.einsum("kd,kd->k", Wn[:, 0], Wn[:, 1])
            if self.cos_cross is not None:
                self.cos_cross[sl] = np.einsum("kd,kd->k", Wn[:, 0], Wn[:, self.d])
        self.count += k

    def claim(self, cos_value):
        """Also track max |cos - cos_value| within blocks (call before the first ``add``)."""
        if cos_value not in (0.0, -1.0 / (self.d - 1)):
            self._claims += (cos_value,)

    def deviation(self, cos_value):
        """max |cos - cos_value| over the within-block pairs seen."""
        if cos_value == 0.0:
            return self.dev0
        if cos_value == -1.0 / (self.d - 1):
            return self.devs
        return self.dev_max.get(cos_value, math.inf)

    def trim(self):
        n = self.count
        self.proj, self.r2 = self.proj[:n], self.r2[:n]
        if self.cos01 is not None:
            self.cos01 = self.cos01[:n]
        if self.cos_cross is not None:
            self.cos_cross = self.cos_cross[:n]


# ---------------------------------------------------------------------------
# The audit


def audit(sampler, d, m=None, coupling=None, n_draws=DEFAULT_N, rng=None, *, call="d,m,rng", alpha=DEFAULT_ALPHA,
          time_budget=None, v=1.0, z=1.0, max_axes=32, chunk=256, name=None, progress=False, kinds=None):
    r"""Test a projection-matrix sampler statistically (see :ref:`guide-montecarlo.audit` for the checks).

    Parameters
    ----------
    sampler : callable
        Draws one (m, d) matrix whose rows are the projections :math:`w_i`
        (numpy array, torch tensor or anything ``numpy.asarray`` accepts;
        real floating dtype).  By default it is called as
        ``sampler(d, m, rng)`` with ``rng`` a :class:`numpy.random.Generator`
        that advances from draw to draw (see ``call``).
    d : int >= 2
        Dimensionality.
    m : int >= 1, optional
        Rows per draw (default d).  With m > d the rows must form independent
        blocks of d rows, the last one truncated, as in the paper.
    coupling : str, optional
        The coupling the sampler claims, one of :data:`CLAIMABLE_COUPLINGS`
        (the exact couplings of :mod:`theory.registry` with PRF and RFF closed forms); enables the ``conformity`` and
        ``structure`` checks and the cross-row norm tests.
    n_draws : int >= 50
        Number of independent draws (one sampler call each).
    rng : None, int or numpy.random.Generator
        Seed of the audit; it feeds the sampler (per ``call``), so a sampler
        that honours its argument gives a reproducible report.
    call : str or callable
        Calling convention: comma-separated tokens ``d``, ``m`` and at most
        one of ``rng`` (the Generator itself) or ``seed`` (a fresh int in
        [0, 2**63 - 1) per draw, for samplers that build their own, e.g.
        torch, generator), in the order the sampler takes them:
        ``'d,m,rng'`` (default), ``'m,d,rng'``, ``'d,m,seed'``, ``'m,d'``...
        Without ``rng`` or ``seed`` the sampler is assumed to use global
        state: numpy's legacy global generator (and torch's, when torch is
        imported) is seeded once from ``rng``.  A callable
        ``adapter(sampler, d, m, rng)`` returning the matrix handles anything
        else (keyword arguments, extra parameters, a class).
    alpha : float in (0, 1)
        Overall false-alarm probability, split equally over the checks that
        run statistical tests (the exact-angle test of a claimed orthogonal or
        simplex coupling is deterministic and needs no share) and within a
        check equally over its tests (Bonferroni).
    time_budget : float, optional
        Stop drawing after this many seconds (keeping at least 50 draws);
        the report says how many were used.  Stopping on time, not on the
        data, keeps the false-alarm probabilities valid.
    v, z : float > 0
        Norms of :math:`x + y` (PRF tests) and :math:`x - y` (RFF tests).
        Larger values raise the power and the skewness of the PRF
        statistics; keep :math:`v \le 1` unless n is large.
    max_axes : int >= 2
        Test every coordinate axis up to this d, else the first and last
        ``max_axes // 2``.
    chunk : int >= 1
        Draws processed together (memory: chunk * m * d floats); all draws
        keep n * m * (axes + 3) projections.
    name : str, optional
        Name of the sampler in the report.
    progress : bool or callable
        A progress bar of the draws on stderr, or ``f(done, total)``.
    kinds : sequence of str, optional
        Feature kinds whose estimates are tested (default every kind of
        :mod:`theory.feature_kinds` without parameters: 'prf', 'rff', 'hyperbolic').

    Returns
    -------
    AuditReport
        ``report.passed``, ``report.failed``, ``report.check(name)``,
        ``print(report)``.

    Raises
    ------
    TypeError
        ``sampler`` not callable, ``call`` neither a string nor a callable,
        or a draw that is not a real floating array.
    ValueError
        Bad ``d``, ``m``, ``coupling``, ``n_draws``, ``alpha``, ``call``, ... (named
        in the message), or a draw of the wrong shape or with NaN/inf entries.

    Notes
    -----
    False alarms: with an exact sampler of the claimed coupling, the
    probability that any check fails is at most ``alpha`` (Bonferroni;
    asymptotic for the z-tests, see :ref:`guide-montecarlo.audit`).  Power: see
    ``tests/test_montecarlo_audit.py``, which re-implements the two public mistakes of
    :ref:`guide-montecarlo.audit` and a wrong coupling claim and shows which checks
    flag them.
    """
    if not callable(sampler):
        raise TypeError(f"sampler must be callable as sampler(d, m, rng) (or per call=), got "
                        f"{type(sampler).__name__}")
    d = check_int(d, "d", 2)
    m = d if m is None else check_int(m, "m", 1)
    if coupling is not None and coupling not in CLAIMABLE_COUPLINGS:
        raise ValueError(f"coupling must be None or one of {', '.join(map(repr, CLAIMABLE_COUPLINGS))}, got "
                         f"{coupling!r}")
    n = check_int(n_draws, "n_draws", MIN_N)
    alpha = check_positive_float(alpha, "alpha")
    if alpha >= 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if time_budget is not None:
        time_budget = check_positive_float(time_budget, "time_budget")
    v = check_positive_float(v, "v")
    z = check_positive_float(z, "z")
    max_axes = check_int(max_axes, "max_axes", 2)
    chunk = check_int(chunk, "chunk", 1)
    kinds_ = _check_kinds(kinds)
    tokens = _parse_call(call)
    rng = check_rng(rng)
    if isinstance(rng, np.random.Generator):
        gen, seed_text = rng, "Generator"
    else:
        gen = np.random.default_rng(rng)
        seed_text = "fresh entropy" if rng is None else "SeedSequence" if not isinstance(rng, int) else str(rng)
    n_dirs = (d if d <= max_axes else 2 * (max_axes // 2)) + 3
    b = min(m, d)
    check_budget(n * m * (n_dirs + 1), f"the projections of n_draws x m = {show_int(n)} x {show_int(m)} rows on "
                 f"{n_dirs} directions",
                 "reduce n_draws or m")
    check_budget(min(chunk, n) * (m * d + b * b), f"a chunk of {show_int(min(chunk, n))} draws of (m, d) = "
                 f"({show_int(m)}, {show_int(d)}) "
                 "matrices and their block cosines", "reduce chunk, m or d")

    dirs = audit_directions(d, max_axes)
    names = list(dirs)
    U = np.stack([dirs[k] for k in names], axis=1)
    draws = _Draws(n, d, m, U)
    if coupling is not None and get_coupling(coupling).cos_theta is not None:
        draws.claim(float(get_coupling(coupling).cos_theta(d)))
    bar = _Progress(progress, n, "audit draws")
    caller = _make_caller(sampler, tokens, d, m, gen)
    t0 = time.perf_counter()
    buf, dtype = [], None
    for k in range(n):
        W, dt = _as_matrix(caller(), d, m, k)
        if dtype is None:
            dtype = dt
        buf.append(W)
        if len(buf) == chunk:
            draws.add(np.stack(buf))
            buf = []
            bar.update(k + 1)
        if time_budget is not None and k + 1 >= MIN_N and time.perf_counter() - t0 > time_budget:
            break
    if buf:
        draws.add(np.stack(buf))
    bar.update(n)
    draws.trim()
    n_used = draws.count
    index = {k: i for i, k in enumerate(names)}

    checks = [
        _check_marginals(draws, names),
        _check_row_norms(draws),
        _check_moments(draws, names),
        _check_norm_independence(draws, names, coupling),
        *(_check_unbiased(draws, index, kind, _pair_norm(kind, v, z)) for kind in kinds_),
        _check_conformity(draws, index, coupling, v, z, kinds_),
        _check_structure(draws, coupling, dtype),
        _check_fixed_norm(draws, index, v, z),
    ]
    # Bonferroni over the checks with statistical tests (a deterministic check cannot false-alarm)
    ran = sum(tests is not None and any(t.pvalue is not None for t in tests) for _, _, tests, _ in checks)
    share = alpha / ran
    results = tuple(_finish(spec, share) for spec in checks)
    structure = _describe_structure(draws, dtype, results)
    notes = []
    if n_used < n:
        notes.append(f"time budget of {time_budget:g} s reached after {n_used} of {n} draws")
    call_text = ",".join(tokens) if isinstance(tokens, tuple) else f"adapter {getattr(call, '__name__', 'callable')}"
    return AuditReport(sampler=name or _sampler_name(sampler), d=d, m=m, coupling=coupling, n=n_used,
                       n_requested=n, alpha=alpha, seconds=time.perf_counter() - t0, checks=results,
                       structure=structure, v=v, z=z, call=call_text, seed=seed_text, notes=tuple(notes))


def _finish(spec, share):
    """(name, statistic, tests or None, note) -> CheckResult with its alpha share and verdict."""
    name, statistic, tests, note = spec
    if tests is None:
        return CheckResult(name, _DESCRIPTIONS[name], statistic, 0.0, (), None, note)
    tests = tuple(tests)
    has_stat = any(t.pvalue is not None for t in tests)
    alpha = share if has_stat else 0.0
    thr = CheckResult(name, _DESCRIPTIONS[name], statistic, alpha, tests).threshold
    passed = not any(t.failed(thr) for t in tests)
    return CheckResult(name, _DESCRIPTIONS[name], statistic, alpha, tests, passed, note)


def _ztest(label, samples, expected, scale=1.0, what="mean"):
    r"""Two-sided skewness-corrected z-test of E[samples] = expected (one value per draw).

    The per-draw statistics here (means of :math:`e^{w^\top v}`) are right-
    skewed, which makes the plain studentized mean left-skewed.  Hall's (1992)
    transformation removes the first-order skewness term:
    :math:`T = \sqrt n\,(S + \hat\gamma S^2/3 + \hat\gamma^2S^3/27 + \hat\gamma/(6n))` with
    :math:`S = (\bar x - \mu)/s` and :math:`\hat\gamma` the sample skewness;
    T is N(0, 1) up to O(1/n) and increasing in :math:`\bar x`.
    """
    n = samples.shape[0]
    mean = float(samples.mean())
    sd = float(samples.std(ddof=1))
    se = sd / math.sqrt(n)
    if sd == 0.0:
        zval = 0.0 if mean == expected else math.copysign(math.inf, mean - expected)
    else:
        s_ = (mean - expected) / sd
        g = float(np.mean((samples - mean) ** 3)) / sd ** 3
        zval = math.sqrt(n) * (s_ + g * s_ * s_ / 3 + g * g * s_ ** 3 / 27 + g / (6 * n))
    p = float(2 * stats.norm.sf(abs(zval)))
    detail = f"{what} {mean / scale:.5g} +- {se / scale:.2g} (expected {expected / scale:.5g})"
    return TestResult(label, zval, p, detail=detail)


def ks_columns(samples, cdf):
    r"""One-sample two-sided KS tests of every column of ``samples`` (axis 0 = draws), vectorised.

    The same statistic and exact p-value (:math:`D_n` survival function,
    ``scipy.stats.kstwo``) as :func:`scipy.stats.kstest` (and so
    :func:`montecarlo.diagnostics.ks_marginals`) column by column, without a
    Python loop: about 50 times faster for the thousands of row-direction
    pairs of a d = 64 audit.

    Parameters
    ----------
    samples : array (n, ...)
    cdf : callable
        Vectorised CDF of the null distribution.

    Returns
    -------
    D, p : arrays of shape ``samples.shape[1:]``
    """
    x = np.sort(np.asarray(samples, dtype=float), axis=0)
    n = x.shape[0]
    f = cdf(x)
    shape = (n,) + (1,) * (x.ndim - 1)
    i = np.arange(1, n + 1, dtype=float).reshape(shape)
    d = np.maximum((i / n - f).max(axis=0), (f - (i - 1) / n).max(axis=0))
    return d, np.clip(stats.kstwo.sf(d, n), 0.0, 1.0)


def _check_marginals(draws, names):
    d, p = ks_columns(draws.proj, special.ndtr)  # (m, K): row i, direction j
    tests = [TestResult(f"row {i}, {nm}", float(d[i, j]), float(p[i, j]), detail="KS vs N(0, 1)")
             for i in range(draws.m) for j, nm in enumerate(names)]
    return ("marginals", "KS D", tests, "")


def _check_row_norms(draws):
    d, p = ks_columns(draws.r2, stats.chi2(draws.d).cdf)
    mean = draws.r2.mean(axis=0)
    tests = [TestResult(f"row {i}", float(d[i]), float(p[i]),
                        detail=f"mean |w|^2 {mean[i]:.4g} (chi^2_{draws.d}: {draws.d})") for i in range(draws.m)]
    return ("row_norms", "KS D", tests, "")


def _check_moments(draws, names):
    tests = []
    for j, nm in enumerate(names):
        p = draws.proj[:, :, j]
        tests.append(_ztest(f"mean w.u, {nm}", p.mean(axis=1), 0.0, what="mean"))
        tests.append(_ztest(f"mean (w.u)^2, {nm}", (p * p).mean(axis=1), 1.0, what="mean"))
    return ("moments", "z", tests, "")


def _centred_ranks(a):
    """Ranks along axis 0 minus their mean (ties, which continuous draws do not have, broken by draw order)."""
    n = a.shape[0]
    order = np.argsort(a, axis=0)
    ranks = np.empty(a.shape)
    shape = (n,) + (1,) * (a.ndim - 1)
    np.put_along_axis(ranks, order, np.arange(n, dtype=float).reshape(shape) - (n - 1) / 2, axis=0)
    return ranks


def _spearman(ra, rb):
    """Spearman rho and two-sided p-value (t approximation, as scipy) from centred ranks (n, ...)."""
    n = ra.shape[0]
    ss = n * (n * n - 1) / 12  # sum of squared centred ranks 0..n-1
    rho = (ra * rb).sum(axis=0) / ss
    rho = np.clip(rho, -1.0, 1.0)
    with np.errstate(divide="ignore"):
        t = rho * np.sqrt((n - 2) / np.maximum(1.0 - rho * rho, 1e-300))
    p = 2 * stats.t.sf(np.abs(t), n - 2)
    return rho, p


def _check_norm_independence(draws, names, coupling):
    r2 = draws.r2
    cos2 = draws.proj ** 2 / np.where(r2 > 0, r2, 1.0)[:, :, None]
    rr = _centred_ranks(r2)
    rho, p = _spearman(rr[:, :, None], _centred_ranks(cos2))
    tests = [TestResult(f"row {i}, |w| vs {nm}", float(rho[i, j]), float(p[i, j]),
                        detail="rho of |w_i|^2 and cos^2(w_i, u)")
             for i in range(draws.m) for j, nm in enumerate(names)]
    note = ""
    if coupling is not None:
        coupled = set(get_coupling(coupling).coupled_norm_pairs(draws.d))
        pairs = [(i, i + 1) for lo, hi in draws.blocks for i in range(lo, hi - 1) if (i - lo, i + 1 - lo) not in coupled]
        if pairs:
            rho2, p2 = _spearman(rr[:, [i for i, _ in pairs]], rr[:, [j for _, j in pairs]])
            tests += [TestResult(f"|w_{i}| vs |w_{j}|", float(rho2[k]), float(p2[k]),
                                 detail="rho of consecutive norms in a block")
                      for k, (i, j) in enumerate(pairs)]
    else:
        note = "cross-row norm tests need a claimed coupling"
    return ("norm_independence", "Spearman rho", tests, note)


def _check_kinds(value):
    """The feature kinds of the audit: every kind without parameters by default, else the checked list."""
    if value is None:
        return tuple(rec.name for rec in fk.RECORDS if not rec.parameters)
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names:
        raise ValueError("kinds must name at least one feature kind")
    for k in names:
        fk.check_kind(k, "kinds")
        if fk.get(k).parameters:
            raise ValueError(f"kinds must be kinds without parameters here ({k!r} needs "
                             f"{', '.join(fk.get(k).parameters)}), got {k!r}")
    return names


def _feature_map(kind):
    """The kind's :class:`~montecarlo.features.FeatureMap` (its statistic does not depend on the kernel)."""
    from .features import FeatureMap

    return FeatureMap(kind, kernel=fk.get(kind).kernels[0], where="audit")


def _pair_norm(kind, v, z):
    """The audit's norm of the kind's pair vector: v (of x + y) or z (of x - y), as its record's argument."""
    return v if fk.get(kind).argument == "v" else z


def _statistic(draws, proj, kind):
    """The kind's per-direction statistic b (n, m) of projections ``proj`` (its log-free value)."""
    fmap = _feature_map(kind)
    return fmap.pair_values(fmap.statistic(proj, np, d=draws.d, w_sq=draws.r2 if fmap.needs_w_sq() else None))


def _check_unbiased(draws, index, kind, t):
    """z-tests of one kind's estimate: the mean statistic against E b = e^{v^2/2} (kinds of v = x + y) or
    e^{-z^2/2} (kinds of z = x - y), as the ratio estimate / kernel (the kernel prefactor cancels)."""
    fmap = _feature_map(kind)
    inverse = math.exp(-fmap.statistic_log_mean(t))
    tests = []
    for nm in _kernel_directions(draws.d):
        b = _statistic(draws, draws.proj[:, :, index[nm]] * t, kind).mean(axis=1)
        tests.append(_ztest(f"{fmap.argument} = {t:g} {nm}", b * inverse, 1.0, what="estimate/kernel"))
    return (f"{kind}_unbiased", "z", tests, "")


def _pair_mean(b):
    """Per draw (1/(m(m-1))) sum_{i != j} b_i b_j for b of shape (n, m)."""
    m = b.shape[1]
    s = b.sum(axis=1)
    return (s * s - (b * b).sum(axis=1)) / (m * (m - 1))


def _theory_conformity(coupling, d, m, kind, t):
    """Pair-averaged pair term of one kind under the claimed coupling (float, :func:`theory.mean_conformity`);
    None when the kind has no closed form for that coupling."""
    import theory
    from mpmath import mp

    if coupling not in theory.kind_couplings(kind):
        return None
    with mp.workdps(20):
        return float(theory.mean_conformity(coupling, d, t, m=m, kind=kind))


def _check_conformity(draws, index, coupling, v, z, kinds_):
    if coupling is None:
        return ("conformity", "z", None, "no coupling claimed (pass coupling=)")
    if draws.m < 2:
        return ("conformity", "z", None, "m = 1: no pairs of features")
    tests, notes = [], []
    for kind in kinds_:
        rec = fk.get(kind)
        t = _pair_norm(kind, v, z)
        rho = _theory_conformity(coupling, draws.d, draws.m, kind, t)
        if rho is None:
            notes.append(f"{rec.label}: no closed form")
            continue
        relative = rec.log_space  # (positive statistics: a relative test; cosines: an absolute one)
        for nm in _kernel_directions(draws.d):
            b = _statistic(draws, draws.proj[:, :, index[nm]] * t, kind)
            tests.append(_ztest(f"{rec.label} {rec.argument} = {t:g} {nm}", _pair_mean(b), rho,
                                scale=abs(rho) if relative else 1.0,
                                what="conformity/theory" if relative else "conformity"))
        notes.append(f"{rec.label} {rho:.6g}")
    note = "theory: " + ", ".join(notes) + (" (ensemble of blocks of d rows)" if draws.m > draws.d else "")
    return ("conformity", "z", tests, note)


def _check_fixed_norm(draws, index, v, z):
    """For a sampler whose rows all have norm sqrt(d) (performer-pytorch's scaling=1): the measured PRF and RFF
    estimates against the biased means of :mod:`theory.fixed_norm` (passing means "biased exactly as a fixed-norm
    orthogonal sampler is"); the note states the predicted relative bias."""
    r2 = draws.r2
    d = draws.d
    if not np.allclose(r2, d, rtol=1e-6, atol=0):
        return ("fixed_norm", "z", None, "rows do not all have norm sqrt(d)")
    import theory
    from mpmath import mp

    with mp.workdps(20):
        bias_prf = float(theory.fixed_norm.fixed_norm_bias(d, v))
        bias_rff = float(theory.fixed_norm.fixed_norm_bias(d, z, kind="rff"))
    tests = []
    for nm in _kernel_directions(d):
        p = draws.proj[:, :, index[nm]]
        tests.append(_ztest(f"PRF v = {v:g} {nm}", np.exp(p * v - 0.5 * v * v).mean(axis=1), 1 + bias_prf,
                            what="estimate/kernel vs fixed-norm theory"))
        k = math.exp(-0.5 * z * z)
        tests.append(_ztest(f"RFF z = {z:g} {nm}", np.cos(p * z).mean(axis=1), k * (1 + bias_rff), scale=k,
                            what="estimate vs fixed-norm theory"))
    note = (f"fixed-norm rows: predicted relative bias {bias_prf:+.4g} (PRF, v = {v:g}), {bias_rff:+.4g} (RFF, "
            f"z = {z:g}) (theory.fixed_norm.fixed_norm_bias); the unbiasedness checks above fail accordingly")
    return ("fixed_norm", "z", tests, note)


def _beta_cos_cdf(d):
    """CDF of cos(theta) between independent isotropic vectors in R^d: (1 + c)/2 ~ Beta((d-1)/2, (d-1)/2)."""
    a = (d - 1) / 2
    dist = stats.beta(a, a)
    return lambda c: dist.cdf((1 + np.asarray(c)) / 2)


def _tolerance(dtype):
    return math.sqrt(np.finfo(dtype).eps) if dtype is not None and dtype.kind == "f" else math.sqrt(2.0 ** -52)


def _check_structure(draws, coupling, dtype):
    if coupling is None:
        return ("structure", "deviation", None, "no coupling claimed (pass coupling=)")
    if draws.m < 2:
        return ("structure", "deviation", None, "m = 1: no pairs of features")
    d = draws.d
    tests = []
    tol = _tolerance(dtype)
    cdf = _beta_cos_cdf(d)
    within = draws.m if draws.m <= d else d
    claimed = get_coupling(coupling).cos_theta
    if claimed is not None:
        c = claimed(d)
        tests.append(TestResult(f"max |cos - ({c})| within blocks", draws.deviation(float(c)), None, tol,
                                detail=f"{coupling} rows: cos = {float(c):.5g} exactly"))
    elif within >= 2:
        dd, pp = ks_columns(draws.cos01, cdf)
        tests.append(TestResult("cos(w_0, w_1) law", float(dd), float(pp),
                                detail="KS vs independent isotropic rows"))
    if draws.cos_cross is not None:
        dd, pp = ks_columns(draws.cos_cross, cdf)
        tests.append(TestResult(f"cos(w_0, w_{d}) across blocks", float(dd), float(pp),
                                detail="KS vs independent isotropic rows"))
    return ("structure", "stat", tests, "")


def _describe_structure(draws, dtype, results):
    tol = _tolerance(dtype)
    ni = next(c for c in results if c.name == "norm_independence")
    nd = [abs(t.statistic) for t in ni.tests if t.label.startswith("row ")]
    nn = [abs(t.statistic) for t in ni.tests if t.label.startswith("|w_")]
    common = dict(norm_direction_rho=max(nd) if nd else math.nan, norm_norm_rho=max(nn) if nn else math.nan,
                  dtype=str(dtype), tolerance=tol)
    if draws.n_pairs == 0:
        return Structure("single row", **common)
    mean0 = draws.cos_sum / draws.n_pairs
    sd = math.sqrt(max(draws.cos_sq / draws.n_pairs - mean0 * mean0, 0.0))
    mean = draws.cos_shift + mean0
    d = draws.d
    if draws.dev0 <= tol:
        looks = "orthogonal"
    elif draws.devs <= tol:
        looks = "simplex"
    elif abs(mean) < 0.1 / math.sqrt(d) and abs(sd * math.sqrt(d) - 1) < 0.1:
        looks = "iid"
    else:
        looks = "unrecognised"
    return Structure(looks, mean, sd, draws.cos_min, draws.cos_max, draws.dev0, draws.devs, **common)
