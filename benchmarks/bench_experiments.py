"""Speed of ``montecarlo.experiments``: ratios against baselines timed in the same process.

Run ``python -m benchmarks.bench_experiments`` (``--quick`` for fewer
repeats, ``--only SECTION...``, ``--table [--protocol paper|resampled] [--n-jobs N]``
to also time the full Table 2 run end to end, ``--uci-dir DIR``, ``--json [PATH]``, by default
``benchmarks/results/bench_experiments.json``).  Each ratio compares two
callables timed round-robin in the same process (ratio of the minima over
repeats; the median ratio is stored too).  Nothing here asserts.

Threads: on a loaded 2-core machine, multi-threaded BLAS and torch intra-op
threads can be 5-25x slower than one thread for these mid-sized products
(spinning threads compete with other jobs).  ``--threads N`` sets torch's
thread count; numpy's OpenBLAS reads ``OPENBLAS_NUM_THREADS`` at start-up, so
set it in the environment (``OPENBLAS_NUM_THREADS=1 python -m ...``) to
compare.  The thread settings and load average are stored with the results.

Sections
--------
classification  PRF kernel-regression accuracy, 100 draws at m = d, per UCI
                dataset, vs the exact-kernel classifier on the same split
                (one O(N_test N_train) pass); per draw vs one bare
                (N_train + N_test, d) @ (d, m) product; and the class sums
                Phi^T Y over per-class runs of class-sorted rows (the
                classifier's way) vs a one-hot matrix product.
attention       PRF attention (numpy), d = 64, m = 130, L = 1024 and 4096,
                bidirectional and causal, vs exact softmax attention on the
                same inputs; the torch module vs torch's
                ``scaled_dot_product_attention`` (float32, CPU).
gram            Gram-matrix error per draw (N = d = 64, m = 128) vs one bare
                (N, m) @ (m, N) product.
parallel        (not in the default set) a Table 2 run (paper protocol,
                ``--parallel-draws`` draws, 8 datasets, 4 couplings) with
                ``n_jobs=2`` vs ``n_jobs=1``, both with one BLAS thread per
                worker (montecarlo.experiments.sweeps), timed round-robin; the
                two tables must be bit-identical.
paired          (not in the default set) variance reduction of common random
                numbers: per dataset (paper protocol, m = d, ``--paired-draws``
                draws; chess a quarter of them), the standard error of the
                paired difference SimRF - IID (and SimRF - ORF) over the unpaired
                one, hypot(se_SimRF, se_IID) of the same draws (what independent
                draws would give), and the same difference from an independent
                run for comparison.
"""

from __future__ import annotations

import os
import platform
import sys
import time

import numpy as np

import montecarlo as mc
from theory.cli import int_arg, main_runner, make_parser
from montecarlo.experiments import attention as at
from montecarlo.experiments import classification as cl
from montecarlo.experiments import gram, uci

try:  # optional backend
    import torch
except ImportError:  # pragma: no cover
    torch = None

from benchmarks._timing import RESULTS_DIR, interleaved, parsed_json_path, ratio, write_json  # noqa: E402


def bench_classification(repeat, uci_dir):
    rows = {}
    try:
        data, missing = uci.load_all(uci_dir, warn=False)
    except FileNotFoundError as exc:
        print(f"classification: skipped ({exc})")
        return {"skipped": str(exc)}
    print("classification: 100 draws at m = d vs the exact classifier; one draw vs one bare product")
    for name, ds in data.items():
        split = ds.split(0)
        d, n_draws = split.d, 100
        W = mc.sample_weights("simplex", d, d, rng=0, n_draws=n_draws)
        X = np.concatenate([split.X_train, split.X_test])
        W0 = np.ascontiguousarray(W[0].T)
        # the class sums Phi^T Y of one chunk of draws: per-class runs (the classifier) vs a one-hot product
        lt = np.exp(-np.abs(np.random.default_rng(1).normal(size=(split.X_train.shape[0], 8 * d))))
        order, present, starts = cl._groups(split.y_train)
        onehot = np.eye(split.n_classes)[split.y_train]
        lt_sorted = lt[order]
        fns = {
            "prf100": lambda: cl._prf_accuracies(split.X_train, split.y_train, split.X_test, split.y_test, W,
                                                 uci.PAPER_SIGMAS[name]),
            "exact": lambda: cl.exact_accuracy(split),
            "product": lambda: X @ W0,
            "class_runs": lambda: np.add.reduceat(lt_sorted, starts, axis=0),
            "onehot": lambda: onehot.T @ lt,
        }
        t = interleaved(fns, repeat)
        r_exact = ratio(t, "prf100", "exact")
        per_draw = min(t["prf100"]) / n_draws / min(t["product"])
        r_sums = ratio(t, "class_runs", "onehot")
        rows[name] = {"prf100_over_exact": r_exact, "per_draw_over_product": per_draw,
                      "class_runs_over_onehot": r_sums, "prf100_s": min(t["prf100"]), "exact_s": min(t["exact"])}
        print(f"  {name:9s} class sums, runs / one-hot ({split.n_classes} classes) = {r_sums[0]:5.2f}x")
        print(f"  {name:9s} N_train={split.X_train.shape[0]:5d} d={d:3d}: 100 draws / exact = {r_exact[0]:6.2f}x "
              f"(median {r_exact[1]:.2f}x); per draw / bare product = {per_draw:6.1f}x")
    rows["missing"] = missing
    return rows


def bench_attention(repeat):
    out = {}
    print("attention: d = 64, m = 130 vs exact softmax attention on the same inputs")
    for L in (1024, 4096):
        Q, K, V = at.synthetic_qkv(L, 64, 0, logit_std=0.25)
        W = mc.sample_weights("simplex", 64, 130, rng=1)
        for causal in (False, True):
            fns = {"prf": lambda: at.prf_attention(Q, K, V, W, causal),
                   "exact": lambda: at.softmax_attention(Q, K, V, causal)}
            t = interleaved(fns, repeat)
            r = ratio(t, "prf", "exact")
            key = f"numpy_L{L}_{'causal' if causal else 'bidirectional'}"
            out[key] = {"ratio": r, "prf_s": min(t["prf"]), "exact_s": min(t["exact"])}
            print(f"  numpy L={L:5d} {'causal' if causal else 'bidir.'}: PRF {min(t['prf']) * 1e3:8.1f} ms, "
                  f"exact {min(t['exact']) * 1e3:8.1f} ms, ratio {r[0]:.2f}x (median {r[1]:.2f}x)")
    if torch is None:
        return out
    from montecarlo.experiments.attention_torch import PRFAttention

    for L in (1024, 4096):
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 4, L, 64, generator=g) * 0.5 for _ in range(3))
        for causal in (False, True):
            mod = PRFAttention(64, 130, "simplex", causal=causal, seed=0).eval()
            with torch.no_grad():
                fns = {"prf": lambda: mod(q, k, v),
                       "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)}
                t = interleaved(fns, repeat)
            r = ratio(t, "prf", "sdpa")
            key = f"torch_L{L}_{'causal' if causal else 'bidirectional'}"
            out[key] = {"ratio": r, "prf_s": min(t["prf"]), "sdpa_s": min(t["sdpa"])}
            print(f"  torch (1, 4, {L}, 64) float32 {'causal' if causal else 'bidir.'}: PRF "
                  f"{min(t['prf']) * 1e3:8.1f} ms, sdpa {min(t['sdpa']) * 1e3:8.1f} ms, ratio {r[0]:.2f}x")
    return out


def bench_gram(repeat):
    X = gram.paper_gram_data()
    W = mc.sample_weights("simplex", 64, 128, rng=0, n_draws=50)
    phi = np.random.default_rng(0).random((64, 128))
    fns = {"gram50": lambda: gram.gram_errors(X, W), "product": lambda: phi @ phi.T}
    t = interleaved(fns, repeat)
    per_draw = min(t["gram50"]) / 50 / min(t["product"])
    print(f"gram: N = d = 64, m = 128: per draw / bare (64, 128) @ (128, 64) = {per_draw:.1f}x")
    return {"per_draw_over_product": per_draw}


def _table_numbers(table):
    out = []
    for row in table.rows.values():
        out += [row["exact"]] + [(row[c].mean, row[c].stderr) for c in table.couplings]
        out += [(e.mean, e.stderr) for e in row["differences"].values()]
    return out


def bench_parallel(repeat, uci_dir, n_draws):
    """Table 2 with n_jobs = 2 vs n_jobs = 1 (one BLAS thread per worker in both), round-robin."""
    runs = {}

    def run(n_jobs):
        table = cl.accuracy_table(cl.TABLE2_COUPLINGS, 1, n_draws, 0, uci_dir=uci_dir, protocol="paper",
                                  n_jobs=n_jobs)
        runs[n_jobs] = table
        return table

    fns = {"n_jobs=2": lambda: run(2), "n_jobs=1": lambda: run(1)}
    t = interleaved(fns, max(1, repeat // 3))
    r = ratio(t, "n_jobs=1", "n_jobs=2")
    identical = _table_numbers(runs[1]) == _table_numbers(runs[2])
    print(f"parallel: Table 2, paper protocol, {n_draws} draws, 8 datasets x 4 couplings: n_jobs=1 "
          f"{min(t['n_jobs=1']):.1f} s, n_jobs=2 {min(t['n_jobs=2']):.1f} s: speed-up {r[0]:.2f}x "
          f"(median {r[1]:.2f}x); bit-identical: {identical}")
    return {"speedup": r, "n_jobs1_s": min(t["n_jobs=1"]), "n_jobs2_s": min(t["n_jobs=2"]), "n_draws": n_draws,
            "bit_identical": identical}


def bench_paired(uci_dir, n_draws, n_jobs):
    """s.e. of paired differences / s.e. of unpaired ones, per dataset (paper protocol, m = d)."""
    out = {}
    print(f"paired: s.e.(paired difference) / hypot(s.e.) of the same draws, paper protocol, m = d, {n_draws} "
          "draws (chess a quarter); independent run alongside")
    for name in uci.DATASETS:
        draws = max(2, n_draws // 4) if name == "chess" else n_draws
        kw = dict(n_draws=draws, rng=0, uci_dir=uci_dir, datasets=[name], protocol="paper", n_jobs=n_jobs)
        try:
            paired = cl.accuracy_table(cl.FIG8_COUPLINGS, paired=True, **kw)
            indep = cl.accuracy_table(cl.FIG8_COUPLINGS, paired=False, **kw)
        except FileNotFoundError as exc:
            out[name] = {"skipped": str(exc)}
            continue
        rp, ri = paired.rows[name], indep.rows[name]
        cells = {}
        for a, b in (("simplex", "iid"), ("simplex", "orthogonal"), ("orthogonal", "iid")):
            e = rp["differences"][a, b]
            unpaired = float(np.hypot(rp[a].stderr, rp[b].stderr))
            ei = ri["differences"][a, b]
            cells[f"{a}-{b}"] = {"paired_se": e.stderr, "unpaired_se": unpaired, "ratio": e.stderr / unpaired,
                                 "paired_mean": e.mean, "paired_z": e.mean / e.stderr,
                                 "independent_se": ei.stderr, "independent_mean": ei.mean}
        out[name] = {"n_draws": draws, **cells}
        print(f"  {name:9s} ({draws:4d} draws): " + ", ".join(
            f"{k} {v['ratio']:.2f} (z {v['paired_z']:+.1f}; independent s.e. {v['independent_se']:.4f} vs "
            f"{v['unpaired_se']:.4f})" for k, v in cells.items()))
    return out


def bench_table(uci_dir, protocol, n_jobs=None):
    t0 = time.perf_counter()
    c0 = time.process_time()
    table = cl.accuracy_table(cl.TABLE2_COUPLINGS, 1, 100, 0, uci_dir=uci_dir, protocol=protocol, n_jobs=n_jobs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(table.format(cl.paper_table(2)))
    n_splits = len(table.settings["split_rng"])
    print(f"full Table 2 run ({protocol} protocol, {n_splits} split(s), 8 datasets, m = d, 100 draws, 4 couplings): "
          f"{wall:.1f} s wall, {cpu:.1f} s CPU")
    return {"wall_s": wall, "cpu_s": cpu, "protocol": protocol, "n_splits": n_splits}


def main(argv=None):
    """Run the command line; returns the exit status (0 done, 2 bad options, 130 Ctrl-C, 143 SIGTERM; the
    ``--json`` path and ``--uci-dir`` are checked before any timing, and an interrupted run leaves no partial
    file)."""
    from montecarlo.experiments.runtime import run_terminable

    return run_terminable(main_runner, PROG, _main, argv)


PROG = "python -m benchmarks.bench_experiments"


def _main(argv):
    p = make_parser(PROG, __doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 repeats instead of 7")
    p.add_argument("--only", nargs="+", choices=("classification", "attention", "gram", "parallel", "paired"),
                   help="sections to run (default: classification, attention, gram)")
    p.add_argument("--table", action="store_true", help="also time the full Table 2 run end to end")
    p.add_argument("--protocol", choices=tuple(uci.PROTOCOLS), default="paper", help="protocol of --table")
    p.add_argument("--n-jobs", type=int_arg(1), default=None,
                   help="workers of --table and the paired section (default: every core)")
    p.add_argument("--parallel-draws", type=int_arg(2), default=100, help="draws of the parallel section's table")
    p.add_argument("--paired-draws", type=int_arg(2), default=400, help="draws of the paired section")
    p.add_argument("--uci-dir", default=None, help="UCI data directory (default: the shipped copy)")
    p.add_argument("--threads", type=int_arg(1), default=None, help="torch intra-op threads")
    p.add_argument("--json", nargs="?", const=str(RESULTS_DIR / "bench_experiments.json"), default=None,
                   metavar="PATH", help="write the results as strict JSON (atomically) to this path (checked before "
                                        "any timing)")
    args = p.parse_args(argv)
    json_path = parsed_json_path(p, args.json)
    if args.uci_dir is not None and not os.path.isdir(args.uci_dir):
        p.error(f"--uci-dir {args.uci_dir!r} does not exist or is not a directory")
    repeat = 3 if args.quick else 7
    sections = args.only or ("classification", "attention", "gram")
    np.seterr(under="ignore")
    if args.threads is not None and torch is not None:
        torch.set_num_threads(args.threads)
    res = {"platform": platform.platform(), "numpy": np.__version__, "cpus": os.cpu_count(),
           "load": os.getloadavg() if hasattr(os, "getloadavg") else None,
           "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
           "torch_threads": torch.get_num_threads() if torch is not None else None}
    print(f"load average {res['load']}, OPENBLAS_NUM_THREADS={res['OPENBLAS_NUM_THREADS']}, "
          f"torch threads {res['torch_threads']}")
    if "classification" in sections:
        res["classification"] = bench_classification(repeat, args.uci_dir)
    if "attention" in sections:
        res["attention"] = bench_attention(repeat)
    if "gram" in sections:
        res["gram"] = bench_gram(repeat)
    if "parallel" in sections:
        res["parallel"] = bench_parallel(repeat, args.uci_dir, args.parallel_draws)
    if "paired" in sections:
        res["paired"] = bench_paired(args.uci_dir, args.paired_draws, args.n_jobs)
    if args.table:
        res["table"] = bench_table(args.uci_dir, args.protocol, args.n_jobs)
    if json_path is not None:
        write_json(json_path, res)
        print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
