"""Helpers shared by the benchmarks: interleaved repeats and ratios of minima/medians, and the ``--json`` output
(checked before any timing, written as strict JSON, atomically)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import numpy as np

#: The repository checkout the benchmarks run from; ``--json`` never overwrites a file git tracks in it.
REPO_ROOT = Path(__file__).resolve().parents[1]
#: Default folder of the benchmarks' JSON results (gitignored), whatever the current directory.
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"


def interleaved(fns, repeat, clock=time.perf_counter):
    """Time each callable ``repeat`` times, round-robin, after one warm-up call each; returns name -> list of
    seconds of ``clock`` (wall time by default; ``time.process_time`` for CPU time, which other jobs on a
    shared machine change little)."""
    times = {k: [] for k in fns}
    for f in fns.values():  # warm-up
        f()
    for _ in range(repeat):
        for k, f in fns.items():
            t0 = clock()
            f()
            times[k].append(clock() - t0)
    return times


def ratio(times, num, den):
    """(ratio of minima, ratio of medians) of two entries of :func:`interleaved`'s result."""
    a, b = times[num], times[den]
    return min(a) / min(b), float(np.median(a) / np.median(b))


def _tracked(path):
    """True when ``path`` (absolute) is a file git tracks in :data:`REPO_ROOT` (False without git)."""
    try:
        rel = os.path.relpath(os.path.realpath(path), REPO_ROOT)
    except ValueError:  # another drive
        return False
    if rel.startswith(os.pardir):
        return False
    try:
        res = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "--error-unmatch", "--", rel],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return res.returncode == 0


def check_json_path(path, name="--json"):
    """``path`` as a :class:`~pathlib.Path` (``None`` passes through) if a JSON file can be written there, checked
    before any timing (:func:`theory.cli.check_output_file`); ValueError naming ``name`` otherwise, also for a file
    that git tracks in the repository (a benchmark never changes tracked files).  Nothing is created here."""
    from theory.cli import check_output_file

    if path is None:
        return None
    text = check_output_file(path, name)
    p = os.path.abspath(text)
    if os.path.exists(p) and _tracked(p):
        raise ValueError(f"{name} {text!r} is a file tracked by git in {str(REPO_ROOT)!r}; write elsewhere "
                         f"(default: {RESULTS_DIR}, which is gitignored)")
    return Path(text)


def parsed_json_path(parser, path, name="--json"):
    """:func:`check_json_path` for a command line: its refusal as ``parser.error`` (one line, status 2)."""
    try:
        return check_json_path(path, name)
    except ValueError as exc:
        parser.error(str(exc))


def section_parser(prog, doc, sections, json_name, *, quick_help="fewer repeats", only_default=None,
                   only_help="sections to run"):
    """The command line of a benchmark made of named sections: :func:`theory.cli.make_parser` with ``--quick``,
    ``--only SECTION ...`` (choices ``sections``; default ``only_default``, all of them when ``None``) and ``--json
    [PATH]`` (without PATH: ``benchmarks/results/<json_name>``); each default stated once in ``--help``.  Parse with :func:`parse_sections`."""
    from montecarlo.experiments.runtime import one_default_help
    from theory.cli import make_parser

    parser = one_default_help(make_parser(prog, doc))
    parser.add_argument("--quick", action="store_true", help=quick_help)
    default = list(sections) if only_default is None else list(only_default)
    parser.add_argument("--only", nargs="+", choices=sections, metavar="SECTION", default=default,
                        help=f"{only_help}, one or more of {', '.join(sections)} (default: {' '.join(default)})")
    parser.add_argument("--json", nargs="?", const=str(RESULTS_DIR / json_name), default=None, metavar="PATH",
                        help=f"also write the rows as strict JSON (without PATH: benchmarks/results/{json_name}; "
                             "checked before any timing)")
    return parser


def parse_sections(parser, argv):
    """``parser.parse_args(argv)`` of a :func:`section_parser`, with ``args.json`` checked (:func:`parsed_json_path`,
    before any timing) and ``args.only`` without repeats (a repeated section runs once)."""
    args = parser.parse_args(argv)
    args.json = parsed_json_path(parser, args.json)
    args.only = list(dict.fromkeys(args.only))
    return args


def finish_json(path, data):
    """Write ``data`` with :func:`write_json` and say so, when ``path`` (a checked ``--json``) is not None."""
    if path is not None:
        write_json(path, data)
        print(f"wrote {path}")


def write_json(path, data):
    """:func:`montecarlo.experiments.runtime.write_json` (strict JSON, atomically; imported when first used, so that
    a benchmark's start does not import montecarlo.experiments)."""
    from montecarlo.experiments.runtime import write_json as write

    return write(path, data)
