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
where Triton is importable the whole scan is one operator (:func:`montecarlo.nn._fused.causal`: a registered
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
  ``montecarlo.nn._fused`` (which registers them; ``montecarlo.nn`` imports it
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

import sys
import types

from montecarlo.nn import _features, _module
from montecarlo.nn._attention_error import AttentionError, attention_error, measured_attention_error, plan_attention
from montecarlo.nn._dispatch import FUSED
from montecarlo.nn._features import check_device, draw_projections, hook_extras, input_range, oprf_a
from montecarlo.nn._mha import PRFMultiheadAttention
from montecarlo.nn._module import RUNNING_MOMENTUM, DecodingState, PRFAttention
from montecarlo.nn._scan import DIRECT_BLOCK, GROUP_ENTRIES, PRODUCT_STATES
from montecarlo.nn._streams import check_generator, fork_generator

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
STORAGE_DTYPES = _features.STORAGE_DTYPES
#: Input dtypes the module accepts (features computed in float32 for the half types).
INPUT_DTYPES = _features.INPUT_DTYPES
#: Default chunk length of the causal scan per device type (a power of two).  On a GPU the fused kernels'
#: chunks: on an H100 (bf16, batch x heads 32, d 64, m 128, forward + backward) 128 took 35.6 ms at
#: L = 65536 against 41.0 for 256 and 51.6 for 512 (and 2.84 against 3.19 ms at 4096 under CUDA graphs), at
#: 12% more memory than 256 (benchmarks/README); on the CPU the within-chunk work dominates.
DEFAULT_CHUNK = _module.DEFAULT_CHUNK

#: The package's files in dependency order (each imports only files before it; ``_fused``, which needs Triton,
#: is imported by ``_dispatch`` and ``_module`` when the kernels first run).
_FILES = ("_probes", "_ops", "_scan", "_fused", "_dispatch", "_streams", "_features", "_module", "_mha",
          "_attention_error")


def _files():
    """The package's files imported so far, in :data:`_FILES` order."""
    return [m for m in (sys.modules.get(f"{__name__}.{f}") for f in _FILES) if m is not None]


class _Package(types.ModuleType):
    """``montecarlo.nn`` itself, one namespace over its files as when it was one file: a name set here
    (``montecarlo.nn.FUSED = False``, a test's ``monkeypatch.setattr``, ``mock.patch.object``) is set in every
    file that holds the same object (its home and the files that imported it); a file's private name is read
    through, and deleting one set here (``mock.patch``'s undo) restores its files' original."""

    def __getattr__(self, name):
        for mod in _files():
            if name in vars(mod):
                return vars(mod)[name]
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __setattr__(self, name, value):
        local = name in vars(self)
        old = vars(self)[name] if local else next((vars(m)[name] for m in _files() if name in vars(m)), _MISSING)
        if old is not _MISSING:
            if not local and _ORIGINALS.get(name, _MISSING) is value:  # (set back: the override has ended)
                del _ORIGINALS[name]
            elif not local:
                _ORIGINALS.setdefault(name, old)
            for mod in _files():
                if vars(mod).get(name, _MISSING) is old:
                    setattr(mod, name, value)
        if local or old is _MISSING:
            super().__setattr__(name, value)

    def __delattr__(self, name):
        if name in _ORIGINALS and name not in vars(self):
            self.__setattr__(name, _ORIGINALS[name])
        else:
            super().__delattr__(name)


_MISSING = object()
#: The files' values of read-through names before they were first set here (restored by ``del``).
_ORIGINALS: dict = {}


sys.modules[__name__].__class__ = _Package
