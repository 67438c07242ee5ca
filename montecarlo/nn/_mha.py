r"""``nn.MultiheadAttention``'s interface around :class:`montecarlo.nn.PRFAttention` (private; public as
:class:`montecarlo.nn.PRFMultiheadAttention`).

The same parameters (``in_proj_weight`` or ``q_proj_weight``/``k_proj_weight``/``v_proj_weight``,
``in_proj_bias``, ``out_proj``), the same initialisation and state-dict keys, the same call
(``query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal``; batched
``(L, N, E)`` or ``batch_first`` ``(N, L, E)``, or unbatched ``(L, E)``) and the same ``(output, weights)``
pair, so that a model swaps its attention in one line::

    layer.self_attn = PRFMultiheadAttention.from_multihead(layer.self_attn, n_features=128, seed=0)

What linear attention cannot do is refused, never approximated silently: ``need_weights=True`` (the L x S
weights are never formed; the default here is False), attention ``dropout`` (it acts on those weights),
``add_bias_kv``/``add_zero_attn``, and an ``attn_mask`` other than the causal one of a module built with
``causal=True`` (any other pattern needs the L x S logits).  Float masks (``TransformerEncoderLayer`` turns
a bool ``src_key_padding_mask`` into 0 / -inf floats before the call) must hold only 0 and -inf, checked
(one synchronisation off the CPU): an additive bias on the logits has no linear-attention form.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from montecarlo._checks import check_bool, check_int
from montecarlo.nn._features import check_device
from montecarlo.nn._module import PRFAttention


class PRFMultiheadAttention(nn.Module):
    r"""``torch.nn.MultiheadAttention`` with PRF attention (:class:`montecarlo.nn.PRFAttention`) per head.

    Parameters
    ----------
    embed_dim, num_heads, bias, kdim, vdim, batch_first, device, dtype
        As ``nn.MultiheadAttention`` (``embed_dim`` divisible by ``num_heads``; the head dimension
        ``embed_dim // num_heads`` is the attention's ``d_head``).
    dropout : float
        Must be 0 (attention dropout acts on the weights, which linear attention never forms).
    add_bias_kv, add_zero_attn : bool
        Must be False.
    n_features, coupling, kind, kind_params, causal, scale, seed, generator, redraw_every, chunk, check_inputs
        Of the inner :class:`~montecarlo.nn.PRFAttention` (attribute ``attention``; one projection matrix
        shared by the heads, as performer-pytorch's).  ``causal=True`` makes every call causal.

    Notes
    -----
    ``_qkv_same_embed_dim`` is False on purpose: ``nn.TransformerEncoderLayer`` and ``nn.TransformerEncoder``
    run a fused fast path in inference mode that reads ``in_proj_weight`` and computes exact softmax attention
    without calling this module; they take it only when ``self_attn._qkv_same_embed_dim`` is True.  Whether
    the packed ``in_proj_weight`` is used is ``packed``.

    Examples
    --------
    >>> mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    >>> prf = PRFMultiheadAttention.from_multihead(mha, n_features=64, seed=0)
    >>> x = torch.randn(2, 10, 32)
    >>> out, weights = prf(x, x, x, key_padding_mask=torch.zeros(2, 10, dtype=torch.bool))
    >>> out.shape, weights
    (torch.Size([2, 10, 32]), None)
    """

    #: Never True (class Notes): keeps the transformer layers' exact-attention fast path from bypassing this module.
    _qkv_same_embed_dim = False

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None, *, n_features=130,
                 coupling="simplex", kind="prf", kind_params=None, causal=False, scale=None, seed=None,
                 generator=None, redraw_every=None, chunk=None, check_inputs=False):
        super().__init__()
        self.embed_dim = check_int(embed_dim, "embed_dim", 1)
        self.num_heads = check_int(num_heads, "num_heads", 1)
        if self.embed_dim % self.num_heads:
            raise ValueError(f"embed_dim must be divisible by num_heads, got embed_dim = {embed_dim} and "
                             f"num_heads = {num_heads}")
        self.kdim = self.embed_dim if kdim is None else check_int(kdim, "kdim", 1)
        self.vdim = self.embed_dim if vdim is None else check_int(vdim, "vdim", 1)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or dropout != 0:
            raise ValueError(f"dropout must be 0: attention dropout acts on the L x S attention weights, which "
                             f"linear attention never forms (drop the output instead), got {dropout!r}")
        self.dropout = 0.0
        for name, value in (("add_bias_kv", add_bias_kv), ("add_zero_attn", add_zero_attn)):
            if check_bool(value, name):
                raise ValueError(f"{name}=True is not supported by PRFMultiheadAttention (give False)")
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self.batch_first = check_bool(batch_first, "batch_first")
        self.head_dim = self.embed_dim // self.num_heads
        factory = {"device": check_device(device), "dtype": dtype}
        E = self.embed_dim
        self.packed = self.kdim == E and self.vdim == E
        if self.packed:
            self.in_proj_weight = nn.Parameter(torch.empty((3 * E, E), **factory))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = nn.Parameter(torch.empty((E, E), **factory))
            self.k_proj_weight = nn.Parameter(torch.empty((E, self.kdim), **factory))
            self.v_proj_weight = nn.Parameter(torch.empty((E, self.vdim), **factory))
            self.register_parameter("in_proj_weight", None)
        if check_bool(bias, "bias"):
            self.in_proj_bias = nn.Parameter(torch.empty(3 * E, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(E, E, bias=bias, **factory)
        self._reset_parameters()
        storage = dtype if dtype in (torch.float32, torch.float64) else torch.float32
        self.attention = PRFAttention(self.head_dim, n_features, coupling, kind=kind, kind_params=kind_params,
                                      causal=causal, scale=scale, seed=seed, generator=generator,
                                      redraw_every=redraw_every, chunk=chunk, check_inputs=check_inputs,
                                      dtype=storage, device=factory["device"])

    def _reset_parameters(self):
        """``nn.MultiheadAttention``'s initialisation: Xavier-uniform projections, zero biases."""
        if self.packed:
            nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                nn.init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            nn.init.constant_(self.in_proj_bias, 0.0)
            nn.init.constant_(self.out_proj.bias, 0.0)

    @property
    def causal(self):
        """Whether every call is causal (the inner module's ``causal``)."""
        return self.attention.causal

    @classmethod
    def from_multihead(cls, mha, *, ignore_dropout=False, **kwargs):
        """A module with the configuration and (copied) weights of the ``nn.MultiheadAttention`` ``mha``;
        ``kwargs`` go to the constructor (the :class:`~montecarlo.nn.PRFAttention` arguments).  An attention
        dropout of ``mha`` (``nn.TransformerEncoderLayer``'s default 0.1) cannot be applied (it acts on the
        attention weights): a ValueError, unless ``ignore_dropout=True`` drops it."""
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"mha must be a torch.nn.MultiheadAttention, got {type(mha).__name__}")
        if mha.dropout and not check_bool(ignore_dropout, "ignore_dropout"):
            raise ValueError(f"mha has attention dropout {mha.dropout}, which linear attention cannot apply (it acts "
                             "on the attention weights): pass ignore_dropout=True to go without it")
        ref = mha.out_proj.weight
        mod = cls(mha.embed_dim, mha.num_heads, bias=mha.in_proj_bias is not None,
                  add_bias_kv=mha.bias_k is not None, add_zero_attn=mha.add_zero_attn, kdim=mha.kdim,
                  vdim=mha.vdim, batch_first=mha.batch_first, device=ref.device, dtype=ref.dtype, **kwargs)
        with torch.no_grad():
            for name, p in mod.named_parameters(recurse=False):
                p.copy_(getattr(mha, name))
            mod.out_proj.load_state_dict(mha.out_proj.state_dict())
        return mod

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kdim={self.kdim}, vdim={self.vdim}, "
                f"batch_first={self.batch_first}")

    def _project(self, query, key, value):
        """The in-projections q, k, v (..., L, E), as ``nn.MultiheadAttention``'s."""
        E = self.embed_dim
        if self.packed:
            w_q, w_k, w_v = self.in_proj_weight.split(E)
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        b_q = b_k = b_v = None
        if self.in_proj_bias is not None:
            b_q, b_k, b_v = self.in_proj_bias.split(E)
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=False, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        """``nn.MultiheadAttention.forward``'s call; returns ``(output, None)``.

        Parameters
        ----------
        query, key, value : torch.Tensor
            (L, N, E), (S, N, kdim), (S, N, vdim); (N, L, E) ... with ``batch_first``; or unbatched (L, E), ...
        key_padding_mask : torch.Tensor, optional
            (N, S) (or (S,) unbatched), bool with True at padded keys, or float holding only 0 and -inf (-inf
            at padded keys; checked).
        need_weights : bool
            Must be False (default here; the weights are never formed).
        attn_mask : torch.Tensor, optional
            Only the causal mask ((L, S) bool True above the diagonal, or float -inf there and 0 elsewhere;
            checked) on a module built with ``causal=True``.
        average_attn_weights : bool
            Ignored (no weights).
        is_causal : bool
            A hint that ``attn_mask`` is the causal mask (then not checked); needs ``causal=True``.

        Returns
        -------
        (torch.Tensor, None)
            The output (L, N, E) (or as the inputs' layout) in the inputs' dtype, and None.
        """
        if need_weights:
            raise ValueError("need_weights=True: PRF attention never forms the L x S attention weights; call with "
                             "need_weights=False (the default of PRFMultiheadAttention)")
        if check_bool(is_causal, "is_causal") and not self.causal:
            raise ValueError("is_causal=True needs a module built with causal=True (PRFMultiheadAttention(..., "
                             "causal=True)): the prefix-sum form is chosen at construction")
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.ndim not in (2, 3):
                raise ValueError(f"{name} must have shape (L, N, E), (N, L, E) with batch_first, or (L, E) "
                                 f"unbatched, got {tuple(t.shape)}")
        if not query.ndim == key.ndim == value.ndim:
            raise ValueError(f"query, key and value must all be batched (3-d) or all unbatched (2-d), got shapes "
                             f"{tuple(query.shape)}, {tuple(key.shape)} and {tuple(value.shape)}")
        batched = query.ndim == 3
        if batched and not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if attn_mask is not None and not is_causal:
            self._check_causal_mask(attn_mask, query.shape[-2], key.shape[-2])
        mask = self._padding_mask(key_padding_mask, key, batched)
        q, k, v = self._project(query, key, value)
        H, Dh = self.num_heads, self.head_dim
        q, k, v = (t.unflatten(-1, (H, Dh)).transpose(-3, -2) for t in (q, k, v))  # (..., H, L, Dh)
        if mask is not None and batched:
            mask = mask[:, None]  # (N, 1, S): one row per batch element, broadcast over the heads
        out = self.attention(q, k, v, key_padding_mask=mask)
        out = self.out_proj(out.transpose(-3, -2).flatten(-2))
        if batched and not self.batch_first:
            out = out.transpose(0, 1)
        return out, None

    def _padding_mask(self, mask, key, batched):
        """The bool (N, S) mask (None without one) from a bool or 0 / -inf float mask."""
        if mask is None:
            return None
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"key_padding_mask must be None or a torch.Tensor, got {type(mask).__name__}")
        want = (key.shape[0], key.shape[-2]) if batched else (key.shape[-2],)
        if tuple(mask.shape) != want:
            raise ValueError(f"key_padding_mask must have shape {'(N, S)' if batched else '(S,)'} = {want}, got "
                             f"{tuple(mask.shape)}")
        if mask.dtype == torch.bool:
            return mask
        if not mask.is_floating_point():
            raise TypeError(f"key_padding_mask must be bool (True at padded keys) or float (0 or -inf), got "
                            f"{mask.dtype}")
        pad = torch.isneginf(mask)
        if not bool(torch.logical_or(pad, mask == 0).all()):
            raise ValueError("a float key_padding_mask must hold only 0 (keep) and -inf (padded): PRF attention cannot "
                             "add another bias to the logits; give a bool mask")
        return pad

    def _check_causal_mask(self, attn_mask, L, S):
        """An attn_mask is accepted only as the causal mask of a causal module (checked)."""
        if not self.causal:
            raise ValueError("attn_mask is not supported by PRF attention (it needs the L x S logits); for padding "
                             "give key_padding_mask, for causal attention build the module with causal=True")
        if not isinstance(attn_mask, torch.Tensor) or tuple(attn_mask.shape) != (L, S):
            raise ValueError(f"attn_mask must be the ({L}, {S}) causal mask (or None) on a causal module, got "
                             f"{getattr(attn_mask, 'shape', type(attn_mask).__name__)}")
        upper = torch.ones(L, S, dtype=torch.bool, device=attn_mask.device).triu(1)
        if attn_mask.dtype == torch.bool:
            ok = bool(torch.equal(attn_mask, upper))
        else:
            ok = bool(torch.equal(torch.isneginf(attn_mask), upper) and (attn_mask[~upper] == 0).all())
        if not ok:
            raise ValueError("attn_mask on a causal PRFMultiheadAttention must be the causal mask (True or -inf "
                             "above the diagonal, False or 0 elsewhere): other patterns need the L x S logits")

