"""Run the proof regression suite and write the claim table.

Usage: ``python -m paper_checks [--out DIR] [-- extra pytest args]``.
Prints the table (label, status, largest discrepancy) and writes
``REPORT.md`` and ``report.json`` to DIR (default: the paper_checks folder).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from paper_checks._report import Collector, build_rows, to_console, to_json, to_markdown

HERE = Path(__file__).resolve().parent


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m paper_checks", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder for REPORT.md and report.json")
    parser.add_argument("-n", "--workers", default="2", help="pytest-xdist workers (0 to run in-process)")
    parser.add_argument("pytest_args", nargs="*", help="extra arguments for pytest (after --)")
    args = parser.parse_args(argv)
    collector = Collector()
    pytest_args = [str(HERE), "-q", "-p", "no:cacheprovider"]
    if args.workers != "0":
        pytest_args += ["-n", args.workers]
    code = pytest.main(pytest_args + list(args.pytest_args), plugins=[collector])
    rows = build_rows(collector)
    print(to_console(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "REPORT.md").write_text(to_markdown(rows, collector.unclaimed))
    (args.out / "report.json").write_text(to_json(rows, collector.unclaimed))
    print(f"wrote {args.out / 'REPORT.md'} and {args.out / 'report.json'}")
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
