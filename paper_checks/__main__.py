"""Run the proof regression suite and write the claim table.

Usage: ``python -m paper_checks [--out DIR] [-n WORKERS] [--write-committed] [-- PYTEST_ARGS]``, or
``python -m paper_checks --certify [CLAIM ...] --out DIR [--d-max D] [--v-max V]`` to write the
certificates of :mod:`paper_checks.certify` instead of running the suite.

Prints the table (label, status, largest discrepancy, totals) and writes
``REPORT.md`` and ``report.json`` to ``--out`` (default
``./paper_checks_report``, outside the package: a run never changes tracked
files).  The committed copies in the ``paper_checks`` folder are rewritten only
with ``--write-committed``, and only from a complete, passing run of the whole
suite.  Nothing is written when pytest did not run the checks (bad pytest
arguments, collection errors, interruption): the previous report stays.  The
``--out`` folder is created before the checks run (a folder that cannot be made
stops the command at once).

Exit status: 0 every check passed and the report was written; 1 a check failed,
the suite could not be collected or run (pytest's statuses 1, 2 with collection
errors, 3), or the report could not be written; 2 bad options of this command,
including PYTEST_ARGS that pytest refuses or that select no check (pytest's 4
and 5); 130 interrupted (Ctrl-C: pytest's 2 without collection errors).  Every
error of this command is one line on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

from theory.cli import atomic_write, check_output_dir, int_arg, make_parser
from paper_checks._report import Collector, build_rows, category, to_console, to_json, to_markdown
from paper_checks.certify import certifiable as certify_claims, positive_fraction

HERE = Path(__file__).resolve().parent
PROG = "python -m paper_checks"
DEFAULT_OUT = "paper_checks_report"
#: pytest exit codes after which the checks did run (0: all passed, 1: some failed).
RAN = (0, 1)
#: pytest's exit status -> this command's (module docstring); pytest's 2 is an interruption or collection errors.
_STATUS = {0: 0, 1: 1, 3: 1, 4: 2, 5: 2}


def _status(code, collector):
    return (1 if collector.collect_errors else 130) if code == 2 else _STATUS.get(code, 1)


def _parser():
    p = make_parser(PROG, "Run the proof regression suite (one row per statement of the paper) and write the "
                          "claim table REPORT.md / report.json.")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help="folder for REPORT.md and report.json (created if missing; not the package folder)")
    p.add_argument("-n", "--workers", type=int_arg(0, 256), default=2,
                   help="pytest-xdist worker processes (0: run in this process)")
    p.add_argument("--write-committed", action="store_true",
                   help=f"also rewrite the committed {HERE.name}/REPORT.md and report.json (only after a complete, "
                        "passing run of the whole suite, without extra pytest arguments)")
    p.add_argument("--certify", nargs="*", metavar="CLAIM", default=None,
                   help="instead of the suite, write one JSON certificate per claim id into --out (no CLAIM: every "
                        "certifiable claim: " + ", ".join(certify_claims()) + "); replay with python -m "
                        "paper_checks.replay DIR")
    p.add_argument("--d-max", type=int_arg(2), default=None, help="with --certify: shrink the domain to d <= D")
    p.add_argument("--v-max", type=positive_fraction, default=None,
                   help="with --certify: shrink the argument to (0, V] (v, u, or z for the RFF claim; exact: '8', "
                        "'0.5', '3/2')")
    p.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARGS", help="extra arguments for pytest (after --)")
    return p


def _write(folder, rows, unclaimed):
    """(REPORT.md, report.json) written in ``folder``; None after a one-line error on stderr (an OSError)."""
    md, js = folder / "REPORT.md", folder / "report.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(md, lambda tmp: Path(tmp).write_text(to_markdown(rows, unclaimed)))
        atomic_write(js, lambda tmp: Path(tmp).write_text(to_json(rows, unclaimed)))
    except OSError as exc:
        print(f"{PROG}: error: could not write the report in {str(folder)!r} ({exc.strerror or exc})", file=sys.stderr)
        return None
    return md, js


def _refuse_committed(code, rows, collector, extra_args):
    """Why the committed table must not be rewritten from this run (None: it may)."""
    if extra_args:
        return "extra pytest arguments select part of the suite"
    if code != 0:
        return f"pytest exited with status {code}"
    if collector.collect_errors:
        return f"collection errors in {', '.join(collector.collect_errors)}"
    not_run = [r["id"] for r in rows if category(r["result"]) == "not run"]
    if not_run:
        return f"{len(not_run)} claims were not run ({', '.join(not_run[:5])}{', ...' if len(not_run) > 5 else ''})"
    return None


def main(argv=None):
    """Entry point; returns the exit status."""
    import pytest

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        check_output_dir(args.out, "--out")
    except ValueError as exc:
        parser.error(str(exc))
    out = Path(args.out).resolve()
    if out == HERE or HERE in out.parents:
        parser.error(f"--out {args.out!r} is inside the package folder {str(HERE)!r}: write elsewhere, or use "
                     "--write-committed to regenerate the committed table deliberately")
    try:  # (before the checks: a pre-check cannot foresee every folder, e.g. one under /proc)
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {args.out!r}: cannot create the folder ({exc.strerror or exc})")
    if args.certify is not None:
        unknown = [c for c in args.certify if c not in certify_claims()]
        if unknown:
            parser.error(f"--certify: unknown claim(s) {', '.join(unknown)}; certifiable: {', '.join(certify_claims())}")
        from paper_checks.certify import run as run_certify

        return run_certify(args.certify, out, d_max=args.d_max, v_max=args.v_max)
    collector = Collector()
    pytest_args = [str(HERE), "-q", "-p", "no:cacheprovider"]
    if args.workers:
        pytest_args += ["-n", str(args.workers)]
    code = int(pytest.main(pytest_args + list(args.pytest_args), plugins=[collector]))
    rows = build_rows(collector)
    if code not in RAN:
        print(f"{PROG}: error: pytest did not run the checks (exit status {code}); no report written "
              f"(the previous one in {str(out)!r} is unchanged)", file=sys.stderr)
        return _status(code, collector)
    print(to_console(rows))
    written = _write(out, rows, collector.unclaimed)
    if written is None:
        return 1
    print(f"wrote {written[0]} and {written[1]}")
    if args.write_committed:
        why = _refuse_committed(code, rows, collector, args.pytest_args)
        if why:
            print(f"{PROG}: error: committed table not rewritten: {why}", file=sys.stderr)
            return code or 1
        written = _write(HERE, rows, collector.unclaimed)
        if written is None:
            return 1
        print(f"rewrote the committed {written[0]} and {written[1]}")
    return code


if __name__ == "__main__":
    sys.exit(main())
