"""The torch module of :mod:`montecarlo.nn`: :class:`PRFAttention` (projections, redraws, checkpoints,
data-driven kind parameters, the forward pass) and its token-by-token decoding state."""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from montecarlo._checks import (AllocationError, check_bool, check_coupling, check_int, check_positive_float,
                                check_rng)
from montecarlo.nn._dispatch import _causal, _fused_features_apply
from montecarlo.nn._features import (_FLOAT_PARAMETERS_ONLY, _XP, INPUT_DTYPES, STORAGE_DTYPES, _dtype_name,
                                     _log_features, _storage_dtype, check_device, draw_projections, input_range)
from montecarlo.nn._ops import _bidirectional, _broadcast_shapes, _ratio, _very_negative, _with_ones
from montecarlo.nn._probes import (_capturing, _compiling, _distributed, _exporting, _in_backward,
                                   _mixed_under_autocast, _no_autocast, _run_eagerly, _transformed)
from montecarlo.nn._streams import _forked, _plain, _restored_rng, _unplain, check_generator, fork_generator
from montecarlo.features import FeatureMap, check_kind_params
from montecarlo.oprf import batch_pair_statistic
from theory import feature_kinds as kinds
from theory.registry import check_dimension
from theory.validation import describe


# (documented in montecarlo.nn)
DEFAULT_CHUNK = {"cpu": 64, "cuda": 128}
#: Momentum of the running statistics behind a data-driven kind parameter in causal attention.
RUNNING_MOMENTUM = 0.1
#: Version of the ``get_extra_state`` record.
_STATE_VERSION = 2


def _mask_keys(lk, key_padding_mask, lead):
    """``lk`` with -inf at padded keys, broadcast to ``lead``."""
    pad = key_padding_mask.unsqueeze(-1)
    if tuple(lk.shape[:-2]) == tuple(lead):
        return lk.masked_fill_(pad, -math.inf)
    return torch.where(pad, torch.tensor(-math.inf, dtype=lk.dtype, device=lk.device), lk)


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
        self.kind = kinds.check_kind(kind, "kind", kernel="softmax")
        rec = kinds.get(self.kind)
        if rec.has("prepare"):  # (the torch paths project on the directions themselves, untransformed)
            ok = [k for k in kinds.names(kernel="softmax") if not kinds.get(k).has("prepare")]
            raise ValueError(f"kind must be one of {', '.join(map(repr, ok))} here (a map that needs no transform of "
                             f"the directions), got {self.kind!r} (its prepare hook transforms them; "
                             "montecarlo.experiments.attention.sderf_attention runs SDERF attention in numpy)")
        self.kind_params = check_kind_params(self.kind, kind_params, name="kind_params", chosen="data", reals=True,
                                             d=self.d_head)
        self.causal = check_bool(causal, "causal")
        if self.causal and not rec.log_space:  # (the causal scan runs in log space: positive features only)
            raise ValueError(f"causal=True needs a kind computed in log space "
                             f"({', '.join(map(repr, kinds.names(log_space=True, kernel='softmax')))}): the causal "
                             f"scan is stabilised in log space, which features that can be negative (kind="
                             f"{self.kind!r}) do not have; use causal=False with kind={self.kind!r}")
        self._fmap = FeatureMap(self.kind, kernel="softmax", where="PRFAttention", chosen="data", **self.kind_params)
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
        kinds.load(self.kind)  # the kind's modules imported now: an import inside forward would break a compiled graph
        if self._data_driven:
            # running mean of |q' + k'|^2 / d for causal attention (0: plain PRFs until the first training batch)
            self.register_buffer("running_rho", torch.zeros((), dtype=storage, device=device))
            self.register_buffer("running_steps", torch.zeros((), dtype=torch.long, device=device))

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

    def _linear_form(self, w, params):
        """The kind's log-features as rows and constants (its record's ``linear_log_features``) for the
        features' kernel, float32; None where the parameters are one per sequence."""
        form = self._fmap.linear_form(w, params, _XP)
        if form is None:
            return None
        rows, bias = form
        bias = bias.to(torch.float32) if isinstance(bias, torch.Tensor) else float(bias)
        return rows.to(torch.float32), bias

    def _kernel_rows(self, w, rec, params):
        """The features' kernel's rows and constants (:func:`montecarlo.nn._fused.feature_rows` of the kind's
        :meth:`_linear_form`), None where the parameters are one per sequence.  Kept between eager forward passes
        while they would come out the same: the projections the same tensor, unmodified (its version counter:
        a redraw or load_state_dict writes in place), the same scale and fixed kind parameters; not for
        parameters from the data, nor under torch.compile or for inference tensors (no version counter), nor
        while a CUDA graph is captured (its replays must read the projections themselves, so that a redraw
        between replays reaches them).  Saves three torch operators per forward."""
        from montecarlo.nn import _fused

        keep = not (self._data_driven or _compiling() or w.is_inference() or _capturing(w))
        key = (self.scale, tuple(sorted(params.items()))) if keep else None
        cached = getattr(self, "_rows_cache", None)
        if keep and cached is not None and cached[0] is w and cached[1] == w._version and cached[2] == key:
            return cached[3]
        form = self._linear_form(w, params)
        rows = None if form is None else _fused.feature_rows(*form, self.scale)
        self._rows_cache = (w, w._version, key, rows) if keep else None
        return rows

    def _features(self, q, k, w, terms, params):
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
            return (_log_features(q, w, terms, self._fmap, self.scale, params),
                    _log_features(k, w, terms, self._fmap, self.scale, params))
        except (TypeError, ValueError):
            if not tensors:
                raise
            _FLOAT_PARAMETERS_ONLY.add(self.kind)
            return self._features(q, k, w, terms, params)

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
            from montecarlo.nn import _fused  # (one pass over q and k each)

            lq, lk = _fused.scaled_log_features((q, k), *rows, self.scale)
        else:
            q, k = q.to(compute), k.to(compute)
            if self._data_driven and not self.causal:  # per-sequence parameters: features of the full lead
                q, k = q.expand(lead + q.shape[-2:]), k.expand(lead + k.shape[-2:])
            lq, lk = self._features(q, k, w, self._fmap.direction_terms(w, xp=_XP), params)
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
        if not self._fmap.log_space:  # features that can be negative: no log space (bidirectional only)
            with _no_autocast(q.device.type):
                out = self._signed_bidirectional(q, k, v, key_padding_mask, query_padding_mask, lead, compute)
            return out.to(out_dtype)
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


    def _signed_bidirectional(self, q, k, v, key_padding_mask, query_padding_mask, lead, compute):
        r"""Bidirectional attention from features that can be negative (a kind not computed in log space, e.g.
        trigonometric softmax features): :math:`\phi(q)^\top S / \phi(q)^\top z` with
        :math:`S = \sum_j \phi(k_j)v_j^\top`, :math:`z = \sum_j\phi(k_j)`.  The kernel prefactor
        :math:`e^{-c\|x'\|^2}` of the features is left out of the queries' (a factor of each query's numerator
        and denominator) and divided by its largest value over each sequence's unpadded keys in the keys' (a
        factor of every numerator and denominator), so that it cannot overflow.  The denominator is an
        estimate of the key mass that can be near 0 or negative (the known weakness of these features)."""
        w = self.weights.to(compute)
        q, k, v = q.to(compute), k.to(compute), v.to(compute)
        params = self._params(q, k, key_padding_mask, query_padding_mask)
        terms = self._fmap.direction_terms(w, xp=_XP)
        c = self._fmap.c
        pad = None if key_padding_mask is None else key_padding_mask.unsqueeze(-1)

        def key_sq(sq):  # -c |k'|^2 less its largest value over the unpadded keys
            if not c:
                return sq
            e = -c * sq
            if pad is not None:
                e = torch.where(pad, -math.inf, e)
            o = e.detach().amax(-2, keepdim=True).clamp_min(_very_negative(e.dtype))
            return sq + o / c

        fq = _log_features(q, w, terms, self._fmap, self.scale, params, False, torch.zeros_like)
        fk = _log_features(k, w, terms, self._fmap, self.scale, params, False, key_sq)
        seen = None
        if pad is not None:
            fk = torch.where(pad, 0.0, fk)
            seen = (~key_padding_mask).any(-1)[..., None, None]
        return _ratio(fq @ (fk.transpose(-1, -2) @ _with_ones(v)), seen)

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
