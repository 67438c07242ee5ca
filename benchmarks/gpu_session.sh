#!/usr/bin/env bash
# The GPU checks of issue 20 as one prepared run (about 5 minutes on an H100 with FORMS of 7 forms: 292 s on
# 2026-11-27, the CUDA tests 172 s of it, mostly compiling the kernels; at most 10; run from the repository
# root):
#   1. the CUDA tests of the attention module and of the fused kernels (their GPU half: compiled kernels
#      against the torch path, no host synchronisation in forward/backward) and of decoding token by token;
#   2. the standard CUDA table (PRFAttention, SDPA, FastAttention; causal and bidirectional; L = 4096, 16384,
#      65536);
#      (SKIP_TABLE=1 skips it);
#   3. the host's work per eager step on this machine's CPU with no-op launches (--host; seconds), and the
#      host's time per launch: Triton's JIT entry, the compiled kernel's runner, a torch operator (--launch);
#   3b. where the host's time of an eager step goes on the GPU machine (--host-profile: forward and backward
#      host and wall times, cProfile, torch.profiler's CPU table);
#   4. the causal variants against SDPA (bf16, forward + backward, batch x heads 32, m = 128): the fused
#      operator at three chunk lengths (and 64 at the first length), on the tile path only, with the scans
#      over the chunks by torch operations instead of their kernels (and the ratio, at the first length),
#      with products of bfloat16 operands instead of TF32 (PRECISION "bf16", opt-in), with IEEE products in
#      the features' kernel instead of 3xTF32 (first length),
#      with the torch feature maps instead of the features' kernel, with float32 inputs
#      (IEEE products: two feature blocks of the fast path), and under torch.compile, also with CUDA graphs
#      at the first length (compiled forms stop starting after --budget seconds), and the eager module
#      captured as CUDA graphs (torch.cuda.make_graphed_callables, chunk 128); each row also gives the
#      host's time per step (until the call returns, launches queued: about the whole time when the CPU is
#      the limit).
#   5. decoding token by token (issue 41 item 4): tokens per second of causal PRFAttention.step (m = 128, 256;
#      bf16, (batch, heads) = (4, 8), d = 64) from the state after a prompt of P tokens against SDPA reading a
#      key-value cache, at P = 1024, 16384, 65536 (about 20 s; writes decode.txt, decode.json).
# Writes device.txt, tests.txt, table.txt, table.json, variants.txt, variants.json, host.txt, host_profile.txt,
# decode.txt and decode.json
# under $OUT
# (default ./gpu_out); variants.txt ends with a summary: each length's forms fastest first as ratios to SDPA,
# and whether the eager default and the fastest form meet issue 20's targets.
# The lent machines have torch (with Triton) but not every pure-Python dependency: with the wheels of
# array-api-compat (and performer-pytorch with its dependencies, for the FastAttention rows) downloaded into
# an ignored .whl/ folder here, the device command was
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#       .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && bash benchmarks/gpu_session.sh
# with carry [".whl"] (pip download --no-deps -d .whl array-api-compat performer-pytorch local-attention
# axial-positional-embedding hyper-connections torch-einops-utils).
# FORMS="name ..." times only those variants (and SDPA), LENGTHS="L ..." other lengths.
# Each step has its own time limit, so that a hang in one still leaves the others' results.
set -uo pipefail
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0  # compiled kernels, also where the root conftest sees no /dev/nvidiactl
{
    ls /dev/nvidiactl
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} 2>&1 | tee "$OUT/device.txt"
timeout 230 python3 -m pytest -q -p no:cacheprovider --maxfail=10 -rfE tests/test_nn_fused.py tests/test_nn_module.py \
    -k cuda 2>&1 | tail -60 | tee "$OUT/tests.txt"  # (not -x: one failure must not hide the other tests)
[ -n "${SKIP_TABLE:-}" ] || timeout 80 python3 -m benchmarks.bench_attention --cuda --quick --json "$OUT/table.json" \
    2>&1 | tee "$OUT/table.txt"
timeout 30 python3 -m benchmarks.bench_attention --host --quick 2>&1 | tee "$OUT/host.txt"
timeout 20 python3 -m benchmarks.bench_attention --launch 2>&1 | tee -a "$OUT/host.txt"
timeout 40 python3 -m benchmarks.bench_attention --host-profile 2>&1 | tee "$OUT/host_profile.txt"
timeout 130 python3 -m benchmarks.bench_attention --cuda --variants --quick --lengths ${LENGTHS:-4096 65536} \
    --budget "${BUDGET:-120}" ${FORMS:+--forms $FORMS} --json "$OUT/variants.json" 2>&1 | tee "$OUT/variants.txt"
timeout 70 python3 -m benchmarks.bench_attention --decode --cuda --quick --json "$OUT/decode.json" 2>&1 \
    | tee "$OUT/decode.txt"
