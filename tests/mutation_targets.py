"""Sampled formula-mutation score of montecarlo, of the feature-kind code and of theory's OPRF closed forms (group
``oprf_theory``): the targets, the test command of each, and a runner built on ``../shared/tools/mutate.py`` (its
mutation sites and operators, unchanged).

``mutate.py`` samples mutants over all the files it is given and runs one command on each.  Here every target
(a file, optionally restricted to some functions) has its own targeted test command, and the sample of a group
is drawn uniformly from the union of its targets' mutation sites, exactly as ``mutate.py`` draws it
(``random.Random(seed).sample(pool, n)``; a site is ``(file, i)`` with ``i`` the index in ``mutate.sites``'
walk order, so a mutant is the same edit ``mutate.py`` makes).  Each mutant runs only the command of its target,
on a scratch copy of the checkout, and is reported as killed (the command failed), timeout (counted as killed,
as mutate.py does, but listed) or survived, with the mutated expression so that a survivor can be classified.

Usage (from the checkout)::

    python tests/mutation_targets.py --group montecarlo --sample 80 --seed 22 [--tests before|after]
    python tests/mutation_targets.py --group kinds --sample 70 --seed 22 --json out.json
    python tests/mutation_targets.py --target oprf_a --sample 20 --seed 1 --timeout 400
    python tests/mutation_targets.py --list          # targets, sites and commands

``--tests before`` uses the existing tests only (the measurement before tests/test_mutation_*.py existed);
``after`` (default) adds this project's mutation tests.  The record of the runs is docs/guide/mutation.rst.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/: run as a script or imported by the tests
from _procs import run_group  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MUTATE = ROOT.parent / "shared" / "tools" / "mutate.py"

PYTEST = "python -m pytest -q -x -p no:cacheprovider"

T = "tests/"
HYP, OPRF, FK = T + "test_hyperbolic.py", T + "test_oprf.py", T + "test_feature_kinds.py"
#: Existing fast tests per target (the "before" commands): pytest argument strings, one pytest run each.  Each
#: target's run takes seconds on the 2-core machine; tests that failed on the unmutated tree when this was set up
#: (other engineers' work in progress) are deselected.
BEFORE = {
    "couplings": [T + "test_montecarlo_couplings.py -k 'not (pass_the_audit and simplex_plus)'"],
    "estimators": [T + "test_montecarlo_estimators.py -m 'not slow' -k 'not 16 and not 64 and not pnc and not "
                   "simplex_plus and not conformity_matches and not many_trials and not gram'"],
    "features": [T + "test_montecarlo_features.py"],
    "pnc": [T + "test_pnc.py -k 'norms_are_chi or monte_carlo_conformity or registered'"],
    "norm_coupling": [T + "test_norm_coupling.py -k 'not 16-0.5'"],
    "feature_kinds": [FK + " --deselect " + FK + "::test_one_copy_of_the_prf_formula"],
    "mc_hyperbolic": [HYP + " -k 'feature_map or gram_and or monte_carlo_agrees'",
                      FK + "::test_one_map_for_numpy_and_torch"],
    "mc_oprf": [OPRF + " -k 'feature_map or monte_carlo_agrees or conformity_estimate or optimal_a_minimises or "
                "bad_input or unbiased'", FK + "::test_one_map_for_numpy_and_torch"],
    "th_hyperbolic": [HYP + " -k 'not 8-2.0 and not monte_carlo and not optimal_sampled and not feature_map and "
                      "not gram'"],
    "th_oprf": [OPRF + " -k 'not monte_carlo and not unbiased and not feature_map and not 3-1.0'"],
    "fused_scans": [T + "test_nn_fused.py -k 'chunk_offsets or state_scan or causal_operator or host_overhead or "
                    "module_with_fused or compiled_causal or ratio'"],
    "fused_products": [T + "test_nn_fused.py -k 'bf16 or precision or tile_shapes or feature_blocks'"],
    "fused_launch": [T + "test_nn_fused.py -k 'launch_cache or features_products or linear_features or "
                     "feature_blocks'"],
    "fused_host": [T + "test_nn_fused.py -k 'feature_rows or keeps_the_features or grids_are_kept or linear_features "
                   "or kernels_equal or causal_operator_equals or host_overhead or ratio_writes or "
                   "broadcast_shapes or module_with_fused'"],
    "nn_func": [T + "test_nn_module.py -k 'torch_func or vmap_and or torch_export or oprf_data_driven or "
                "meta_device'",
                T + "test_experiments_torch.py -k 'autocast or torch_compile'"],
    "nn_host": [T + "test_nn_fused.py -k 'keeps_the_features or broadcast_shapes or causal_scan_with or "
                "module_with_fused or ratio_writes or broadcast_leading or host_overhead'",
                T + "test_nn_module.py -x -k 'causal and not slow'"],
    "fast_sq": [OPRF + " -k 'not_a_power or dense_rows'", T + "test_hardening_montecarlo.py -k round_two",
                T + "test_montecarlo_limits.py -k fast_projection"],
    "oprf_stat": [T + "test_nn_module.py -k 'a_star or ignores_padded or oprf_data_driven'",
                  OPRF + " -k 'batch_pair or optimal_a'"],
    "mc_edges": [T + "test_montecarlo_limits.py -k 'outside_float64 or frobenius'",
                 T + "test_hardening_montecarlo.py -k round_two"],
    # group oprf_theory: existing closed-form checks (the pnc quadratures' tests are left out: 12 s a mutant)
    "oprf_a": [OPRF + " -k 'optimal_a_minimises or data_parameters or bad_input or domain'",
               T + "test_theory_oprf_edges.py -k optimal_a"],
    "oprf_var": [T + "test_theory_round3.py -k oprf",
                 OPRF + " -k 'theorem_pair_term or certified or domain or bad_input'",
                 T + "test_theory_oprf_edges.py -k 'iid_oprf_mse or theorem_couplings'",
                 T + "test_mutation_kinds.py::TestOprfTheory -k 'one_eighth or certified'"],
    "dim_bits": [T + "test_theory_huge_d.py -k 'not pdf_wij and not z_crit'", T + "test_theory_round3.py -k d_1e20"],
    # group tiny_v: the tests written with the tiny-v branch (no "before": the code is new)
    "tiny_v_mse": [T + "test_tiny_v_budget.py", "paper_checks/test_beyond.py -k v4"],
    "tiny_v_e": [T + "test_tiny_v_budget.py", "paper_checks/test_beyond.py -k v4"],
    "mse_kinds": [FK + " -k 'kernel_mse or mean_conformity'",
                  HYP + " -k 'issue_numbers or single_direction or small_v or (monte_carlo and not pnc)'",
                  OPRF + " -k 'domain or bad_input or (monte_carlo and not pnc) or conformity_estimate'"],
}
#: The tests added against the survivors of the "before" run (one more pytest run per target).
MUT_MC, MUT_K, MUT_O = (T + "test_mutation_montecarlo.py", T + "test_mutation_kinds.py",
                        T + "test_mutation_theory_oprf.py")
AFTER = {
    "couplings": [MUT_MC + "::TestCouplings"],
    "estimators": [MUT_MC + "::TestEstimators"],
    "features": [MUT_MC + "::TestFeatures"],
    "pnc": [MUT_MC + "::TestPnc"],
    "norm_coupling": [MUT_MC + "::TestNormCoupling"],
    "feature_kinds": [MUT_K + "::TestRegistry"],
    "mc_hyperbolic": [MUT_K + "::TestHyperbolicMap"],
    "mc_oprf": [MUT_K + "::TestOprfMap"],
    "th_hyperbolic": [MUT_K + "::TestHyperbolicTheory"],
    "th_oprf": [MUT_K + "::TestOprfTheory"],
    "mse_kinds": [MUT_K + "::TestKernelMse"],
    "fused_scans": [],
    "fused_products": [],
    "fused_launch": [],
    "fused_host": [],
    "nn_host": [],
    "nn_func": [],
    "fast_sq": [],
    "oprf_stat": [],
    "mc_edges": [],
    "oprf_a": [MUT_O + "::TestOptimalA"],
    "oprf_var": [MUT_O + "::TestOprfMse"],
    "dim_bits": [MUT_O + "::TestDimensionBits"],
    "tiny_v_mse": [],
    "tiny_v_e": [],
}

#: name -> (group, file, functions or None for the whole file)
TARGETS = {
    "couplings": ("montecarlo", "montecarlo/couplings.py", None),
    "estimators": ("montecarlo", "montecarlo/estimators.py", None),
    "features": ("montecarlo", "montecarlo/features.py", None),
    "pnc": ("montecarlo", "montecarlo/pnc.py", None),
    "norm_coupling": ("montecarlo", "montecarlo/norm_coupling.py", None),
    "feature_kinds": ("kinds", "theory/feature_kinds.py", None),
    "mc_hyperbolic": ("kinds", "montecarlo/hyperbolic.py", None),
    "mc_oprf": ("kinds", "montecarlo/oprf.py", None),
    "th_hyperbolic": ("kinds", "theory/hyperbolic.py", None),
    "th_oprf": ("kinds", "theory/oprf.py", None),
    "mse_kinds": ("kinds", "theory/mse.py", ("kernel_mse", "_kind_inner", "_kind_scaled", "mean_conformity")),
    # the fused causal scan's kernels over the chunks and of the ratio, and their launches (Triton's interpreter)
    "fused_scans": ("fused", "montecarlo/nn/_fused.py",
                    ("_scan_program", "_chunk_offsets_kernel", "_row_offsets_kernel", "_states_kernel",
                     "_states_adjoint_kernel", "_ratio_rows", "_ratio_kernel", "_ratio_grad_kernel",
                     "_chunk_offsets_impl", "_states", "_prefix_states", "_states_adjoint", "_ratio_launch",
                     "_seen_rows", "ratio")),
    # the kernels' products (the bfloat16 operands and the interpreter's rounding of them, also of the values'
    # gradient stored in bfloat16) and their sizes
    "fused_products": ("fused", "montecarlo/nn/_fused.py", ("_bf16_bits", "_bf16_rounded", "_mm", "products", "_sizes")),
    # the launch cache (the compiled kernels' runners) and the features' kernels' products and sizes
    "fused_launch": ("fused", "montecarlo/nn/_fused.py", ("_arg_key", "_launch_key", "_launch", "_launch_cache_off",
                                                       "feature_products", "_feature_meta")),
    # the host's work of an eager step (the features' rows kept, the leading shapes written directly, the grids
    # kept) and the values' layout without a ones column (the kernels' loads and stores of values)
    "fused_host": ("fused", "montecarlo/nn/_fused.py", ("feature_rows", "scaled_log_features", "_grids", "_grids_of",
                                                     "_linear_features_impl", "_linear_features_backward_impl",
                                                     "_cols", "_values", "_store_cols", "_store_value_grads")),
    "nn_host": ("fused", "montecarlo/nn/_module.py", ("_kernel_rows",)),
    "nn_host_dispatch": ("fused", "montecarlo/nn/_dispatch.py", ("_as_rows",)),
    "nn_host_ops": ("fused", "montecarlo/nn/_ops.py", ("_broadcast_shapes",)),
    # torch.func and torch.export: the forward-mode rules, the Functions' contexts, the switches that pick them;
    # deferred initialisation (the meta device, reset_parameters)
    "nn_func": ("fused", "montecarlo/nn/_ops.py", ("jvp", "setup_context", "_with_jvp")),
    "nn_func_scan": ("fused", "montecarlo/nn/_scan.py", ("jvp", "setup_context")),
    "nn_func_probes": ("fused", "montecarlo/nn/_probes.py", ("_transformed", "_no_autocast", "_autocast_on",
                                                              "_exporting")),
    "nn_func_module": ("fused", "montecarlo/nn/_module.py", ("_rho", "reset_parameters")),
    "nn_func_features": ("fused", "montecarlo/nn/_features.py", ("draw_projections",)),
    # the second exploration run's fixes (2026-11-27): the fast couplings' row norms cut to d of p columns, the
    # input checks of the HD-product and Algorithm 1; FAVOR++'s A* on both sides of s = 1/2 and its statistic
    # over the unpadded finite rows; exact_kernel's and the features' float64 range
    "fast_sq": ("hardening", "montecarlo/couplings.py", ("_fast_sq_norms", "row_sq_norms", "_array_ns",
                                                          "_fast_structured")),
    "oprf_stat": ("hardening", "montecarlo/oprf.py", ("_a_star", "_row_moments")),
    "mc_edges": ("hardening", "montecarlo/estimators.py", ("exact_kernel", "gram_estimate")),
    # the OPRF (FAVOR++) closed forms of theory/oprf.py: the optimal A (and the A=None dispatch), the pieces of the
    # OPRF kernel MSE (A's check, E[b^2] and the variance's exponent, the v -> 0 values, the pair excess's dispatch,
    # the certified ball); and the guard bits of an integer dimension (theory.distributions.dimension_bits)
    "oprf_a": ("oprf_theory", "theory/oprf.py", ("optimal_a", "_optimal_a", "_parameters")),
    "oprf_var": ("oprf_theory", "theory/oprf.py", ("check_a", "_log_excess_moment", "_exponent", "_variance",
                                                   "second_moment", "_small_v", "_pair_excess", "certified_mse",
                                                   "_arb_real")),
    "dim_bits": ("oprf_theory", "theory/distributions.py", ("dimension_bits",)),
    # the pair excess at tiny v: its Taylor terms and remainder bound, the cap on extra bits, the v^4 coefficient
    "tiny_v_mse": ("tiny_v", "theory/mse.py", ("_series_excess", "_excess", "_small_arg_bits")),
    "tiny_v_e": ("tiny_v", "theory/conformities.py", ("coupling_conformity_v4_excess",)),
}
# (montecarlo.nn is a package: its targets of one concern span files, one target per file, the same commands)
for _name in ("nn_host_dispatch", "nn_host_ops"):
    BEFORE[_name], AFTER[_name] = BEFORE["nn_host"], AFTER["nn_host"]
for _name in ("nn_func_scan", "nn_func_probes", "nn_func_module", "nn_func_features"):
    BEFORE[_name], AFTER[_name] = BEFORE["nn_func"], AFTER["nn_func"]
GROUPS = ("montecarlo", "kinds", "fused", "hardening", "oprf_theory", "tiny_v")


def load_mutate(path=MUTATE):
    """The shared tool as a module (its ``sites`` and ``mutate``)."""
    if not path.exists():
        raise SystemExit(f"error: {path} not found (the shared mutation tool; this runner uses its operators)")
    spec = importlib.util.spec_from_file_location("mutate_tool", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def command(name, tests):
    """The test command of a target: ``before`` (existing tests) or ``after`` (plus the mutation tests)."""
    parts = BEFORE[name] + (AFTER[name] if tests == "after" else [])
    return " && ".join(f"{PYTEST} {p}" for p in parts)


def _line_ranges(tree, functions):
    spans = [(n.lineno, n.end_lineno) for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in functions]
    found = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    missing = set(functions) - found
    if missing:
        raise SystemExit(f"error: functions {sorted(missing)} not found")
    return spans


def target_sites(tool, name, root=ROOT):
    """Indices (into ``tool.sites``' walk order) of the mutation sites of a target."""
    _, path, functions = TARGETS[name]
    tree = ast.parse((root / path).read_text())
    spans = _line_ranges(tree, functions) if functions else None
    out = []
    for i, (_, node) in enumerate(tool.sites(tree)):
        if spans is None or any(lo <= node.lineno <= hi for lo, hi in spans):
            out.append(i)
    return out


def describe_mutant(tool, src, index):
    """(kind, line, expression before, after, mutated source): ``tool.mutate`` plus the edited expression."""
    tree = ast.parse(src)
    for i, (kind, node) in enumerate(tool.sites(tree)):
        if i == index:
            before = ast.unparse(node)
            break
    else:
        raise IndexError(index)
    kind2, line, new = tool.mutate(src, index)
    tree2 = ast.parse(new)
    for i, (_, node) in enumerate(tool.sites(tree2)):
        if i == index:
            after = ast.unparse(node)
            break
    else:  # the mutation removed a site (e.g. -x -> +x)
        after = "?"
    if kind == "neg":
        after = "+" + before[1:] if before.startswith("-") else after
    return kind2, line, before, after, new


def _run(cmd, cwd, timeout):
    t0 = time.time()
    try:
        code, out = run_group(cmd, timeout, shell=True, cwd=cwd, env={**os.environ, "PYTHONPATH": str(cwd)})
        status = "killed" if code != 0 else "survived"
        tail = out.strip().splitlines()[-1:] if code else []
    except subprocess.TimeoutExpired:  # the whole process group was killed (pytest's workers too)
        status, tail = "timeout", []
    return status, time.time() - t0, tail


def _write_atomic(path, text):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Sampled formula-mutation score of a group of targets, each mutant "
                                 "run against its own target's test command (operators of ../shared/tools/mutate.py).")
    ap.add_argument("--group", choices=GROUPS, help="one of " + ", ".join(GROUPS))
    ap.add_argument("--target", choices=tuple(TARGETS),
                    help="sample this target's sites only (its group implied), e.g. to cover all of a small one")
    ap.add_argument("--sample", type=int, default=80, help="mutants drawn from the group's sites (default 80)")
    ap.add_argument("--seed", type=int, default=22, help="seed of the sample (default 22)")
    ap.add_argument("--tests", choices=("before", "after"), default="after",
                    help="existing tests only, or with tests/test_mutation_*.py (default after)")
    ap.add_argument("--timeout", type=int, default=60,
                    help="seconds per mutant before it counts as a timeout: at least this, and 4 times the unmutated "
                         "run of the target's command (default 60)")
    ap.add_argument("--json", help="write the per-mutant results here (atomically)")
    ap.add_argument("--only", nargs="+", metavar="FILE:LINE:KIND",
                    help="re-run just these mutants of the sample (as printed), e.g. to check a new test")
    ap.add_argument("--sources", metavar="DIR",
                    help="take the target files from DIR (same relative paths, e.g. a copy made for an earlier run) "
                         "instead of the checkout, so that a later run samples the same mutants")
    ap.add_argument("--list", action="store_true", help="print targets, site counts and commands, then exit")
    a = ap.parse_args(argv)
    tool = load_mutate()
    if a.list:
        for name, (group, path, fns) in TARGETS.items():
            n = len(target_sites(tool, name, ROOT if a.sources is None else Path(a.sources)))
            print(f"{group:11} {name:14} {path}{' (' + ', '.join(fns) + ')' if fns else ''}: {n} sites\n"
                  f"    {command(name, a.tests)}")
        return 0
    if a.target is not None:
        if a.group not in (None, TARGETS[a.target][0]):
            ap.error(f"--target {a.target} is in group {TARGETS[a.target][0]!r}, not {a.group!r}")
        a.group = TARGETS[a.target][0]
    if a.group is None:
        ap.error("--group is required (or --target, or --list)")
    if a.sample < 1:
        ap.error(f"--sample must be >= 1, got {a.sample}")
    names = [a.target] if a.target else [n for n, t in TARGETS.items() if t[0] == a.group]
    src_root = ROOT if a.sources is None else Path(a.sources)
    for n in names:
        if not (src_root / TARGETS[n][1]).is_file():
            raise SystemExit(f"error: --sources {a.sources}: {TARGETS[n][1]} not found")
    digests = {TARGETS[n][1]: hashlib.sha256((src_root / TARGETS[n][1]).read_bytes()).hexdigest()[:16] for n in names}
    pool = [(n, i) for n in names for i in target_sites(tool, n, src_root)]
    rng = random.Random(a.seed)
    chosen = rng.sample(pool, min(a.sample, len(pool)))
    where = f"target {a.target!r}" if a.target else f"group {a.group!r}"
    print(f"{len(pool)} mutation sites in {where}; running {len(chosen)} (seed {a.seed}, tests {a.tests})",
          flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "proj"
        shutil.copytree(ROOT, work, symlinks=True,
                        ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "simplex_rf_figures"))
        (Path(tmp) / "shared").symlink_to(ROOT.parent / "shared")
        for n in names:  # the sampled sources (the checkout's own unless --sources)
            shutil.copyfile(src_root / TARGETS[n][1], work / TARGETS[n][1])
        limits = {}
        for name in sorted({n for n, _ in chosen}):
            status, secs, tail = _run(command(name, a.tests), work, a.timeout * 5)
            if status != "survived":
                print(f"error: the unmutated checkout fails the command of {name!r} ({status}, {secs:.0f} s): "
                      f"{' '.join(tail)}\n    {command(name, a.tests)}", file=sys.stderr)
                return 2
            limits[name] = max(a.timeout, int(4 * secs))
            print(f"baseline {name}: passes in {secs:.0f} s (mutant timeout {limits[name]} s)", flush=True)
        for k, (name, index) in enumerate(chosen, 1):
            path = TARGETS[name][1]
            orig = (work / path).read_text()
            kind, line, before, after, new = describe_mutant(tool, orig, index)
            tag = f"{path}:{line}:{kind}"
            if a.only and tag not in a.only:
                continue
            (work / path).write_text(new)
            try:
                status, secs, tail = _run(command(name, a.tests), work, limits[name])
            finally:
                (work / path).write_text(orig)
            results.append({"target": name, "file": path, "line": line, "kind": kind, "index": index,
                            "before": before, "after": after, "status": status, "seconds": round(secs, 1)})
            print(f"[{k}/{len(chosen)}] {status.upper() if status == 'survived' else status:8} {tag} "
                  f"`{before}` -> `{after}` ({secs:.0f} s)", flush=True)
    counts = {s: sum(r["status"] == s for r in results) for s in ("killed", "timeout", "survived")}
    total = len(results)
    for r in results:
        if r["status"] == "survived":
            print(f"survivor: {r['file']}:{r['line']} {r['kind']} `{r['before']}` -> `{r['after']}`")
    print(f"{where} (seed {a.seed}, tests {a.tests}): {total} mutants, killed {counts['killed']}, "
          f"timeout {counts['timeout']}, survived {counts['survived']}; kill rate "
          f"{(counts['killed'] + counts['timeout']) / max(total, 1):.0%}")
    if a.json:
        _write_atomic(a.json, json.dumps({"group": a.group, "target": a.target, "seed": a.seed, "sample": a.sample,
                                          "tests": a.tests, "sha256": digests, "counts": counts, "mutants": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
