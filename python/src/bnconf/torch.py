"""`bnconf.torch`: judge a ``torch.nn`` normalization module against bnconf's exact reference.

    import torch, bnconf.torch

    report = bnconf.torch.check_module(torch.nn.BatchNorm2d, dtype="float32")
    assert report.ok, report                 # or: bnconf.torch.assert_module_conforms(...)

``module`` is a ``torch.nn`` normalization class, which bnconf constructs from each case
(features, eps, momentum, affine, in the case's parameter dtype, on ``device``), or a callable
``case -> torch.nn.Module`` for the user's own module (bnconf then sets its parameters,
buffers, ``momentum`` and mode per op, as below). Per op (FORMAT.md, "Ops and layouts"):

- ``forward``: the module in training mode gives ``y``. ``torch.nn`` modules do not return
  their batch statistics, so for torch's own BatchNorm classes (whose forward is
  ``_BatchNorm.forward``) ``mean`` is ``torch.native_batch_norm``'s ``save_mean`` (the kernel
  that forward runs) and ``var`` is ``torch.var_mean(x, dims, correction=0)`` (PyTorch's biased
  variance: the kernel keeps only ``1/sqrt(var + eps)`` and an unbiased running variance; with
  a mixed dtype, of ``x`` converted to the parameter dtype). A
  module with its own ``forward`` does not expose them: unsupported, with that reason.
- ``backward``: autograd: ``y = module(x)`` in training mode with ``weight = gamma`` and
  ``bias = 0``, ``y.backward(dy)``; ``dx = x.grad``, ``dgamma = weight.grad``, ``dbeta =
  bias.grad``.
- ``eval``: the handed-in ``mean``/``var`` written into the ``running_mean``/``running_var``
  buffers, ``module.eval()``, ``y = module(x)``. ``sync_forward``: the same with ``running_var =
  m2 - mean*mean`` formed in torch (glue: SyncBatchNorm's gather kernels have no CPU version).
- ``running_update`` (convention ``pytorch``, torch's own: ``new = (1-a)*old + a*batch``, the
  running variance unbiased): the buffers set to the handed-in running statistics,
  ``module.momentum = a``, one training step, the buffers read back. Convention ``onnx``:
  unsupported (torch has one convention).
- ``sync_backward``, ``sync_stats``: unsupported (SyncBatchNorm's kernels have no CPU version
  and take invstd/sums, not the handed-in statistics of FORMAT.md).

Layouts are viewed as torch's ``[N, C, ...]``: ``rows``/``flat`` ``[C, m]`` → ``[1, C, m]``
(BatchNorm1d's ``(N, C, L)``), ``chw`` → ``[1, C, H, W]``, ``nchw`` as is, ``nhwc`` → a
channels-last strided view ``permute(0, 3, 1, 2)`` (torch's channels-last kernel runs; results
are permuted back). A class that cannot take the view's rank (BatchNorm2d on ``rows``) reports
the case unsupported with torch's reason; so does training on one value per channel
(``F.batch_norm`` refuses it).

The normalization family (``family=`` ``layer_norm``, ``rms_norm``, ``group_norm``; by default
the class's family, ``batch_norm`` for a callable): bnconf builds ``LayerNorm(x.shape[-k:],
eps, elementwise_affine, bias)`` (k = ``normalized_ndim``; ``elementwise_affine=False`` for
affine ``none``, ``bias=False`` for ``weight``), ``RMSNorm(x.shape[-k:], eps,
elementwise_affine)``, ``GroupNorm(groups, C, eps, affine, bias)`` or ``InstanceNorm1d/2d/3d(C,
eps, affine, bias, track_running_stats=False)`` (only the cases with groups = C, of the class's
rank; ``nc`` is viewed as ``[N, C, 1]`` for InstanceNorm1d), in the parameter dtype, with
``weight ← gamma`` and ``bias ← beta`` (1 and 0 where the case has none). Per op:

- ``layer_norm``, ``rms_norm``, ``group_norm``: ``y = module(x)`` in training mode. The
  statistics are returned only where the module's own kernel is observable: torch's own
  LayerNorm/GroupNorm (``mean``, ``rstd`` from ``torch.native_layer_norm`` /
  ``native_group_norm``, the kernels their forward runs, when torch keeps them in the case's
  ``param_dtype``); any other module (RMSNorm, InstanceNorm, a module with its own forward)
  returns only ``y`` and its statistics are not given (optional outputs: never recomputed).
- ``*_backward``: autograd, ``y.backward(dy)``: ``dx = x.grad``, ``dgamma = weight.grad``,
  ``dbeta = bias.grad`` (the ones the case has; a module without the parameter is unsupported).
- group_norm's ``nhwc``/``ndhwc``: x viewed as ``[N, C, ...]`` with channels-last strides
  (torch's channels-last kernel runs), as adapters/torch_family.py does; results permuted back.
- rms_norm's convention ``offset`` (``(1 + gamma)·x·rstd``) is unsupported for
  ``torch.nn.RMSNorm`` (it computes ``weight·x·rstd``; ``weight = 1 + gamma`` would be a
  rounding of bnconf's); a callable's module is handed ``gamma`` in either convention.
- Mixed precision (``float16+float32``, ``bfloat16+float32``): half x, float32 module; an
  output torch returns in another dtype than the case's, or an error torch raises for the
  dtype pair, makes the case unsupported with that reason (as adapters/torch_family.py).

Requires torch (``pip install torch``); ``import bnconf`` does not.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Union

import numpy as np

from ._check import Case, Unsupported
from ._frameworks import check_family, entry_points, require

#: The families bnconf.torch checks: batch_norm and the normalization family.
TORCH_FAMILIES = ("batch_norm", "layer_norm", "rms_norm", "group_norm")
FAMILIES = TORCH_FAMILIES

#: torch.nn normalization classes, by name → the family they belong to.
MODULE_FAMILY = {
    "BatchNorm1d": "batch_norm",
    "BatchNorm2d": "batch_norm",
    "BatchNorm3d": "batch_norm",
    "LayerNorm": "layer_norm",
    "RMSNorm": "rms_norm",
    "GroupNorm": "group_norm",
    "InstanceNorm1d": "group_norm",
    "InstanceNorm2d": "group_norm",
    "InstanceNorm3d": "group_norm",
}

# batch_norm layouts → how the case array becomes torch's [N, C, ...] view: "lead", a leading
# N = 1 axis ([C, m] → [1, C, m]: BatchNorm1d; [C, H, W] → [1, C, H, W]: BatchNorm2d); "same",
# as is; "last", channels last, permuted to [N, C, ...] (a strided view: torch's channels-last
# kernel runs). nc, ncl, ncdhw as is (BatchNorm1d/3d), ndhwc channels last.
BN_LAYOUTS = {
    "rows": "lead",
    "flat": "lead",
    "chw": "lead",
    "nchw": "same",
    "nhwc": "last",
    "nc": "same",
    "ncl": "same",
    "ncdhw": "same",
    "ndhwc": "last",
}

_SYNC_REASON = (
    "SyncBatchNorm's kernels (batch_norm_backward_elemt/_reduce, "
    "batch_norm_gather_stats_with_counts) have no CPU implementation and take "
    "invstd/sums, not FORMAT.md's handed-in statistics"
)


def _torch():
    return require("torch", "bnconf.torch", "torch", "torch")


def _torch_dtype(torch, numpy_name: str):
    return {
        "float64": torch.float64,
        "float32": torch.float32,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
    }[numpy_name]


def family_of(module) -> Optional[str]:
    """The family of a torch.nn normalization class or instance (None for other modules)."""
    cls = module if isinstance(module, type) else type(module)
    for c in cls.__mro__:
        if c.__module__.startswith("torch.nn") and c.__name__ in MODULE_FAMILY:
            return MODULE_FAMILY[c.__name__]
    return None


def _resolve_family(family: Optional[str], module) -> str:
    """``family``, or (None) the family of a torch.nn class, ``batch_norm`` for a callable."""
    if family is not None:
        return str(family)
    return (family_of(module) if isinstance(module, type) else None) or "batch_norm"


def _check_family(family: str, module) -> None:
    check_family(family, TORCH_FAMILIES)
    if isinstance(module, type):
        fam = family_of(module)
        if fam is None:
            raise ValueError(
                f"module {module.__name__} is not a torch.nn normalization class "
                f"({', '.join(MODULE_FAMILY)}); pass a callable case -> nn.Module for your own"
            )
        if fam != family:
            raise ValueError(
                f"module {module.__name__} is a {fam} module; family={family!r} "
                f"needs one of "
                + ", ".join(n for n, f in MODULE_FAMILY.items() if f == family)
            )
    elif not callable(module):
        raise TypeError(
            f"module must be a torch.nn normalization class or a callable case -> "
            f"torch.nn.Module, not {module!r}"
        )


class _Run:
    """One case on one module: the case's tensors in torch's view, and the module."""

    def __init__(self, torch, case: Case, module, device: str, name: str):
        self.torch = torch
        self.case = case
        self.module = module
        self.device = device
        self.name = name
        self.dtype = _torch_dtype(torch, case.dtype)
        self.param_dtype = _torch_dtype(torch, case.param_dtype)
        if case.layout not in BN_LAYOUTS:
            raise Unsupported(f"{name}: layout {case.layout} has no torch [N, C, ...] view here")
        self.how = BN_LAYOUTS[case.layout]

    def nc(self, name: str):
        """Input ``name`` (layout-shaped) as a tensor in torch's [N, C, ...] view."""
        a = self.case.inputs[name]
        t = self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device).to(self.dtype)
        if self.how == "lead":
            return t.reshape(1, *a.shape)
        if self.how == "last":
            return t.permute(0, t.dim() - 1, *range(1, t.dim() - 1))
        return t

    def back(self, t) -> np.ndarray:
        """A [N, C, ...] tensor back in the case layout, as numpy."""
        if self.how == "last":
            t = t.permute(0, *range(2, t.dim()), 1)
        return self.host(t).reshape(self.case.shape)

    def vec(self, name: str):
        """Per-channel input ``name`` as a [C] tensor in the parameter dtype."""
        a = self.case.inputs[name]
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device).to(self.param_dtype)

    def host(self, t) -> np.ndarray:
        t = t.detach().cpu().contiguous()
        if t.dtype == self.torch.bfloat16:
            t = t.float()  # numpy has no bfloat16; written back rounded to bf16 (exact here)
        return t.numpy()

    def module_takes(self, x) -> None:
        """A BatchNorm class that cannot take this view's rank: unsupported, torch's reason."""
        check_dim = getattr(self.module, "_check_input_dim", None)
        if check_dim is None:
            return
        try:
            check_dim(x)
        except ValueError as e:
            raise Unsupported(
                f"{self.name}: {type(self.module).__name__} cannot take layout "
                f"{self.case.layout} (viewed as {list(x.shape)}): {e}"
            ) from None

    def call(self, x):
        """``module(x)``, with torch's refusal of one value per channel in training mode
        reported as unsupported, with torch's message: the framework declines the case."""
        try:
            return self.module(x)
        except ValueError as e:
            refusals = ("Expected more than 1 value per channel", "eps must be positive")
            if any(s in str(e) for s in refusals):
                raise Unsupported(f"{self.name}: F.batch_norm refuses this case: {e}") from None
            raise

    def buffers(self):
        m = self.module
        rm, rv = getattr(m, "running_mean", None), getattr(m, "running_var", None)
        if rm is None or rv is None:
            raise Unsupported(
                f"{self.name}: the module has no running_mean/running_var buffers "
                "(built with track_running_stats=False?): it takes no handed-in statistics"
            )
        return rm, rv

    def set_affine(self, gamma, beta, *, for_grad: bool = False) -> None:
        """weight ← gamma, bias ← beta (None: 0). A module without them (affine=False)
        computes the case only when gamma is all 1 and beta all 0 (and no gradient of them
        is asked for)."""
        torch = self.torch
        w, b = getattr(self.module, "weight", None), getattr(self.module, "bias", None)
        if w is None or b is None:
            if for_grad:
                raise Unsupported(
                    f"{self.name}: the module has no weight/bias (affine=False): no dgamma, dbeta"
                )
            if bool((gamma != 1).any()) or (beta is not None and bool((beta != 0).any())):
                raise Unsupported(
                    f"{self.name}: the module has no weight/bias (affine=False); the case's "
                    "gamma is not all 1 or beta not all 0"
                )
            return
        with torch.no_grad():
            w.copy_(gamma)
            if beta is None:
                b.zero_()
            else:
                b.copy_(beta)


def _is_torch_batchnorm(module) -> bool:
    """A torch BatchNorm whose forward is torch's own (so its batch statistics are those of
    torch.native_batch_norm)."""
    torch = _torch()
    bn = torch.nn.modules.batchnorm._BatchNorm
    return isinstance(module, bn) and type(module).forward is bn.forward


# ---------------------------------------------------------------------------------------------
# batch_norm: one function per op. Adding a family is one more table of the same shape
# (e.g. "layer_norm": {"layer_norm": ..., "layer_norm_backward": ...}) and a builder.


def _bn_forward(r: _Run) -> Dict[str, Any]:
    torch = r.torch
    if not _is_torch_batchnorm(r.module):
        raise Unsupported(
            f"{r.name}: {type(r.module).__name__}'s forward returns only y; the batch statistics "
            "it normalized with (mean, var) are not observable (torch's BatchNorm classes are "
            "read through torch.native_batch_norm, the kernel their forward runs)"
        )
    x = r.nc("x")
    r.module_takes(x)
    gamma, beta = r.vec("gamma"), r.vec("beta")
    r.set_affine(gamma, beta)
    r.module.train()
    with torch.no_grad():
        y = r.call(x)
        eps = float(r.module.eps)
        _, save_mean, _ = torch.native_batch_norm(x, gamma, beta, None, None, True, 1.0, eps)
        dims = [d for d in range(x.dim()) if d != 1]
        # mixed precision: the statistics are in the parameter dtype (the kernel's are, in
        # its float accumulators), so var_mean runs on x converted to it (exact)
        var, _ = torch.var_mean(x.to(r.param_dtype), dim=dims, correction=0)
    return {"y": r.back(y), "mean": r.host(save_mean), "var": r.host(var)}


def _bn_backward(r: _Run) -> Dict[str, Any]:
    x = r.nc("x")
    r.module_takes(x)
    r.set_affine(r.vec("gamma"), None, for_grad=True)
    r.module.train()
    r.module.zero_grad(set_to_none=True)
    xg = x.detach().clone().requires_grad_(True)
    y = r.call(xg)
    y.backward(r.nc("dy"))
    w, b = r.module.weight, r.module.bias
    if xg.grad is None or w.grad is None or b.grad is None:
        raise Unsupported(f"{r.name}: autograd gave no gradient for x, weight or bias")
    return {"dx": r.back(xg.grad), "dgamma": r.host(w.grad), "dbeta": r.host(b.grad)}


def _bn_eval_with(r: _Run, mean, var) -> Dict[str, Any]:
    torch = r.torch
    x = r.nc("x")
    r.module_takes(x)
    if getattr(r.module, "track_running_stats", True) is False:
        raise Unsupported(
            f"{r.name}: built with track_running_stats=False, the module normalizes with batch "
            "statistics in eval mode: it takes no handed-in statistics"
        )
    rm, rv = r.buffers()
    r.set_affine(r.vec("gamma"), r.vec("beta"))
    with torch.no_grad():
        rm.copy_(mean)
        rv.copy_(var)
        r.module.eval()
        y = r.call(x)
    return {"y": r.back(y)}


def _bn_eval(r: _Run) -> Dict[str, Any]:
    return _bn_eval_with(r, r.vec("mean"), r.vec("var"))


def _bn_sync_forward(r: _Run) -> Dict[str, Any]:
    mean = r.vec("mean")
    return _bn_eval_with(r, mean, r.vec("m2") - mean * mean)


def _bn_running_update(r: _Run) -> Dict[str, Any]:
    torch = r.torch
    if r.case.convention != "pytorch":
        raise Unsupported(
            f"{r.name}: PyTorch implements only the pytorch convention, not {r.case.convention}"
        )
    x = r.nc("x")
    r.module_takes(x)
    if not hasattr(r.module, "momentum"):
        raise Unsupported(f"{r.name}: the module has no momentum attribute to set")
    rm, rv = r.buffers()
    if not float(getattr(r.module, "eps", 1.0)) > 0:
        # running_update cases carry eps = 0 (the update does not depend on it) and torch
        # refuses eps <= 0 in training: torch's default, which changes nothing judged here
        r.module.eps = 1e-5
    with torch.no_grad():
        rm.copy_(r.vec("running_mean"))
        rv.copy_(r.vec("running_var"))
        r.module.momentum = float(r.case.momentum)
        r.module.train()
        r.call(x)
    return {"new_mean": r.host(rm), "new_var": r.host(rv)}


#: family → op → the function computing that op's outputs with the module, or the reason
#: (a string) no module of the family can express the op.
OPS: Dict[str, Dict[str, Union[str, Callable[[_Run], Dict[str, Any]]]]] = {
    "batch_norm": {
        "forward": _bn_forward,
        "backward": _bn_backward,
        "eval": _bn_eval,
        "sync_forward": _bn_sync_forward,
        "running_update": _bn_running_update,
        "sync_backward": _SYNC_REASON,
        "sync_stats": _SYNC_REASON,
    },
}

# ---------------------------------------------------------------------------------------------
# The normalization family: layer_norm (LayerNorm), rms_norm (RMSNorm), group_norm (GroupNorm,
# InstanceNorm1d/2d/3d: groups = C).

#: group_norm layouts → (permutation to torch's [N, C, ...], its inverse, memory format name)
#: for the channels-last ones (the strided view is dense in that format: torch's channels-last
#: kernel runs, as adapters/torch_family.py runs it).
FAMILY_CHANNELS_LAST = {
    "nhwc": ((0, 3, 1, 2), (0, 2, 3, 1), "channels_last"),
    "ndhwc": ((0, 4, 1, 2, 3), (0, 2, 3, 4, 1), "channels_last_3d"),
}

#: The ranks InstanceNorm1d/2d/3d take batched: [N, C, L], [N, C, H, W], [N, C, D, H, W].
_INSTANCE_RANK = {"InstanceNorm1d": 3, "InstanceNorm2d": 4, "InstanceNorm3d": 5}


def _torch_class(module) -> Optional[str]:
    """The name of the torch.nn normalization class ``module`` (a class or an instance) is or
    derives from, or None."""
    cls = module if isinstance(module, type) else type(module)
    for c in cls.__mro__:
        if c.__module__.startswith("torch.nn") and c.__name__ in MODULE_FAMILY:
            return c.__name__
    return None


class _FamilyRun:
    """One family case on one module: the case's tensors in the module's view, and the module.
    Layout ``last``: ``x`` as is (``[*batch, *normalized]``). group_norm layouts: torch's
    ``[N, C, ...]`` (channels-last ones as a channels-last strided view); InstanceNorm1d on
    ``nc`` views ``[N, C]`` as ``[N, C, 1]`` (its 2-D input would be an unbatched ``[C, L]``)."""

    def __init__(self, torch, case: Case, module, device: str, name: str):
        self.torch = torch
        self.case = case
        self.module = module
        self.device = device
        self.name = name
        self.dtype = _torch_dtype(torch, case.dtype)
        self.param_dtype = _torch_dtype(torch, case.param_dtype)
        self.cls = _torch_class(module)
        self.perm = FAMILY_CHANNELS_LAST.get(case.layout)
        self.extra_axis = case.layout == "nc" and self.cls == "InstanceNorm1d"
        rank = _INSTANCE_RANK.get(self.cls or "")
        if rank is not None:
            n = len(case.shape) + (1 if self.extra_axis else 0)
            if n != rank:
                raise Unsupported(
                    f"{name}: {self.cls} takes [N, C, ...] of rank {rank}, not layout "
                    f"{case.layout} (rank {len(case.shape)})"
                )

    def view(self, name: str):
        """Activation ``name`` (``x`` or ``dy``) as a tensor in the module's view."""
        torch = self.torch
        a = self.case.inputs[name]
        t = torch.from_numpy(np.ascontiguousarray(a)).to(self.device).to(self.dtype)
        if self.perm is not None:
            to_nc, _, fmt = self.perm
            t = t.permute(*to_nc).contiguous(memory_format=getattr(torch, fmt))
        if self.extra_axis:
            t = t.reshape(*t.shape, 1)
        return t

    def back(self, t) -> np.ndarray:
        """A tensor of the module's view back in the case layout, as numpy."""
        if self.perm is not None:
            t = t.permute(*self.perm[1])
        return self.host(t).reshape(self.case.shape)

    def param(self, name: str):
        a = self.case.inputs[name]
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device).to(self.param_dtype)

    def host(self, t) -> np.ndarray:
        t = t.detach().cpu().contiguous()
        if t.dtype == self.torch.bfloat16:
            t = t.float()  # numpy has no bfloat16; written back rounded to bf16 (exact here)
        return t.numpy()

    def set_affine(self, *, grads=()) -> None:
        """weight ← gamma (1 where the case has none), bias ← beta (0 where it has none). A
        module without a weight computes a case with gamma only when gamma is all 1 (and no
        dgamma is asked for); likewise bias, beta and dbeta. ``grads``: the parameter
        gradients the op returns."""
        torch, case = self.torch, self.case
        gamma = self.param("gamma") if "gamma" in case.inputs else None
        beta = self.param("beta") if "beta" in case.inputs else None
        for attr, value, fill, grad in (
            ("weight", gamma, 1.0, "dgamma"),
            ("bias", beta, 0.0, "dbeta"),
        ):
            p = getattr(self.module, attr, None)
            if p is None:
                if grad in grads:
                    raise Unsupported(
                        f"{self.name}: the module has no {attr} (built without it): no {grad}"
                    )
                if value is not None and bool((value != fill).any()):
                    raise Unsupported(
                        f"{self.name}: the module has no {attr} (built without it); the case's "
                        f"{'gamma' if attr == 'weight' else 'beta'} is not all {fill:g}"
                    )
                continue
            if value is not None and tuple(p.shape) != tuple(value.shape):
                raise Unsupported(
                    f"{self.name}: the module's {attr} has shape {list(p.shape)}, the case's "
                    f"{'gamma' if attr == 'weight' else 'beta'} {list(value.shape)}"
                )
            with torch.no_grad():
                if value is None:
                    p.fill_(fill)
                else:
                    p.copy_(value)

    def call(self, x):
        """``module(x)``; torch refusing the case (InstanceNorm on one spatial element in
        training) is unsupported with torch's message; with a mixed dtype whatever torch
        raises is (the framework declines the dtype pair)."""
        try:
            return self.module(x)
        except ValueError as e:
            if "Expected more than 1 spatial element" in str(e):
                raise Unsupported(f"{self.name}: torch refuses this case: {e}") from None
            raise
        except (RuntimeError, TypeError) as e:
            if self.dtype != self.param_dtype:
                first = str(e).splitlines()[0] if str(e) else ""
                raise Unsupported(
                    f"{self.name}: {self.case.dtype} x with {self.case.param_dtype} parameters: "
                    f"torch raises {type(e).__name__}: {first}"
                ) from None
            raise

    def same_dtype(self, out: str, t, want) -> None:
        """An output torch returns in another dtype than the case's is unsupported (a cast here
        would be glue, not the module)."""
        if t.dtype != want:
            raise Unsupported(
                f"{self.name}: returns {out} as {t.dtype}; the case's {out} is "
                f"{str(want).replace('torch.', '')}"
            )


def _native_statistics(r: _FamilyRun, x, op: str):
    """(mean, rstd) of the native kernel a torch LayerNorm/GroupNorm's own forward runs
    (torch.native_layer_norm / native_group_norm, as adapters/torch_family.py reads them), in
    the case's statistic shapes; None for any other module (their statistics are not
    observable: not returned, never recomputed here)."""
    torch, m = r.torch, r.module
    w, b = getattr(m, "weight", None), getattr(m, "bias", None)
    if op == "layer_norm" and r.cls == "LayerNorm" and type(m).forward is torch.nn.LayerNorm.forward:
        k = len(m.normalized_shape)
        _, mean, rstd = torch.native_layer_norm(x, list(m.normalized_shape), w, b, float(m.eps))
        batch = tuple(x.shape[: x.dim() - k])
        return mean.reshape(batch), rstd.reshape(batch)
    if op == "group_norm" and r.cls == "GroupNorm" and type(m).forward is torch.nn.GroupNorm.forward:
        n, c = x.shape[0], x.shape[1]
        hw = 1
        for s in x.shape[2:]:
            hw *= s
        _, mean, rstd = torch.native_group_norm(x, w, b, n, c, hw, int(m.num_groups), float(m.eps))
        return mean, rstd
    return None


def _family_forward(r: _FamilyRun) -> Dict[str, Any]:
    torch, op = r.torch, r.case.op
    x = r.view("x")
    r.set_affine()
    r.module.train()
    with torch.no_grad():
        y = r.call(x)
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"the module returned {type(y).__name__}, not a tensor")
        r.same_dtype("y", y, r.dtype)
        out = {"y": r.back(y)}
        stats = _native_statistics(r, x, op)
    if stats is not None:
        for name, t in zip(("mean", "rstd"), stats):
            # torch keeps them in the parameters' type, or x's type (affine none, mixed):
            # given only when that is the case's param_dtype
            if name in r.case.outputs and t.dtype == r.param_dtype:
                out[name] = r.host(t)
    return out


def _family_backward(r: _FamilyRun) -> Dict[str, Any]:
    torch, case = r.torch, r.case
    grads = tuple(n for n in ("dgamma", "dbeta") if n in case.outputs)
    r.set_affine(grads=grads)
    r.module.train()
    r.module.zero_grad(set_to_none=True)
    xg = r.view("x").detach().clone().requires_grad_(True)  # clone keeps the strides
    y = r.call(xg)
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"the module returned {type(y).__name__}, not a tensor")
    r.same_dtype("y", y, r.dtype)
    y.backward(r.view("dy"))
    if xg.grad is None:
        raise Unsupported(f"{r.name}: autograd gave no gradient for x")
    out = {"dx": r.back(xg.grad)}
    for name, attr in (("dgamma", "weight"), ("dbeta", "bias")):
        if name not in grads:
            continue
        g = getattr(r.module, attr).grad
        if g is None:
            raise Unsupported(f"{r.name}: autograd gave no gradient for the module's {attr}")
        r.same_dtype(name, g, r.param_dtype)
        out[name] = r.host(g)
    return out


def _rms_convention(r: _FamilyRun, fn):
    """torch.nn.RMSNorm computes ``weight·x·rstd`` (convention ``standard``); ``offset``
    (``(1 + gamma)·x·rstd``) is unsupported for it (weight = 1 + gamma would be a rounding of
    bnconf's, not torch's). A user's module is handed gamma whatever the convention."""
    if r.case.convention == "offset" and r.cls == "RMSNorm":
        raise Unsupported(
            f"{r.name}: torch.nn.RMSNorm computes weight*x*rstd (convention standard), not "
            "(1 + gamma)*x*rstd (offset); weight = 1 + gamma would be rounded by bnconf in the "
            "parameters' dtype, not by torch"
        )
    return fn(r)


FAMILY_OPS = {
    "layer_norm": {"layer_norm": _family_forward, "layer_norm_backward": _family_backward},
    "rms_norm": {
        "rms_norm": lambda r: _rms_convention(r, _family_forward),
        "rms_norm_backward": lambda r: _rms_convention(r, _family_backward),
    },
    "group_norm": {"group_norm": _family_forward, "group_norm_backward": _family_backward},
}


def _bias_kwargs(cls, case: Case) -> Dict[str, Any]:
    """``bias=False`` where the case has no beta and the class takes ``bias=`` (torch >= 2.1)."""
    import inspect

    if case.affine == "weight_bias" or case.affine == "none":
        return {}
    if "bias" in inspect.signature(cls.__init__).parameters:
        return {"bias": False}
    return {}  # an older torch: the bias is set to 0 (exact)


def _build_family(torch, cls, case: Case, device: str):
    """The torch.nn module of ``cls`` for a family case, in the case's parameter dtype:
    ``LayerNorm(x.shape[-k:], eps, elementwise_affine, bias)``, ``RMSNorm(x.shape[-k:], eps,
    elementwise_affine)``, ``GroupNorm(groups, C, eps, affine, bias)``, ``InstanceNormNd(C,
    eps, affine, bias, track_running_stats=False)`` (groups = C only)."""
    name = _torch_class(cls)
    x = case.inputs["x"]
    dt = _torch_dtype(torch, case.param_dtype)
    affine = case.affine != "none"
    eps = float(case.eps)
    if case.layout == "last":
        k = int(case.normalized_ndim)
        shape = tuple(int(n) for n in x.shape[x.ndim - k:])
        if name == "LayerNorm":
            return cls(shape, eps=eps, elementwise_affine=affine, device=device, dtype=dt,
                       **_bias_kwargs(cls, case))  # fmt: skip
        return cls(shape, eps=eps, elementwise_affine=affine, device=device, dtype=dt)
    c = int(x.shape[case.channel_axis])
    if name == "GroupNorm":
        return cls(int(case.groups), c, eps=eps, affine=affine, device=device, dtype=dt,
                   **_bias_kwargs(cls, case))  # fmt: skip
    if int(case.groups) != c:
        raise Unsupported(
            f"{cls.__name__}: InstanceNorm normalizes each channel (groups = C = {c}); this case "
            f"has groups = {case.groups}"
        )
    return cls(c, eps=eps, affine=affine, track_running_stats=False, device=device, dtype=dt,
               **_bias_kwargs(cls, case))  # fmt: skip


def _build_batch_norm(torch, cls, case: Case, device: str):
    """``cls(C, eps, momentum, affine=True)`` in the case's parameter dtype on ``device``."""
    c = case.inputs["x"].shape[case.channel_axis] if case.channel_axis is not None else None
    if c is None:
        raise Unsupported(f"{cls.__name__}: layout {case.layout} has no channel axis")
    momentum = 0.1 if case.momentum is None else float(case.momentum)
    return cls(
        c,
        eps=float(case.eps),
        momentum=momentum,
        affine=True,
        device=device,
        dtype=_torch_dtype(torch, case.param_dtype),
    )


#: family → how a torch.nn class of that family is constructed from a case.
BUILDERS = {
    "batch_norm": _build_batch_norm,
    "layer_norm": _build_family,
    "rms_norm": _build_family,
    "group_norm": _build_family,
}

OPS.update(FAMILY_OPS)


def build_module(cls, case: Case, *, device: str = "cpu"):
    """The module bnconf constructs from ``case`` for the torch.nn class ``cls`` (what
    :func:`check_module` does with a class): e.g. ``BatchNorm2d(C, eps, momentum,
    affine=True)`` or ``LayerNorm(x.shape[-k:], eps, elementwise_affine, bias)`` in the case's
    parameter dtype on ``device``."""
    family = family_of(cls)
    _check_family(family or "batch_norm", cls)
    return BUILDERS[family](_torch(), cls, case, device)


def module_kernel(
    module,
    *,
    family: Optional[str] = None,
    device: str = "cpu",
    name: Optional[str] = None,
) -> Callable[[Case], Dict[str, Any]]:
    """The kernel ``case -> dict of outputs`` that :func:`check_module` judges: ``module`` (a
    torch.nn class or a callable ``case -> nn.Module``) on one case. Raises
    :class:`bnconf.Unsupported` with the reason for a case the module cannot express.
    ``name`` prefixes those reasons (default: the module's class name). ``family``: the
    class's family when None (``batch_norm`` for a callable); the kernel's ``bnconf_family``
    says which family it judges."""
    torch = _torch()
    family = _resolve_family(family, module)
    _check_family(family, module)
    ops = OPS[family]
    label = name or getattr(module, "__name__", None) or type(module).__name__
    run = _Run if family == "batch_norm" else _FamilyRun

    def kernel(case: Case) -> Dict[str, Any]:
        op = ops.get(case.op)
        if op is None:
            raise Unsupported(f"{label}: op {case.op} not implemented")
        if isinstance(op, str):
            raise Unsupported(f"{label}: {op}")
        if isinstance(module, type):
            m = BUILDERS[family](torch, module, case, device)
        else:
            m = module(case)
            if not isinstance(m, torch.nn.Module):
                raise TypeError(
                    f"the module callable returned {type(m).__name__}, not a torch.nn.Module"
                )
            m = m.to(device)
        return op(run(torch, case, m, device, label))

    kernel.bnconf_family = family
    return kernel


check_module, assert_module_conforms = entry_points(
    module_kernel,
    "module",
    """Judge a torch.nn normalization module on a bnconf suite (the module docstring says what
    each op runs). ``module``: a class (``torch.nn.BatchNorm2d``, ``torch.nn.LayerNorm``, ...)
    or a callable ``case -> torch.nn.Module``. ``family``: the class's family when None (the
    default; ``batch_norm`` for a callable), else ``batch_norm``, ``layer_norm``, ``rms_norm``
    or ``group_norm``. Raises ValueError for another family or a class of another family.""",
    families=TORCH_FAMILIES,
)


__all__ = [
    "BN_LAYOUTS",
    "FAMILY_CHANNELS_LAST",
    "FAMILY_OPS",
    "TORCH_FAMILIES",
    "BUILDERS",
    "FAMILIES",
    "MODULE_FAMILY",
    "OPS",
    "assert_module_conforms",
    "build_module",
    "check_module",
    "family_of",
    "module_kernel",
]
