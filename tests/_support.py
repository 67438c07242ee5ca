"""Small helpers shared by several theory test modules (one home each).

The statistical thresholds and the digit comparisons of both suites live in :mod:`paper_checks._compare`;
the helpers of the command-line tests in :mod:`_cli`, of the tests that start processes in :mod:`_procs`.
"""

from __future__ import annotations

import numpy as np
import pytest

import theory

#: x86's long double has a 63-bit mantissa; elsewhere ``np.longdouble`` may be a double
LONG = np.finfo(np.longdouble).nmant > 52

#: 4301 digits: ``str(BIG)`` raises ValueError (``sys.get_int_max_str_digits()`` = 4300)
BIG = 2**14286

#: the work budget (units) of the tests that show a loop stops within its budget: about 0.2 s of work
SMALL = 20_000


def rel_err(a, b):
    """|a - b| / |b|, at the caller's precision."""
    return abs(a - b) / abs(b)


def small_budget():
    """A work budget of ``SMALL`` units for every theory call inside it."""
    return theory.budget(work=SMALL)


def raises_budget(match):
    """``pytest.raises`` of the ConvergenceError of an exhausted ``small_budget``, its message matching ``match``."""
    return pytest.raises(theory.ConvergenceError, match=rf"(?s){match}.*work budget of {SMALL} units exhausted")


def pnc_rule_builds(monkeypatch, call):
    """(precision tiers, builds) of theory.pnc's pair rules during ``call()``, its memos emptied before and after:
    every tier a rule was set to, and how many times a rule's split points were computed (a fresh rule, or a rule
    raised to a higher tier: its nodes then built again)."""
    import theory.pnc as pnc

    built = []
    ensure = pnc.PairRule.ensure

    def counting(self, what, prec=None):
        fresh, before = not self.pieces, self.prec
        ensure(self, what, prec)
        built.append((fresh or self.prec != before, self.prec))

    pnc.clear_caches()
    monkeypatch.setattr(pnc.PairRule, "ensure", counting)
    try:
        call()
    finally:
        pnc.clear_caches()
    return {p for _, p in built}, sum(b for b, _ in built)


def pnc_nodes_built(monkeypatch, call):
    """Node evaluations (the partner and the weight of each node of each rung of each piece) built by theory.pnc's
    pair rules during ``call()``, its memos emptied before and after: a count of work, not of time."""
    import theory._antithetic as anti
    import theory.pnc as pnc

    count = [0]
    build = anti.piece_nodes

    def counting(d, kind, lo, hi, n, what):
        count[0] += n
        return build(d, kind, lo, hi, n, what)

    pnc.clear_caches()
    monkeypatch.setattr(anti, "piece_nodes", counting)
    try:
        call()
    finally:
        pnc.clear_caches()
        monkeypatch.setattr(anti, "piece_nodes", build)
    return count[0]
