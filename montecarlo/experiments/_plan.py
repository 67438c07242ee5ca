"""A sweep before it runs: its units, their costs, and how their results become the sweep's result.

:func:`classification_curve` and :func:`attention_scan` are each one
:class:`SweepPlan` run by :func:`~montecarlo.experiments.sweeps.run_units`
(``plan.run(n_jobs, progress)``).  Their ``*_plan`` forms return the plan
unrun, so that a caller with several sweeps (``python -m figures``: every
figure's cells) can run the units of all of them in **one** parallel sweep
and finish each plan with its own results (``plan.finish(results)``); the
numbers are the same either way, since every unit is seeded by its own keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SweepPlan:
    """The units of one sweep and the step that assembles their results.

    Attributes
    ----------
    func : callable
        A module-level function (picklable: process and Dask backends); unit i computes
        ``func(*units[i])``.
    units : list of tuple
    costs : list of float
        Estimated cost of each unit (units are dispatched largest first; any positive scale).
    finish : callable
        ``finish(results)`` with ``results[i] = func(*units[i])`` returns the sweep's result.  It runs
        in the caller's process (a closure is fine).
    label : str
        Progress label.
    warm_up : callable, optional
        :func:`~montecarlo.experiments.sweeps.run_units`' ``warm_up`` (lazy imports before threads start).
    info : dict
        What the caller may want to know before running (e.g. ``{'missing': ...}``).
    """

    func: object
    units: list
    costs: list
    finish: object
    label: str = "units"
    warm_up: object = None
    info: dict = field(default_factory=dict)

    def run(self, n_jobs=None, progress=None):
        """Run the units through :func:`~montecarlo.experiments.sweeps.run_units` and finish."""
        from .sweeps import run_units

        return self.finish(run_units(self.func, self.units, n_jobs=n_jobs, costs=self.costs, progress=progress,
                                     label=self.label, warm_up=self.warm_up))
