"""``python -m figures``: regenerate every figure, or those named by ``--only``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback

from ._context import UCI_ENV, Context
from .downstream import Skip
from .registry import FIGURES, lookup
from .style import use_paper_style

DEFAULT_OUT = "simplex_rf_figures"


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m figures",
        description=("Regenerate the figures of Simplex Random Features (Reid et al., ICML 2023) with analytic "
                     "curves from `theory` and Monte Carlo points from `montecarlo`. Each figure writes "
                     "NAME.png, NAME.pdf and its plotted numbers NAME.json."),
        epilog="figures: " + ", ".join(f.name for f in FIGURES),
    )
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output directory (default: ./{DEFAULT_OUT})")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="only these figures (repeat or comma-separate; full name, figN, or LaTeX label)")
    p.add_argument("--quick", action="store_true", help="fewer Monte Carlo samples (under 30 s in all)")
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    p.add_argument("--dps", type=int, default=20, help="mpmath decimal digits of the analytic curves (default 20)")
    p.add_argument("--backend", choices=("numpy", "torch"), default="numpy",
                   help="array backend of the Monte Carlo parts (default numpy)")
    p.add_argument("--uci-dir", default=None,
                   help=f"UCI data directory for Figs. 8 and 10 (default: ${UCI_ENV}; skipped if neither)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--list", action="store_true", help="list the figures and exit")
    return p


def _selection(parser, only):
    if not only:
        return list(FIGURES)
    chosen = []
    for item in only:
        for name in filter(None, (s.strip() for s in item.split(","))):
            try:
                f = lookup(name)
            except ValueError as exc:
                parser.error(str(exc))
            if f not in chosen:
                chosen.append(f)
    return chosen


def main(argv=None):
    """Run the command line; returns the exit status (0 when every selected figure was written or skipped).

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default ``sys.argv[1:]``).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        for f in FIGURES:
            print(f"{f.name:22s} {f.paper_label or '(new)':20s} {f.description}")
        return 0
    if args.dps < 10:
        parser.error(f"--dps must be an integer >= 10, got {args.dps}")
    if args.backend == "torch" and importlib.util.find_spec("torch") is None:
        parser.error("--backend torch needs PyTorch (pip install torch array-api-compat)")
    selected = _selection(parser, args.only)
    ctx = Context(out=args.out, quick=args.quick, seed=args.seed, dps=args.dps, backend=args.backend,
                  progress=not args.no_progress, uci_dir=args.uci_dir)
    use_paper_style()
    os.makedirs(ctx.out, exist_ok=True)
    summary, failed = [], []
    t_all = time.perf_counter()
    for f in selected:
        t0, c0 = time.perf_counter(), time.process_time()
        entry = {"name": f.name, "paper_label": f.paper_label}
        try:
            f.draw(ctx)
        except Skip as exc:
            entry.update(status="skipped", reason=str(exc))
            print(f"{f.name}: skipped: {exc}", flush=True)
        except Exception as exc:  # report, go on with the other figures, fail at the end
            entry.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
            failed.append(f.name)
            traceback.print_exc()
            print(f"{f.name}: FAILED: {type(exc).__name__}: {exc}", flush=True)
        else:
            entry["status"] = "written"
            print(f"{f.name}: {time.perf_counter() - t0:.1f} s -> {os.path.join(ctx.out, f.name)}.{{png,pdf,json}}",
                  flush=True)
        entry["seconds"] = round(time.perf_counter() - t0, 3)
        entry["cpu_seconds"] = round(time.process_time() - c0, 3)
        summary.append(entry)
    total = time.perf_counter() - t_all
    with open(os.path.join(ctx.out, "index.json"), "w") as fh:
        json.dump({"settings": {"quick": ctx.quick, "seed": ctx.seed, "dps": ctx.dps, "backend": ctx.backend},
                   "seconds": round(total, 3), "figures": summary}, fh, indent=1)
        fh.write("\n")
    written = sum(e["status"] == "written" for e in summary)
    skipped = sum(e["status"] == "skipped" for e in summary)
    print(f"{written} of {len(selected)} figures written, {skipped} skipped, {len(failed)} failed, "
          f"in {total:.1f} s ({ctx.out})", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
