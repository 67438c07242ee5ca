"""Run settings shared by every figure: output folder, seeds, precision, backend, progress.

A figure function receives one :class:`Context` and returns nothing; it calls
:meth:`Context.save` once with its matplotlib figure and its plotted numbers.
"""

from __future__ import annotations

import io
import json
import os
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from mpmath import mp

from theory.cli import atomic_write, check_output_dir
from montecarlo.experiments.runtime import jsonable
from montecarlo.experiments.sweeps import check_n_jobs
from montecarlo.experiments.uci import ENV_VAR
from theory.validation import check_bool, check_choice, check_int

#: Environment variable naming the UCI data directory (Figs. 8 and 10): the loader's, one home.
UCI_ENV = ENV_VAR
#: Array backends of the Monte Carlo parts.
BACKENDS = ("numpy", "torch")
#: Precision range of the analytic curves (mpmath decimal digits); above 200 the curves take minutes.
DPS_RANGE = (10, 200)
#: Fonts embedded as TrueType (Type 42) in PDF and PostScript output, never as Type 3 bitmaps-by-procedure.
FONT_RC = {"pdf.fonttype": 42, "ps.fonttype": 42}
#: ``savefig`` metadata per format: no creation date in the PDF, so that a run's files are the same bytes as
#: another's with the same settings (the PNG carries no date).
SAVE_METADATA = {"png": None, "pdf": {"CreationDate": None}}


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
        UCI data directory for Figs. 8 and 10 (``None``: ``$SIMPLEX_RF_UCI_DIR``
        or the copy shipped with :mod:`montecarlo.experiments`); a named
        directory must exist.
    n_jobs : int or None
        Parallel worker processes of the figures' sweep (:func:`figures._sweep.compute`,
        through :func:`montecarlo.experiments.sweeps.run_units`; None: every core, 1:
        this process).  The numbers do not depend on it.
    capture : bool
        :meth:`save` keeps the files' bytes in :attr:`captured` (name -> {'png', 'pdf',
        'json'}) instead of writing them (a worker process renders, the main process
        writes, :meth:`write_files`).

    Raises
    ------
    ValueError
        (or :class:`~theory.validation.ArgumentTypeError`) naming the bad
        setting: ``out`` empty, an existing file or under a file; ``seed`` not
        an integer >= 0; ``dps`` outside :data:`DPS_RANGE`; an unknown
        ``backend``; a ``uci_dir`` that is not a directory; non-bool flags.
    """

    out: str = "simplex_rf_figures"
    quick: bool = False
    seed: int = 0
    dps: int = 20
    backend: str = "numpy"
    progress: bool = True
    uci_dir: str | None = None
    n_jobs: int | None = None
    capture: bool = False
    written: list = field(default_factory=list)
    captured: dict = field(default_factory=dict)

    def __post_init__(self):
        self.out = check_output_dir(self.out, "out")
        self.quick = check_bool(self.quick, "quick")
        self.seed = check_int(self.seed, "seed", 0)
        self.dps = check_int(self.dps, "dps", DPS_RANGE[0], maximum=DPS_RANGE[1])
        self.backend = check_choice(self.backend, "backend", BACKENDS)
        self.progress = check_bool(self.progress, "progress")
        self.n_jobs = check_n_jobs(self.n_jobs)
        self.capture = check_bool(self.capture, "capture")
        if self.uci_dir is not None:
            if not isinstance(self.uci_dir, (str, os.PathLike)) or not str(self.uci_dir).strip():
                raise ValueError(f"uci_dir must be None or a directory path, got {self.uci_dir!r}")
            if not os.path.isdir(self.uci_dir):
                raise ValueError(f"uci_dir {os.fspath(self.uci_dir)!r} does not exist or is not a directory")

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
        """A tqdm bar over ``total`` tasks on stderr (a silent stand-in when off or without tqdm); its
        ``message`` method is a :func:`~montecarlo.experiments.sweeps.run_units` progress callback (the bar
        follows the units done)."""
        if self.progress:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                return _Bar(tqdm(total=total, desc=desc, leave=False, unit="task", dynamic_ncols=True))
        return _NoBar()

    def settings(self):
        """The settings a worker process needs to rebuild this context (:class:`Context` keywords)."""
        return {"out": self.out, "quick": self.quick, "seed": self.seed, "dps": self.dps, "backend": self.backend,
                "uci_dir": self.uci_dir}

    def compute(self, parts, label="cells"):
        """The results of a figure's parts (:mod:`figures._sweep`), computed in one sweep on :attr:`n_jobs`
        worker processes (a progress bar over its units on stderr); a part that failed raises its exception."""
        from . import _sweep

        bar = self.progress_bar(None, label)
        try:
            results, _ = _sweep.compute({label: parts}, self.n_jobs, bar.message if self.progress else None, label)
        finally:
            bar.close()
        return _sweep.raise_failed(results[label])

    def save(self, fig, name, data):
        """Write ``NAME.png``, ``NAME.pdf`` and the plotted numbers ``NAME.json`` to :attr:`out`.

        ``data`` gets the run settings added under ``"settings"``; numpy
        arrays and numbers are converted to JSON lists and floats (full
        double precision; NaN and infinities as ``null``).  Each file is
        written under a temporary name and renamed into place
        (:func:`theory.cli.atomic_write`), the JSON last, so an
        interrupted run never leaves a half-written file under a final name;
        PDF fonts are embedded as TrueType (:data:`FONT_RC`), and the PDF has no
        creation date (:data:`SAVE_METADATA`): two runs with the same settings
        write the same bytes.
        """
        import matplotlib
        import matplotlib.pyplot as plt

        data = dict(data)
        data["settings"] = {"quick": self.quick, "seed": self.seed, "dps": self.dps, "backend": self.backend}
        text = json.dumps(jsonable(data), indent=1, allow_nan=False) + "\n"
        if self.capture:
            files = {}
            try:
                with matplotlib.rc_context(FONT_RC), _quiet_font_subsetting():
                    for ext in ("png", "pdf"):
                        buf = io.BytesIO()
                        fig.savefig(buf, format=ext, metadata=SAVE_METADATA[ext])
                        fig.set_layout_engine("none")
                        files[ext] = buf.getvalue()
            finally:
                plt.close(fig)
            files["json"] = text
            self.captured[name] = files
            return []
        os.makedirs(self.out, exist_ok=True)
        paths = []
        try:
            with matplotlib.rc_context(FONT_RC), _quiet_font_subsetting():
                for ext in ("png", "pdf"):
                    path = os.path.join(self.out, f"{name}.{ext}")
                    atomic_write(path, lambda tmp, ext=ext: fig.savefig(tmp, format=ext, metadata=SAVE_METADATA[ext]))
                    # the layout computed for the PNG is kept for the PDF (saves a second constrained-layout pass)
                    fig.set_layout_engine("none")
                    paths.append(path)
        finally:
            plt.close(fig)
        path = os.path.join(self.out, f"{name}.json")
        atomic_write(path, lambda tmp: _write_text(tmp, text))
        paths.append(path)
        self.written.extend(paths)
        return paths


    def write_files(self, name, files):
        """Write the captured files of one figure (PNG, PDF, then the JSON; each atomically) to :attr:`out`."""
        os.makedirs(self.out, exist_ok=True)
        paths = []
        for ext in ("png", "pdf", "json"):
            path = os.path.join(self.out, f"{name}.{ext}")
            body = files[ext]
            if isinstance(body, str):
                atomic_write(path, lambda tmp, body=body: _write_text(tmp, body))
            else:
                atomic_write(path, lambda tmp, body=body: _write_bytes(tmp, body))
            paths.append(path)
        self.written.extend(paths)
        return paths


@contextmanager
def _quiet_font_subsetting():
    """Silence fontTools' harmless "'created' timestamp seems very low" warnings while Type 42 fonts are
    subset (the Computer Modern fonts carry pre-1970 timestamps); stderr stays for real problems."""
    import logging

    log = logging.getLogger("fontTools.ttLib.tables._h_e_a_d")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _write_text(path, text):
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _write_bytes(path, body):
    with open(path, "wb") as fh:
        fh.write(body)


class _NoBar:
    """The part of tqdm's interface the figures use, doing nothing."""

    def update(self, n=1):
        pass

    def message(self, text):
        pass

    def close(self):
        pass


class _Bar:
    """A tqdm bar with :meth:`message`: a progress callback of
    :func:`~montecarlo.experiments.sweeps.run_units` (its messages carry ``done`` and ``total``)."""

    def __init__(self, bar):
        self.bar = bar

    def update(self, n=1):
        self.bar.update(n)

    def message(self, text):
        done, total = getattr(text, "done", None), getattr(text, "total", None)
        changed = total is not None and self.bar.total != total
        if changed:
            self.bar.total = total
        if done is not None and done > self.bar.n:
            self.bar.update(done - self.bar.n)
        if changed or (total is not None and self.bar.n == total):
            # tqdm draws an update only after its mininterval: a new total and the last unit are drawn always,
            # so that the bar shows k/n however fast (or slow) the units come
            self.bar.refresh()

    def close(self):
        self.bar.close()


def to_numpy(a):
    """A float64 numpy array from a numpy, torch or cupy array."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    elif hasattr(a, "get") and not isinstance(a, np.ndarray):
        a = a.get()
    return np.asarray(a, dtype=float)
