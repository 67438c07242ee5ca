"""Speed and memory of montecarlo.nn.PRFAttention against performer-pytorch's FastAttention and torch SDPA.

CPU (``python -m benchmarks.bench_attention [--quick]``): (batch, heads) =
(2, 4), d = 64, m = 64 and 256, coupling ``simplex``, float32, forward
passes under ``torch.no_grad``, bidirectional and causal, L = 256 ... 16384
(``--quick``: L = 1024, 4096 and m = 64).  Against performer-pytorch's
``FastAttention`` with the same m (skipped if performer-pytorch is not
installed; its causal path without the ``fast_transformers`` CUDA kernel is
the memory-hungry cumulative-sum form, measured up to L = 4096 with
``--quick`` and 16384 otherwise) and exact ``scaled_dot_product_attention``.
Time: CPU time of the process (``time.process_time``) with one torch thread
by default (``--threads``), the minimum over interleaved repeats, so that
other jobs on a shared machine change it little.  Memory: the peak resident
memory added by one forward pass, measured in a fresh subprocess per cell
(``/proc/self/clear_refs`` resets the high-water mark; Linux only;
``--no-memory`` skips it).

CUDA (``python -m benchmarks.bench_attention --cuda [--quick]``; skipped
with a message when CUDA is not available): the issue-20 setting, batch x
heads = 32 ((4, 8)), d = 64, m = 128, bfloat16 inputs, forward + backward
(a fixed cotangent), causal and bidirectional, L = 1024 ... 65536
(``--quick``: 4096, 16384, 65536; under a minute on one H100), timed with
CUDA synchronisation, peak memory from ``torch.cuda.max_memory_allocated``;
against SDPA (flash attention) and FastAttention where installed.
Host (``python -m benchmarks.bench_attention --host``; no GPU needed): the CPU work of one eager causal
training step of the fused CUDA path (Python, the torch operators' dispatch, autograd), measured on tiny
CPU tensors with the kernels' launches as no-ops, against SDPA's on the same tensors; with the numbers of
kernel launches, custom-operator calls and other torch operators per step.
Causal training (``--backward``): CPU time of the causal forward with autograd and its backward (m = 256,
L = 1024 ... 65536, one thread), the no-grad forward and SDPA's causal forward + backward up to 16384.
Decoding (``--decode``; ``--cuda`` on the GPU in bfloat16 with (batch, heads) = (4, 8)): tokens per second of
``PRFAttention.step`` (m = 128, 256) from the state after a prompt of P tokens against SDPA reading a key-value
cache of P + 1 positions, at P = 1024, 16384, 65536 (``--lengths``).
Launch (``--launch``; needs CUDA): the host's time per kernel launch through Triton's JIT entry, through
the compiled kernel's runner (what ``montecarlo.nn._fused.LAUNCH_CACHE`` uses) and for a torch operator.
``--json [PATH]`` also writes the rows (default
``benchmarks/results/bench_attention.json``).  Nothing here asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import subprocess
import sys
import time
from unittest import mock

from benchmarks._timing import RESULTS_DIR, check_json_path, write_json

PROG = "python -m benchmarks.bench_attention"
CPU_SHAPE = (2, 4)
CUDA_SHAPE = (4, 8)
D_HEAD = 64


def _fast_attention():
    """performer-pytorch's FastAttention class, or None when it is not installed."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from performer_pytorch import FastAttention
    except ImportError:
        return None
    return FastAttention


def _build(impl, causal, m, device, torch):
    """A callable attention(q, k, v) of one implementation."""
    if impl == "prf":
        from montecarlo.nn import PRFAttention

        mod = PRFAttention(D_HEAD, m, "simplex", causal=causal, seed=0, device=device)
        return mod
    if impl == "fast":
        import contextlib
        import io

        FastAttention = _fast_attention()
        with contextlib.redirect_stdout(io.StringIO()):  # it prints a note when fast_transformers is missing
            return FastAttention(D_HEAD, m, causal=causal).to(device)
    F = torch.nn.functional
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _impls(causal, L, cap_fast):
    out = ["prf", "sdpa"]
    if _fast_attention() is not None and not (causal and L > cap_fast):
        out.insert(1, "fast")
    return out


# ---------------------------------------------------------------------------
# CPU


def _rss_kb(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def peak_forward_mb(impl, causal, L, m, threads):
    """Peak resident memory (MB) added by one forward pass (call in a fresh process)."""
    import torch

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (0.5 * torch.randn(*CPU_SHAPE, L, D_HEAD, generator=gen) for _ in range(3))
    fn = _build(impl, causal, m, "cpu", torch)
    with torch.no_grad():
        small = tuple(t[..., :16, :].contiguous() for t in (q, k, v))
        fn(*small)  # lazy initialisation outside the measurement
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset the high-water mark VmHWM to the current RSS
        before = _rss_kb("VmRSS")
        out = fn(q, k, v)
        peak = _rss_kb("VmHWM")
    del out
    return (peak - before) / 1024.0


def _measure_memory(impl, causal, L, m, threads):
    cmd = [sys.executable, "-m", "benchmarks.bench_attention", "--_peak", impl, str(int(causal)), str(L), str(m),
           str(threads)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        return float(res.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def _cpu_time(fns, repeat):
    """Minimum CPU time (s) of each callable over ``repeat`` interleaved calls (one warm-up each)."""
    from benchmarks._timing import interleaved

    return {k: min(v) for k, v in interleaved(fns, repeat, clock=time.process_time).items()}


def cpu_rows(seq_lens, m_values, repeat, threads, memory, cap_fast):
    import torch

    torch.set_num_threads(threads)
    rows = []
    for causal in (False, True):
        for m in m_values:
            for L in seq_lens:
                gen = torch.Generator().manual_seed(0)
                q, k, v = (0.5 * torch.randn(*CPU_SHAPE, L, D_HEAD, generator=gen) for _ in range(3))
                impls = _impls(causal, L, cap_fast)
                fns = {}
                for impl in impls:
                    fn = _build(impl, causal, m, "cpu", torch)

                    def call(fn=fn):
                        with torch.no_grad():
                            fn(q, k, v)
                    fns[impl] = call
                t = _cpu_time(fns, repeat)
                mem = {impl: _measure_memory(impl, causal, L, m, threads) if memory else None for impl in impls}
                row = {"device": "cpu", "causal": causal, "L": L, "m": m, "pass": "forward",
                       "ms": {i: 1e3 * t[i] for i in impls}, "peak_mb": mem}
                rows.append(row)
                print("  " + _line(row), flush=True)
    return rows


# ---------------------------------------------------------------------------
# CUDA


def _cuda_inputs(L, dev):
    """q, k, v (bf16, 0.5 N(0, 1)) and a fixed cotangent of the issue-20 shape, seeded."""
    import torch

    gen = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (0.5 * torch.randn(*CUDA_SHAPE, L, D_HEAD, generator=gen, device=dev, dtype=torch.bfloat16)
               for _ in range(3))
    cot = torch.randn(*CUDA_SHAPE, L, D_HEAD, generator=gen, device=dev, dtype=torch.bfloat16)
    return q, k, v, cot


def _cuda_step(fn, q, k, v, cot):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]

    def step():
        out = fn(*leaves)
        out.backward(cot.to(out.dtype))
        for t in leaves:
            t.grad = None
    return step


def _cuda_time(step, repeat, warmup=3):
    """(first call's seconds, the minimum over ``repeat`` timed calls in ms, peak MB of one call, the minimum
    host time of a call in ms: until the call returns, before the synchronisation (the CPU's own work,
    launches queued; about the whole time when the host is the limit), the median time in ms).  ``warmup``
    untimed calls first, the first of them timed as the first call (a compile, for a compiled module): with a
    single warm-up call and 3 timed ones an H100 run timed the default causal step at 2.76 ms with 2.20 ms of
    host time, where --host-profile's 3 warm-up calls and 20 timed ones gave 2.24 ms with 1.07 (the early
    calls' host work: the caching allocator's first segments, lazily loaded CUDA modules)."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for _ in range(warmup - 1):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    times, queued = [], []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        queued.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return (first, 1e3 * min(times), (torch.cuda.max_memory_allocated() - base) / 2**20, 1e3 * min(queued),
            1e3 * sorted(times)[len(times) // 2])


def cuda_rows(seq_lens, repeat, cap_fast):
    import torch

    dev = "cuda"
    rows = []
    for causal in (True, False):
        for L in seq_lens:
            q, k, v, cot = _cuda_inputs(L, dev)
            ms, mem = {}, {}
            for impl in _impls(causal, L, cap_fast):
                fn = _build(impl, causal, 128, dev, torch)
                try:
                    _, ms[impl], mem[impl], _, _ = _cuda_time(_cuda_step(fn, q, k, v, cot), repeat)
                except torch.cuda.OutOfMemoryError:
                    ms[impl], mem[impl] = None, "OOM"
                    torch.cuda.empty_cache()
                del fn
            row = {"device": torch.cuda.get_device_name(), "causal": causal, "L": L, "m": 128,
                   "pass": "forward+backward, bf16", "ms": ms, "peak_mb": mem}
            rows.append(row)
            print("  " + _line(row), flush=True)
    return rows


def _variant_row(name, chunk, comp, kw, plain, q, k, v, cot, repeat, dev):
    """One form of :func:`cuda_causal_variants` timed (SDPA, or PRFAttention with ``_causal``'s keywords
    ``kw``, compiled or not)."""
    import functools

    import torch

    import montecarlo.nn as mnn

    if name == "sdpa":
        fn = _build("sdpa", True, 128, dev, torch)
    else:
        mnn._causal = functools.partial(plain, **kw)
        fn = mnn.PRFAttention(D_HEAD, 128, "simplex", causal=True, seed=0, device=dev, chunk=chunk)
        if comp == "graphed":  # the eager module's kernels captured as CUDA graphs (forward and backward)
            fn = torch.cuda.make_graphed_callables(fn, tuple(t.detach().requires_grad_() for t in (q, k, v)))
        elif comp:
            torch._dynamo.reset()
            fn = torch.compile(fn, dynamic=False, **({"mode": comp} if isinstance(comp, str) else {}))
    first, ms, mb, host, med = _cuda_time(_cuda_step(fn, q, k, v, cot), repeat)
    return {"device": torch.cuda.get_device_name(), "L": q.shape[-2], "form": name, "ms": ms, "peak_mb": mb,
            "first_s": first, "host_ms": host, "ms_median": med}


def _variant_forms():
    """The forms of :func:`cuda_causal_variants`: (name, chunk, compiled (False, True, a torch.compile mode,
    or "graphed": torch.cuda.make_graphed_callables of the eager module), keywords of ``_causal`` with the
    settings "kernel" (of montecarlo.nn._fused) and "nn" (of montecarlo.nn), "float32" inputs and "first_only" (at
    the first length only))."""
    return [("sdpa", None, False, {}), ("fused_c256", 256, False, {"fused": True}),
            ("fused_c256_tile", 256, False, {"fused": True, "kernel": {"GAP": None}}),
            ("fused_c256_torch_scans", 256, False, {"fused": True, "kernel": {"SCAN_KERNELS": False}}),
            ("fused_c256_torch_ratio", 256, False,
             {"fused": True, "first_only": True, "kernel": {"RATIO_KERNELS_ON": False}}),
            ("fused_c256_bf16", 256, False, {"fused": True, "kernel": {"PRECISION": "bf16"}}),
            ("fused_c256_torch_features", 256, False,
             {"fused": True, "nn": {"_fused_features_apply": lambda x, w: False}}),
            ("fused_c256_ieee_features", 256, False,
             {"fused": True, "first_only": True, "kernel": {"FEATURE_PRECISION": "ieee"}}),
            ("fused_c256_float32", 256, False, {"fused": True, "float32": True, "first_only": True}),
            ("fused_c256_float32_fast32", 256, False,
             {"fused": True, "float32": True, "first_only": True, "kernel": {"FAST_FEATURE_BLOCK": 32}}),
            ("fused_c128", 128, False, {"fused": True}),
            ("graphed_fused_c128", 128, "graphed", {"fused": True}),  # (early: before the compiled forms' budget)
            ("fused_c64", 64, False, {"fused": True, "first_only": True}),
            ("fused_c512", 512, False, {"fused": True}),
            ("fused_c128_bf16", 128, False, {"fused": True, "kernel": {"PRECISION": "bf16"}}),
            ("fused_c256_jit", 256, False, {"fused": True, "kernel": {"LAUNCH_CACHE": False}}),
            ("fused_c128_jit", 128, False, {"fused": True, "kernel": {"LAUNCH_CACHE": False}}),
            ("fused_c128_ieee_features", 128, False,
             {"fused": True, "first_only": True, "kernel": {"FEATURE_PRECISION": "ieee"}}),
            ("fused_c128_features64", 128, False,
             {"fused": True, "first_only": True, "kernel": {"FEATURE_KERNEL_BLOCK": 64}}),
            ("fused_c128_features_tf32x3_w8", 128, False,
             {"fused": True, "first_only": True, "kernel": {"FEATURE_PRECISION": "tf32x3", "FEATURE_NUM_WARPS": 8}}),
            ("compiled_fused_c256", 256, True, {"fused": True}),
            ("compiled_fused_c128", 128, True, {"fused": True}),
            ("cudagraphs_fused_c256", 256, "reduce-overhead", {"fused": True, "first_only": True}),
            ("cudagraphs_fused_c128", 128, "reduce-overhead", {"fused": True, "first_only": True})]


def cuda_causal_variants(seq_lens, repeat, budget_s, device="cuda", names=None):
    """Causal PRFAttention on CUDA in several forms against SDPA (the issue-20 setting): eager with the
    within-chunk part in the fused Triton kernels (the default where Triton is importable; TF32 products for
    these bf16 inputs; most chunks on the fast path) at chunk 256, 128 and 512 (and 64 at the first length: half
    the within-chunk work of 128, twice the chunks), at 256 with every chunk on the
    tile path (``GAP = None``), with the scans over the chunks (offsets, prefix states and their adjoint) by
    torch operations instead of their kernels (``SCAN_KERNELS = False``: the batched product while N <= d_v
    + 1, else the log-depth scan), at the first length with the ratio by torch operations instead of its
    kernels (``RATIO_KERNELS_ON = False``), with products of bfloat16 operands instead of TF32 (``PRECISION =
    "bf16"``, opt-in; also at chunk 128), with the log-features by torch operations instead of their kernel
    (``_fused_features_apply`` off), at the first length with IEEE products in the features' kernel instead of
    "tf32x3" (``FEATURE_PRECISION = "ieee"``), with float32 inputs at the first length (IEEE products: the fast
    path's feature block 64, which spills, and 32), and ``torch.compile`` (inductor, static shapes) with the
    kernels as custom operators at chunk 256 and 128 (and, at the first length, with CUDA graphs:
    ``mode="reduce-overhead"``, no launch overhead left), and the eager module at chunk 128 captured as CUDA
    graphs by ``torch.cuda.make_graphed_callables`` (its kernels and torch operators replayed, no host work
    but the inputs' and gradients' copies); compiled forms are skipped once ``budget_s`` seconds
    have passed; and at chunk 256 and 128 with every launch through Triton's JIT entry (``LAUNCH_CACHE =
    False``; by default the launches after the first go through the compiled kernels' runners), at 128 with
    IEEE products in the features' kernel, with its feature block 64 (``FEATURE_KERNEL_BLOCK``) and with its
    configuration before the night of 2026-11-27 ("tf32x3" products on 8 warps; first length).  ``names``: only
    the forms of these names (and SDPA).  (Two other fast-path shapes, features 32 and tile 32 on 4 warps,
    took 6.5 ms against 5.4 at L = 4096 in run 4 of benchmarks/README and are no longer timed.)  Prints the
    top CUDA kernels of the eager default at the first L (30 rows: the kernels and the torch work around
    them)."""
    import torch

    import montecarlo.nn as mnn

    dev, t_start, rows = device, time.perf_counter(), []
    plain = mnn._causal
    for L in seq_lens:
        q, k, v, cot = _cuda_inputs(L, dev)
        forms = [f for f in _variant_forms() if names is None or f[0] in names or f[0] == "sdpa"]
        if not mnn._triton_available():
            forms = [f for f in forms if f[3].get("fused") is not True]
        for name, chunk, comp, kw in forms:
            if comp and comp != "graphed" and time.perf_counter() - t_start > budget_s:
                print(f"  L={L} {name}: skipped (budget)", flush=True)
                continue
            if kw.get("first_only") and L != seq_lens[0]:  # (forms timed at the first length only)
                continue
            kw = dict(kw)
            kw.pop("first_only", None)
            settings = kw.pop("kernel", {})  # module settings of montecarlo.nn._fused for this form, restored after
            nn_settings = kw.pop("nn", {})  # and of montecarlo.nn
            args = [t.float() for t in (q, k, v, cot)] if kw.pop("float32", False) else [q, k, v, cot]
            try:
                with contextlib.ExitStack() as stack:
                    if settings:
                        import montecarlo.nn._fused

                        stack.enter_context(mock.patch.multiple(montecarlo.nn._fused, **settings))
                    if nn_settings:
                        stack.enter_context(mock.patch.multiple(mnn, **nn_settings))
                    row = _variant_row(name, chunk, comp, kw, plain, *args, repeat, dev)
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                row = {"device": torch.cuda.get_device_name(), "L": L, "form": name, "ms": None, "peak_mb": "OOM"}
            except Exception as exc:  # a compile failure is a result of this benchmark, not its end
                row = {"device": torch.cuda.get_device_name(), "L": L, "form": name, "ms": None,
                       "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            finally:
                mnn._causal = plain
            rows.append(row)
            print(f"  L={L} {name}: " + (f"{row['ms']:.2f} ms (median {row['ms_median']:.2f}, host "
                                         f"{row['host_ms']:.2f}), {row['peak_mb']:.0f} MB, "
                                         f"first call {row['first_s']:.1f} s" if row.get("ms") is not None else
                                         str(row.get("error", row.get("peak_mb")))), flush=True)
        if L == seq_lens[0]:
            fn = mnn.PRFAttention(D_HEAD, 128, "simplex", causal=True, seed=0, device=dev)
            step = _cuda_step(fn, q, k, v, cot)
            step()
            act = torch.profiler.ProfilerActivity.CUDA if dev == "cuda" else torch.profiler.ProfilerActivity.CPU
            with torch.profiler.profile(activities=[act]) as prof:
                step()
                torch.cuda.synchronize()
            print(prof.key_averages().table(sort_by=f"{dev}_time_total", row_limit=30), flush=True)
    return rows


def variants_summary(rows, targets=((4096, 3.0), (65536, 1.0)), default=None):
    """Lines that rank the rows of :func:`cuda_causal_variants` by time at each length, as ratios to SDPA's row
    of the same length, and say for the issue-20 targets (PRF / SDPA at most 3 at L = 4096, under 1 at 65536)
    whether the eager default (the form ``default``; None: ``fused_c`` and the module's CUDA default chunk,
    ``montecarlo.nn.DEFAULT_CHUNK["cuda"]``) and the fastest form meet them.  Rows without a time (OOM,
    errors, skipped) are listed as such; a length without an SDPA row gets no ratios."""
    if default is None:
        from montecarlo.nn import DEFAULT_CHUNK

        default = f"fused_c{DEFAULT_CHUNK['cuda']}"
    lines = []
    for L in sorted({r["L"] for r in rows}):
        at = [r for r in rows if r["L"] == L]
        sdpa = next((r["ms"] for r in at if r["form"] == "sdpa" and r.get("ms")), None)
        sdpa_med = next((r.get("ms_median") for r in at if r["form"] == "sdpa" and r.get("ms")), None)
        timed = sorted((r for r in at if r["form"] != "sdpa" and r.get("ms") is not None), key=lambda r: r["ms"])
        lines.append(f"L={L}: SDPA {sdpa:.2f} ms" if sdpa else f"L={L}: no SDPA time")
        for r in timed:
            ratio = f" = {_ratio(r['ms'], sdpa):.2f} x SDPA" if sdpa else ""
            if sdpa_med and r.get("ms_median"):
                ratio += f" (medians {r['ms_median']:.2f} / {sdpa_med:.2f} = {r['ms_median'] / sdpa_med:.2f} x)"
            lines.append(f"  {r['form']}: {r['ms']:.2f} ms{ratio} (host {r.get('host_ms') or 0:.2f} ms)")
        for r in at:
            if r["form"] != "sdpa" and r.get("ms") is None:
                lines.append(f"  {r['form']}: {r.get('error', r.get('peak_mb', 'no time'))}")
        bound = dict(targets).get(L)
        if bound is not None and sdpa and timed:
            own = next((r for r in timed if r["form"] == default), None)
            for label, r in ((f"eager default {default}", own), (f"fastest {timed[0]['form']}", timed[0])):
                if r is not None:
                    x = _ratio(r["ms"], sdpa)
                    ok = x <= bound if bound > 1 else x < bound
                    lines.append(f"  target PRF / SDPA {'<=' if bound > 1 else '<'} {bound:g} at L = {L}: {label} "
                                 f"{x:.2f}: {'met' if ok else 'not met'}")
    return lines


def host_overhead(repeat, L=64, d=16, m=16):
    """The CPU work that eager mode puts on the host for one causal training step (forward + backward, bf16
    inputs) of the fused CUDA path, without a GPU: the module on tiny CPU tensors, the fused path switched
    on for the CPU, every Triton launch replaced by a no-op that goes through the launch cache's path as on a
    GPU (its key per launch, then a stand-in runner), so that what is timed is Python, the torch operators'
    dispatch and autograd (not Triton's launcher nor CUDA's own launch cost: about 9 us per launch measured on
    an H100's host, ``--launch``).  Against
    SDPA's causal forward + backward on the same tensors, interleaved.  Also counts per step the kernel
    launches, the custom-operator calls (none in eager mode) and the other torch operators (views
    included).  Returns a dict (times in ms: minimum and median over ``repeat`` steps)."""
    import collections

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import montecarlo.nn._fused as fused
    import montecarlo.nn as mnn
    from benchmarks._timing import interleaved

    launches = collections.Counter()

    class NoLaunch:  # a compiled kernel's stand-in: its first launch per specialisation returns a runner
        def __init__(self, name):
            self.name = name
            self.arg_names = getattr(fused, name).arg_names

        def __getitem__(self, grid):
            def launch(*a, **kw):
                launches.update([self.name])
                return runner
            return launch

    class Runner:
        def __getitem__(self, grid):
            return lambda *a: launches.update(["runner"])

    runner = Runner()
    kernels = {name: NoLaunch(name) for name in dir(fused) if name.endswith("_kernel")}
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, L, d, generator=gen).bfloat16().requires_grad_() for _ in range(3))
    cot = torch.randn(1, L, d, generator=gen).bfloat16()
    F = torch.nn.functional
    # (the launch cache's path as on a GPU: its key per launch, then the runner; torch's CPU build has no
    # current CUDA device to put in the key)
    with mock.patch.multiple(fused, **kernels, _is_compiled=lambda kernel: isinstance(kernel, NoLaunch)), \
            mock.patch.object(torch.cuda, "current_device", lambda: 0), \
            mock.patch.object(mnn, "_FUSED_DEVICE", "cpu"), mock.patch.dict(fused._COMPILED, clear=True):
        att = mnn.PRFAttention(d, m, "simplex", causal=True, seed=0, chunk=32)  # (two chunks)

        def prf():
            att(q, k, v).backward(cot)

        def sdpa():
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(cot)

        times = interleaved({"prf": prf, "sdpa": sdpa}, repeat)
        ops = collections.Counter()

        class Count(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                ops["custom" if func.namespace == "simplex_rf" else "aten"] += 1
                return func(*args, **(kwargs or {}))

        launches.clear()
        with Count():
            prf()
    ms = {k: (1e3 * min(t), 1e3 * sorted(t)[len(t) // 2]) for k, t in times.items()}
    return {"prf_ms": ms["prf"], "sdpa_ms": ms["sdpa"], "ratio_min": ms["prf"][0] / ms["sdpa"][0],
            "launches": sum(launches.values()), "custom_ops": ops["custom"], "aten_ops": ops["aten"]}


def launch_overhead(repeat=300):
    """The host's time per kernel launch on CUDA (us, the minimum over 5 rounds of ``repeat`` launches queued
    without synchronisation, tiny tensors): one of the fused kernels (the offsets over the chunks) through
    Triton's JIT entry ``kernel[grid](...)`` (binder, cache key, globals check, then the launcher), the same
    compiled kernel through its ``CompiledKernel`` runner (the launcher alone; an error string where this
    Triton's runner takes other arguments), and a torch elementwise operator (``add_``).  What the JIT entry
    costs on top of the launcher, times the 20 launches of a training step, is what a cache of compiled kernels
    would save."""
    import torch

    from montecarlo.nn import _fused

    o = torch.randn(1, 4, 32, device="cuda")
    bef, off = torch.empty_like(o), torch.empty_like(o)
    kernel, grid, meta = _fused._chunk_offsets_kernel, (1, 1), {"F": 32, "num_warps": 4}
    compiled = kernel[grid](o, bef, off, 4, 32, **meta)
    forms = {"triton_jit": lambda: kernel[grid](o, bef, off, 4, 32, **meta),
             "triton_compiled": lambda: compiled[(1, 1, 1)](o, bef, off, 4, 32, 32),
             "torch_add": lambda: o.add_(0.0)}
    out = {}
    for name, fn in forms.items():
        try:
            fn()
            torch.cuda.synchronize()
            best = math.inf
            for _ in range(5):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(repeat):
                    fn()
                best = min(best, (time.perf_counter() - t0) / repeat)
                torch.cuda.synchronize()
            out[name] = 1e6 * best
        except Exception as exc:  # (the runner's arguments differ between Triton versions)
            out[name] = f"{type(exc).__name__}: {str(exc)[:160]}"
    return out


FEATURE_SHAPES = ((64, 32, 8), (128, 32, 8), (64, 64, 4), (128, 64, 8), (32, 32, 4), (64, 32, 4), (32, 64, 4))


def cuda_feature_configs(L=4096, repeat=50, device="cuda"):
    """The features' kernels alone on CUDA (the issue-20 shape: x (32, L, 64) bf16, rows (128, 64)), each
    launch shape of :data:`FEATURE_SHAPES` (rows per program, feature block, warps) with the forward's
    products "tf32x3" and "tf32x2", and the gradient's kernel (IEEE products) at each shape: microseconds per
    call by CUDA events (the minimum of 3 rounds of ``repeat`` calls queued back to back).  Rows (kernel,
    precision, shape, us)."""
    import torch

    from montecarlo.nn import _fused

    gen = torch.Generator(device=device).manual_seed(0)
    x = (0.5 * torch.randn(32, L, D_HEAD, generator=gen, device=device)).to(torch.bfloat16)
    w = torch.randn(128, D_HEAD, generator=gen, device=device)
    b = torch.randn(128, generator=gen, device=device)
    G = torch.randn(32, L, 128, generator=gen, device=device)
    s = D_HEAD ** -0.5

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        best = math.inf
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(repeat):
                fn()
            end.record()
            torch.cuda.synchronize()
            best = min(best, 1e3 * start.elapsed_time(end) / repeat)
        return best

    rows = []
    for T, F, W in FEATURE_SHAPES:
        for prec in ("tf32x3", "tf32x2"):
            with mock.patch.multiple(_fused, FEATURE_PRECISION=prec, FEATURE_TILE=T, FEATURE_KERNEL_BLOCK=F,
                                     FEATURE_NUM_WARPS=W):
                try:
                    us = timed(lambda: _fused._linear_features_impl(x, w, b, s))
                except Exception as exc:  # (a shape that does not compile is a result)
                    us = f"{type(exc).__name__}: {str(exc)[:120]}"
            rows.append(("forward", prec, (T, F, W), us))
        with mock.patch.multiple(_fused, FEATURE_GRAD_TILE=T, FEATURE_GRAD_BLOCK=F, FEATURE_GRAD_NUM_WARPS=W):
            try:
                us = timed(lambda: _fused._linear_features_backward_impl(x, w, G, s))
            except Exception as exc:
                us = f"{type(exc).__name__}: {str(exc)[:120]}"
        rows.append(("gradient", "ieee", (T, F, W), us))
    for row in rows:
        print(f"  {row[0]} {row[1]} tile,block,warps {row[2]}: "
              + (f"{row[3]:.1f} us" if isinstance(row[3], float) else row[3]), flush=True)
    return rows


def cuda_host_profile(L=4096, repeat=20, device="cuda"):
    """Where the host's time of one eager causal training step of the default CUDA path goes (the issue-20
    shape at length ``L``): the host's time of the forward call and of the backward call, each with the device
    idle at its start (synchronised before) and queued back to back, against their wall times; the forward
    under cProfile (the main thread's Python; the backward runs on autograd's device thread, which cProfile does
    not see); and torch.profiler's CPU table of three steps (every thread: the torch operators, the driver
    calls, autograd's nodes).  Printed; returns the timings (ms, minimum and median)."""
    import cProfile
    import io
    import pstats

    import torch

    import montecarlo.nn as mnn

    q, k, v, cot = _cuda_inputs(L, device)
    fn = mnn.PRFAttention(D_HEAD, 128, "simplex", causal=True, seed=0, device=device)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    sync = torch.cuda.synchronize
    for _ in range(3):
        fn(*leaves).backward(cot)
    sync()
    def step(split):
        """Times (t0 .. t4) of one step from an idle device: forward called, returned, (synchronised where
        ``split``), backward returned, synchronised."""
        for x in leaves:
            x.grad = None
        sync()
        t0 = time.perf_counter()
        out = fn(*leaves)
        t1 = time.perf_counter()
        if split:
            sync()
        t2 = time.perf_counter()
        out.backward(cot)
        t3 = time.perf_counter()
        sync()
        return t0, t1, t2, t3, time.perf_counter()

    t = {key: [] for key in ("fwd_host", "fwd_wall", "bwd_host", "bwd_wall", "step_fwd_host", "step_bwd_host",
                             "step_wall")}
    for _ in range(repeat):
        t0, t1, t2, t3, t4 = step(True)
        for key, val in (("fwd_host", t1 - t0), ("fwd_wall", t2 - t0), ("bwd_host", t3 - t2), ("bwd_wall", t4 - t2)):
            t[key].append(val)
        t0, t1, t2, t3, t4 = step(False)
        for key, val in (("step_fwd_host", t1 - t0), ("step_bwd_host", t3 - t2), ("step_wall", t4 - t0)):
            t[key].append(val)
    res = {key: (1e3 * min(val), 1e3 * sorted(val)[len(val) // 2]) for key, val in t.items()}
    print(f"L={L}, chunk {fn.chunk}: ms (minimum, median) over {repeat}: "
          + ", ".join(f"{key} {a:.3f} ({b:.3f})" for key, (a, b) in res.items()), flush=True)
    prof = cProfile.Profile()
    sync()
    prof.enable()
    for _ in range(repeat):
        out = fn(*leaves)
    prof.disable()
    del out
    sync()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    print(f"cProfile of {repeat} forward calls (queued, not synchronised), by own time:", flush=True)
    print("\n".join(buf.getvalue().splitlines()[:60]), flush=True)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as tp:
        for _ in range(3):
            for x in leaves:
                x.grad = None
            fn(*leaves).backward(cot)
        sync()
    print(tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=40), flush=True)
    return res


# ---------------------------------------------------------------------------
# output


def decode_rows(positions, m_values, repeat, device="cpu", dtype="float32", shape=CPU_SHAPE):
    """Tokens per second of generation at each position P: causal PRFAttention's :meth:`step` (a state after a
    prompt of P tokens, from :meth:`prefill`) against SDPA reading a key-value cache of P + 1 positions (the new
    key and value written into a preallocated cache, then one query over the cache), one token of every
    (batch, head) per call; wall time with synchronisation (CUDA), the minimum over interleaved repeats."""
    import torch

    from montecarlo.nn import PRFAttention

    dt = getattr(torch, dtype)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    rows = []
    g = torch.Generator(device=device).manual_seed(0)
    for P in positions:
        q = torch.randn(*shape, P + 1, D_HEAD, generator=g, device=device, dtype=dt)
        K, V = torch.randn_like(q), torch.randn_like(q)
        qt, kt, vt = q[..., -1:, :].clone(), K[..., -1:, :].clone(), V[..., -1:, :].clone()

        def sdpa():
            K[..., P:P + 1, :] = kt  # (the cache write of the new position)
            V[..., P:P + 1, :] = vt
            torch.nn.functional.scaled_dot_product_attention(qt, K, V)
            sync()

        fns = {"sdpa": sdpa}
        for m in m_values:
            att = PRFAttention(D_HEAD, m, "simplex", causal=True, seed=0, device=device).eval()
            with torch.no_grad(), mock.patch("montecarlo.nn.FUSED", False):  # (the prompt by the torch levels:
                _, state = att.prefill(q[..., :P, :], K[..., :P, :], V[..., :P, :])  # no kernel compiled here)

            def step(att=att, state=state):
                with torch.no_grad():
                    att.step(qt, kt, vt, state)
                sync()

            fns[f"prf_m{m}"] = step
        times = {}
        for _ in range(repeat):  # interleaved: the load of a shared machine changes every form alike
            for name, fn in fns.items():
                fn()
                t0 = time.perf_counter()
                fn()
                times.setdefault(name, []).append(time.perf_counter() - t0)
        tokens = math.prod(shape)
        row = {"position": P, "shape": list(shape), "device": device, "dtype": dtype,
               "ms": {k: 1e3 * min(v) for k, v in times.items()},
               "tokens_per_s": {k: tokens / min(v) for k, v in times.items()}}
        rows.append(row)
        print(f"P = {P:6d}: " + ", ".join(f"{k} {row['ms'][k]:.3f} ms ({row['tokens_per_s'][k]:.0f} tok/s)"
                                          for k in fns), flush=True)
        del q, K, V
    return rows


def backward_rows(seq_lens, m, repeat, threads, sdpa_max=16384, shape=CPU_SHAPE):
    """Causal training on the CPU: CPU time of PRFAttention's forward with autograd, its backward (a fixed
    cotangent), the forward under no_grad, and SDPA's causal forward + backward up to ``sdpa_max``; one torch
    thread by default, the minimum over ``repeat`` interleaved repeats."""
    import torch

    from montecarlo.nn import PRFAttention

    torch.set_num_threads(threads)
    rows = []
    for L in seq_lens:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(*shape, L, D_HEAD, generator=g).requires_grad_() for _ in range(3))
        cot = torch.randn(*shape, L, D_HEAD, generator=g)
        att = PRFAttention(D_HEAD, m, "simplex", causal=True, seed=0)
        t = {"forward": [], "backward": [], "no_grad": [], "sdpa": []}
        for _ in range(repeat):
            t0 = time.process_time()
            out = att(q, k, v)
            t1 = time.process_time()
            out.backward(cot)
            t2 = time.process_time()
            del out
            with torch.no_grad():
                att(q, k, v)
            t3 = time.process_time()
            t["forward"].append(t1 - t0)
            t["backward"].append(t2 - t1)
            t["no_grad"].append(t3 - t2)
            if L <= sdpa_max:
                t4 = time.process_time()
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).backward(cot)
                t["sdpa"].append(time.process_time() - t4)
            q.grad = k.grad = v.grad = None
        row = {"L": L, "m": m, "threads": threads, **{f"{k}_s": min(x) for k, x in t.items() if x}}
        row["backward_over_forward"] = row["backward_s"] / row["forward_s"]
        if "sdpa_s" in row:
            row["prf_over_sdpa"] = (row["forward_s"] + row["backward_s"]) / row["sdpa_s"]
        rows.append(row)
        print(f"L = {L:6d}: forward {row['forward_s']:.3f} s, backward {row['backward_s']:.3f} s "
              f"({row['backward_over_forward']:.2f} x), no-grad forward {row['no_grad_s']:.3f} s"
              + (f", SDPA forward + backward {row['sdpa_s']:.3f} s ({row['prf_over_sdpa']:.2f} x)" if "sdpa_s" in row
                 else ""), flush=True)
        del q, k, v, cot
    return rows


def _ratio(a, b):
    return None if a is None or b is None or isinstance(a, str) or isinstance(b, str) or b == 0 else a / b


def _line(r):
    parts = [f"{'causal' if r['causal'] else 'bidir '} L={r['L']:6d} m={r['m']:3d}:"]
    for impl, t in r["ms"].items():
        mb = r["peak_mb"].get(impl)
        parts.append(f"{impl} {t:9.1f} ms" if t is not None else f"{impl} OOM")
        if isinstance(mb, float):
            parts[-1] += f" {mb:7.0f} MB"
    return " ".join(parts)


def table(rows):
    """One markdown table: times, peak memory and the ratios PRF / FastAttention and PRF / SDPA."""
    lines = ["device | pass | mode | L | m | PRF ms | FastAttention ms | SDPA ms | PRF / Fast (time) | "
             "PRF / SDPA (time) | PRF MB | Fast MB | SDPA MB | PRF / Fast (memory)",
             "--- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | ---"]

    def f(x, fmt):
        return "-" if x is None else (x if isinstance(x, str) else format(x, fmt))

    for r in rows:
        t, mb = r["ms"], r["peak_mb"]
        lines.append(" | ".join([r["device"], r["pass"], "causal" if r["causal"] else "bidirectional", str(r["L"]),
                                 str(r["m"]), f(t.get("prf"), ".1f"), f(t.get("fast"), ".1f"), f(t.get("sdpa"), ".1f"),
                                 f(_ratio(t.get("prf"), t.get("fast")), ".2f"),
                                 f(_ratio(t.get("prf"), t.get("sdpa")), ".2f"),
                                 f(mb.get("prf"), ".0f"), f(mb.get("fast"), ".0f"), f(mb.get("sdpa"), ".0f"),
                                 f(_ratio(mb.get("prf"), mb.get("fast")), ".2f")]))
    return "\n".join(lines)


def _parser():
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer lengths and repeats")
    p.add_argument("--cuda", action="store_true", help="the CUDA benchmark only (bf16 forward + backward)")
    p.add_argument("--variants", action="store_true",
                   help="with --cuda: causal PRFAttention in several forms (scan/loop, chunk, torch.compile) "
                        "against SDPA instead of the standard table")
    p.add_argument("--lengths", type=int, nargs="+", default=None, metavar="L",
                   help="with --variants: the sequence lengths (default 4096 65536 16384)")
    p.add_argument("--forms", nargs="+", default=None, metavar="NAME",
                   help="with --variants: only these forms (and SDPA); default: all")
    p.add_argument("--budget", type=float, default=300.0, metavar="S",
                   help="with --variants: no compiled form is started after this many seconds")
    p.add_argument("--host", action="store_true",
                   help="the host's work per eager causal training step of the fused CUDA path, measured on the "
                        "CPU with the kernels' launches as no-ops, against SDPA (no GPU needed)")
    p.add_argument("--launch", action="store_true",
                   help="the host's time per kernel launch on CUDA: a fused kernel through Triton's JIT entry and "
                        "its compiled runner, and a torch operator (needs CUDA)")
    p.add_argument("--host-profile", action="store_true",
                   help="where the host's time of an eager causal training step on CUDA goes (forward and backward "
                        "host and wall times, cProfile, torch.profiler's CPU table; needs CUDA)")
    p.add_argument("--feature-configs", action="store_true",
                   help="the features' kernels alone on CUDA at each launch shape and product (needs CUDA)")
    p.add_argument("--decode", action="store_true",
                   help="generation: tokens per second of causal PRFAttention.step (m = 128, 256) against SDPA "
                        "with a key-value cache at positions 1k, 16k, 64k (--lengths: others; with --cuda on the "
                        "GPU, bfloat16)")
    p.add_argument("--backward", action="store_true",
                   help="causal training on the CPU: forward with autograd and backward of PRFAttention (m = 256) "
                        "against its no-grad forward and SDPA's causal forward + backward, L = 1k ... 64k "
                        "(--lengths: others)")
    p.add_argument("--threads", type=int, default=1, metavar="N", help="torch CPU threads")
    p.add_argument("--no-memory", action="store_true", help="skip the CPU memory subprocesses")
    p.add_argument("--json", nargs="?", const=str(RESULTS_DIR / "bench_attention.json"), default=None, metavar="PATH",
                   help="also write the rows as JSON (default path: %(const)s)")
    p.add_argument("--_peak", nargs=5, help=argparse.SUPPRESS)
    return p


def main(argv=None):
    args = _parser().parse_args(argv)
    if args._peak:
        impl, causal, L, m, threads = args._peak
        print(peak_forward_mb(impl, causal == "1", int(L), int(m), int(threads)))
        return 0
    try:
        import torch
    except ImportError:
        print(f"{PROG}: error: needs torch", file=sys.stderr)
        return 2
    if args.threads < 1:
        print(f"{PROG}: error: --threads must be >= 1", file=sys.stderr)
        return 2
    try:
        args.json = check_json_path(args.json)  # (before any timing)
    except (TypeError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    known = [f[0] for f in _variant_forms()]
    if args.forms and not set(args.forms) <= set(known):
        print(f"{PROG}: error: --forms: unknown {sorted(set(args.forms) - set(known))}; one of {known}",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    if args.host:
        torch.set_num_threads(args.threads)
        res = host_overhead(50 if args.quick else 300)
        print(f"host work per causal training step (L = 64, d = m = 16, two chunks; kernels not launched): "
              f"PRFAttention {res['prf_ms'][0]:.3f} ms (median {res['prf_ms'][1]:.3f}), SDPA {res['sdpa_ms'][0]:.3f} "
              f"ms (median {res['sdpa_ms'][1]:.3f}): {res['ratio_min']:.1f} x; per step {res['launches']} kernel "
              f"launches, {res['custom_ops']} custom-operator calls, {res['aten_ops']} other torch operators")
        if args.json:
            _write_json(args.json, {"host": res, "torch": torch.__version__})
        return 0
    if args.launch:
        if not torch.cuda.is_available():
            print(f"{PROG}: error: --launch needs CUDA", file=sys.stderr)
            return 2
        res = launch_overhead(50 if args.quick else 300)
        print("host time per launch (us): " + ", ".join(
            f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items()), flush=True)
        if args.json:
            _write_json(args.json, {"launch": res, "torch": torch.__version__})
        return 0
    if args.feature_configs:
        if not torch.cuda.is_available():
            print(f"{PROG}: error: --feature-configs needs CUDA", file=sys.stderr)
            return 2
        rows = cuda_feature_configs(args.lengths[0] if args.lengths else 4096)
        if args.json:
            _write_json(args.json, {"feature_configs": rows, "torch": torch.__version__})
        return 0
    if args.host_profile:
        if not torch.cuda.is_available():
            print(f"{PROG}: error: --host-profile needs CUDA", file=sys.stderr)
            return 2
        res = cuda_host_profile(args.lengths[0] if args.lengths else 4096, 5 if args.quick else 20)
        if args.json:
            _write_json(args.json, {"host_profile": res, "torch": torch.__version__})
        return 0
    if args.backward:
        print(f"causal training on the CPU: (batch, heads) = {CPU_SHAPE}, d = {D_HEAD}, m = 256, float32, "
              f"{args.threads} thread(s), CPU time, minimum over repeats", flush=True)
        rows = backward_rows(tuple(args.lengths or (1024, 2048, 4096, 8192, 16384, 32768, 65536)), 256,
                             1 if args.quick else 2, args.threads)
        if args.json:
            _write_json(args.json, {"backward": rows, "torch": torch.__version__})
        return 0
    if args.decode:
        if args.cuda and not torch.cuda.is_available():
            print(f"{PROG}: CUDA is not available here: the CUDA decoding benchmark is skipped", file=sys.stderr)
            return 0
        torch.set_num_threads(args.threads)
        device, dtype = ("cuda", "bfloat16") if args.cuda else ("cpu", "float32")
        shape = CUDA_SHAPE if args.cuda else CPU_SHAPE
        print(f"decoding on {device} ({dtype}): (batch, heads) = {shape}, d = {D_HEAD}, one token per (batch, head) "
              f"per call, {args.threads} thread(s), wall time, minimum over repeats", flush=True)
        rows = decode_rows(tuple(args.lengths or (1024, 16384, 65536)), (128, 256), 20 if args.quick else 50,
                           device, dtype, shape)
        if args.json:
            _write_json(args.json, {"decode": rows, "torch": torch.__version__,
                                    "cuda_device": torch.cuda.get_device_name() if args.cuda else None})
        return 0
    if args.cuda:
        if not torch.cuda.is_available():
            print(f"{PROG}: CUDA is not available here: the CUDA benchmark is skipped", file=sys.stderr)
            return 0
        seq_lens = (4096, 16384, 65536) if args.quick else (1024, 4096, 16384, 65536)
        if args.variants:
            rows = cuda_causal_variants(tuple(args.lengths or (4096, 65536, 16384)), 10 if args.quick else 20,
                                        args.budget, names=args.forms)
            print("\n".join(["", "Summary (fastest first):"] + variants_summary(rows)), flush=True)
            if args.json:
                _write_json(args.json, {"rows": rows, "torch": torch.__version__})
            return 0
        print(f"CUDA {torch.cuda.get_device_name()}: (batch, heads) = {CUDA_SHAPE}, d = {D_HEAD}, m = 128, "
              "bf16 forward + backward; minimum over repeats", flush=True)
        rows = cuda_rows(seq_lens, 10 if args.quick else 20, cap_fast=4096)
    else:
        seq_lens = (1024, 4096) if args.quick else (256, 1024, 4096, 16384)
        m_values = (64,) if args.quick else (64, 256)
        print(f"CPU: (batch, heads) = {CPU_SHAPE}, d = {D_HEAD}, float32 forward (no_grad), {args.threads} "
              "thread(s), CPU time, minimum over repeats", flush=True)
        rows = cpu_rows(seq_lens, m_values, 3 if args.quick else 5, args.threads, not args.no_memory,
                        cap_fast=4096 if args.quick else 16384)
    print()
    print(table(rows))
    meta = {"torch": torch.__version__, "python": platform.python_version(), "threads": args.threads,
            "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "seconds": time.perf_counter() - t0}
    print(f"\n{meta}")
    if args.json:
        _write_json(args.json, {"meta": meta, "rows": rows})
    return 0


def _write_json(path, obj):
    """The rows as strict JSON, atomically (:func:`benchmarks._timing.write_json`)."""
    write_json(path, obj)


if __name__ == "__main__":
    sys.exit(main())
