"""Tests of :mod:`theory.validation`: integer checks and how huge integers are named in messages."""

import numpy as np
import pytest
from mpmath import mp

import theory
from _support import BIG


# ---------------------------------------------------------------------------
# Regression tests for the findings of issue 11, one block per item, each against an
# independent computation (mpmath's own series at high precision, arb balls from
# python-flint, a dense scan, or a closed form).


def test_check_int_accepts_integers_and_forms_its_message_only_to_refuse(monkeypatch):
    """check_int: Python and numpy integers pass as Python ints; bool, numpy bool and floats are refused
    (TypeError naming the argument and the bound), values outside the bounds too (ValueError with the context);
    the message is formed only when refusing (the kernels' launch sizes call it dozens of times per training
    step): with its former stubbed to fail, valid calls still pass and a refusal reaches it."""
    from theory import validation as V

    assert V.check_int(3, "d", 1) == 3 and type(V.check_int(np.int64(5), "d", 1)) is int
    for bad in (True, np.bool_(True), 2.0):
        with pytest.raises(TypeError, match=r"d must be an integer >= 1, got"):
            V.check_int(bad, "d", 1)
    with pytest.raises(ValueError, match=r"^m must be an integer >= 1 and <= 4 for x, got 5 \(int\)$"):
        V.check_int(5, "m", 1, "for x", maximum=4)

    def stub(*args):
        raise AssertionError("message formed")

    monkeypatch.setattr(V, "_int_what", stub)
    assert V.check_int(7, "d", 1, maximum=9) == 7 and V.check_int(np.int32(2), "d") == 2
    with pytest.raises(AssertionError, match="message formed"):
        V.check_int(0, "d", 1)


def test_show_int_names_integers_beyond_the_str_limit():
    """theory.validation.show_int: str(n) up to 256 bits, beyond that the leading digits (or the power of two)
    and the bit length, never str(n), which Python refuses beyond 4300 digits (issue 38: d = 2^14286 in a
    message raised 'Exceeds the limit (4300 digits)').  The leading digits are checked against mpmath's own
    decimal conversion; describe() and show() of containers holding such integers do not raise either."""
    from fractions import Fraction

    from theory import validation as V

    assert V.show_int(2**256 - 1) == str(2**256 - 1) and V.show_int(np.int64(-7)) == "-7"
    assert V.show_int(2**256) == "2^256 (an integer of 257 bits)"
    assert V.show_int(-(2**14286)) == "-2^14286 (an integer of 14287 bits)"
    for n in (2**256 + 1, 3 * 2**20000, 10**5000 + 1, 7**9000, -(5**7000)):
        lead = mp.nstr(mp.mpf(abs(n)), 6, min_fixed=1, max_fixed=0, strip_zeros=False)  # e.g. '1.19408e+6021'
        sign = "-" if n < 0 else ""
        assert V.show_int(n) == f"about {sign}{lead} (an integer of {abs(n).bit_length()} bits)"
    assert V.show_int(10**300 - 1) == "about 1.00000e+300 (an integer of 997 bits)"  # (9.99999... rounds up)
    assert V.show_int(12345, 3) == "1.23e+04" and V.show_int(2**14286, 3).startswith("2^14286")
    assert V.show_int("8") == "'8'"  # (a label formed before its argument is checked shows it as it came)
    big = 2**14286
    assert V.describe(big) == "2^14286 (an integer of 14287 bits) (int)"
    assert V.describe(Fraction(big, 3)) == "2^14286 (an integer of 14287 bits) / 3 (Fraction)"
    assert V.describe([big]) == "<a list too large to print> (list)"
    with pytest.raises(ValueError, match="Exceeds the limit"):
        str(big)  # (the limit that show_int avoids: without it every message above raised this)


# ---------------------------------------------------------------------------
# Huge dimensions d (and tiny w, large z_max): the findings A-D of the huge-d exploration.
#
# Every reference is independent of the function under test: mpmath's loggamma or hyp1f1 in the
# global context at 100-200 digits (a different formula from the one theory evaluates), exact
# integers (chi moments of even order), or the closed form p(0) of Lemma 4.2 at cos theta = -1.
# Each numeric check is shown to have power: the old evaluation (the same formula at the old
# working precision, reproduced here in a few lines) fails it.


@pytest.mark.parametrize("call,kind,shown", [
    (lambda: theory.orf_conformity_kummer(BIG + 1, 0.5), ValueError,
     r"got about 3\.26978e\+4300 \(an integer of 14287"),
    (lambda: theory.simplex_vectors(BIG), ValueError, r"d\^2 = 2\^28572 .*got 2\^14286 \(an integer of 14287 bits\)"),
    (lambda: theory.pdf_wij_float(0.5, BIG, 0), ValueError, r"d must be an integer >= 1 and <= 4503599627370496"),
    (lambda: theory.prf_mse_from_conformity(-1, 0.5, m=BIG, x_norm=0.25, y_norm=0.25), ValueError,
     r"for m = 2\^14286 \(an integer of 14287 bits\) PRF features"),
    (lambda: theory.conformity_iid(2, -BIG), ValueError, r"got -2\^14286 \(an integer of 14287 bits\) \(int\)"),
], ids=["kummer", "simplex_vectors", "pdf_wij_float", "mse_from_conformity", "describe"])
def test_huge_integers_are_named_in_messages(call, kind, shown):
    """The error names the huge argument by its size (theory.validation.show_int) instead of failing to print
    it.  Before: the str-conversion ValueError (pdf_wij_float: OverflowError, d unnamed)."""
    with pytest.raises(kind, match=shown):
        call()
