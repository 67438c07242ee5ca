"""What the experiments share with the figures and the benchmarks: the command-line runtime (SIGTERM handled as
Ctrl-C, ``--help`` with each default said once), z-scores of paired differences, the check against repeated
items, and results as JSON types."""

from __future__ import annotations

import argparse
import collections
import contextlib
import math
import signal
import sys
import threading

import numpy as np

__all__ = ["EXIT_TERMINATED", "HelpFormatter", "Terminated", "Z_RTOL", "format_z", "jsonable",
           "one_default_help", "refuse_repeats", "run_terminable", "terminate_as_interrupt", "write_json", "z_score"]


def refuse_repeats(items, name, what):
    """ValueError naming ``name`` and the repeated items if one of ``items`` (strings or ints: couplings, arms,
    kinds, seeds) occurs more than once."""
    seq = list(items)
    repeated = sorted(x for x, n in collections.Counter(seq).items() if n > 1)  # (linear: seq.count was n^2)
    if repeated:
        raise ValueError(f"{name} must not repeat {what}, got {seq} ({', '.join(map(str, repeated))} repeated)")


#: A standard error at or below this fraction of the compared values' scale is round-off, not a measured spread
#: (a Monte Carlo standard error of a mean over fewer than 10**12 draws is never that small relative to it).
Z_RTOL = 1e-9


def z_score(diff, stderr, scale=0.0):
    """``diff / stderr`` elementwise, NaN (n/a) where the standard error is 0, NaN or negligible.

    Negligible: ``stderr <= Z_RTOL * max(|diff|, scale)``, with ``scale`` the
    magnitude of the values whose difference ``diff`` is (e.g. 1 for
    accuracies, the larger of the two means for a paired difference): such an
    error is the round-off of draws that all gave the same difference, and a
    z-score from it (10**15) or a division by an exact 0 would be meaningless.
    No numpy warning is raised.  Returns a float for scalar input, else an ndarray.
    """
    d = np.asarray(diff, dtype=float)
    se = np.asarray(stderr, dtype=float)
    ref = np.maximum(np.abs(d), np.abs(np.asarray(scale, dtype=float)))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ok = se > Z_RTOL * ref  # False for NaN
        z = np.where(ok, d / np.where(ok, se, 1.0), np.nan)
    return float(z) if z.ndim == 0 else z


def format_z(z, spec="+.1f"):
    """A z-score as text: ``n/a`` when it is not finite (:func:`z_score`), else ``format(z, spec)``."""
    z = float(z)
    return format(z, spec) if math.isfinite(z) else "n/a"


class Terminated(KeyboardInterrupt):
    """Raised by the SIGTERM handler of :func:`terminate_as_interrupt`: a KeyboardInterrupt, so it is handled
    like Ctrl-C (every file being written is removed by :func:`theory.cli.atomic_write`'s cleanup) and not
    swallowed by ``except Exception``."""


#: Exit status of a command line stopped by SIGTERM (128 + 15, the shell's convention); Ctrl-C gives 130.
EXIT_TERMINATED = 128 + signal.SIGTERM


@contextlib.contextmanager
def terminate_as_interrupt():
    """While active, SIGTERM raises :class:`Terminated` in the main thread instead of killing the process at
    once, so ``try``/``finally`` cleanups run and no ``.NAME.PID.part`` file is left; the previous handler is
    restored on exit.  Outside the main thread (where no handler can be installed) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_terminable(runner, prog, body, argv):
    """``runner(prog, body, argv)`` (:func:`theory.cli.main_runner`) under :func:`terminate_as_interrupt`:
    SIGTERM is handled like Ctrl-C (files being written are removed) and ends with one line
    ``PROG: terminated (SIGTERM)`` on stderr and status :data:`EXIT_TERMINATED` (143); Ctrl-C stays 130."""
    def guarded(args):
        try:
            return body(args)
        except Terminated:
            print(f"{prog}: terminated (SIGTERM)", file=sys.stderr)
            return EXIT_TERMINATED

    with terminate_as_interrupt():
        return runner(prog, guarded, argv)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each option's default said once: argparse's ``(default: X)`` is added only where the help
    text does not already say the default (it contains "default") and X says something (not None, not False,
    not a suppressed value); before, "(default: the protocol's, 5 or 1) (default: None)"."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def one_default_help(parser):
    """Give ``parser`` (a :func:`theory.cli.make_parser` parser) the :class:`HelpFormatter`; returns it."""
    parser.formatter_class = HelpFormatter
    return parser


def jsonable(obj):
    """Convert numpy arrays/scalars and mpmath numbers to JSON types (non-finite -> None): the figures' data and
    the benchmarks' results and the attention grids (:func:`write_json`); other objects are left to ``json.dumps``."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)) or type(obj).__module__.startswith("mpmath"):
        x = float(obj)
        return x if math.isfinite(x) else None
    return obj


def write_json(path, data):
    """Write ``data`` (through :func:`jsonable`) as strict JSON to ``path``, atomically (a temporary
    ``.NAME.PID.part`` renamed into place, removed on any error or interrupt); the folder is created."""
    import json
    from pathlib import Path

    from theory.cli import atomic_write

    text = json.dumps(jsonable(data), indent=1, allow_nan=False) + "\n"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return path
