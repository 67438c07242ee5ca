r"""PRF attention as a torch ``nn.Module``: :class:`PRFAttention` (the SimRFs-Performer of Sec. 5.4).

``from montecarlo.nn import PRFAttention``.  FAVOR+-style linear attention:
the softmax kernel :math:`e^{s\,q^\top k}` is estimated by positive random
features of any coupling (``coupling="simplex"`` is the SimRFs-Performer) and
any positive feature kind of :mod:`theory.feature_kinds` (``kind="prf"``,
``"hyperbolic"``, ``"oprf"`` where registered), bidirectional or causal, self-
or cross-attention, with key-padding masks.  The log-features come from the
kind's record (hook ``log_features``: one home of each formula, shared with the
numpy reference :func:`montecarlo.experiments.attention.prf_attention`).

Numerical stabilisation (no ``eps`` anywhere; every offset cancels exactly,
and the offsets are detached, so gradients are unchanged):

* bidirectional: per sequence and feature f a key offset
  :math:`o_f = \max_j \ell_f(k'_j)`, key masses :math:`z_f = \sum_j e^{\ell_f(k'_j) - o_f} \ge 1`,
  and per query row :math:`r_i = \max_f(\ell_f(q'_i) + o_f + \log z_f)`: no exponent
  exceeds 0 and every denominator is >= 1;
* causal: query i's offset is :math:`r_i = \max_f(\ell_f(q'_i) + c_{if})` with
  :math:`c_{if} = \max_{j \le i}\ell_f(k'_j)` (a running maximum: no future key
  sets an earlier query's scale), and every group of keys is summarised with
  the per-feature maximum **of keys that all lie in the query's past**:
  earlier chunks through a prefix state (a scan over chunks), the chunk itself
  through a dyadic decomposition (at level s, the second half of every block
  of 2s positions reads the first half), and the key at the query's own
  position directly.  Each exponent is then :math:`\le 0` and the denominator
  is >= 1 for every query that sees a key, **whatever the data**: there is no
  data-dependent fallback path, hence no host synchronisation.

Range of the inputs (:func:`input_range`; ``check_inputs=True`` refuses inputs beyond it with a
ValueError naming ``q`` or ``k``, and a ``scale`` beyond the compute dtype's range is refused at every
forward without a synchronisation).  The construction above is exact in exact arithmetic; in floating
point it needs the log-features, about :math:`-s\|x\|^2/2` for a query or key x, to be representable,
and the causal scan needs more:

* bidirectional attention is exact to rounding while every log-feature stays below a quarter of the
  largest number of the compute dtype (float32, also for bfloat16 and float16 inputs: 8.5e37, so
  :math:`s\|x\|^2` up to about 1.7e38, entries of about 5e18 at d = 8; float64: 4.5e307, entries of about
  1e153), and :math:`\|x\|^2` itself is finite; beyond, with the check off, every output of the sequence
  is NaN.  A kind parameter taken from the data (oprf's A) sums squared norms over the sequence, which
  overflows L times earlier (NaN outputs; the check names the input);
* causal attention: the sums of log-features and offsets round differently from their parts, so an
  exponent can exceed 0 by about half a unit in the last place of the log-features: exact to rounding
  while they stay below :math:`\log(\text{largest})/(8\varepsilon)` (float32 9.3e7, :math:`s\|x\|^2`
  up to about 1.9e8; float64 4.0e17, :math:`s\|x\|^2` about 8e17); measured at d = 8 and 64, every
  kind: NaN outputs from :math:`s\|x\|^2` about 2.7e9 in float32 (entries of 3e4 at d = 8) and about
  1.3e19 in float64 (entries of 2e9), never below.  Use float64 inputs or a smaller ``scale`` there.

Precision: the features are computed in float32 (float64 when the inputs or
the projections are float64) whatever the input dtype, with autocast disabled
inside; the output comes back in the input dtype.  Under autocast, q, k and v
of differing dtypes (a float32 rotary table times bfloat16 queries) are cast to
autocast's dtype first, as ``scaled_dot_product_attention`` does; outside
autocast they must share one dtype (a TypeError).  ``model.to(torch.bfloat16)``
keeps the projections in float32 (a bfloat16-rounded matrix would no longer be
a draw of the coupling).

No host synchronisation in ``forward``: shape, dtype and device checks are
free; the finiteness of q, k, v and the range of q and k are checked only with ``check_inputs=True``
(one synchronisation per tensor).  A kind parameter chosen from the data (oprf's
A) is one tensor per sequence on the device (the registered oprf map takes
arrays); only a kind whose map took nothing but floats would cost one
synchronisation per forward (one value per batch).  With the check off, non-finite inputs give
NaN in the outputs they reach (a NaN or infinite key: every output of its
sequence (bidirectional) or from its position on (causal); a NaN query: its
own row); nothing raises and nothing hangs.  A data-driven kind parameter
(oprf's A) reads only the unpadded rows with a finite squared norm, so a
non-finite row reaches no other row through it, and causal attention's running
statistic skips a batch whose statistic is not finite.

Gradients: of every path (bidirectional, causal, the fused kernels), also twice:
``backward(create_graph=True)`` gives a gradient that is differentiable again (Hessian-vector products,
gradient penalties); the hand-written and the kernels' backward passes then run through autograd of torch
operations instead (the torch levels for the causal scan: slower, and they hold their temporaries).  A kind
parameter chosen from the data (oprf's A without ``kind_params``) is a constant of the backward pass: the
gradient is that of the module with the same A given, not the derivative of the data-driven forward (the
kernel estimate is unbiased for every A, so its derivative through A has mean zero over feature draws, but
for one draw it is not small).

torch.func transforms (``grad``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``hessian``, ``vmap``: per-sample
gradients, Jacobians, forward mode) run on the torch levels, whose autograd.Functions carry vmap and jvp
rules; the fused kernels step aside under a transform (their Functions have neither), and the causal
scan's in-place inference path too.  Causal oprf with A from running statistics refuses a transform in
training mode (the statistics are updated in place): give ``kind_params`` or use ``eval()``.

Speed
-----
The causal scan combines its chunks by a loop on the CPU (in place, one carried state, groups of chunks:
the least memory) and, on accelerators and under ``torch.compile``, by one batched product over the chunks
while there are at most d_v + 1 of them (:data:`PRODUCT_STATES`; not yet timed on a GPU), else by a
log-depth scan; the part inside each chunk as dyadic levels of torch operations.  On CUDA float32 features
where Triton is importable the whole scan is one operator (:func:`montecarlo._fused.causal`: a registered
custom operator under ``torch.compile``, its implementation under an autograd.Function in eager mode, which
saves the operators' dispatch; ``montecarlo.nn.FUSED = False`` turns it off): the rows' offsets, the chunks'
summaries and their gradient in kernels of their own, the prefix states by the product or the scan, and
fused kernels for the chunks (most chunks as matrix products of per-position factors with the chunk's key
offsets, tiles of 64; chunks whose keys rise too far for that on the tile path, with per-tile key maxima and
the diagonal tile elementwise; the earlier chunks' prefix state read in the same kernels; TF32 products for
bfloat16/float16 inputs, IEEE float32 for float32 ones); there the log-features of every kind with a linear
form in its record (``linear_log_features``: prf, hyperbolic, oprf with one A for the batch) are a kernel of
their own too, which reads bfloat16/float16 queries and keys as they are.  On an H100
(bf16, forward + backward, batch x heads 32, d 64, m = 128; ``benchmarks/README.md``, session of
2026-11-27): eager 0.22 x SDPA's time at L = 65536 and 2.9-3.2 x at L = 4096, where the host's Python per
step is about the GPU's work of the forward (the GPU's own time is 2.68 x SDPA's step); the module captured
as CUDA graphs, ``torch.cuda.make_graphed_callables(module, (q, k, v))`` (fixed shapes; no host work per
step, so no Python either: the forward's redraw schedule does not run in replays; call ``redraw()`` between
replays, which the graphs then read), 2.74 x at 4096: the form for short sequences in a training loop.
(Before the kernels: 1.27 x and 15.4 x eager.)

Decoding token by token
-----------------------
Causal attention generates with an explicit recurrent state: ``out_t, state = attn.step(q_t, k_t, v_t,
state)`` for one position ((..., 1, d) inputs; ``state=None`` at the first), or ``out, state =
attn.prefill(q, k, v)`` for a prompt.  The :class:`DecodingState` holds per feature the running maximum of
the keys' log-features and the value and key-mass sums scaled by it, the stabilised form of the scan above,
so L steps give the forward's outputs (float64 to about 1e-15; float32/bf16 to the forward's own rounding) at
a cost per token independent of the position (O(m d_v)).  The state records the module and the projections
it was built with: after a redraw or ``load_state_dict`` a step with an old state is a ValueError.  Steps
never redraw nor move running statistics (oprf's A from the data is fixed in the state at the first step).
On the CPU (d = 64, (batch, heads) (2, 4), one thread; ``python -m benchmarks.bench_attention --decode``):
see benchmarks/README.md for tokens per second against SDPA reading a key-value cache.

Multi-head attention layers: :class:`PRFMultiheadAttention` has ``nn.MultiheadAttention``'s parameters, call
and ``(output, None)`` result (``PRFMultiheadAttention.from_multihead(layer.self_attn, n_features=...)``
swaps a transformer layer's attention in one line; what linear attention cannot do, such as
``need_weights=True`` or an arbitrary ``attn_mask``, is refused).

Predicting the error, choosing m
--------------------------------
:func:`attention_error` predicts the expected error of this module's output against exact softmax
attention from closed forms (first order in 1/m, with the cross-pair conformity of coupled directions of
:mod:`theory.attention`), and flags where first order is not enough; :func:`plan_attention` (and ``python -m
montecarlo.nn plan``) returns the smallest m and the best (kind, coupling, OPRF A) for a target error, or
says that none reaches it (the guide page "Predicting the attention error").

Random features, copies, checkpoints
------------------------------------
The projections live in the buffer ``weights`` (width-1 (m, d) matrix shared by
queries and keys), drawn by :func:`montecarlo.sample_weights` from a
``torch.Generator`` the caller owns (``generator=``) or from a numpy stream
seeded by ``seed``.  :meth:`PRFAttention.redraw` draws new ones;
``redraw_every=k`` redraws every k training-mode forward passes;
``eval()`` and :meth:`PRFAttention.freeze` never redraw.  Under
``torch.compile`` that schedule runs eagerly (``torch.compiler.disable``: one
graph break per forward, so ``fullgraph=True`` needs ``redraw_every=None``;
call :meth:`PRFAttention.redraw` outside the compiled model instead) and
redraws exactly as eager mode.

* ``copy.deepcopy`` copies the current projections exactly but **forks** the
  random stream: the copy's later redraws are independent of the original's
  (numpy stream: a ``SeedSequence`` spawn, which leaves the original's own
  stream untouched; torch generator: the copy's generator is seeded by one
  draw from the original's, which advances it).  Forks are reproducible: the
  same seeds and the same copies give the same draws.  Layers that share one
  stream (one ``torch.Generator``, or one ``numpy.random.Generator`` passed as
  ``seed``) share one fork of it in a deep copy of the model.  For *lock-step* copies
  (identical redraws), load the original's state into the copy
  (``twin.load_state_dict(orig.state_dict())``, which also copies the stream
  position) or build each with one shared ``torch.Generator`` passed explicitly
  and redraw them in the same order.
* ``state_dict()`` holds the projections, the redraw counter, the frozen flag
  and the stream position (``get_extra_state``: plain ints, bools, strings,
  lists and dicts of them and a uint8 tensor, all loadable with
  ``torch.load(weights_only=True)`` for every numpy bit generator: PCG64,
  PCG64DXSM, MT19937, Philox, SFC64), for a numpy stream its ``SeedSequence``
  with the spawn counter, and the running statistics of kinds with
  data-driven parameters: a run resumed from a checkpoint redraws, and its
  later deep copies fork, exactly as the uninterrupted run's.
  Checkpoint with ``torch.save(model.state_dict(), path)`` and
  ``model.load_state_dict(torch.load(path))``; ``torch.save(model)`` of the
  whole module needs ``torch.load(path, weights_only=False)`` (the class is not
  on torch's allow-list), as for any custom module.
* Under ``torch.distributed`` (DistributedDataParallel) give every rank the
  same ``seed`` (or generator state): redraws happen inside forward, after
  DDP's broadcast of the buffers, so unseeded ranks would draw different
  projections (a RuntimeWarning says so at such a redraw).
* Deferred initialisation: a module built on the meta device
  (``device="meta"``, or under ``with torch.device("meta")``: the module
  follows torch's default device, as ``nn.Linear``) holds meta buffers and
  runs a forward for shapes; after ``to_empty(device=...)``, whose buffers are
  uninitialised, :meth:`PRFAttention.reset_parameters` draws the projections
  a module built there with the same seed has (FSDP and torch call it by that
  name); deep copies made on the meta device draw their own.
* ``torch.export`` (inference): a module in eval mode (or frozen, or without
  ``redraw_every``) exports, every kind, causal or not, masks as keyword
  inputs, and the program saves and loads (``torch.export.save`` / ``load``)
  with the eager module's outputs; on the fused path (CUDA with Triton) the
  kernels are the registered operators ``simplex_rf::*``, so import
  ``montecarlo._fused`` (which registers them; ``montecarlo.nn`` imports it
  only when the kernels first run) before loading such a program.  In
  training mode with ``redraw_every`` export raises a RuntimeError: an
  exported program is one traced forward and would never redraw.
* Activation checkpointing (``torch.utils.checkpoint``) recomputes the
  forward inside the backward pass: that recomputation never redraws the
  features nor counts towards ``redraw_every`` (so the backward differentiates
  the forward's estimator); causal attention with A from running statistics
  (oprf without ``kind_params``) refuses it in training mode with a
  RuntimeError, since those statistics moved after the forward.

References
----------
Reid et al., "Simplex Random Features", ICML 2023, Sec. 5.4; Choromanski et al.,
"Rethinking Attention with Performers", ICLR 2021; Likhosherstov et al., "Chefs'
Random Tables: Non-Trigonometric Random Features", NeurIPS 2022 (FAVOR++, the
``oprf`` kind's A).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
from typing import NamedTuple

import array_api_compat
import numpy as np
import torch
from torch import nn

import montecarlo as mc
from montecarlo._checks import (AllocationError, check_bool, check_coupling, check_int, check_positive_float,
                                check_rng)
from montecarlo.oprf import batch_pair_statistic
from theory import feature_kinds as kinds
from theory.registry import check_dimension
from theory.validation import check_real, describe

__all__ = [
    "DEFAULT_CHUNK",
    "INPUT_DTYPES",
    "DecodingState",
    "STORAGE_DTYPES",
    "AttentionError",
    "PRFAttention",
    "PRFMultiheadAttention",
    "attention_error",
    "check_device",
    "check_generator",
    "draw_projections",
    "input_range",
    "measured_attention_error",
    "oprf_a",
    "plan_attention",
]

#: dtypes of the projections (and of the feature computations); other accepted dtypes store float32.
STORAGE_DTYPES = (torch.float32, torch.float64)
#: Input dtypes the module accepts (features computed in float32 for the half types).
INPUT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
#: Default chunk length of the causal scan per device type (a power of two).  On a GPU the fused kernels'
#: chunks: on an H100 (bf16, batch x heads 32, d 64, m 128, forward + backward) 128 took 35.6 ms at
#: L = 65536 against 41.0 for 256 and 51.6 for 512 (and 2.84 against 3.19 ms at 4096 under CUDA graphs), at
#: 12% more memory than 256 (benchmarks/README); on the CPU the within-chunk work dominates.
DEFAULT_CHUNK = {"cpu": 64, "cuda": 128}
#: Largest block length whose within-chunk scores are formed directly (s x s); longer blocks are summarised as
#: an (m, d_v) state (cheaper from about s = m d_v / (m + d_v)).
DIRECT_BLOCK = 32
#: Off the CPU the earlier chunks' prefix states come from one batched product while the number of chunks N is
#: at most this times d_v + 1 (its (n, m, N, N) factors then hold no more entries than the chunk summaries),
#: else from the log-depth scan.
PRODUCT_STATES = 1.0
#: The causal scan on CUDA float32 features by the fused Triton operator (:func:`montecarlo._fused.causal`)
#: where Triton is importable; False: always the torch levels.
FUSED = True
# The device type whose tensors the fused operators take (the tests set it to "cpu", where Triton's
# interpreter runs the kernels, to check the other conditions of :func:`_fused_applies` without a GPU).
_FUSED_DEVICE = "cuda"
_TRITON = None
#: Inference on the CPU works through the chunks in groups of about this many log-feature entries (the
#: temporaries of the within-chunk levels are a few times a group; the result is the same for any group).
GROUP_ENTRIES = 1 << 22
#: Momentum of the running statistics behind a data-driven kind parameter in causal attention.
RUNNING_MOMENTUM = 0.1
#: Version of the ``get_extra_state`` record.
_STATE_VERSION = 2
#: The array-API namespace of torch tensors handed to the kinds' hooks (looked up once, not per call, so that
#: torch.compile traces no lookup).
_XP = array_api_compat.array_namespace(torch.empty(0))


# ---------------------------------------------------------------------------
# small helpers


def check_generator(generator, name="generator"):
    """``generator`` if it is None or a ``torch.Generator``; TypeError otherwise."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{name} must be None or a torch.Generator, got {type(generator).__name__}")
    return generator


def fork_generator(generator):
    """A new ``torch.Generator`` on ``generator``'s device seeded by one draw of it (which advances it): the
    stream of a deep copy, independent of the original's later draws and reproducible from its seed."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())
    return torch.Generator(device=generator.device).manual_seed(seed)


def _forked(stream, memo, fork):
    """``fork(stream)`` once per deep copy: the fork is kept in the copy's ``memo`` under the stream's id (and
    the stream kept alive there, as ``copy`` does), so that modules sharing one stream share its fork."""
    key = ("montecarlo.nn fork", id(stream))
    if key not in memo:
        memo[key] = fork(stream)
        memo.setdefault(id(memo), []).append(stream)
    return memo[key]


#: numpy bit generators whose state a checkpoint may hold (``get_extra_state``).
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _plain(obj):
    """A numpy bit generator's state (or seed sequence) as plain Python objects that ``torch.load`` reads with
    ``weights_only=True``: arrays become ``{"ndarray": dtype, "values": list}``, numpy integers ints."""
    if isinstance(obj, np.ndarray):
        return {"ndarray": obj.dtype.str, "values": obj.tolist()}
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def _unplain(obj):
    """The inverse of :func:`_plain`."""
    if isinstance(obj, dict):
        if set(obj) == {"ndarray", "values"}:
            return np.asarray(obj["values"], dtype=np.dtype(obj["ndarray"]))
        return {k: _unplain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unplain(v) for v in obj]
    return obj


def _restored_rng(rng, state, seed_seq, own):
    """The numpy Generator a checkpoint's ``state`` (and seed sequence) describes.  A stream the module owns is
    rebuilt from the saved seed sequence (its spawn counter included) and bit generator; the caller's shared
    Generator (``own`` False) is set in place (its seed sequence is the caller's)."""
    if not isinstance(state, dict) or state.get("bit_generator") not in _BIT_GENERATORS:
        raise ValueError(f"the state's numpy stream must be the state of one of the bit generators "
                         f"{', '.join(_BIT_GENERATORS)}, got {describe(state)}")
    name = state["bit_generator"]
    if own:
        seq = None
        if seed_seq is not None:
            seq = np.random.SeedSequence(seed_seq["entropy"], spawn_key=tuple(seed_seq["spawn_key"]),
                                         pool_size=seed_seq["pool_size"],
                                         n_children_spawned=seed_seq["n_children_spawned"])
        elif type(rng.bit_generator).__name__ == name:  # (a version-1 state: no seed sequence recorded)
            seq = rng.bit_generator.seed_seq
        rng = np.random.Generator(getattr(np.random, name)(seq))
    elif type(rng.bit_generator).__name__ != name:
        raise ValueError(f"the state's numpy stream is a {name}, this module draws from the caller's "
                         f"{type(rng.bit_generator).__name__} Generator (passed as seed): pass a Generator of a {name}")
    rng.bit_generator.state = state
    return rng


def check_device(device, name="device"):
    """A ``torch.device`` (or None) that exists here: ValueError naming ``name`` for a malformed string or a
    CUDA device when CUDA is not available."""
    if device is None:
        return None
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{name} must be None, a string such as 'cpu' or 'cuda:0', or a torch.device, "
                        f"got {describe(device)}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"{name} must name a torch device such as 'cpu' or 'cuda:0', got {device!r}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}={str(device)!r} asks for CUDA, but CUDA is not available here "
                             "(torch.cuda.is_available() is False)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{name}={str(device)!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    return dev


def _storage_dtype(dtype, name="dtype"):
    if dtype not in INPUT_DTYPES:
        raise ValueError(f"{name} must be one of torch.float32, torch.float64, torch.bfloat16, torch.float16, "
                         f"got {dtype!r}")
    return dtype if dtype in STORAGE_DTYPES else torch.float32


def _dtype_name(dtype):
    """``torch.float32`` -> ``'float32'``."""
    return str(dtype).replace("torch.", "")


def _very_negative(dtype):
    """A finite stand-in for -inf in offsets (a few of them still add up without overflow)."""
    return torch.finfo(dtype).min / 8


def input_range(dtype, causal):
    r"""The largest magnitude of a log-feature (about :math:`s\|x\|^2/2` for a query or key x) for which
    attention computed in ``dtype`` (float32 or float64) is exact to rounding (module docs, "Range of the
    inputs"): a quarter of the dtype's largest number bidirectionally (the sum of a query's and a key's
    log-features stays finite), :math:`\log(\text{largest})/(8\varepsilon)` causally (the exponents that
    exceed 0 by rounding, about :math:`\varepsilon/2` times the log-features, stay below a quarter of the
    exponential's range)."""
    info = torch.finfo(dtype)
    if causal:
        return math.log(info.max) / (8 * info.eps)
    return info.max / 4


def oprf_a(rho):
    r"""FAVOR++'s variance-minimising A of optimised PRFs for a mean :math:`\rho = \overline{\|x+y\|^2}/d`.

    :math:`A^* = \big(1 - 2\rho - \sqrt{(2\rho+1)^2 + 8\rho}\big)/16` (Likhosherstov et al. 2022):
    the root of :math:`\partial_A` of the log second moment
    :math:`d\log(1-4A) - \tfrac d2\log(1-8A) + \|x+y\|^2/(1-8A)` averaged over the pairs;
    :math:`A^* \le 0`, 0 at :math:`\rho = 0` (plain PRFs).  :func:`montecarlo.oprf.optimal_a` (the formula's
    home, also the oprf record's ``data_parameters`` rule): floats and numpy arrays checked, torch tensors
    elementwise on their device (no synchronisation).
    """
    from montecarlo.oprf import optimal_a

    return optimal_a(rho)


def draw_projections(coupling, d, m, *, generator=None, rng=None, device=None, dtype=torch.float32):
    r"""(m, d) projections of a coupling as a torch tensor, drawn from a torch or numpy generator.

    Parameters
    ----------
    coupling : str
        Any coupling of :data:`montecarlo.COUPLINGS`.
    d, m : int
        Dimensionality and number of projections.
    generator : torch.Generator, optional
        Drawn from on the generator's own device (then moved to ``device``).
    rng : None, int or numpy.random.Generator
        Used when ``generator`` is None (torch's generator is seeded from it).
    device : torch device, optional
        Where the result lives (default: the generator's device, else CPU).
    dtype : torch.float32 or torch.float64
        dtype of the result.

    Returns
    -------
    torch.Tensor of shape (m, d)
        Rows exactly :math:`\mathcal N(0, I_d)` for the exact couplings.
    """
    check_generator(generator)
    device = check_device(device)
    if generator is not None:
        w = mc.sample_weights(coupling, d, m, rng=generator, xp="torch", device=generator.device, dtype=dtype)
        return w if device is None else w.to(device)
    if device is not None and device.type == "meta":  # (no generator there: drawn on the CPU, shape kept)
        return mc.sample_weights(coupling, d, m, rng=rng, xp="torch", device="cpu", dtype=dtype).to(device)
    return mc.sample_weights(coupling, d, m, rng=rng, xp="torch", device=device, dtype=dtype)


# ---------------------------------------------------------------------------
# the attention computations (functions of log-features; no host synchronisation)


def hook_extras(log_map, d):
    """Keywords a log-feature hook takes beyond the common contract: ``d`` for maps whose constant depends on
    it (oprf's :math:`(1-4A)^{d/4}`); looked up once per hook."""
    takes = _TAKES_D.get(log_map)
    if takes is None:
        takes = _TAKES_D[log_map] = "d" in inspect.signature(log_map).parameters
    return {"d": d} if takes else {}


_TAKES_D: dict = {}
#: Kinds whose log-feature hook refused tensor parameters (then one float per forward: a synchronisation).
_FLOAT_PARAMETERS_ONLY: set = set()


def _log_features(x, w, w_sq, rec, scale, params):
    r"""Log-features (..., L, width m) of :math:`x' = s^{1/2}x` through the kind's record (softmax kernel)."""
    m, d = w.shape
    proj = x @ (w * math.sqrt(scale)).transpose(0, 1)  # w.(s^1/2 x), a fresh tensor the hook may overwrite
    sq = _call(_SquaredNorm, _SquaredNormJvp, x) * scale
    log_map = kinds.hook(rec.name, "log_features")
    return log_map(proj, sq, m, 0.5, _XP, w_sq=w_sq, **hook_extras(log_map, d), **params)


class _SquaredNorm(torch.autograd.Function):
    """|x|^2 over the last axis (keepdim) with the backward 2 x g as one product (autograd's for x * x: two
    products and a sum over (..., L, d)); differentiable again (create_graph)."""

    generate_vmap_rule = True  # (torch.func transforms: vmap, grad, vjp, jvp, jacrev, jacfwd, hessian)

    @staticmethod
    def forward(x):
        return (x * x).sum(-1, keepdim=True)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return x * (2.0 * g)


class _SquaredNormJvp(_SquaredNorm):
    """:class:`_SquaredNorm` with its forward-mode rule (:func:`_with_jvp`)."""

    @staticmethod
    def jvp(ctx, dx):
        x, = ctx.saved_tensors
        return 2.0 * (x * dx).sum(-1, keepdim=True)


def _with_jvp(fn, with_jvp):
    """The autograd.Function ``fn``, or its twin ``with_jvp`` that adds a forward-mode rule where one may be
    asked for: under a torch.func transform (jvp, jacfwd, hessian) or in forward-mode AD.  Two classes, since
    Dynamo does not trace a Function that defines jvp (torch.compile would break its graph there)."""
    level = getattr(getattr(torch.autograd, "forward_ad", None), "_current_level", -1)
    return with_jvp if _transformed() or level >= 0 else fn


def _call(fn, with_jvp, *args):
    """``fn.apply(*args)`` (or its twin's, :func:`_with_jvp`), or its forward alone where no derivative can be
    asked for (grad mode off, no forward-mode AD, no torch.func transform, not tracing): an autograd.Function's
    apply binds its arguments by signature, tens of microseconds per call that decoding token by token pays
    three times per step."""
    level = getattr(getattr(torch.autograd, "forward_ad", None), "_current_level", -1)
    if not torch.is_grad_enabled() and level < 0 and not _transformed() and not _compiling():
        return fn.forward(*args)
    return _with_jvp(fn, with_jvp).apply(*args)


def _mask_keys(lk, key_padding_mask, lead):
    """``lk`` with -inf at padded keys, broadcast to ``lead``."""
    pad = key_padding_mask.unsqueeze(-1)
    if tuple(lk.shape[:-2]) == tuple(lead):
        return lk.masked_fill_(pad, -math.inf)
    return torch.where(pad, torch.tensor(-math.inf, dtype=lk.dtype, device=lk.device), lk)


def _ratio(nd, seen):
    """Split (..., d_v + 1) numerator/denominator; rows that see no key (``seen`` False) get 0, zero gradient."""
    return _call(_Ratio, _RatioJvp, nd, seen)


class _Ratio(torch.autograd.Function):
    """num / den with a hand-written backward, one (..., d_v + 1) cotangent ``[g / den, -(g / den) . num / den]``
    (autograd's would fill a zero tensor of that shape per slice and add them: about ten passes over the
    outputs instead of four); differentiable again (create_graph) since the backward is torch operations."""

    generate_vmap_rule = True

    @staticmethod
    def forward(nd, seen):
        out = nd[..., :-1] / _Ratio._denominator(nd, seen)
        return out if seen is None else out.masked_fill_(~seen, 0.0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)  # (the input alone: no second (n, L, d_v) tensor held for the backward)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def _denominator(nd, seen):
        den = nd[..., -1:]
        return den if seen is None else torch.where(seen, den, torch.ones_like(den))

    @staticmethod
    def cotangent(nd, seen, g):
        """The cotangent of ``nd`` for the outputs' ``g`` (torch operations: differentiable again)."""
        den = _Ratio._denominator(nd, seen)
        gn = g / den
        G = torch.cat([gn, (gn * nd[..., :-1]).sum(-1, keepdim=True).div_(den).neg_()], -1)  # d/d den: -gn.out
        return G if seen is None else G.masked_fill(~seen, 0.0)

    @staticmethod
    def backward(ctx, g):
        return _Ratio.cotangent(*ctx.saved_tensors, g), None


class _RatioJvp(_Ratio):
    """:class:`_Ratio` with its forward-mode rule (:func:`_with_jvp`)."""

    @staticmethod
    def jvp(ctx, dnd, _):
        """The outputs' tangent ``(dnum - out dden) / den`` (rows that see no key: 0)."""
        nd, seen = ctx.saved_tensors
        den = _Ratio._denominator(nd, seen)
        d = (dnd[..., :-1] - nd[..., :-1] / den * dnd[..., -1:]) / den
        return d if seen is None else d.masked_fill(~seen, 0.0)


def _batch_first_mask(mask, tensors, name):
    """A (B, L) padding mask for inputs with two or more leading axes (B, H, ..., L, d) read as
    ``nn.MultiheadAttention``'s (batch, L) convention: (B, 1, ..., 1, L), one mask per batch element (plain
    broadcasting would align B with the last leading axis, the heads).  Other masks are returned as given;
    a first axis that is neither 1 nor the inputs' batch is a ValueError suggesting the shapes that work."""
    if not isinstance(mask, torch.Tensor) or mask.ndim != 2:
        return mask
    shapes = [t.shape for t in tensors if isinstance(t, torch.Tensor)]
    n_lead = max((len(sh) for sh in shapes), default=2) - 2
    if n_lead < 2:
        return mask
    batch = {sh[0] for sh in shapes if len(sh) - 2 == n_lead} - {1}
    if mask.shape[0] != 1 and len(batch) == 1 and mask.shape[0] not in batch:
        lead = tuple(max(shapes, key=len)[:-2])
        raise ValueError(f"{name} of shape {tuple(mask.shape)} is read as nn.MultiheadAttention's (batch, L) mask, "
                         f"one row per batch element, but the inputs' leading shape (batch, heads, ...) is {lead}: "
                         f"give one row per batch element (a (batch, L) mask, or mask[:, None] of shape "
                         f"(batch, 1, L)), or a mask shaped like the leading axes, e.g. (1, heads, L) for one row "
                         "per head")
    return mask.reshape((mask.shape[0],) + (1,) * (n_lead - 1) + (mask.shape[1],))


def _with_ones(v):
    """[v, 1]: one product then gives the numerator and the denominator (the key mass)."""
    return torch.nn.functional.pad(v, (0, 1), value=1.0)  # (one operator; a ones tensor and a cat made two)


def _bidirectional(lq, lk, v, seen=None):
    """Stabilised bidirectional attention.  ``lq`` and ``lk`` are fresh log-features (overwritten in place);
    padded keys have ``lk = -inf``; ``seen`` (broadcastable to (..., 1, 1)) is False for sequences whose keys
    are all padded (None: no mask)."""
    neg = _very_negative(lk.dtype)
    o = lk.detach().amax(-2, keepdim=True)  # (..., 1, M): per sequence and feature
    if seen is not None:
        o = o.clamp_min(neg)  # a sequence with every key padded
    ek = lk.sub_(o).exp_()  # padded keys: exp(-inf) = 0
    S = ek.transpose(-1, -2) @ _with_ones(v)  # (..., M, d_v + 1); last column: z >= 1
    z = S[..., -1:]
    if seen is not None:
        z = z.clamp_min(torch.finfo(z.dtype).tiny)
    off = o + torch.log(z).transpose(-1, -2)
    if _broadcast_shapes(lq.shape, off.shape) == tuple(lq.shape):
        t = lq.add_(off)  # l(q) + o + log z, in place
    else:  # keys with more leading axes than the queries
        t = lq + off
    r = t.detach().amax(-1, keepdim=True)
    eq = t.sub_(r).exp_()  # max over features exactly 1
    return _ratio(eq @ (S / z), seen)  # S / z: key-mass-weighted means of v (last column 1)


def _broadcast_shapes(*shapes):
    """``torch.broadcast_shapes`` as a tuple, without its cost (tens of microseconds of Python per call) where the
    shapes are equal, as they mostly are (RuntimeError where they do not broadcast)."""
    first = shapes[0]
    if all(s == first for s in shapes[1:]):
        return tuple(first)
    return tuple(torch.broadcast_shapes(*shapes))


def _exclusive_cummax(x, dim, fill):
    """max over the entries before each position along ``dim`` (``fill`` at the first)."""
    inc = torch.cummax(x, dim=dim).values
    first = torch.full_like(inc.narrow(dim, 0, 1), fill)
    return torch.cat([first, inc.narrow(dim, 0, inc.shape[dim] - 1)], dim=dim)


def _run_eagerly(reason):
    """A decorator: the function run eagerly under torch.compile (``torch.compiler.disable``, torch >= 2.1;
    unchanged before), with ``reason`` in the error of ``fullgraph=True`` (torch >= 2.6 takes one)."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)

    def wrap(fn):
        if disable is None:
            return fn
        try:
            return disable(fn, reason=reason)
        except TypeError:  # (no reason= before torch 2.6)
            return disable(fn)

    return wrap


def _compiling():
    """Whether torch.compile is tracing (``torch.compiler.is_compiling``, torch >= 2.3; False before)."""
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(fn()) if fn is not None else False


def _autocast_on(device_type):
    """Whether autocast is on for ``device_type`` (False for a device type without autocast, such as meta;
    True where an older torch cannot tell, without the device argument)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:
        return False
    except TypeError:
        return True


def _no_autocast(device_type):
    """A context with autocast off on ``device_type``: ``torch.autocast(enabled=False)`` where autocast is on
    there, else none (no region: torch.export made the forward's regions of grad mode inside an autocast
    region empty higher-order operators, which a saved program then failed to load with)."""
    if _autocast_on(device_type):
        return torch.autocast(device_type=device_type, enabled=False)
    return contextlib.nullcontext()


def _mixed_under_autocast(q, k, v):
    """Whether q, k, v are tensors of differing dtypes under autocast on their device (a float32 rotary table
    times bf16 queries, say), which forward then casts to autocast's dtype as SDPA does."""
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or q.dtype == k.dtype == v.dtype:
        return False
    return _autocast_on(q.device.type)


def _transformed():
    """Whether a torch.func transform (vmap, grad, jacrev, ...) is active: the in-place inference path then
    gives way (vmap refuses in-place writes of batched values into tensors allocated unbatched)."""
    fn = getattr(torch._C, "_are_functorch_transforms_active", None)
    return bool(fn()) if fn is not None else False


def _distributed():
    """Whether torch.distributed runs with more than one process."""
    dist = getattr(torch, "distributed", None)
    return bool(dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def _exporting():
    """Whether torch.export is tracing (``torch.compiler.is_exporting``, torch >= 2.6; False before)."""
    fn = getattr(getattr(torch, "compiler", None), "is_exporting", None)
    return bool(fn()) if fn is not None else False


def _scan_states(K, oc):
    r"""Exclusive prefix states of the chunk summaries by a log-depth scan (no loop over the chunks).

    ``K`` (n, N, M, D) holds each chunk's keys summarised with the chunk's own per-feature offset ``oc``
    (n, N, M).  The pairs (offset O, state P) combine associatively as
    :math:`(O_1, P_1)\oplus(O_2, P_2) = (O, P_1 e^{O_1 - O} + P_2 e^{O_2 - O})`, :math:`O = \max(O_1, O_2)`
    (every factor <= 1); ceil(log2 N) Hillis-Steele steps give the inclusive states, shifted by one chunk to
    the exclusive ones, whose offsets are the maxima over the earlier chunks (``before``).  Offsets are
    detached constants; the states carry the gradient.  Used on accelerators and under ``torch.compile``:
    a handful of launches per step instead of one per chunk."""
    N = K.shape[1]
    O, P = oc, K
    s = 1
    while s < N:
        with torch.no_grad():
            Onew = torch.maximum(O[:, :-s], O[:, s:])
            fa = torch.exp(O[:, :-s] - Onew).unsqueeze(-1)
            fb = torch.exp(O[:, s:] - Onew).unsqueeze(-1)
            O = torch.cat([O[:, :s], Onew], 1)
        P = torch.cat([P[:, :s], P[:, :-s] * fa + P[:, s:] * fb], 1)
        s *= 2
    return torch.cat([torch.zeros_like(P[:, :1]), P[:, :-1]], 1)


def _product_states(K, oc, before, neg):
    r"""The same exclusive prefix states as :func:`_scan_states` by one batched matrix product over the chunks:
    :math:`P_c = \sum_{c' < c} e^{O_{c'} - B_c} K_{c'}` with :math:`O` = ``oc`` and :math:`B_c` = ``before``
    (the maximum of the earlier chunks' offsets; at least ``neg``, as ``oc``), so every factor is <= 1.  The
    (n, M, N, N) factors hold N / D times K's entries: used while N <= :data:`PRODUCT_STATES` D (a few launches
    instead of the scan's dozens of small ones)."""
    return (_product_weights(oc, before, neg) @ K.transpose(1, 2)).transpose(1, 2)


def _product_weights(oc, before, neg):
    """The factors (n, M, c, c') of :func:`_product_states`: e^{O_c' - B_c} for c' < c, else 0."""
    N = oc.shape[1]
    with torch.no_grad():
        B = before.clamp_min(neg).transpose(1, 2).unsqueeze(-1)  # (n, M, N, 1)
        earlier = torch.ones(N, N, dtype=torch.bool, device=oc.device).tril(-1)  # c' < c
        return torch.where(earlier, oc.transpose(1, 2).unsqueeze(-2) - B, -math.inf).exp_()


def _by_product(x):
    """Whether the prefix states of x's chunks ((n, N, M, D): summaries or their cotangents) are formed by the
    batched product: N <= :data:`PRODUCT_STATES` D."""
    return x.shape[1] <= PRODUCT_STATES * x.shape[-1]


def _prefix_states(K, oc, before, neg):
    """The exclusive prefix states of the chunk summaries K (offsets ``oc``) with offsets ``before``: by the
    product (:func:`_product_states`) while :func:`_by_product`, else by the scan."""
    if _by_product(K):
        return _product_states(K, oc, before, neg)
    return _scan_states(K, oc)


def _prefix_states_adjoint(dP, oc, before, neg):
    r"""The gradient of :func:`_prefix_states` (a linear map of K) for the states' cotangent ``dP``:
    :math:`dK_{c'} = \sum_{c > c'} e^{O_{c'} - B_c} dP_c`.  By the product's transpose, or by the scan run
    backwards over the chunks with offsets :math:`-B` (non-increasing: the reversed scan's offset over the
    chunks after c' is :math:`-B_{c'+1}`), scaled by :math:`e^{O_{c'} - B_{c'+1}} \le 1`."""
    if _by_product(dP):
        return (_product_weights(oc, before, neg).transpose(-1, -2) @ dP.transpose(1, 2)).transpose(1, 2)
    with torch.no_grad():
        B = before.clamp_min(neg)
        S = _scan_states(dP.flip(1), (-B).flip(1)).flip(1)  # sum_{c > c'} e^{B_{c'+1} - B_c} dP_c
        scale = torch.exp(oc[:, :-1] - B[:, 1:]).unsqueeze(-1)
        return torch.cat([S[:, :-1] * scale, torch.zeros_like(S[:, -1:])], 1)


def _loop_states(K, decay):
    """The same exclusive prefix states by the recursion over chunks, P_{c+1} = P_c decay_c + K_c: one
    step per chunk, with autograd through :class:`_LoopStates` (whose backward is the recursion run backwards:
    linear in the number of chunks)."""
    return _call(_LoopStates, _LoopStatesJvp, K, decay)


def _loop_recursion(K, decay):
    """The recursion of :func:`_loop_states` by torch operations (differentiable: autograd, torch.func)."""
    states = [torch.zeros_like(K[:, 0])]
    for i in range(K.shape[1] - 1):
        states.append(torch.addcmul(K[:, i], states[-1], decay[:, i].unsqueeze(-1)))
    return torch.stack(states, dim=1)


class _LoopStates(torch.autograd.Function):
    r"""The exclusive prefix states :math:`P_0 = 0`, :math:`P_{c+1} = P_c\,\delta_c + K_c` (K (n, N, M, D),
    ``decay`` :math:`\delta` (n, N, M), a constant) written into one buffer, with the backward by the recursion
    run backwards into one gradient buffer: :math:`A_{N-1} = dP_{N-1}`, :math:`A_c = dP_c + A_{c+1}\delta_c`,
    :math:`dK_c = A_{c+1}` (:math:`dK_{N-1} = 0`).  Autograd's own backward of the loop zero-filled a full-size
    gradient of K at every chunk's select, which made the causal backward quadratic in L.  A backward with
    ``create_graph`` or under torch.func runs through autograd of :func:`_loop_recursion` instead."""

    generate_vmap_rule = True

    @staticmethod
    def forward(K, decay):
        P = torch.empty_like(K)
        P[:, 0] = 0.0
        for c in range(K.shape[1] - 1):
            torch.addcmul(K[:, c], P[:, c], decay[:, c].unsqueeze(-1), out=P[:, c + 1])
        return P

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, dP):
        K, decay = ctx.saved_tensors
        if _transformed() or torch.is_grad_enabled():  # (torch.func, or create_graph: differentiable again)
            return _loop_adjoint(dP, decay), None
        N = dP.shape[1]
        dK = torch.empty_like(dP)
        dK[:, N - 1] = 0.0
        A = dP[:, N - 1].clone()
        for c in range(N - 2, -1, -1):
            dK[:, c] = A
            A.mul_(decay[:, c].unsqueeze(-1)).add_(dP[:, c])
        return dK, None


def _loop_adjoint(dP, decay):
    """The backward of :class:`_LoopStates` by out-of-place torch operations (differentiable again; the map is
    linear in K, so this is its whole vector-Jacobian product)."""
    N = dP.shape[1]
    A = dP[:, N - 1]
    grads = [torch.zeros_like(A)]
    for c in range(N - 2, -1, -1):
        grads.append(A)
        A = torch.addcmul(dP[:, c], A, decay[:, c].unsqueeze(-1))
    return torch.stack(grads[::-1], dim=1)


class _LoopStatesJvp(_LoopStates):
    """:class:`_LoopStates` with its forward-mode rule (:func:`_with_jvp`): the map is linear in K."""

    @staticmethod
    def jvp(ctx, dK, _):
        K, decay = ctx.saved_tensors
        return _loop_recursion(torch.zeros_like(K) if dK is None else dK, decay)


def _loop_in_place(qr, lk4, v4, nd, oc, before, decay, gain, run):
    """Inference on the CPU: the recursion over chunks with each chunk's summary formed inside the loop, so
    that only one (n, m, d_v + 1) state is held (not the states of all chunks); ``qr`` and ``lk4`` are
    overwritten chunk by chunk, ``nd`` receives the earlier chunks' contributions; ``run`` is the state
    before the first of these chunks (None: none yet), and the state after the last is returned."""
    for i in range(qr.shape[1]):
        if run is not None:
            nd[:, i].add_(qr[:, i].add_(before[:, i].unsqueeze(1)).exp_() @ run)
        Ki = lk4[:, i].sub_(oc[:, i].unsqueeze(1)).exp_().transpose(-1, -2) @ v4[:, i]
        Ki.mul_(gain[:, i].unsqueeze(-1))
        run = Ki if run is None else Ki.addcmul_(run, decay[:, i].unsqueeze(-1))
    return run


def _halves(x, s, half):
    """The first (0) or second (1) half of every block of 2s positions along dim 2 of x (n, N, b, C)."""
    n, N, b, C = x.shape
    return x.view(n, N, b // (2 * s), 2, s, C)[:, :, :, half]


def _levels(qr, lk4, v4, offsets, neg):
    """Numerators and key masses (n, N, b, D) of the keys of each query's own chunk: the key at the query's
    position, then at level s the second half of each block of 2s positions reading the first half."""
    nd = (qr + lk4).exp_().sum(-1, keepdim=True) * v4
    for oF in offsets:
        s = _level_size(oF, qr)
        qS, kF, vF = _halves(qr, s, 1), _halves(lk4, s, 0), _halves(v4, s, 0)
        if s == 1:  # one key: its own features, elementwise
            part = (qS + kF).exp_().sum(-1, keepdim=True) * vF
        else:
            eqS = (qS + oF).exp_()  # <= 1: oF <= c_if for every query of the second half
            eF = (kF - oF.clamp_min(neg)).exp_()
            if s <= DIRECT_BLOCK:
                part = (eqS @ eF.transpose(-1, -2)) @ vF
            else:
                part = eqS @ (eF.transpose(-1, -2) @ vF)
        _halves(nd, s, 1).add_(part)
    return nd


def _level_size(oF, x):
    """The block length s of a level from its offsets (n, N, b / 2s, 1 or s, M)."""
    return x.shape[2] // (2 * oF.shape[2])


def _in_backward():
    """Whether this runs inside a backward pass: a forward recomputed there by activation checkpointing
    (torch.utils.checkpoint), which must not redraw the features or move running statistics; torch's own test
    (as FSDP's); False where torch lacks it."""
    fn = getattr(torch._C, "_current_graph_task_id", None)
    return fn is not None and fn() != -1


def _differentiable_vjp(fn, inputs, G, needs):
    r"""The vector-Jacobian product of ``fn`` at ``inputs`` for the cotangent ``G`` by autograd through fn's own
    torch operations, with ``create_graph``: what a hand-written backward (or a kernel) computes, as a gradient
    that is itself differentiable (``backward(create_graph=True)``: Hessian-vector products, gradient
    penalties).  ``needs``: which inputs want a gradient (``ctx.needs_input_grad``); None for the others."""
    with torch.enable_grad():
        out = fn(*inputs)
    wanted = [x for x, need in zip(inputs, needs) if need]
    grads = iter(torch.autograd.grad(out, wanted, G, create_graph=True, allow_unused=True) if wanted else ())
    return tuple(next(grads) if need else None for need in needs)


class _Levels(torch.autograd.Function):
    """:func:`_levels` with a hand-written backward: the exponentials are recomputed level by level and the
    gradients accumulated in place into one buffer per input (autograd would zero-fill a full-size gradient
    for every half-block view, several per level).  The offsets are constants (detached), as in the
    forward's construction."""

    generate_vmap_rule = True

    @staticmethod
    def forward(qr, lk4, v4, neg, *offsets):
        with torch.no_grad():
            return _levels(qr, lk4, v4, offsets, neg)

    @staticmethod
    def setup_context(ctx, inputs, output):
        qr, lk4, v4, ctx.neg, *offsets = inputs
        ctx.save_for_backward(qr, lk4, v4, *offsets)
        ctx.save_for_forward(qr, lk4, v4, *offsets)

    @staticmethod
    def backward(ctx, G):
        qr, lk4, v4, *offsets = ctx.saved_tensors
        nones = (None,) * (1 + len(offsets))
        if _transformed():  # under torch.func (grad, vjp, jacrev, vmap): the levels' vjp by torch.func itself
            grads = torch.func.vjp(lambda *x: _levels(*x, offsets, ctx.neg), qr, lk4, v4)[1](G)
            return (*(gr if need else None for gr, need in zip(grads, ctx.needs_input_grad)), *nones)
        if torch.is_grad_enabled():  # backward(create_graph=True): a gradient that is differentiable again
            grads = _differentiable_vjp(lambda *x: _levels(*x, offsets, ctx.neg), (qr, lk4, v4), G,
                                        ctx.needs_input_grad[:3])
            return (*grads, *nones)
        gq, gk = torch.zeros_like(qr), torch.zeros_like(lk4)
        e = (qr + lk4).exp_()
        w = e.sum(-1, keepdim=True)
        gv = w * G
        e.mul_((G * v4).sum(-1, keepdim=True))
        gq.add_(e)
        gk.add_(e)
        del e
        for oF in offsets:
            s = _level_size(oF, qr)
            qS, kF, vF, GS = _halves(qr, s, 1), _halves(lk4, s, 0), _halves(v4, s, 0), _halves(G, s, 1)
            if s == 1:
                e = (qS + kF).exp_()
                _halves(gv, s, 0).addcmul_(e.sum(-1, keepdim=True), GS)
                e.mul_((GS * vF).sum(-1, keepdim=True))
                _halves(gq, s, 1).add_(e)
                _halves(gk, s, 0).add_(e)
                continue
            eqS = (qS + oF).exp_()
            eF = (kF - oF.clamp_min(ctx.neg)).exp_()
            if s <= DIRECT_BLOCK:
                A = eqS @ eF.transpose(-1, -2)  # (.., s, s)
                dA = GS @ vF.transpose(-1, -2)
                _halves(gv, s, 0).add_(A.transpose(-1, -2) @ GS)
                d_eq, d_ef = dA @ eF, dA.transpose(-1, -2) @ eqS
            else:
                S = eF.transpose(-1, -2) @ vF  # (.., M, D)
                dS = eqS.transpose(-1, -2) @ GS
                _halves(gv, s, 0).add_(eF @ dS)
                d_eq, d_ef = GS @ S.transpose(-1, -2), vF @ dS.transpose(-1, -2)
            _halves(gq, s, 1).addcmul_(d_eq, eqS)
            _halves(gk, s, 0).addcmul_(d_ef, eF)
        return (gq, gk, gv, *nones)


class _LevelsJvp(_Levels):
    """:class:`_Levels` with its forward-mode rule (:func:`_with_jvp`)."""

    @staticmethod
    def jvp(ctx, dq, dk, dv, *_):
        """The levels' tangent by torch.func.jvp of :func:`_levels` (the offsets constants: they cancel)."""
        qr, lk4, v4, *offsets = ctx.saved_tensors
        tangents = tuple(torch.zeros_like(x) if t is None else t for x, t in zip((qr, lk4, v4), (dq, dk, dv)))
        return torch.func.jvp(lambda *x: _levels(*x, offsets, ctx.neg), (qr, lk4, v4), tangents)[1]


def _within_chunks(lq4, lk4, v4, before, neg, grad):
    r"""The part of causal attention inside each chunk, and the query offsets: ``lq4``, ``lk4`` (n, N, b, M),
    ``v4`` (n, N, b, D) and ``before`` (n, N, M), the per-feature maxima over the earlier chunks (None: there
    are none, -inf).  Returns
    ``qr`` = l(q) - r (row offsets r_i = max_f(l_f(q_i) + c_if); ``lq4`` itself, overwritten, without
    autograd) and ``nd`` (n, N, b, D), the numerators and key masses of the keys of each query's own chunk
    (with autograd through :class:`_Levels`).  (The fused kernels do all of it in
    :func:`montecarlo._fused.causal`.)"""
    b = lq4.shape[2]
    with torch.no_grad():
        kd = lk4.detach()
        sizes = [1 << e for e in range(max(0, b.bit_length() - 1))]  # block lengths s = 1, 2, ..., b / 2
        # maxima of the first halves (a single key at s = 1: a view, no copy)
        offsets = [_halves(kd, s, 0) if s == 1 else _halves(kd, s, 0).amax(-2, keepdim=True) for s in sizes]
        c = kd.clone() if before is None else torch.maximum(kd, before.unsqueeze(2))  # c_if, over the dyadic blocks
        for s, oF in zip(sizes, offsets):
            _halves(c, s, 1).clamp_min_(oF)
        r = c.add_(lq4.detach()).amax(-1, keepdim=True).clamp_min_(neg)  # (n, N, b, 1)
        del c
    qr = lq4 - r if grad else lq4.sub_(r)  # l_f(q_i) - r_i, shared by every term
    if not grad:
        return qr, _levels(qr, lk4, v4, offsets, neg)
    return qr, _with_jvp(_Levels, _LevelsJvp).apply(qr, lk4, v4, neg, *offsets)


def _fused_applies(x, b):
    """Whether the causal scan runs in the fused Triton operator: :data:`FUSED`, a CUDA float32 tensor,
    chunks of a multiple of 16 positions, and Triton importable (eager or under ``torch.compile``, which
    calls them as custom operators)."""
    if not (FUSED and x.device.type == _FUSED_DEVICE and x.dtype == torch.float32 and b >= 16 and b % 16 == 0):
        return False
    return _triton_available() and not _transformed()


def _fused_features_apply(x, w):
    """Whether a kind's linear log-features can run in montecarlo._fused's kernel: :data:`FUSED`, CUDA
    inputs in float32, bfloat16 or float16 with float32 projections that need no gradient, d <= 128, Triton
    importable."""
    if not (FUSED and x.device.type == _FUSED_DEVICE and x.dtype in (torch.float32, torch.bfloat16, torch.float16)
            and w.dtype == torch.float32 and not w.requires_grad and x.shape[-1] <= 128):
        return False
    return _triton_available() and not _transformed()


def _capturing(x):
    """Whether a CUDA graph is being captured on the current stream (False off CUDA, where torch's CPU build
    has no such query)."""
    return x.device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _triton_available():
    """Whether Triton imports (checked once; a broken installation counts as none: the torch levels run)."""
    global _TRITON
    if _TRITON is None:
        try:
            import triton  # noqa: F401
        except Exception:
            _TRITON = False
        else:
            _TRITON = True
    return _TRITON


def _unfused(lq4, lk4, v4, neg, grad, scan):
    """:func:`_causal`'s numerators and key masses (n, N, b, D) by torch operations: the chunks' prefix states
    (scan, product or loop), the dyadic levels within each chunk; in place and in groups of chunks for
    inference on the CPU."""
    n, N, b, M = lq4.shape
    D = v4.shape[-1]
    if N == 1 and (grad or scan):  # one chunk: no earlier chunks, no states (and no offsets over them, whose
        # no-grad region, with nothing between it and the levels' own, made torch.export write an empty region
        # of autocast that a saved program failed to load with)
        return _within_chunks(lq4, lk4, v4, None, neg, grad)[1]
    with torch.no_grad():
        ochunk = lk4.detach().amax(2)  # (n, N, M): each chunk's maximum per feature
        before = _exclusive_cummax(ochunk, 1, -math.inf)  # maximum over the earlier chunks
        oc = ochunk.clamp_min(neg)
        if not scan:  # the recursion over chunks: P_{c+1} = P_c decay_c + K_c gain_c
            after = torch.cummax(oc, dim=1).values  # offset of the state after chunk c
            decay = torch.exp(torch.cat([torch.full_like(after[:, :1], neg), after[:, :-1]], 1) - after)
            gain = torch.exp(oc - after)
    # earlier chunks: per-chunk summaries with the chunk's offset, combined by a scan whose offsets are the
    # maxima over all earlier chunks (all in the past of every query that reads them)
    if grad or scan:
        P = None
        if N > 1:
            K = (lk4 - oc.unsqueeze(2)).exp_().transpose(-1, -2) @ v4  # (n, N, M, D), offsets oc
            # states with offsets `before`
            P = _prefix_states(K, oc, before, neg) if scan else _loop_states(K * gain.unsqueeze(-1), decay)
            del K
        qr, nd = _within_chunks(lq4, lk4, v4, before, neg, grad)
        if P is not None:
            nd.add_((qr + before.unsqueeze(2)).exp_() @ P)
        del P
    else:  # inference on the CPU: groups of chunks, in place, one state carried along
        nd = torch.empty((n, N, b, D), dtype=v4.dtype, device=v4.device)
        group = max(1, GROUP_ENTRIES // (n * b * M))
        run = None
        for g in range(0, N, group):
            sl = slice(g, g + group)
            qr, nd_g = _within_chunks(lq4[:, sl], lk4[:, sl], v4[:, sl], before[:, sl], neg, False)
            run = _loop_in_place(qr, lk4[:, sl], v4[:, sl], nd_g, oc[:, sl], before[:, sl], decay[:, sl],
                                 gain[:, sl], run)
            nd[:, sl] = nd_g
            del qr, nd_g
    return nd


def _as_rows(x, lead, shape):
    """``x`` (..., a, c) broadcast to ``lead`` + (a, c) and reshaped to ``shape``: no operator where it already
    has them (each view is host time and an autograd node)."""
    if tuple(x.shape[:-2]) != lead:
        x = x.expand(lead + tuple(x.shape[-2:]))
    return x if tuple(x.shape) == shape else x.reshape(shape)


def _causal(lq, lk, v, chunk, seen=None, scan=None, fused=None, half=False, out_dtype=None):
    r"""Stabilised causal attention (module docs): prefix states over chunks, dyadic blocks within a chunk,
    the diagonal directly.  ``lq``, ``lk`` (..., L, M) fresh log-features (padded keys -inf; overwritten in
    place where no gradient needs them), v (..., L, d_v; any float dtype: cast to the log-features' here,
    except bfloat16/float16 values on the fused path, which reads them as they are); ``chunk`` a power of
    two; ``seen`` (..., L, 1) bool or None; ``scan``: combine the chunks by the log-depth scan (True), the
    loop over chunks (False), or by device (None: the scan off the CPU and under ``torch.compile``, the loop
    on the CPU, where it runs in place and holds the least memory); ``fused``: the whole scan by the Triton operator
    :func:`montecarlo._fused.causal` (True; ``scan`` then does not apply), by torch operations (False), or
    where the operator applies (None: :func:`_fused_applies`); ``half``: the module's inputs are
    bfloat16/float16 (the kernels' products then run in TF32: :func:`montecarlo._fused.products`);
    ``out_dtype``: the dtype the fused path writes its output in (its ratio's kernel; None: the features').

    Every exponential below has an exponent <= 0 by construction, whatever the data: the offsets of a group
    of keys are their per-feature maxima, and a query reads only groups that lie wholly in its past, so each
    offset is at most the query's running maximum c_if, which sets the query's row offset r_i.
    """
    L, M = lq.shape[-2], lq.shape[-1]
    lead = _broadcast_shapes(lq.shape[:-2], lk.shape[:-2], v.shape[:-2])
    dv = v.shape[-1]
    if math.prod(lead) == 0:  # an empty batch: an empty output, still connected to the inputs' graph
        return v.expand(lead + (L, dv)) * 0 + (lq.sum() + lk.sum()) * 0
    n = math.prod(lead)
    neg = _very_negative(lq.dtype)
    grad = torch.is_grad_enabled() and (lq.requires_grad or lk.requires_grad or v.requires_grad)
    if scan is None:
        scan = lq.device.type != "cpu" or _compiling() or _transformed()
    b = min(chunk, mc.couplings.next_power_of_two(L))  # a power of two, no longer than needed
    N = -(-L // b)
    Lp = N * b
    pad = Lp - L
    # (n, N, b, .) directly where no padding is needed: one view, none where the shapes are already so
    lq = _as_rows(lq, lead, (n, L, M) if pad else (n, N, b, M))
    lk = _as_rows(lk, lead, (n, L, M) if pad else (n, N, b, M))
    if not grad:  # written in place below: no broadcast (stride-0) views
        lq, lk = lq.contiguous(), lk.contiguous()
    if fused is None:
        fused = _fused_applies(lq, b)
    if fused:
        from montecarlo import _fused
    if not (fused and _fused._half_values(lq, v)):  # (the operator reads half values as they are: no float32 copy)
        v = v.to(lq.dtype)
    ve = _as_rows(v, lead, (n, L, dv) if pad else (n, N, b, dv))
    if not fused:  # (the fused operator forms the key mass itself: no ones column stored)
        ve = _with_ones(ve)
    D = dv + 1
    if pad:  # pad to whole chunks: keys -inf (no mass), queries and values 0 (outputs dropped)
        lq = torch.nn.functional.pad(lq, (0, 0, 0, pad)).reshape(n, N, b, M)
        lk = torch.nn.functional.pad(lk, (0, 0, 0, pad), value=-math.inf).reshape(n, N, b, M)
        ve = torch.nn.functional.pad(ve, (0, 0, 0, pad)).reshape(n, N, b, ve.shape[-1])
    if seen is not None:
        seen = seen.expand(lead + (L, 1)).reshape(n, L, 1)
    if fused:  # the whole scan in the kernels' operator
        nd = _fused.causal(lq, lk, ve, _fused.products(half))
        return _fused.ratio(nd, seen, L, out_dtype or nd.dtype, lead + (L, dv))
    nd = _unfused(lq, lk, ve, neg, grad, scan)
    return _ratio(nd.view(n, Lp, D)[:, :L], seen).reshape(lead + (L, dv))


# ---------------------------------------------------------------------------
# the module


class PRFAttention(nn.Module):
    r"""Linear softmax attention with positive random features of a chosen coupling and kind.

    Parameters
    ----------
    d_head : int
        Query/key dimension d.
    n_features : int
        Number m of random directions (the paper's Performers: 130); the
        feature width is ``kind``'s width times m (2m for ``'hyperbolic'``).
    coupling : str
        One of :data:`montecarlo.COUPLINGS` (default ``'simplex'``).
    kind : str
        A positive feature kind of :mod:`theory.feature_kinds` (``'prf'``,
        ``'hyperbolic'``, ``'oprf'`` where registered).
    kind_params : dict, optional
        Values of the kind's parameters (``record.parameters``), e.g.
        ``{"A": -0.1}`` for ``'oprf'``.  A parameter the module can choose from
        the data (the kind record's ``data_parameters`` rule: oprf's A) may be left out: then
        bidirectional attention takes it from the current queries and keys
        (unpadded positions only, so padded content never changes an output;
        per sequence, or per batch while the kind's map takes only a float:
        module docs), and causal attention from running statistics of
        earlier training batches (constant within a forward pass, since prefix
        sums cannot look ahead; buffer ``running_rho``, starting at plain PRFs).
    causal : bool
        Prefix-sum (autoregressive) attention: query i sees keys j <= i
        (needs as many queries as keys).
    scale : float, optional
        s in :math:`e^{s q^\top k}` (default :math:`1/\sqrt d`).
    seed : None, int, numpy.random.Generator or SeedSequence
        Seed of the feature draws when no ``generator`` is given.
    generator : torch.Generator, optional
        The generator every draw uses (the caller seeds and owns it; each draw
        advances it).  A CPU generator works for a module on any device.
    redraw_every : int, optional
        In training mode and unless frozen, redraw the features every this many
        forward passes (default: never; see the Notes).
    chunk : int, optional
        Chunk length of the causal scan, a power of two (default
        :data:`DEFAULT_CHUNK` for the module's device type).
    check_inputs : bool
        Also check that q, k and v are finite (a host synchronisation per
        tensor; default off: non-finite inputs then give NaN outputs, see the
        module docs).
    dtype : torch dtype
        float32 (default) or float64: the dtype of the projections and of the
        feature computations.  bfloat16 and float16 are accepted and store
        float32.
    device : torch device, optional
        Where the projections live (inputs must be on the same device); a
        CUDA device without CUDA is a ValueError.  Default: torch's default
        device (``torch.set_default_device``, ``with torch.device(...)``; the
        CPU unless set), as ``nn.Linear``; ``"meta"`` for deferred
        initialisation (:meth:`reset_parameters`).

    Notes
    -----
    **Copies and checkpoints**: see the module docs (a deep copy forks the
    random stream; ``state_dict`` holds the redraw counter and stream
    position, so a resumed run is bit-identical to an uninterrupted one).

    **How often to redraw.** A redraw swaps the kernel estimator under
    weights that have adapted to the old one.  Measured on the digits
    Performer of :mod:`montecarlo.experiments.performer_train` (2 layers,
    m = 32, d_head = 16, batch 32, 10 epochs of 41 steps, 5 seeds; final test
    accuracy, ORF / SimRF): never .888 +- .005 / .897 +- .011; every 10 steps
    .840 +- .017 / .848 +- .014; every 100 steps .837 +- .011 / .833 +- .021;
    once per epoch .852 +- .013 / .881 +- .013
    (``python -m montecarlo.experiments performer-train --redraw-study``).
    Hence the default ``redraw_every=None``: draw once (seeded), train, and
    evaluate with the same features; redraw (or fine-tune after a redraw)
    only where the estimator's variance, not its adaptation, dominates.

    **Why performer-pytorch's FastAttention shows a smaller error.**
    performer-pytorch's ``softmax_kernel`` adds ``eps = 1e-4`` to every
    feature after subtracting a per-row maximum (queries) and one maximum over
    all keys and features of a sequence (keys).  With ``eps = 0`` and the same
    projection matrix its output equals this module's to float32 rounding.
    The ``eps`` is a data-dependent shrinkage towards uniform attention (the
    mean of V): at logit std 1 (L = 1024, m = 130) 99.8% of the key features
    fall below it and it carries 98% of the key mass.  Relative output error
    against exact softmax attention, L = 1024, d = 64, m = 130, synthetic
    Q, K, V of :func:`~montecarlo.experiments.attention.synthetic_qkv`,
    mean +- standard error over 10 draws of the same matrices in both
    (:func:`montecarlo.performer.fast_attention_errors`, defaults):

    =========  ==========  ==============  ==============  ==============  ========
    logit std  coupling    this module     FastAttention   FastAttention   mean(V)
                                                           vs mean(V)      vs exact
    =========  ==========  ==============  ==============  ==============  ========
    0.25       orthogonal  0.242 +- 0.014  0.227 +- 0.013  0.286 +- 0.016  0.193
    0.25       simplex     0.223 +- 0.012  0.208 +- 0.011  0.267 +- 0.013  0.193
    0.5        orthogonal  0.540 +- 0.022  0.370 +- 0.011  0.336 +- 0.025  0.368
    0.5        simplex     0.537 +- 0.019  0.374 +- 0.012  0.330 +- 0.032  0.368
    1          orthogonal  0.914 +- 0.026  0.607 +- 0.001  0.040 +- 0.006  0.613
    1          simplex     0.940 +- 0.023  0.608 +- 0.001  0.047 +- 0.008  0.613
    =========  ==========  ==============  ==============  ==============  ========

    At logit std 1 FastAttention's output is within 5% of the mean of V: its
    error is that of uniform attention (bias); this module's error is the
    variance of the unbiased estimator, which the coupling reduces and which
    shrinks as m grows.  To compare couplings, use the unbiased form.

    Examples
    --------
    >>> att = PRFAttention(64, 130, "simplex", seed=0)
    >>> q = k = v = torch.randn(2, 4, 100, 64)
    >>> att(q, k, v).shape
    torch.Size([2, 4, 100, 64])
    >>> att(q.bfloat16(), k.bfloat16(), v.bfloat16()).dtype
    torch.bfloat16
    """

    def __init__(self, d_head, n_features=130, coupling="simplex", *, kind="prf", kind_params=None, causal=False,
                 scale=None, seed=None, generator=None, redraw_every=None, chunk=None, check_inputs=False,
                 dtype=torch.float32, device=None):
        super().__init__()
        self.d_head = check_int(d_head, "d_head", 1)
        self.n_features = check_int(n_features, "n_features", 1)
        self.coupling = check_coupling(coupling)
        check_dimension(self.d_head, self.coupling, "d_head")
        self.kind = kinds.check_kind(kind, "kind", has=("log_features",), positive=True)
        rec = kinds.get(self.kind)
        if "softmax" not in rec.kernels:
            raise ValueError(f"kind must estimate the softmax kernel, got {kind!r} (kernels {rec.kernels})")
        self.kind_params = self._check_kind_params(rec, kind_params, self.d_head)
        self.causal = check_bool(causal, "causal")
        self.scale = 1.0 / math.sqrt(self.d_head) if scale is None else check_positive_float(scale, "scale")
        self.redraw_every = None if redraw_every is None else check_int(redraw_every, "redraw_every", 1)
        if chunk is not None:
            chunk = check_int(chunk, "chunk", 1)
            if chunk & (chunk - 1):
                raise ValueError(f"chunk must be a power of two (1, 2, 4, ..., 64, ...), got {chunk}")
        self.chunk = chunk
        self.check_inputs = check_bool(check_inputs, "check_inputs")
        storage = _storage_dtype(dtype)
        device = check_device(device)
        if device is None:  # torch's default device, as nn.Linear (with torch.device("meta"): meta buffers)
            default = getattr(torch, "get_default_device", lambda: None)()
            device = default if default is not None and default.type != "cpu" else None
        if generator is not None and seed is not None:
            raise ValueError("give seed or generator, not both")
        self._generator = check_generator(generator)
        self._seeded = seed is not None or generator is not None  # (unseeded redraws differ between ranks)
        self._rng = np.random.default_rng(check_rng(seed, "seed"))  # (a Generator given: that object itself)
        # where reset_parameters draws again; None for a numpy Generator the caller passed (their stream, which
        # other modules may share: never rewound, as a torch.Generator)
        self._draw_state = None if isinstance(seed, np.random.Generator) else self._rng.bit_generator.state
        self._frozen = False
        self._calls = 0
        self._draws = 0  # projections drawn or loaded so far: a DecodingState records it (step)
        # drawn before anything is allocated: sample_weights bounds the memory that n_features x d_head asks for
        self.register_buffer("weights", self._draw(device, storage))
        self._data_driven = tuple(p for p in rec.parameters if p not in self.kind_params)
        for name in ("log_features", "linear_log_features", "data_parameters"):  # the kind's modules imported
            if rec.has(name):  # now: an import inside forward would break a torch.compile graph
                kinds.hook(self.kind, name)
        if self._data_driven:
            # running mean of |q' + k'|^2 / d for causal attention (0: plain PRFs until the first training batch)
            self.register_buffer("running_rho", torch.zeros((), dtype=storage, device=device))
            self.register_buffer("running_steps", torch.zeros((), dtype=torch.long, device=device))

    @staticmethod
    def _check_kind_params(rec, kind_params, d):
        if kind_params is None:
            kind_params = {}
        if not isinstance(kind_params, dict):
            raise TypeError(f"kind_params must be None or a dict of the kind's parameters {rec.parameters}, "
                            f"got {describe(kind_params)}")
        unknown = [p for p in kind_params if p not in rec.parameters]
        if unknown:
            allowed = ", ".join(repr(p) for p in rec.parameters) or "none"
            raise ValueError(f"kind_params has {unknown[0]!r}, which kind={rec.name!r} does not take "
                             f"(its parameters: {allowed})")
        missing = [p for p in rec.parameters if p not in kind_params and not rec.has("data_parameters")]
        if missing:
            raise ValueError(f"kind_params must give {missing[0]!r} for kind={rec.name!r} (no data-driven "
                             "choice is known for it)")
        out = {}
        for p, value in kind_params.items():
            if isinstance(value, torch.Tensor):
                raise TypeError(f"kind_params[{p!r}] must be a real number, got a tensor")
            out[p] = float(check_real(value, f"kind_params[{p!r}]"))
        if out and rec.has("float_parameters"):  # the kind's own rule for given values (oprf: A < 1/8), now and
            try:  # not at the first forward
                kinds.hook(rec.name, "float_parameters")(d, 0.0, **out)
            except ValueError as exc:
                raise ValueError(f"kind_params={kind_params} for kind={rec.name!r}: {exc}") from None
        return out

    @classmethod
    def from_weights(cls, weights, **kwargs):
        """A module with the given (m, d) projections (e.g. shared with numpy code), frozen."""
        if not isinstance(weights, torch.Tensor):
            weights = torch.as_tensor(np.asarray(weights))
        if weights.ndim != 2:
            raise ValueError(f"weights must be an (m, d) tensor, got shape {tuple(weights.shape)}")
        if not weights.dtype.is_floating_point:
            raise ValueError(f"weights must hold real floating numbers, got dtype {weights.dtype}")
        if weights.device.type != "meta" and not bool(torch.isfinite(weights).all()):  # (once, at construction)
            raise ValueError("weights must be finite (found NaN or inf)")
        kwargs.setdefault("dtype", weights.dtype if weights.dtype in STORAGE_DTYPES else torch.float32)
        mod = cls(weights.shape[1], weights.shape[0], device=weights.device, **kwargs)
        with torch.no_grad():
            mod.weights.copy_(weights)
        mod.freeze()
        return mod

    # -- random features -------------------------------------------------

    def _draw(self, device, dtype):
        """(n_features, d_head) projections of the module's coupling from its stream; an oversized request is an
        AllocationError in the module's own words (n_features, d_head)."""
        try:
            return draw_projections(self.coupling, self.d_head, self.n_features, generator=self._generator,
                                    rng=self._rng, device=device, dtype=dtype)
        except AllocationError as exc:
            raise AllocationError(f"PRFAttention(d_head={self.d_head}, n_features={self.n_features}) asks for "
                                  f"(n_features, d_head) = ({self.n_features}, {self.d_head}) projections: reduce "
                                  f"n_features (the sampler says: {exc})") from None

    @torch.no_grad()
    def redraw(self):
        """Draw fresh projections of the module's coupling (in place, on its device and dtype)."""
        self.weights.copy_(self._draw(self.weights.device, self.weights.dtype))
        self._draws = getattr(self, "_draws", 0) + 1  # (a decoding state built on the old projections is refused)
        self._calls = 0
        return self

    @torch.no_grad()
    def reset_parameters(self):
        """The projections drawn again as at construction, the redraw counter and running statistics zeroed:
        what a module built on the meta device (``device="meta"`` or ``with torch.device("meta")``) needs after
        ``to_empty(device=...)``, which leaves its buffers uninitialised (FSDP's and torch's convention for
        deferred initialisation).  With a seed, the numpy stream is rewound to where construction drew (a deep
        copy: to where it forked), so the projections equal those of the module built on a real device; with a
        ``torch.Generator`` or a ``numpy.random.Generator`` passed as ``seed`` (the caller's stream, which other
        modules may share: never rewound) they are its next draw."""
        if self._generator is None and self._draw_state is not None:
            self._rng.bit_generator.state = self._draw_state
        self.redraw()
        for name in ("running_rho", "running_steps"):
            if name in self._buffers:
                self._buffers[name].zero_()
        return self

    @_run_eagerly("PRFAttention(redraw_every=...) redraws its projections inside forward in training mode, "
                  "which runs eagerly (a graph break): torch.compile(..., fullgraph=True) needs redraw_every=None "
                  "(call redraw() outside the compiled model), eval(), or freeze()")
    def _redraw_schedule(self):
        """One training-mode forward of ``redraw_every``: redraw when due, count the call (not in a forward that
        the backward recomputes: activation checkpointing).  Runs eagerly under torch.compile (one graph
        break: the samplers are numpy and generator code), so that a compiled module redraws as an eager one."""
        if _in_backward():
            return
        if self._calls >= self.redraw_every:
            if not getattr(self, "_seeded", True) and _distributed():  # (modules pickled before it: no flag)
                import warnings

                warnings.warn("PRFAttention redraws its projections inside forward without a seed under "
                              "torch.distributed: each rank draws its own (DistributedDataParallel broadcasts "
                              "buffers before the forward, not after the redraw), so the ranks' estimators differ; "
                              "give every rank the same seed= (or generator state)", RuntimeWarning, stacklevel=3)
            self.redraw()
        self._calls += 1

    def freeze(self):
        """Keep the current features: no automatic redraws (explicit :meth:`redraw` still works)."""
        self._frozen = True
        return self

    def unfreeze(self):
        """Allow the automatic redraws of ``redraw_every`` again."""
        self._frozen = False
        return self

    @property
    def frozen(self):
        """Whether automatic redraws are off."""
        return self._frozen

    @property
    def calls_since_redraw(self):
        """Training-mode forward passes since the last redraw (the counter of ``redraw_every``)."""
        return self._calls

    def _apply(self, fn, *args, **kwargs):
        """``.to()``, ``.half()``, ``.cuda()``...: the projections follow the device but never drop below
        float32 (a bfloat16 copy of a simplex block is not a simplex block); so do the running statistics."""
        before = {k: self._buffers[k] for k in ("weights", "running_rho") if k in self._buffers}
        out = super()._apply(fn, *args, **kwargs)
        for k, old in before.items():
            after = self._buffers[k]
            if after is not None and after.dtype not in STORAGE_DTYPES:
                self._buffers[k] = old.to(device=after.device)
        return out

    def __deepcopy__(self, memo):
        """An exact copy of the current state whose random stream is forked (module docs); streams that several
        modules share (one ``torch.Generator``, or one ``numpy.random.Generator`` passed as ``seed``) are forked
        once per deep copy, and the copies share the fork (the copy's ``memo``)."""
        cls = self.__class__
        new = cls.__new__(cls)
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if key in ("_rng", "_generator"):
                continue
            new.__dict__[key] = copy.deepcopy(value, memo)
        shared = self._draw_state is None  # (the caller's numpy Generator: other modules may draw from it too)
        new._rng = _forked(self._rng, memo, lambda rng: rng.spawn(1)[0]) if shared else self._rng.spawn(1)[0]
        new._draw_state = None if shared else new._rng.bit_generator.state  # (reset_parameters: its own fork)
        new._generator = None if self._generator is None else _forked(self._generator, memo, fork_generator)
        return new

    def get_extra_state(self):
        """Redraw counter, frozen flag and the random stream's position with, for a numpy stream, its seed
        sequence (the spawn counter: a resumed run's deep copies fork as the uninterrupted run's); plain ints,
        strings, lists, dicts and a uint8 tensor, loadable with ``weights_only=True`` for every numpy bit
        generator."""
        numpy_rng = seed_seq = None
        if self._generator is None:
            numpy_rng = _plain(self._rng.bit_generator.state)
            seq = getattr(self._rng.bit_generator, "seed_seq", None)
            if isinstance(seq, np.random.SeedSequence):
                seed_seq = _plain({"entropy": seq.entropy, "spawn_key": list(seq.spawn_key),
                                   "pool_size": seq.pool_size, "n_children_spawned": seq.n_children_spawned})
        return {"version": _STATE_VERSION, "coupling": self.coupling, "calls": int(self._calls),
                "frozen": bool(self._frozen), "numpy_rng": numpy_rng, "seed_seq": seed_seq,
                "torch_rng": None if self._generator is None else self._generator.get_state()}

    def set_extra_state(self, state):
        if not isinstance(state, dict) or state.get("version") not in (1, _STATE_VERSION):
            raise ValueError(f"PRFAttention extra state must be a dict of version 1 or {_STATE_VERSION}, "
                             f"got {describe(state)}")
        if (state["torch_rng"] is None) != (self._generator is None):
            have = "a torch.Generator" if self._generator is not None else "a numpy seed"
            saved = "a numpy seed" if state["torch_rng"] is None else "a torch.Generator"
            raise ValueError(f"the state was saved by a module drawing from {saved}, this one draws from {have}: "
                             "build it the same way (seed= or generator=) before load_state_dict")
        saved = state.get("coupling", self.coupling)  # (states saved before the coupling was recorded: any)
        if saved != self.coupling:
            raise ValueError(f"the state holds projections of coupling {saved!r}, this module draws {self.coupling!r}: "
                             f"build it with coupling={saved!r} (its later redraws follow the module's coupling), or "
                             "take the projections alone with PRFAttention.from_weights(state['weights'], ...)")
        if state["torch_rng"] is None:
            rng = _restored_rng(self._rng, _unplain(state["numpy_rng"]), _unplain(state.get("seed_seq")),
                                own=self._draw_state is not None)
        self._calls = int(state["calls"])
        self._frozen = bool(state["frozen"])
        if state["torch_rng"] is None:
            self._rng = rng
        else:
            self._generator.set_state(state["torch_rng"])

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._draws = getattr(self, "_draws", 0) + 1  # (new projections: decoding states of the old are refused)

    def extra_repr(self):
        return (f"d_head={self.d_head}, n_features={self.n_features}, coupling={self.coupling!r}, "
                f"kind={self.kind!r}, causal={self.causal}, redraw_every={self.redraw_every}, "
                f"frozen={self._frozen}")

    # -- input checks ----------------------------------------------------------

    def _check(self, q, k, v, key_padding_mask, query_padding_mask):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.ndim < 2:
                raise ValueError(f"{name} must have shape (..., L, d), got {tuple(t.shape)}")
            if t.dtype not in INPUT_DTYPES:
                raise TypeError(f"{name} must be float32, float64, bfloat16 or float16, got {t.dtype}")
            if t.device != self.weights.device:
                raise ValueError(f"{name} is on {t.device} but the module is on {self.weights.device} "
                                 "(move the module with .to(device))")
            if t.shape[-2] == 0:
                raise ValueError(f"{name} must hold at least one position (L >= 1), got shape {tuple(t.shape)}")
        if not (q.dtype == k.dtype == v.dtype):
            raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
        if q.shape[-1] != self.d_head or k.shape[-1] != self.d_head:
            raise ValueError(f"q and k must have last dimension d_head = {self.d_head}, "
                             f"got {tuple(q.shape)} and {tuple(k.shape)}")
        if v.shape[-2] != k.shape[-2]:
            raise ValueError(f"v must have shape (..., L_k, d_v) with L_k = {k.shape[-2]} keys, got {tuple(v.shape)}")
        if self.causal and q.shape[-2] != k.shape[-2]:
            raise ValueError(f"causal attention needs as many queries as keys, got {q.shape[-2]} and {k.shape[-2]}")
        shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
        for name, mask, length, of in (("key_padding_mask", key_padding_mask, k.shape[-2], "L_k"),
                                       ("query_padding_mask", query_padding_mask, q.shape[-2], "L_q")):
            if mask is None:
                continue
            if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
                raise TypeError(f"{name} must be a bool tensor (..., {of}), True at padded positions, got "
                                f"{getattr(mask, 'dtype', type(mask).__name__)}")
            if mask.ndim < 1 or mask.shape[-1] != length:
                raise ValueError(f"{name} must have shape (..., {of}) with {of} = {length}, "
                                 f"got {tuple(mask.shape)}")
            if mask.device != k.device:
                raise ValueError(f"{name} is on {mask.device}, k on {k.device}")
            shapes.append(mask.shape[:-1])
        if query_padding_mask is not None and not self._data_driven:
            raise ValueError("query_padding_mask only matters for a kind whose parameters are taken from the data "
                             f"(kind={self.kind!r} with kind_params={self.kind_params}); drop it")
        try:
            lead = _broadcast_shapes(*shapes)
        except RuntimeError:
            raise ValueError("the leading (batch, head) shapes of q, k, v and the padding masks must broadcast, "
                             f"got {[tuple(s) for s in shapes]}") from None
        compute = self._compute_dtype(q.dtype)
        if self.scale > torch.finfo(compute).max:  # (a Python float: no synchronisation)
            raise ValueError(f"scale = {self.scale:.3g} is beyond the range of {_dtype_name(compute)}, the dtype the "
                             f"features of {_dtype_name(q.dtype)} inputs are computed in here (largest "
                             f"{torch.finfo(compute).max:.3g}): every output would be NaN; compute in float64 "
                             "(float64 inputs, or a module built with dtype=torch.float64) or use a smaller scale")
        if self.check_inputs:
            for name, t in (("q", q), ("k", k), ("v", v)):
                if not torch.isfinite(t).all():
                    raise ValueError(f"{name} must be finite (found NaN or inf; check_inputs=True)")
        return tuple(lead)

    def _compute_dtype(self, dtype):
        """The dtype of the feature computations for inputs of ``dtype`` (module docs, "Precision")."""
        return torch.float64 if torch.float64 in (self.weights.dtype, dtype) else torch.float32

    def _check_range(self, lq, lk, compute):
        """ValueError naming q or k where a log-feature is not finite or exceeds :func:`input_range` (a
        synchronisation each; ``check_inputs=True``)."""
        limit = input_range(compute, self.causal)
        for name, lf in (("q", lq), ("k", lk)):
            if lf.numel() == 0:
                continue
            top = float(lf.detach().abs().amax())
            if top <= limit:
                continue
            reach = f"reach |l| = {top:.3g}" if math.isfinite(top) else "are not finite (they overflow)"
            mode = "causal" if self.causal else "bidirectional"
            hint = ("compute in float64 (float64 inputs, or a module built with dtype=torch.float64), or use a "
                    "smaller scale or smaller inputs" if compute != torch.float64 else
                    "use a smaller scale or smaller inputs")
            raise ValueError(f"{name}'s log-features {reach} (about s|{name}|^2/2, scale s = "
                             f"{self.scale:.3g}), beyond {limit:.3g}, the range in which {mode} attention computed in "
                             f"{_dtype_name(compute)} is exact (montecarlo.nn.input_range; module docs, \"Range of "
                             f"the inputs\"): its outputs would be NaN or wrong; {hint} (check_inputs=True)")

    # -- data-driven kind parameters -----------------------------------------

    def _rho(self, q, k, key_padding_mask, query_padding_mask):
        r"""Per sequence :math:`\overline{\|q'_i + k'_j\|^2}/d` over the unpadded queries and keys (detached;
        :func:`montecarlo.oprf.batch_pair_statistic` of the scaled inputs)."""
        with torch.no_grad():  # (and detached: no_grad does not stop forward-mode tangents, torch.func.jvp's)
            s = math.sqrt(self.scale)
            return batch_pair_statistic(s * q.detach(), s * k.detach(), query_padding_mask, key_padding_mask, _XP)

    def _params(self, q, k, key_padding_mask, query_padding_mask):
        params = dict(self.kind_params)
        if not self._data_driven:
            return params
        if self.causal:
            if self.training and _in_backward():
                raise RuntimeError(
                    f"PRFAttention(kind={self.kind!r}, causal=True) takes {', '.join(self._data_driven)} from running "
                    "statistics that moved after the forward pass this backward pass recomputes (activation "
                    "checkpointing): the recomputed forward would use another value; give kind_params, or use "
                    "eval() or no checkpointing for this module")
            if self.training and _transformed():
                raise RuntimeError(
                    f"PRFAttention(kind={self.kind!r}, causal=True) in training mode updates running statistics "
                    f"for {', '.join(self._data_driven)} in place, which torch.func transforms (vmap, grad, jvp, "
                    "...) cannot do; give kind_params, or use eval() inside the transform")
            if self.training:  # the statistics of this batch serve the next forward passes
                with torch.no_grad():
                    rho = self._rho(q, k, key_padding_mask, query_padding_mask).mean().to(self.running_rho.dtype)
                    current = self.running_rho.clone()
                    rho = torch.where(torch.isfinite(rho), rho, current)  # an overflowing batch leaves it (no sync)
                    mom = torch.clamp(1.0 / (self.running_steps + 1.0), min=RUNNING_MOMENTUM).to(rho.dtype)
                    self.running_rho.add_(mom * (rho - self.running_rho))
                    self.running_steps.add_(1)
            else:
                current = self.running_rho
            rho = current
        else:
            rho = self._rho(q, k, key_padding_mask, query_padding_mask)[..., None, None]
        chosen = kinds.hook(self.kind, "data_parameters")(rho, _XP)  # the kind's rule, on the device
        return {**params, **{p: chosen[p] for p in self._data_driven}}

    @staticmethod
    def _linear_form(w, rec, params):
        """The kind's log-features as rows and constants (its record's ``linear_log_features``) for the
        features' kernel, float32; None where the parameters are one per sequence."""
        w_sq = (w * w).sum(-1) if rec.needs_w_sq() else None
        form = kinds.hook(rec.name, "linear_log_features")(w, w.shape[0], _XP, w_sq=w_sq, d=w.shape[1], **params)
        if form is None:
            return None
        rows, bias = form
        bias = bias.to(torch.float32) if isinstance(bias, torch.Tensor) else float(bias)
        return rows.to(torch.float32), bias

    def _kernel_rows(self, w, rec, params):
        """The features' kernel's rows and constants (:func:`montecarlo._fused.feature_rows` of the kind's
        :meth:`_linear_form`), None where the parameters are one per sequence.  Kept between eager forward passes
        while they would come out the same: the projections the same tensor, unmodified (its version counter:
        a redraw or load_state_dict writes in place), the same scale and fixed kind parameters; not for
        parameters from the data, nor under torch.compile or for inference tensors (no version counter), nor
        while a CUDA graph is captured (its replays must read the projections themselves, so that a redraw
        between replays reaches them).  Saves three torch operators per forward."""
        from montecarlo import _fused

        keep = not (self._data_driven or _compiling() or w.is_inference() or _capturing(w))
        key = (self.scale, tuple(sorted(params.items()))) if keep else None
        cached = getattr(self, "_rows_cache", None)
        if keep and cached is not None and cached[0] is w and cached[1] == w._version and cached[2] == key:
            return cached[3]
        form = self._linear_form(w, rec, params)
        rows = None if form is None else _fused.feature_rows(*form, self.scale)
        self._rows_cache = (w, w._version, key, rows) if keep else None
        return rows

    def _features(self, q, k, w, w_sq, rec, params):
        """Log-features of queries and keys with one set of kind parameters.

        Data-driven parameters are tensors (one value per sequence, on the device: no synchronisation).  A
        kind whose map accepts only floats gets one value per forward instead (the mean over the batch's
        sequences), which costs one synchronisation; the module remembers the kind and goes there directly.
        """
        tensors = [p for p in self._data_driven if isinstance(params.get(p), torch.Tensor)]
        if tensors and self.kind in _FLOAT_PARAMETERS_ONLY:
            params = {**params, **{p: float(params[p].mean()) for p in tensors}}
            tensors = []
        try:
            return (_log_features(q, w, w_sq, rec, self.scale, params),
                    _log_features(k, w, w_sq, rec, self.scale, params))
        except (TypeError, ValueError):
            if not tensors:
                raise
            _FLOAT_PARAMETERS_ONLY.add(self.kind)
            return self._features(q, k, w, w_sq, rec, params)

    # -- forward -----------------------------------------------------------------

    def _log_features_pair(self, q, k, lead, compute, params_of):
        """Log-features of q and k (autocast off: the caller's region) through the features' kernel where it
        applies (CUDA, a kind with a linear form), else the kind's map; ``params_of(q, k)`` gives the kind
        parameters (q, k in the compute dtype where some come from the data).  Checked against
        :func:`input_range` with ``check_inputs``."""
        rec = kinds.get(self.kind)
        w = self.weights.to(compute)
        fast = rec.has("linear_log_features") and _fused_features_apply(q, w)  # q, k read in their dtype
        if not fast or self._data_driven:  # (data-driven parameters: statistics in the compute dtype)
            q, k = q.to(compute), k.to(compute)
        params = params_of(q, k)
        rows = self._kernel_rows(w, rec, params) if fast else None  # None: one A per sequence
        if rows is not None:
            from montecarlo import _fused  # (one pass over q and k each)

            lq, lk = _fused.scaled_log_features((q, k), *rows, self.scale)
        else:
            q, k = q.to(compute), k.to(compute)
            if self._data_driven and not self.causal:  # per-sequence parameters: features of the full lead
                q, k = q.expand(lead + q.shape[-2:]), k.expand(lead + k.shape[-2:])
            w_sq = (w * w).sum(-1) if rec.needs_w_sq() else None
            lq, lk = self._features(q, k, w, w_sq, rec, params)
        if self.check_inputs:
            self._check_range(lq, lk, compute)
        return lq, lk

    def forward(self, q, k, v, key_padding_mask=None, *, query_padding_mask=None):
        """Attention output for queries q (..., L_q, d), keys k (..., L_k, d) and values v (..., L_k, d_v).

        Parameters
        ----------
        q, k, v : torch.Tensor
            One dtype (float32, float64, bfloat16 or float16; under autocast,
            differing dtypes are cast to autocast's dtype, as SDPA does); leading shapes
            broadcast; L_q, L_k >= 1.  Cross-attention: L_q may differ from L_k
            (bidirectional only).
        key_padding_mask : torch.Tensor of bool, optional
            Shape (..., L_k), broadcasting against the leading shape; True
            marks padded keys, which are ignored (the convention of
            ``torch.nn.MultiheadAttention``).  A (B, L_k) mask with inputs of
            two or more leading axes (B, H, L, d) holds one row per batch
            element, as ``nn.MultiheadAttention``'s: it is read as (B, 1, L_k)
            (plain broadcasting would pair its rows with the heads); its first
            axis must then be 1 or B.  A query that sees no key (all
            keys masked, or in the causal case all keys up to its position)
            gets output 0 and zero gradient.
        query_padding_mask : torch.Tensor of bool, optional
            Shape (..., L_q) (a (B, L_q) mask as ``key_padding_mask``'s), True
            at padded queries: only used by kinds whose parameters come from
            the data (oprf without A), to leave padded
            queries out of the statistics (in self-attention pass the key mask).

        Returns
        -------
        torch.Tensor (..., L_q, d_v)
            In the input dtype.
        """
        if _mixed_under_autocast(q, k, v):  # as SDPA under autocast: one dtype, autocast's
            target = torch.get_autocast_dtype(q.device.type)
            q, k, v = q.to(target), k.to(target), v.to(target)
        key_padding_mask = _batch_first_mask(key_padding_mask, (q, k, v), "key_padding_mask")
        query_padding_mask = _batch_first_mask(query_padding_mask, (q, k, v), "query_padding_mask")
        lead = self._check(q, k, v, key_padding_mask, query_padding_mask)
        if self.training and not self._frozen and self.redraw_every is not None:
            if _exporting():  # (an exported program is one traced forward: it would never redraw)
                raise RuntimeError("PRFAttention with redraw_every in training mode cannot be exported: torch.export "
                                   "traces one forward, so the exported program would never redraw; export in "
                                   "eval() mode, after freeze(), or with redraw_every=None (and redraw the "
                                   "program's 'weights' buffer yourself)")
            self._redraw_schedule()
        out_dtype = q.dtype
        compute = self._compute_dtype(q.dtype)
        with _no_autocast(q.device.type):
            lq, lk = self._log_features_pair(q, k, lead, compute,
                                             lambda q, k: self._params(q, k, key_padding_mask, query_padding_mask))
            if not self.causal:  # (the causal scan casts v where it needs to: _causal)
                v = v.to(compute)
            seen = None
            if key_padding_mask is not None:
                lk = _mask_keys(lk, key_padding_mask, lead)
                keep = ~key_padding_mask
                if self.causal:
                    seen = (torch.cumsum(keep, dim=-1) > 0).unsqueeze(-1)  # (..., L, 1)
                else:
                    seen = keep.any(-1)[..., None, None]
            if self.causal:
                chunk = self.chunk or DEFAULT_CHUNK.get(q.device.type, DEFAULT_CHUNK["cuda"])
                out = _causal(lq, lk, v, chunk, seen, half=out_dtype in (torch.bfloat16, torch.float16),
                              out_dtype=out_dtype)
            else:
                out = _bidirectional(lq, lk, v, seen)
        return out.to(out_dtype)


    # -- decoding token by token ----------------------------------------------

    def step(self, q, k, v, state=None, *, key_padding_mask=None):
        r"""One position of causal attention for generation: ``out_t, state = attn.step(q_t, k_t, v_t, state)``.

        The recurrent state holds, per feature f, the running maximum :math:`o_f = \max_{j \le t}\ell_f(k_j)`
        of the keys' log-features and the sums :math:`S_f = \sum_{j \le t} e^{\ell_f(k_j) - o_f}[v_j, 1]`
        (values and key mass), the log-space stabilised form of the causal scan (module docs): each new key
        rescales the sums by :math:`e^{o_f - o'_f} \le 1`, and the query's row offset
        :math:`r = \max_f(\ell_f(q_t) + o_f)` makes every exponent :math:`\le 0` and the key mass :math:`\ge 1`.
        So the outputs of L steps equal :meth:`forward` over the L positions (float64: to about 1e-15
        relative; float32: to the forward's own rounding), at a cost per token independent of the position:
        O(m d_v) work and memory.  Nothing here redraws, counts towards ``redraw_every``, or moves running
        statistics; a kind parameter taken from the data (oprf's A from the running statistics) is fixed at
        the first step and kept in the state.

        Parameters
        ----------
        q, k, v : torch.Tensor
            (..., 1, d), (..., 1, d), (..., 1, d_v): the query, key and value of the new position (leading
            shapes broadcast, and match the state's after the first step).
        state : DecodingState, optional
            The state returned by the previous step of this module (None: the first position).
        key_padding_mask : torch.Tensor of bool, optional
            (..., 1), True where the new key is padding: it is not added to the state (the query still reads
            the earlier keys; a query that has seen no key gets 0, as in :meth:`forward`).

        Returns
        -------
        (torch.Tensor, DecodingState)
            The output (..., 1, d_v) in the input dtype and the state after this position.

        Raises
        ------
        ValueError
            On a module that is not causal, inputs of more than one position, or a state of another module, of
            other projections (a redraw or ``load_state_dict`` since it was built), shape, dtype or device.
        """
        if not self.causal:
            raise ValueError("step() decodes causal attention: build the module with causal=True")
        if _mixed_under_autocast(q, k, v):
            target = torch.get_autocast_dtype(q.device.type)
            q, k, v = q.to(target), k.to(target), v.to(target)
        key_padding_mask = _batch_first_mask(key_padding_mask, (q, k, v), "key_padding_mask")
        lead = self._check(q, k, v, key_padding_mask, None)
        if q.shape[-2] != 1:
            raise ValueError(f"step() takes one position: q, k and v of shape (..., 1, d), got {tuple(q.shape)}; "
                             "forward() takes whole sequences")
        out_dtype = q.dtype
        compute = self._compute_dtype(q.dtype)
        if state is None:
            params = self._decoding_params()
        else:
            lead = self._check_state(state, lead, v.shape[-1], compute, q.device)
            params = state.params
        with _no_autocast(q.device.type):
            lq, lk = self._log_features_pair(q, k, lead, compute, lambda q, k: params)
            if key_padding_mask is not None:
                lk = torch.where(key_padding_mask.unsqueeze(-1), -math.inf, lk)
            lq, lk = lq.expand(lead + lq.shape[-2:])[..., 0, :], lk.expand(lead + lk.shape[-2:])[..., 0, :]
            vt = v.to(compute).expand(lead + v.shape[-2:])[..., 0, :]
            out, sums, offset = _decode(lq, lk, vt, None if state is None else state.sums,
                                        None if state is None else state.offset)
        new = DecodingState(sums, offset, params, id(self), getattr(self, "_draws", 0))
        return out.unsqueeze(-2).to(out_dtype), new

    def prefill(self, q, k, v, key_padding_mask=None):
        """Causal attention over a prompt and the decoding state after it: ``out, state = attn.prefill(q, k, v)``,
        then :meth:`step` from ``state`` (the same outputs as :meth:`step` over the prompt, in one pass).

        Parameters
        ----------
        q, k, v, key_padding_mask
            As :meth:`forward` (causal: as many queries as keys).

        Returns
        -------
        (torch.Tensor, DecodingState)
            :meth:`forward`'s output and the state after the last position.
        """
        if not self.causal:
            raise ValueError("prefill() decodes causal attention: build the module with causal=True")
        params = self._decoding_params()  # (before forward: the running statistics its training mode moves)
        out = self(q, k, v, key_padding_mask)
        if _mixed_under_autocast(q, k, v):
            target = torch.get_autocast_dtype(q.device.type)
            q, k, v = q.to(target), k.to(target), v.to(target)
        key_padding_mask = _batch_first_mask(key_padding_mask, (q, k, v), "key_padding_mask")
        lead = _broadcast_shapes(*(t.shape[:-2] for t in (q, k, v)),
                                 *(() if key_padding_mask is None else (key_padding_mask.shape[:-1],)))
        compute = self._compute_dtype(q.dtype)
        with _no_autocast(q.device.type):
            _, lk = self._log_features_pair(k[..., :1, :], k, lead, compute, lambda q, k: params)
            if key_padding_mask is not None:
                lk = torch.where(key_padding_mask.unsqueeze(-1), -math.inf, lk)
            lk = lk.expand(lead + lk.shape[-2:])
            with torch.no_grad():
                offset = lk.detach().amax(-2).clamp_min(_very_negative(lk.dtype))
            sums = (lk - offset.unsqueeze(-2)).exp().transpose(-1, -2) @ _with_ones(v.to(compute).expand(
                lead + v.shape[-2:]))
        return out, DecodingState(sums, offset, params, id(self), getattr(self, "_draws", 0))

    def _decoding_params(self):
        """The kind parameters of a new decoding state: the given ones, and those taken from the data by the
        kind's rule from the running statistics as they are (not moved)."""
        params = dict(self.kind_params)
        if self._data_driven:
            with torch.no_grad():
                chosen = kinds.hook(self.kind, "data_parameters")(self.running_rho.detach().clone(), _XP)
            params.update({p: chosen[p] for p in self._data_driven})
        return params

    def _check_state(self, state, lead, dv, compute, device):
        """The leading shape of a step with ``state`` (ValueError where the state does not belong here)."""
        if not isinstance(state, DecodingState):
            raise TypeError(f"state must be None or the DecodingState of this module's previous step, got "
                            f"{describe(state)}")
        if state.owner != id(self):
            raise ValueError("state was built by another PRFAttention module: decode each module with its own "
                             "states")
        if state.draws != getattr(self, "_draws", 0):
            raise ValueError("state was built with other projections (the module redrew or loaded new ones since): "
                             "start a new state (state=None) and decode the sequence again")
        have = tuple(state.sums.shape[:-2])
        try:
            joint = _broadcast_shapes(lead, have)
        except RuntimeError:
            joint = None
        if joint != have or state.sums.shape[-1] != dv + 1:
            raise ValueError(f"q, k, v of leading shape {lead} and d_v = {dv} do not fit a state of leading shape "
                             f"{have} and d_v = {state.sums.shape[-1] - 1}")
        if state.sums.dtype != compute or state.sums.device != device:
            raise ValueError(f"state holds {state.sums.dtype} on {state.sums.device}, this step computes in "
                             f"{compute} on {device}: keep one input dtype and device for a sequence")
        return have


class DecodingState(NamedTuple):
    r"""The recurrent state of :meth:`PRFAttention.step` (a named tuple: a pytree for ``torch.compile`` and
    ``torch.utils._pytree``).

    Attributes
    ----------
    sums : torch.Tensor
        (..., width m, d_v + 1): :math:`S_f = \sum_{j \le t} e^{\ell_f(k_j) - o_f}[v_j, 1]`.
    offset : torch.Tensor
        (..., width m): :math:`o_f`, the running maximum of the keys' log-features (a very negative finite
        number before the first unpadded key).
    params : dict
        The kind parameters the state was built with (oprf's A from the data: fixed for the sequence).
    owner : int
        ``id`` of the module that built it.
    draws : int
        Which of the module's projections it was built with (its count of draws and loads).
    """

    sums: torch.Tensor
    offset: torch.Tensor
    params: dict
    owner: int
    draws: int


def _decode(lq, lk, v, sums, offset):
    r"""One step of the stabilised recurrence (:meth:`PRFAttention.step`): ``lq``, ``lk`` (..., M) the new
    position's log-features (padded key: -inf), ``v`` (..., d_v), the previous ``sums`` (..., M, d_v + 1) and
    ``offset`` (..., M) or None.  Returns the output (..., d_v) and the new sums and offset.  The offsets are
    detached constants (they cancel), as in the scan."""
    neg = _very_negative(lk.dtype)
    with torch.no_grad():
        new = lk.detach().clamp_min(neg) if offset is None else torch.maximum(offset, lk.detach())
    add = (lk - new).exp().unsqueeze(-1) * _with_ones(v).unsqueeze(-2)  # (..., M, D); exponents <= 0
    sums = add if sums is None else torch.addcmul(add, sums, (offset - new).exp().unsqueeze(-1))
    with torch.no_grad():
        r = (lq.detach() + new).amax(-1, keepdim=True)
    eq = (lq + new - r).exp()  # <= 1, one of them 1
    nd = (eq.unsqueeze(-2) @ sums).squeeze(-2)  # (..., D)
    seen = sums[..., -1].detach().amax(-1, keepdim=True) > 0  # a key seen: its feature's mass is >= 1
    return _ratio(nd, seen), sums, new


from montecarlo._mha import PRFMultiheadAttention  # noqa: E402  (it builds on PRFAttention above)
from montecarlo._attention_error import (AttentionError, attention_error, measured_attention_error,  # noqa: E402,F401
                                         plan_attention)

if __name__ == "__main__":  # python -m montecarlo.nn plan|grid ...
    import sys

    from montecarlo._attention_error import main

    sys.exit(main())
