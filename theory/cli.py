"""Plumbing shared by every command line of the toolkit (:mod:`theory`, :mod:`montecarlo`,
:mod:`figures`, ``paper_checks``); it lives in the lowest layer so that all of them can use it.

Every command line of the toolkit follows one contract: ``--help`` prints the
options with their help text and defaults and runs nothing; a bad option is
one line on stderr and exit status 2 (argparse's convention); a failure while
computing is one line ``PROG: error: ...`` on stderr and a non-zero status,
never a traceback; long work reports progress on stderr.  This module holds
the argument types, the runner and the atomic file writes that implement it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from .errors import NoConvergence
from .validation import show, show_int

__all__ = ["OneLineParser", "atomic_write", "check_output_dir", "int_arg", "main_runner", "make_parser",
           "real_arg"]


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (``PROG: error: ... (see --help)``), status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see --help)\n")


def make_parser(prog, description, epilog=None):
    """A :class:`OneLineParser` that shows every option's default in ``--help``."""
    return OneLineParser(prog=prog, description=description, epilog=epilog,
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def n_jobs_arg(text):
    """argparse ``type=`` of ``--n-jobs``: a nonzero integer (joblib's convention: -1 every core, -2 all but one)."""
    value = int_arg()(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be a nonzero integer (-1: every core), got 0")
    return value


def int_arg(minimum=None, maximum=None):
    """argparse ``type=``: an integer in [minimum, maximum] (the message names the bounds)."""

    bounds = " and ".join(b for b in (f">= {minimum}" if minimum is not None else "",
                                      f"<= {maximum}" if maximum is not None else "") if b)

    def integer(text):
        try:
            value = int(text)
        except ValueError:
            digits = text.strip().lstrip("+-").replace("_", "")
            if digits.isdigit():  # more digits than Python converts (sys.get_int_max_str_digits)
                raise argparse.ArgumentTypeError(f"must be an integer{' ' + bounds if bounds else ''}, got an "
                                                 f"integer of {len(digits)} digits") from None
            raise argparse.ArgumentTypeError(f"expected an integer, got {show(text)}") from None
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be an integer {bounds}, got {show_int(value)}")
        return value

    return integer


def real_arg(minimum=None, strict=False, maximum=None):
    """argparse ``type=``: a finite real number, >= (or > with ``strict``) ``minimum`` and <= ``maximum``."""

    def real(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a real number, got {text!r}") from None
        low = minimum is not None and (value <= minimum if strict else value < minimum)
        if not math.isfinite(value) or low or (maximum is not None and value > maximum):
            bounds = [b for b in (f"{'>' if strict else '>='} {minimum:g}" if minimum is not None else "",
                                  f"<= {maximum:g}" if maximum is not None else "") if b]
            raise argparse.ArgumentTypeError(f"must be a finite real{' ' + ' and '.join(bounds) if bounds else ''}"
                                             f", got {text!r}")
        return value

    return real


def main_runner(prog, body, argv=None):
    """Run ``body(argv) -> exit status`` with the toolkit's error contract.

    Bad input found after parsing (ValueError, TypeError, an
    :class:`~montecarlo._checks.AllocationError`) is one line ``PROG: error:
    ...`` on stderr with status 2; a computation that did not converge
    (any :class:`mpmath.NoConvergence`, :class:`theory.errors.ConvergenceError` included)
    or ran out of memory, status 1;
    Ctrl-C, status 130.  argparse's own exits (``--help``: 0, bad options: 2)
    pass through.
    """
    try:
        return int(body(argv))
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except NoConvergence as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except MemoryError as exc:
        print(f"{prog}: error: out of memory ({_one_line(exc) or 'MemoryError'}); reduce the sizes", file=sys.stderr)
        return 1


def _one_line(exc):
    return " ".join(str(exc).split())


def atomic_write(path, write):
    """Write a file so that it is either absent, its old version, or complete: never half-written.

    ``write(tmp_path)`` writes the content to a temporary name in the same
    directory (``.NAME.PID.part``, created with the process umask); it is then
    renamed over ``path`` with :func:`os.replace` (atomic on POSIX and
    Windows).  On any error the temporary file is removed and the error
    re-raised; ``path`` is untouched.
    """
    path = os.fspath(path)
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.part")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def check_output_dir(path, name="--out"):
    """``path`` as a str if it is, or can be created as, a directory; ValueError naming ``name`` otherwise.

    Refused: an empty path, an existing file, and a path under a file (which
    ``os.makedirs`` would report with a traceback-worthy NotADirectoryError).
    Nothing is created here.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a directory path, got {type(path).__name__}")
    text = os.fspath(path)
    if not str(text).strip():
        raise ValueError(f"{name} must be a directory path, got an empty string")
    p = os.path.abspath(text)
    if os.path.exists(p) and not os.path.isdir(p):
        raise ValueError(f"{name} {text!r} exists and is not a directory")
    _check_writable_under(p, text, name)
    return str(text)


def _check_writable_under(p, text, name):
    """ValueError naming ``name`` unless the nearest existing ancestor of the absolute path ``p`` (``p`` itself
    where it exists) is a directory this process can write in."""
    existing = p
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(f"{name} {text!r} is under {existing!r}, which is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{name} {text!r}: cannot write in {existing!r} (permission denied)")


def check_output_file(path, name="--json"):
    """``path`` as a str if a file can be written there (its folder created as needed); ValueError naming
    ``name`` otherwise: an empty path, a path ending in a separator, an existing directory, a path under a file,
    a folder that cannot be written.  Nothing is created here."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path, got {type(path).__name__}")
    text = os.fspath(path)
    if not str(text).strip():
        raise ValueError(f"{name} must be a file path, got an empty string")
    if text.endswith(("/", os.sep)):
        raise ValueError(f"{name} {text!r} names a folder; give a file path such as {text}results.json")
    p = os.path.abspath(text)
    if os.path.isdir(p):
        raise ValueError(f"{name} {text!r} is a directory; give a file path such as "
                         f"{os.path.join(text, 'results.json')}")
    _check_writable_under(os.path.dirname(p), text, name)
    return str(text)
