r"""The toolkit's projection matrices inside performer-pytorch (a real client), and why its error differs.

The recipe, and why the error of performer-pytorch's own sampler differs: :ref:`guide-montecarlo.performer`
(``docs/guide/sampling.rst``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch

import montecarlo as mc
from montecarlo._checks import (
    check_budget,
    check_coupling,
    check_couplings,
    check_dimension,
    check_int,
    check_positive_float,
    check_rng,
)

from theory.validation import show_int

from .nn import check_generator, draw_projections, fork_generator

__all__ = ["PerformerProjection", "FastAttentionErrors", "fast_attention_errors", "performer_projection_matrix",
           "use_coupling"]


def performer_projection_matrix(dim_heads, nb_features, coupling="simplex", *, generator=None, seed=None,
                                device=None):
    r"""A ``(nb_features, dim_heads)`` float32 matrix for ``FastAttention.projection_matrix``.

    Parameters
    ----------
    dim_heads : int
        Head dimension d (``FastAttention(dim_heads=...)``).
    nb_features : int
        Number m of random features (``FastAttention(nb_features=...)``); any
        m, drawn as independent blocks of d rows, the last one truncated.
    coupling : str
        Any coupling of :data:`montecarlo.COUPLINGS` (default ``'simplex'``).
    generator : torch.Generator, optional
        Generator to draw from (on its own device); else ``seed`` is used.
    seed : None, int or numpy.random.Generator
        Used when ``generator`` is None.
    device : torch device, optional
        Where the matrix lives (default: the generator's device, else CPU).

    Returns
    -------
    torch.Tensor of shape (nb_features, dim_heads), float32
        Rows :math:`w_f`, each exactly :math:`\mathcal N(0, I_d)` for the exact
        couplings (performer-pytorch's ``ortho_scaling=0`` convention).

    References
    ----------
    Reid et al., "Simplex Random Features", ICML 2023, Sec. 3 (``simplex_block_eq``) and Sec. 5.4.
    """
    return draw_projections(coupling, dim_heads, nb_features, generator=generator, rng=seed, device=device,
                            dtype=torch.float32)


class PerformerProjection:
    """A drop-in for ``FastAttention.create_projection``: ``proj(device=None)`` returns a fresh matrix.

    Every call draws a new, independent matrix of the coupling (from
    ``generator``, or from a numpy generator seeded once by ``seed``), so
    ``FastAttention.redraw_projection_matrix`` and the ``Performer`` model's
    ``feature_redraw_interval`` redraw with the chosen coupling.  Picklable
    (``torch.save`` of a whole model works).

    Parameters
    ----------
    dim_heads : int
        Head dimension d (>= the coupling's minimum, 2 for the simplex couplings).
    nb_features : int
        Number m of random features per draw.
    coupling : str
        Any coupling of :data:`montecarlo.COUPLINGS` (default ``'simplex'``).
    generator : torch.Generator, optional
        Every draw advances it.
    seed : None, int or numpy.random.Generator
        Without a generator: a Generator is used (and advanced) as is, an int
        seeds a private one.
    """

    def __init__(self, dim_heads, nb_features, coupling="simplex", *, generator=None, seed=None):
        self.coupling = check_coupling(coupling)
        self.dim_heads = check_dimension(dim_heads, self.coupling, "dim_heads")
        self.nb_features = check_int(nb_features, "nb_features", 1)
        if generator is not None and seed is not None:
            raise ValueError("give seed or generator, not both")
        self.generator = check_generator(generator)
        seed = check_rng(seed, "seed")
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

    def __call__(self, device=None):
        return performer_projection_matrix(self.dim_heads, self.nb_features, self.coupling,
                                           generator=self.generator, seed=None if self.generator is not None else self.rng,
                                           device=device)

    def __deepcopy__(self, memo):
        """A copy whose random stream is forked, as :class:`montecarlo.nn.PRFAttention`'s: a numpy stream by a
        ``SeedSequence`` spawn (the original's stream untouched), a ``torch.Generator`` seeded by one draw of the
        original's (which advances it); so deep-copied FastAttention modules redraw independently, and the
        same seeds and copies give the same draws."""
        new = copy.copy(self)
        memo[id(self)] = new
        if self.generator is None:
            new.rng = self.rng.spawn(1)[0]
        else:
            new.generator = fork_generator(self.generator)
        return new

    def __repr__(self):
        return (f"PerformerProjection(dim_heads={self.dim_heads}, nb_features={self.nb_features}, "
                f"coupling={self.coupling!r})")


def use_coupling(module, coupling="simplex", *, generator=None, seed=None):
    """Make every performer-pytorch ``FastAttention`` in ``module`` draw its features with ``coupling``.

    Replaces each one's ``create_projection`` by a :class:`PerformerProjection`
    and redraws its ``projection_matrix`` now, on the buffer's device (later
    redraws, explicit or by ``feature_redraw_interval``, use the coupling).

    Parameters
    ----------
    module : torch.nn.Module
        A ``FastAttention``, or a model containing some (``Performer``,
        ``PerformerLM``...): any submodule with a ``projection_matrix`` buffer
        and a ``create_projection`` attribute.
    coupling : str
        Any coupling of :data:`montecarlo.COUPLINGS`.
    generator : torch.Generator, optional
        Shared by all the FastAttention modules (each draw advances it).
    seed : None or int
        Without a generator: seed of a numpy stream shared by all of them.

    Returns
    -------
    list of torch.nn.Module
        The FastAttention modules changed.

    Raises
    ------
    ValueError
        If ``module`` holds no FastAttention, or one uses ``ortho_scaling != 0``
        (fixed row norms :math:`\\sqrt d`: the rows would not be Gaussian, and
        replacing them would change the model).
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    targets = [m for m in module.modules() if hasattr(m, "create_projection")
               and isinstance(getattr(m, "projection_matrix", None), torch.Tensor)]
    if not targets:
        raise ValueError(f"module holds no performer-pytorch FastAttention (a submodule with projection_matrix "
                         f"and create_projection), got {type(module).__name__}")
    for m in targets:
        if getattr(m, "ortho_scaling", 0) != 0:
            raise ValueError(f"use_coupling needs FastAttention(ortho_scaling=0) (chi_d row norms), got "
                             f"ortho_scaling={m.ortho_scaling!r}")
    if generator is None:  # one numpy stream shared by every module
        seed = np.random.default_rng(check_rng(seed, "seed"))
    for m in targets:
        nb_features, dim_heads = m.projection_matrix.shape
        m.create_projection = PerformerProjection(dim_heads, nb_features, coupling, generator=generator, seed=seed)
        m.redraw_projection_matrix(m.projection_matrix.device)
    return targets


# ---------------------------------------------------------------------------
# FastAttention against the unbiased estimator on the same matrices


@dataclass(frozen=True)
class FastAttentionErrors:
    r"""Relative output errors of FastAttention and of the unbiased PRF attention (same Q, K, V, same matrices).

    Attributes
    ----------
    logit_stds : tuple of float
    couplings : tuple of str
    unbiased, fast, fast_vs_mean, *_se : dict
        (logit_std, coupling) -> mean (and standard error) over draws of:
        :math:`\|\widehat{\mathrm{Att}} - \mathrm{Att}\|_F/\|\mathrm{Att}\|_F`
        for :func:`~montecarlo.experiments.attention.prf_attention`
        (``unbiased``) and ``FastAttention`` (``fast``), and
        :math:`\|\mathrm{FA} - \bar V\|_F/\|\bar V\|_F`, FastAttention's distance
        from uniform attention (every row the mean of V; ``fast_vs_mean``).
    uniform : dict
        logit_std -> relative error of uniform attention against exact attention.
    seq_len, d_head, n_features, n_draws : int
    """

    logit_stds: tuple
    couplings: tuple
    unbiased: dict
    unbiased_se: dict
    fast: dict
    fast_se: dict
    fast_vs_mean: dict
    fast_vs_mean_se: dict
    uniform: dict
    seq_len: int
    d_head: int
    n_features: int
    n_draws: int

    def format(self):
        """A markdown table, one row per (logit std, coupling)."""
        lines = [f"L = {self.seq_len}, d = {self.d_head}, m = {self.n_features}, {self.n_draws} draws (mean +- SE)",
                 "", "logit std | coupling | unbiased PRF | FastAttention | FastAttention vs mean(V) | "
                     "mean(V) vs exact", "--- | --- | --- | --- | --- | ---"]
        for s in self.logit_stds:
            for c in self.couplings:
                k = (s, c)
                lines.append(f"{s:g} | {c} | {self.unbiased[k]:.3f} +- {self.unbiased_se[k]:.3f} | "
                             f"{self.fast[k]:.3f} +- {self.fast_se[k]:.3f} | "
                             f"{self.fast_vs_mean[k]:.3f} +- {self.fast_vs_mean_se[k]:.3f} | {self.uniform[s]:.3f}")
        return "\n".join(lines)


def fast_attention_errors(logit_stds=(0.25, 0.5, 1.0), couplings=("orthogonal", "simplex"), *, seq_len=1024,
                          d_head=64, n_features=130, n_draws=10, rng=0, data_rng=0):
    r"""performer-pytorch's FastAttention vs the unbiased PRF attention, same Q, K, V and matrices.

    For each logit std, one :func:`~montecarlo.experiments.attention.synthetic_qkv`
    draw; for each coupling, ``n_draws`` matrices, each used by both
    ``FastAttention`` (float32, its ``softmax_kernel`` with ``eps = 1e-4``)
    and :func:`~montecarlo.experiments.attention.prf_attention` (float64, no
    ``eps``).  Reproduces the table of
    :class:`~montecarlo.nn.PRFAttention` (Notes) with
    the defaults.

    Parameters
    ----------
    logit_stds : sequence of float > 0
        Standard deviations of the logits of unrelated tokens
        (:func:`~montecarlo.experiments.attention.synthetic_qkv`).
    couplings : sequence of str
        Couplings of the matrices shared by both attentions.
    seq_len, d_head, n_features, n_draws : int
        L, d, m and the number of matrices per coupling.
    rng : None, int or numpy.random.Generator
        Seed of the feature draws (one stream per coupling).
    data_rng : None, int or numpy.random.Generator
        Seed of the data.

    Returns
    -------
    FastAttentionErrors
    """
    from performer_pytorch import FastAttention

    from .experiments._common import child_rng, coupling_key, seed_entropy
    from .experiments.attention import prf_attention, rel_error, softmax_attention, synthetic_qkv

    logit_stds = tuple(check_positive_float(s, "logit_stds") for s in logit_stds)
    couplings = check_couplings(couplings)
    seq_len = check_int(seq_len, "seq_len", 1)
    d_head = check_int(d_head, "d_head", 2)
    n_features = check_int(n_features, "n_features", 1)
    n_draws = check_int(n_draws, "n_draws", 2)
    check_budget(n_features * d_head, f"FastAttention's (n_features, d_head) = ({show_int(n_features)}, {d_head}) "
                 "projection", "reduce n_features")
    entropy = seed_entropy(rng)
    fa = FastAttention(d_head, n_features)
    out = {name: {} for name in ("unbiased", "unbiased_se", "fast", "fast_se", "fast_vs_mean", "fast_vs_mean_se")}
    uniform = {}
    for s in logit_stds:
        Q, K, V = synthetic_qkv(seq_len, d_head, data_rng, logit_std=s)
        exact = softmax_attention(Q, K, V)
        mean_v = np.broadcast_to(V.mean(axis=0), V.shape)
        uniform[s] = float(rel_error(mean_v, exact, (-2, -1)))
        q, k, v = (torch.tensor(a, dtype=torch.float32)[None, None] for a in (Q, K, V))
        for c in couplings:
            W = mc.sample_weights(c, d_head, n_features, rng=child_rng(entropy, coupling_key(c)), n_draws=n_draws)
            e = np.empty((3, n_draws))
            for r in range(n_draws):
                with torch.no_grad():
                    fa.projection_matrix.copy_(torch.tensor(W[r], dtype=torch.float32))
                    o = fa(q, k, v)[0, 0].double().numpy()
                e[0, r] = rel_error(prf_attention(Q, K, V, W[r]), exact, (-2, -1))
                e[1, r] = rel_error(o, exact, (-2, -1))
                e[2, r] = rel_error(o, mean_v, (-2, -1))
            for i, name in enumerate(("unbiased", "fast", "fast_vs_mean")):
                out[name][s, c] = float(e[i].mean())
                out[name + "_se"][s, c] = float(e[i].std(ddof=1) / math.sqrt(n_draws))
    return FastAttentionErrors(logit_stds, couplings, uniform=uniform, seq_len=seq_len, d_head=d_head,
                               n_features=n_features, n_draws=n_draws, **out)
