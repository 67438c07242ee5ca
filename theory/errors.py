"""The project's one failure family: a computation that cannot reach its accuracy.

Every routine of the toolkit that iterates (a series, a quadrature, a root
bracket, an enclosure in ball arithmetic, the SimRFs+ update) either returns
a result at the promised accuracy or raises :class:`ConvergenceError`, a
subclass of :class:`mpmath.mp.NoConvergence`.  ``except mpmath.mp.NoConvergence``
therefore catches every such failure of :mod:`theory`, :mod:`theory.certified`
and :mod:`montecarlo`; the subclasses say which kind of budget ran out:

=============================  ===============================================
:class:`ConvergenceError`      the root: a series, quadrature or search did
                               not reach the working precision within its
                               budget (terms, precision retries, subdivisions
                               or seconds); the message says which knob to turn
:class:`CertificationError`    :mod:`theory.certified`: a rigorous enclosure is
                               valid but wider than the digits asked for
:class:`IterationError`        :mod:`montecarlo`: an iteration on float arrays
                               (the SimRFs+ update) did not meet its tolerance
=============================  ===============================================

Bad input is never reported this way: it raises :class:`ValueError` or
:class:`TypeError` naming the argument (:mod:`theory.validation`).
"""

from __future__ import annotations

from mpmath.libmp import NoConvergence

__all__ = ["CertificationError", "ConvergenceError", "IterationError", "NoConvergence"]


class ConvergenceError(NoConvergence):
    """A series, quadrature or search did not reach the requested accuracy within its budget."""


class CertificationError(ConvergenceError):
    """A rigorous ball enclosure is valid but too wide for the digits requested."""


class IterationError(ConvergenceError, RuntimeError):
    """A float iteration (the SimRFs+ update) did not meet its tolerance within its pass budget.

    Also a :class:`RuntimeError`, which it was before the failure family was unified.
    """
