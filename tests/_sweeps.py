"""The accuracy table of the sweeps' reproducibility tests (``test_experiments_sweeps.py``), importable by the child
processes those tests start (``from tests._sweeps import accuracy_table, numbers``): a helper module, so that no
process imports a test module."""

from __future__ import annotations

from montecarlo.experiments import classification as cl


def accuracy_table(**kw):
    """A small Table 2 (three couplings, banknote and wifi, 30 draws, two splits, fixed seeds)."""
    return cl.accuracy_table(("iid", "simplex", "simplex_plus"), n_draws=30, rng=5, datasets=["banknote", "wifi"],
                             split_rng=(0, 1), **kw)


def numbers(table):
    """Every number of the table, in a fixed order: the exact accuracy, each coupling's mean and standard error,
    each paired difference's."""
    out = []
    for row in table.rows.values():
        out += [row["exact"]] + [(row[c].mean, row[c].stderr) for c in table.couplings]
        out += [(e.mean, e.stderr) for e in row["differences"].values()]
    return out
