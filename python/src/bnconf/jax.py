"""`bnconf.jax`: judge a JAX normalization function or a Flax module against bnconf's exact
reference.

    import jax, jax.numpy as jnp, bnconf.jax

    def bn(x, gamma, beta, *, axes, channel_axis, eps, mean=None, var=None):
        shape = [1] * x.ndim; shape[channel_axis] = -1
        xhat = jax.nn.standardize(x, axes, mean=None if mean is None else mean.reshape(shape),
                                  variance=None if var is None else var.reshape(shape),
                                  epsilon=eps)
        y = gamma.reshape(shape) * xhat + beta.reshape(shape)
        return y if mean is not None else (y, jnp.mean(x, axes), jnp.var(x, axes))

    report = bnconf.jax.check_function(bn, dtype="float32")

    import flax.linen as nn
    report = bnconf.jax.check_flax_module(nn.BatchNorm, dtype="float32")

**check_function(fn, ...)**: bnconf calls ``fn(x, gamma, beta, *, axes, channel_axis, eps)``
(``x`` in the case layout, ``gamma``/``beta`` of shape ``[C]``, ``axes`` the tuple of axes
reduced over, ``eps`` a Python float) for the training normalization, inside ``jax.jit``
(``axes``/``channel_axis`` static). It returns ``y``, or ``(y, mean, var)`` (``[C]`` each):
- ``forward``: ``y, mean, var`` as returned; a function returning only ``y`` does not expose
  its statistics: unsupported, with that reason.
- ``backward``: ``jax.vjp`` of ``y`` with respect to ``(x, gamma, beta)`` (``beta = 0``),
  cotangent ``dy``: ``dx, dgamma, dbeta``.
- ``eval``: ``fn(..., mean=mean, var=var)`` (the handed-in statistics, shape ``[C]``) gives
  ``y``; ``sync_forward``: the same with ``var = m2 - mean*mean`` formed with jnp. A function
  without ``mean``/``var`` keywords takes no handed-in statistics: unsupported.
- ``running_update``: unsupported (a function keeps no running statistics; see
  ``check_flax_module``). ``sync_backward``, ``sync_stats``: unsupported (JAX's cross-device
  BatchNorm is the VJP through ``lax.pmean``, which needs the other shards' data).

**check_flax_module(module, ...)**: ``module`` is a ``flax.linen`` BatchNorm class, which bnconf
constructs per case as ``module(axis=channel_axis, epsilon=eps)``, or a callable ``case ->
flax.linen.Module`` for the user's own; its variables are ``nn.BatchNorm``'s:
``{"params": {"scale", "bias"}, "batch_stats": {"mean", "var"}}``, in the case dtype. Each op
is one ``jax.jit``-ed ``module.apply``:
- ``forward``: ``apply(..., use_running_average=False, mutable=["batch_stats"])`` on a clone
  with ``momentum=0``: Flax blends ``momentum*old + (1-momentum)*batch``, so the updated
  ``batch_stats`` are exactly the batch statistics the module normalized with.
- ``backward``: ``jax.vjp`` of that training forward's ``y`` w.r.t. ``(x, scale, bias)``.
- ``eval``: ``apply(..., use_running_average=True)`` with ``batch_stats`` = the handed-in
  mean/var; ``sync_forward``: var = ``m2 - mean*mean`` formed with jnp.
- ``running_update``, convention ``onnx`` (Flax's: biased variance, ``momentum*old +
  (1-momentum)*batch``): one training step on a clone with ``momentum = a`` from the handed-in
  running statistics, the new ``batch_stats`` read back. Convention ``pytorch``: unsupported.
- ``sync_backward``, ``sync_stats``: unsupported (``lax.pmean`` across devices; an equal-weight
  mean cannot express shards of unequal size).

Both: ``device`` names a JAX platform (``"cpu"``, ``"gpu"``, ...); float64 suites turn on
``jax_enable_x64`` (a process-wide JAX setting). Requires jax (and flax for
``check_flax_module``); ``import bnconf`` does not.

**The normalization family** (``family="layer_norm"``, ``"rms_norm"``, ``"group_norm"``):

- ``check_function(fn, family=...)``: bnconf calls ``fn(x, gamma, beta, *, axes, eps)``
  (layout ``last``: ``axes`` the last ``normalized_ndim`` axes, ``gamma``/``beta`` of the
  normalized shape) or ``fn(x, gamma, beta, *, axes, eps, channel_axis, groups)``
  (group_norm: ``gamma``/``beta`` of shape ``[C]``), inside ``jax.jit``; ``gamma``/``beta`` are
  None where the case has none. It returns ``y``, or ``(y, mean, rstd)`` (rms_norm: ``(y,
  rstd)``) to have the statistics judged (they are optional: a function returning only ``y``
  is judged on ``y``). Backward: ``jax.vjp`` of ``y`` w.r.t. ``(x, gamma, beta)`` (beta = 0
  where the case asks for ``dbeta``). rms_norm's ``offset`` cases are handed ``gamma`` as is.
- ``check_flax_module(module)``: ``flax.linen.LayerNorm``/``RMSNorm`` built with
  ``reduction_axes = feature_axes`` = the last ``normalized_ndim`` axes, ``GroupNorm(num_groups
  = groups)``, each with ``epsilon = eps``, ``use_scale``/``use_bias`` as the case's affine,
  ``param_dtype`` the case's parameter dtype and ``dtype`` (Flax's result dtype) x's — for
  half x with float32 parameters that is Flax's mixed precision, ``dtype=half,
  param_dtype=float32``, where ``dtype=None`` would promote y to float32 — (Flax's other
  defaults kept: ``use_fast_variance=True``, whose one-pass variance does not conform on the
  cancellation cases), or a callable ``case -> flax.linen.Module`` whose params are named
  ``scale``/``bias`` (``flax_family_module(cls, case, **fields)`` builds the former with
  fields changed, e.g. ``use_fast_variance=False``). ``y = module.apply(...)``
  (Flax modules do not return their statistics: not given); backward ``jax.vjp`` w.r.t. x and
  the params. GroupNorm takes the channels last: x is moved there and ``y``/``dx`` back. RMSNorm
  (``scale·x·rstd``): the ``offset`` convention is unsupported, with the reason.
- An output returned in another dtype than the case's (a user's module with ``dtype=None``:
  Flax promotes half x with float32 params to a float32 y) is unsupported with the reason.

"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Optional

import numpy as np

from ._check import Case, Unsupported
from ._frameworks import check_family, entry_points, require

# The reasons JAX and Flax cannot express an op (what the unsupported cases say).
FUNCTION_UNSUPPORTED = {
    "sync_backward": "JAX's sync BN is the VJP through lax.pmean over devices; no op takes "
    "handed-in all-reduced gradient statistics",
    "running_update": "JAX keeps no running statistics (user or Flax code does)",
    "sync_stats": "JAX has no count-weighted all-reduce of shard statistics (lax.pmean is an "
    "equal-weight mean)",
}
FLAX_UNSUPPORTED = {
    "sync_backward": "Flax's sync BN differentiates through lax.pmean over devices; no op takes "
    "handed-in all-reduced gradient statistics",
    "sync_stats": "Flax all-reduces with an equal-weight lax.pmean of per-device means; shards "
    "of unequal size cannot be expressed",
}


def _jax():
    jax = require("jax", "bnconf.jax", "jax", "jax")
    return jax, require("jax.numpy", "bnconf.jax", "jax", "jax")


def _linen():
    return require("flax.linen", "bnconf.jax.check_flax_module", "flax", "flax")


class _Run:
    """One case: its arrays as JAX arrays on the chosen device, and host conversion back."""

    def __init__(self, jax, jnp, case: Case, device: str, name: str):
        self.jax, self.jnp, self.case, self.name = jax, jnp, case, name
        if case.channel_axis is None:
            raise Unsupported(f"{name}: layout {case.layout} has no channel axis")
        if "float64" in (case.dtype, case.param_dtype) and not jax.config.jax_enable_x64:
            jax.config.update("jax_enable_x64", True)
        try:
            self.device = jax.devices(device)[0]
        except RuntimeError as e:
            raise ValueError(f"device={device!r}: JAX has no such platform here: {e}") from None
        self.cax, self.axes = case.channel_axis, tuple(case.reduce_axes)
        self.eps = float(case.eps)

    def arr(self, name: str, param: bool = False):
        dt = self.case.param_dtype if param else self.case.dtype
        a = self.case.inputs[name]
        if dt == "bfloat16":
            return self.jax.device_put(self.jnp.asarray(a, dtype=self.jnp.bfloat16), self.device)
        return self.jax.device_put(self.jnp.asarray(a), self.device)

    def vec(self, name: str):
        return self.arr(name, param=True)

    def host(self, out: Dict[str, Any]) -> Dict[str, np.ndarray]:
        res = {}
        for k, v in out.items():
            a = np.asarray(v)
            if a.dtype.name == "bfloat16":
                a = a.astype(np.float32)  # written back rounded to bf16 (exact here)
            res[k] = a
        return res


def _accepts_stats(fn) -> bool:
    """``fn`` takes ``mean=`` and ``var=`` keywords (or ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    return "mean" in params and "var" in params


def _y(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def function_kernel(
    fn, *, family: Optional[str] = None, device: str = "cpu", name: Optional[str] = None
) -> Callable[[Case], Dict[str, Any]]:
    """The kernel ``case -> dict of outputs`` that :func:`check_function` judges: ``fn`` on one
    case, as the module docstring describes. Raises :class:`bnconf.Unsupported` with the
    reason for a case the function cannot express; ``name`` prefixes those reasons (default:
    the function's ``__name__``)."""
    jax, jnp = _jax()
    family = "batch_norm" if family is None else str(family)
    check_family(family, JAX_FAMILIES)
    if not callable(fn):
        raise TypeError(
            f"fn must be a JAX function (x, gamma, beta, *, axes, channel_axis, eps), not {fn!r}"
        )
    label = name or getattr(fn, "__name__", "function")
    if family != "batch_norm":
        k = _family_function_kernel(fn, family, device, label)
        k.bnconf_family = family
        return k
    stats = _accepts_stats(fn)

    def _forward(x, gamma, beta, eps, cax, axes):
        return fn(x, gamma, beta, axes=axes, channel_axis=cax, eps=eps)

    def _backward(x, dy, gamma, eps, cax, axes):
        beta = jnp.zeros_like(gamma)
        def f(x_, g_, b_):
            return _y(fn(x_, g_, b_, axes=axes, channel_axis=cax, eps=eps))

        _, vjp = jax.vjp(f, x, gamma, beta)
        return vjp(dy)

    def _eval(x, gamma, beta, mean, var, eps, cax, axes):
        return _y(fn(x, gamma, beta, axes=axes, channel_axis=cax, eps=eps, mean=mean, var=var))

    def _sync_forward(x, gamma, beta, mean, m2, eps, cax, axes):
        return _eval(x, gamma, beta, mean, m2 - mean * mean, eps, cax, axes)

    static = ("cax", "axes")
    forward = jax.jit(_forward, static_argnames=static)
    backward = jax.jit(_backward, static_argnames=static)
    evaluate = jax.jit(_eval, static_argnames=static)
    sync_forward = jax.jit(_sync_forward, static_argnames=static)

    def kernel(case: Case) -> Dict[str, Any]:
        op = case.op
        if op in FUNCTION_UNSUPPORTED:
            raise Unsupported(f"{label}: {FUNCTION_UNSUPPORTED[op]}")
        if op not in ("forward", "backward", "eval", "sync_forward"):
            raise Unsupported(f"{label}: op {op} not implemented")
        if op in ("eval", "sync_forward") and not stats:
            raise Unsupported(
                f"{label}: the function has no mean=/var= keywords: it takes no handed-in "
                "statistics"
            )
        r = _Run(jax, jnp, case, device, label)
        kw = {"eps": r.eps, "cax": r.cax, "axes": r.axes}
        with jax.default_device(r.device):
            if op == "forward":
                out = forward(r.arr("x"), r.vec("gamma"), r.vec("beta"), **kw)
                if not (isinstance(out, (tuple, list)) and len(out) == 3):
                    raise Unsupported(
                        f"{label}: the function returns only y; its batch statistics (mean, var) "
                        "are not observable (return (y, mean, var) to have them judged)"
                    )
                res = dict(zip(("y", "mean", "var"), out))
            elif op == "backward":
                dx, dgamma, dbeta = backward(r.arr("x"), r.arr("dy"), r.vec("gamma"), **kw)
                res = {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
            elif op == "eval":
                args = (r.vec("gamma"), r.vec("beta"), r.vec("mean"), r.vec("var"))
                res = {"y": evaluate(r.arr("x"), *args, **kw)}
            else:
                args = (r.vec("gamma"), r.vec("beta"), r.vec("mean"), r.vec("m2"))
                res = {"y": sync_forward(r.arr("x"), *args, **kw)}
            return r.host(res)

    return kernel


# ---------------------------------------------------------------------------------------------
# The normalization family: layer_norm, rms_norm, group_norm.

#: The families bnconf.jax checks: batch_norm and the normalization family.
JAX_FAMILIES = ("batch_norm", "layer_norm", "rms_norm", "group_norm")
FAMILIES = JAX_FAMILIES

#: flax.linen classes by name → their family.
FLAX_FAMILY = {
    "BatchNorm": "batch_norm",
    "LayerNorm": "layer_norm",
    "RMSNorm": "rms_norm",
    "GroupNorm": "group_norm",
}

#: The statistics a family function may return after ``y`` (in this order).
FAMILY_STATS = {"layer_norm": ("mean", "rstd"), "rms_norm": ("rstd",), "group_norm": ("mean", "rstd")}


def _flax_class(module) -> Optional[str]:
    """The flax.linen normalization class ``module`` (a class) is or derives from, or None."""
    for c in getattr(module, "__mro__", ()):
        if c.__module__.startswith("flax.linen") and c.__name__ in FLAX_FAMILY:
            return c.__name__
    return None


def _family_base(op: str) -> str:
    return op[: -len("_backward")] if op.endswith("_backward") else op


class _FamilyRun:
    """One family case as JAX arrays on the chosen device (``gamma``/``beta`` None where the
    case has none), and host conversion back."""

    def __init__(self, jax, jnp, case: Case, device: str, name: str):
        self.jax, self.jnp, self.case, self.name = jax, jnp, case, name
        if "float64" in (case.dtype, case.param_dtype) and not jax.config.jax_enable_x64:
            jax.config.update("jax_enable_x64", True)
        try:
            self.device = jax.devices(device)[0]
        except RuntimeError as e:
            raise ValueError(f"device={device!r}: JAX has no such platform here: {e}") from None
        self.eps = float(case.eps)
        self.axes = tuple(case.reduce_axes)
        self.base = _family_base(case.op)

    def arr(self, name: str):
        case = self.case
        if name not in case.inputs:
            return None
        dt = case.dtype if name in ("x", "dy") else case.param_dtype
        a = case.inputs[name]
        if dt == "bfloat16":
            return self.jax.device_put(self.jnp.asarray(a, dtype=self.jnp.bfloat16), self.device)
        return self.jax.device_put(self.jnp.asarray(a), self.device)

    def want(self, out: str) -> str:
        return self.case.dtype if out in ("y", "dx") else self.case.param_dtype

    def host(self, out: Dict[str, Any]) -> Dict[str, np.ndarray]:
        """The outputs as numpy; an output JAX returns in another dtype than the case's is
        unsupported (a cast here would be glue, not the function)."""
        res = {}
        for k, v in out.items():
            a = np.asarray(v)
            if a.dtype.name != self.want(k):
                raise Unsupported(
                    f"{self.name}: returns {k} as {a.dtype.name}; the case's {k} is {self.want(k)}"
                )
            if a.dtype.name == "bfloat16":
                a = a.astype(np.float32)  # written back rounded to bf16 (exact here)
            res[k] = a
        return res

    def vjp_outputs(self, y_of, x, dy, gamma):
        """``jax.vjp`` of ``y_of(x, gamma, beta)`` (beta = 0 where the case asks for dbeta):
        the case's dx, dgamma, dbeta."""
        jnp = self.jnp
        outs = self.case.outputs
        beta = jnp.zeros_like(gamma) if "dbeta" in outs and gamma is not None else None
        if "dbeta" in outs and beta is None:
            raise Unsupported(f"{self.name}: dbeta without gamma")
        y, vjp = self.jax.vjp(y_of, x, gamma, beta)
        if y.dtype != dy.dtype:
            raise Unsupported(
                f"{self.name}: returns y as {y.dtype}; the case's y (and dy) is {dy.dtype}"
            )
        dx, dgamma, dbeta = vjp(dy)
        res = {"dx": dx}
        if "dgamma" in outs:
            res["dgamma"] = dgamma
        if "dbeta" in outs:
            res["dbeta"] = dbeta
        return res


def _family_function_kernel(fn, family: str, device: str, label: str):
    jax, jnp = _jax()
    stats_names = FAMILY_STATS[family]

    def kernel(case: Case) -> Dict[str, Any]:
        if case.family != family:
            raise Unsupported(f"{label}: a {family} function, not {case.family}")
        r = _FamilyRun(jax, jnp, case, device, label)
        kw = {"axes": r.axes, "eps": r.eps}
        if family == "group_norm":
            kw.update(channel_axis=case.channel_axis, groups=int(case.groups))

        def call(x, gamma, beta):
            return fn(x, gamma, beta, **kw)

        with jax.default_device(r.device):
            x, gamma = r.arr("x"), r.arr("gamma")
            if r.base == case.op:
                out = jax.jit(call)(x, gamma, r.arr("beta"))
                if isinstance(out, (tuple, list)):
                    if len(out) != 1 + len(stats_names):
                        raise TypeError(
                            f"{label} returned {len(out)} values; expected y or (y, "
                            f"{', '.join(stats_names)})"
                        )
                    res = dict(zip(("y",) + stats_names, out))
                else:
                    res = {"y": out}  # the statistics are not given (optional)
            else:
                res = jax.jit(lambda x, dy, g: r.vjp_outputs(
                    lambda x_, g_, b_: _y(call(x_, g_, b_)), x, dy, g
                ))(x, r.arr("dy"), gamma)  # fmt: skip
            return r.host(res)

    return kernel


def _family_flax_build(nn, cls, case: Case, **fields):
    """The flax.linen module of ``cls`` for a family case: ``LayerNorm``/``RMSNorm`` over the
    last ``normalized_ndim`` axes (``reduction_axes = feature_axes``), ``GroupNorm(groups)``
    (channels last), with ``use_scale``/``use_bias`` as the case's affine, ``param_dtype`` the
    case's parameter dtype and ``dtype`` (Flax's result dtype) x's: half x with float32
    parameters is Flax's mixed precision, ``dtype=half, param_dtype=float32`` (with
    ``dtype=None`` Flax would promote y to float32). ``fields`` (e.g. ``use_fast_variance``)
    are passed on; the other fields Flax's defaults."""
    name = _flax_class(cls)
    eps = float(case.eps)
    use_scale = case.affine != "none"
    use_bias = case.affine == "weight_bias"
    jnp = _jax()[1]
    fields = dict(fields, param_dtype=jnp.dtype(case.param_dtype), dtype=jnp.dtype(case.dtype))
    if name == "GroupNorm":
        return cls(num_groups=int(case.groups), epsilon=eps, use_scale=use_scale,
                   use_bias=use_bias, **fields)  # fmt: skip
    k = int(case.normalized_ndim)
    axes = tuple(range(-k, 0))
    if name == "RMSNorm":
        if case.convention == "offset":
            raise Unsupported(
                "RMSNorm: flax.linen.RMSNorm computes scale*x*rstd (convention standard), not "
                "(1 + gamma)*x*rstd (offset); scale = 1 + gamma would be rounded by bnconf"
            )
        return cls(epsilon=eps, use_scale=use_scale, reduction_axes=axes, feature_axes=axes,
                   **fields)  # fmt: skip
    return cls(epsilon=eps, use_scale=use_scale, use_bias=use_bias, reduction_axes=axes,
               feature_axes=axes, **fields)  # fmt: skip


def flax_family_module(cls, case: Case, **fields):
    """The module :func:`check_flax_module` builds from the flax.linen class ``cls``
    (``LayerNorm``, ``RMSNorm``, ``GroupNorm`` or a subclass) for a family case (the module
    docstring says how), with ``fields`` (e.g. ``use_fast_variance=False``) set too: for a
    callable ``case -> Module`` that changes one of Flax's defaults and keeps the rest, e.g.
    ``flax_module_kernel(lambda c: flax_family_module(nn.LayerNorm, c, use_fast_variance=False),
    family="layer_norm")``."""
    name = _flax_class(cls) if isinstance(cls, type) else None
    if FLAX_FAMILY.get(name or "") not in ("layer_norm", "rms_norm", "group_norm"):
        raise ValueError(f"{cls!r} is not flax.linen.LayerNorm, RMSNorm or GroupNorm")
    return _family_flax_build(_linen(), cls, case, **fields)


def _family_flax_kernel(module, family: str, device: str, label: str):
    jax, jnp = _jax()
    nn = _linen()

    def build(case: Case):
        if isinstance(module, type):
            return _family_flax_build(nn, module, case)
        m = module(case)
        if not isinstance(m, nn.Module):
            raise TypeError(
                f"the module callable returned {type(m).__name__}, not a flax.linen.Module"
            )
        return m

    def kernel(case: Case) -> Dict[str, Any]:
        if case.family != family:
            raise Unsupported(f"{label}: a {family} module, not {case.family}")
        r = _FamilyRun(jax, jnp, case, device, label)
        m = build(case)
        # group_norm: Flax's GroupNorm takes the channels last (x moved there and back)
        cax = case.channel_axis
        last = cax is None or cax == len(case.shape) - 1

        def to_m(t):
            return t if last else jnp.moveaxis(t, cax, -1)

        def from_m(t):
            return t if last else jnp.moveaxis(t, -1, cax)

        with jax.default_device(r.device):
            x, gamma = r.arr("x"), r.arr("gamma")
            params = dict(m.init(jax.random.PRNGKey(0), to_m(x)).get("params", {}))
            pshape = tuple(case.inputs["gamma"].shape) if "gamma" in case.inputs else None
            for p, inp, grad, fill in (("scale", "gamma", "dgamma", 1.0), ("bias", "beta", "dbeta", 0.0)):
                if p not in params:
                    if grad in case.outputs:
                        raise Unsupported(
                            f"{label}: the module has no {p} (use_{p}=False): no {grad}"
                        )
                    v = case.inputs.get(inp)
                    if v is not None and bool((v != fill).any()):
                        raise Unsupported(
                            f"{label}: the module has no {p}; the case's {inp} is not all {fill:g}"
                        )
                elif pshape is not None and tuple(params[p].shape) != pshape:
                    raise Unsupported(
                        f"{label}: the module's {p} has shape {list(params[p].shape)}, the "
                        f"case's gamma {list(pshape)}"
                    )

            def y_of(x_, g_, b_):
                ps = dict(params)
                if "scale" in ps:
                    ps["scale"] = jnp.ones_like(ps["scale"]) if g_ is None else g_
                if "bias" in ps:
                    ps["bias"] = jnp.zeros_like(ps["bias"]) if b_ is None else b_
                return from_m(m.apply({"params": ps}, to_m(x_)))

            if r.base == case.op:
                res = {"y": jax.jit(y_of)(x, gamma, r.arr("beta"))}
            else:
                res = jax.jit(lambda x, dy, g: r.vjp_outputs(y_of, x, dy, g))(
                    x, r.arr("dy"), gamma
                )
        return r.host(res)

    return kernel


def _flax_vars(gamma, beta, mean, var):
    return {"params": {"scale": gamma, "bias": beta}, "batch_stats": {"mean": mean, "var": var}}


def flax_module_kernel(
    module, *, family: Optional[str] = None, device: str = "cpu", name: Optional[str] = None
) -> Callable[[Case], Dict[str, Any]]:
    """The kernel ``case -> dict of outputs`` that :func:`check_flax_module` judges: ``module``
    (a flax.linen class, or a callable ``case -> flax.linen.Module``) on one case. Raises
    :class:`bnconf.Unsupported` with the reason for a case the module cannot express; ``name``
    prefixes those reasons (default: the module's class name)."""
    jax, jnp = _jax()
    nn = _linen()
    if family is None:
        cls = _flax_class(module) if isinstance(module, type) else None
        family = FLAX_FAMILY.get(cls or "", "batch_norm")
    family = str(family)
    check_family(family, JAX_FAMILIES)
    if isinstance(module, type):
        if not issubclass(module, nn.Module):
            raise ValueError(f"module {module.__name__} is not a flax.linen Module class")
        fam = FLAX_FAMILY.get(_flax_class(module) or "")
        if fam != family:
            need = " or ".join(f"flax.linen.{n}" for n, f in FLAX_FAMILY.items() if f == family)
            raise ValueError(
                f"module {module.__name__} is not a {family} module ({need}); "
                "pass a callable case -> flax.linen.Module for your own"
            )
    elif not callable(module):
        raise TypeError(
            f"module must be a flax.linen class or a callable case -> Module, not {module!r}"
        )
    if family != "batch_norm":
        label = name or getattr(module, "__name__", None) or type(module).__name__
        k = _family_flax_kernel(module, family, device, label)
        k.bnconf_family = family
        return k

    def build(case: Case):
        if isinstance(module, type):
            return module(axis=case.channel_axis, epsilon=float(case.eps))
        m = module(case)
        if not isinstance(m, nn.Module):
            raise TypeError(
                f"the module callable returned {type(m).__name__}, not a flax.linen.Module"
            )
        return m

    label = name or getattr(module, "__name__", None) or type(module).__name__

    def with_momentum(bn, a: float, label: str):
        try:
            return bn.clone(momentum=a)
        except TypeError as e:
            raise Unsupported(
                f"{label}: the module has no momentum field to set ({e}); its batch statistics "
                "are read by setting momentum"
            ) from None

    def kernel(case: Case) -> Dict[str, Any]:
        op = case.op
        if op in FLAX_UNSUPPORTED:
            raise Unsupported(f"{label}: {FLAX_UNSUPPORTED[op]}")
        if op not in ("forward", "backward", "eval", "sync_forward", "running_update"):
            raise Unsupported(f"{label}: op {op} not implemented")
        r = _Run(jax, jnp, case, device, label)
        bn = build(case)
        if op != "running_update":
            if not getattr(bn, "use_scale", True) or not getattr(bn, "use_bias", True):
                raise Unsupported(
                    f"{label}: the module has no scale/bias (use_scale/use_bias=False): the "
                    "case's gamma and beta cannot be set"
                )

        def train(m, x, gamma, beta, rmean, rvar):
            y, upd = m.apply(
                _flax_vars(gamma, beta, rmean, rvar), x, use_running_average=False,
                mutable=["batch_stats"],
            )  # fmt: skip
            return y, upd["batch_stats"]["mean"], upd["batch_stats"]["var"]

        with jax.default_device(r.device):
            x = r.arr("x")
            if op == "forward":
                m0 = with_momentum(bn, 0.0, label)

                def f(x, gamma, beta):
                    c = gamma.shape[0]
                    return train(m0, x, gamma, beta, jnp.zeros(c, x.dtype), jnp.ones(c, x.dtype))

                y, mean, var = jax.jit(f)(x, r.vec("gamma"), r.vec("beta"))
                res = {"y": y, "mean": mean, "var": var}
            elif op == "backward":

                def f(x, dy, gamma):
                    c = gamma.shape[0]
                    stats = (jnp.zeros(c, x.dtype), jnp.ones(c, x.dtype))

                    def y_of(x_, g_, b_):
                        return bn.apply(
                            _flax_vars(g_, b_, *stats), x_, use_running_average=False,
                            mutable=["batch_stats"],
                        )[0]  # fmt: skip

                    _, vjp = jax.vjp(y_of, x, gamma, jnp.zeros_like(gamma))
                    return vjp(dy)

                dx, dgamma, dbeta = jax.jit(f)(x, r.arr("dy"), r.vec("gamma"))
                res = {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
            elif op in ("eval", "sync_forward"):
                second = "var" if op == "eval" else "m2"

                def f(x, gamma, beta, mean, v):
                    var = v if op == "eval" else v - mean * mean
                    return bn.apply(_flax_vars(gamma, beta, mean, var), x, use_running_average=True)

                y = jax.jit(f)(x, r.vec("gamma"), r.vec("beta"), r.vec("mean"), r.vec(second))
                res = {"y": y}
            else:
                if case.convention != "onnx":
                    raise Unsupported(
                        f"{label}: Flax's running statistics follow the onnx convention (biased "
                        f"variance), not {case.convention}"
                    )
                ma = with_momentum(bn, float(case.momentum), label)

                def f(x, rmean, rvar):
                    c = rmean.shape[0]
                    ones, zeros = jnp.ones(c, x.dtype), jnp.zeros(c, x.dtype)
                    _, new_mean, new_var = train(ma, x, ones, zeros, rmean, rvar)
                    return new_mean, new_var

                new_mean, new_var = jax.jit(f)(x, r.vec("running_mean"), r.vec("running_var"))
                res = {"new_mean": new_mean, "new_var": new_var}
        return r.host(res)

    return kernel


check_function, assert_function_conforms = entry_points(
    function_kernel,
    "function",
    """Judge a JAX normalization function on a bnconf suite (the module docstring gives the
    calling convention and what each op runs). ``family``: ``batch_norm`` when None (the
    default), or ``layer_norm``, ``rms_norm``, ``group_norm``.""",
    families=JAX_FAMILIES,
)
check_flax_module, assert_flax_module_conforms = entry_points(
    flax_module_kernel,
    "flax_module",
    """Judge a Flax (linen) normalization module on a bnconf suite; ``module`` is a class
    (``flax.linen.BatchNorm``, ``LayerNorm``, ``RMSNorm``, ``GroupNorm``) or a callable ``case ->
    flax.linen.Module``. ``family``: the class's when None (the default; ``batch_norm`` for a
    callable).""",
    families=JAX_FAMILIES,
)


__all__ = [
    "FAMILIES",
    "FLAX_FAMILY",
    "JAX_FAMILIES",
    "assert_flax_module_conforms",
    "assert_function_conforms",
    "check_flax_module",
    "check_function",
    "flax_family_module",
    "flax_module_kernel",
    "function_kernel",
]
