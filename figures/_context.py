"""Run settings shared by every figure: output folder, seeds, precision, backend, progress.

A figure function receives one :class:`Context` and returns nothing; it calls
:meth:`Context.save` once with its matplotlib figure and its plotted numbers.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from mpmath import mp

#: Environment variable naming the UCI data directory (Figs. 8 and 10).
UCI_ENV = "SIMPLEX_RF_UCI_DIR"


@dataclass
class Context:
    """Settings of one ``python -m figures`` run.

    Attributes
    ----------
    out : str
        Output directory (created if missing).
    quick : bool
        Fewer Monte Carlo samples (for tests and smoke runs).
    seed : int
        Base seed; each figure draws from its own stream derived from it and
        the figure's name, so ``--only`` reproduces the numbers of a full run.
    dps : int
        mpmath decimal precision of the analytic curves.
    backend : {'numpy', 'torch'}
        Array backend of the Monte Carlo parts (passed to :mod:`montecarlo`).
    progress : bool
        Show progress bars (tqdm, on stderr) for the Monte Carlo parts.
    uci_dir : str or None
        UCI data directory for Figs. 8 and 10 (``None``: those figures are skipped).
    """

    out: str = "simplex_rf_figures"
    quick: bool = False
    seed: int = 0
    dps: int = 20
    backend: str = "numpy"
    progress: bool = True
    uci_dir: str | None = None
    written: list = field(default_factory=list)

    def rng(self, tag):
        """A numpy Generator for one figure part, seeded from ``(seed, crc32(tag))``."""
        return np.random.default_rng([self.seed, zlib.crc32(tag.encode())])

    @contextmanager
    def precision(self):
        """mpmath working precision for the analytic curves (restored on exit)."""
        with mp.workdps(self.dps):
            yield

    def n(self, default, quick):
        """Pick a Monte Carlo sample size: ``quick`` in quick mode, else ``default``."""
        return quick if self.quick else default

    def progress_bar(self, total, desc):
        """A tqdm bar over ``total`` Monte Carlo tasks on stderr (a silent stand-in when off or without tqdm)."""
        if self.progress:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                return tqdm(total=total, desc=desc, leave=False, unit="task", dynamic_ncols=True)
        return _NoBar()

    def save(self, fig, name, data):
        """Write ``NAME.png``, ``NAME.pdf`` and the plotted numbers ``NAME.json`` to :attr:`out`.

        ``data`` gets the run settings added under ``"settings"``; numpy
        arrays and numbers are converted to JSON lists and floats (full
        double precision; NaN and infinities as ``null``).
        """
        import matplotlib.pyplot as plt

        os.makedirs(self.out, exist_ok=True)
        data = dict(data)
        data["settings"] = {"quick": self.quick, "seed": self.seed, "dps": self.dps, "backend": self.backend}
        paths = []
        for ext in ("png", "pdf"):
            path = os.path.join(self.out, f"{name}.{ext}")
            fig.savefig(path)
            # the layout computed for the PNG is kept for the PDF (saves a second constrained-layout pass)
            fig.set_layout_engine("none")
            paths.append(path)
        plt.close(fig)
        path = os.path.join(self.out, f"{name}.json")
        with open(path, "w") as fh:
            json.dump(_jsonable(data), fh, indent=1, allow_nan=False)
            fh.write("\n")
        paths.append(path)
        self.written.extend(paths)
        return paths


class _NoBar:
    """The part of tqdm's interface the figures use, doing nothing."""

    def update(self, n=1):
        pass

    def close(self):
        pass


def _jsonable(obj):
    """Convert numpy arrays/scalars and mpmath numbers to JSON types (non-finite -> None)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)) or type(obj).__module__.startswith("mpmath"):
        x = float(obj)
        return x if math.isfinite(x) else None
    return obj


def to_numpy(a):
    """A float64 numpy array from a numpy, torch or cupy array."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    elif hasattr(a, "get") and not isinstance(a, np.ndarray):
        a = a.get()
    return np.asarray(a, dtype=float)
