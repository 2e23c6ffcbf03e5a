"""What the framework entry points (`bnconf.torch`, `bnconf.jax`) share: the families this
bnconf's harness has, and the ``check_*`` / ``assert_*_conforms`` pair built around a
``make_kernel(obj, family=, device=) -> kernel(case)`` function, judged by :func:`bnconf.check`."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Iterable, Optional, Tuple, Union

from ._check import check
from ._report import MAX_LISTED, Report

#: Families every framework module checks (bnconf.torch, bnconf.jax); each passes the ones it
#: takes to :func:`check_family` (bnconf.torch: the normalization family too). The others are
#: planned for it (bnconf.check(kernel, family=...) judges every family).
FAMILIES = ("batch_norm",)
PLANNED_FAMILIES = ("layer_norm", "rms_norm", "group_norm")


def planned(family: str, families=FAMILIES) -> str:
    """`` (planned for bnconf 0.4)`` for a family of the plan not in ``families``, else ``""``."""
    return " (planned for bnconf 0.4)" if family in PLANNED_FAMILIES and family not in families else ""


def check_family(family: str, families=FAMILIES) -> None:
    """ValueError naming ``family`` unless it is one of ``families`` (the ones the framework
    module takes)."""
    if family not in families:
        raise ValueError(
            f"family {family!r}{planned(family, families)}: this framework check takes only "
            f"{', '.join(families)}"
        )


def require(module: str, who: str, package: str, extra: str):
    """``import module``, or ImportError saying that ``who`` needs ``package`` and how to
    install it (the frameworks are imported lazily: ``import bnconf`` never needs them)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{who} needs {package}: pip install {package} (or the bnconf[{extra}] extra)"
        ) from e


def label_of(obj) -> str:
    """How messages name a class, function or other callable."""
    return getattr(obj, "__name__", None) or repr(obj)


def entry_points(
    make_kernel: Callable[..., Callable], name: str, doc: str, families=FAMILIES
) -> Tuple[Callable[..., Report], Callable[..., Report]]:
    """``check_<name>(obj, *, family, dtype, suite, ops, layouts, device, seed, require_all)``
    and ``assert_<name>_conforms(obj, **same)`` for ``make_kernel``. With more ``families``
    than batch_norm, ``family`` defaults to None (``make_kernel`` decides: the kernel's
    ``bnconf_family``) and the suite is that family's."""
    default_family = "batch_norm" if tuple(families) == FAMILIES else None

    def checker(
        obj,
        *,
        family: Optional[str] = default_family,
        dtype: Union[str, Any] = "float32",
        suite: str = "default",
        ops: Optional[Union[str, Iterable[str]]] = None,
        layouts: Optional[Union[str, Iterable[str]]] = None,
        device: str = "cpu",
        seed: Optional[int] = None,
        require_all: bool = False,
    ) -> Report:
        kernel = make_kernel(obj, family=family, device=device)
        return check(
            kernel, suite=suite, dtype=dtype, ops=ops, layouts=layouts, seed=seed,
            require_all=require_all,
            family=getattr(kernel, "bnconf_family", None) or family or "batch_norm",
        )  # fmt: skip

    def asserter(obj, **kwargs) -> Report:
        report = checker(obj, **kwargs)
        if not report.ok:
            raise AssertionError(
                f"{label_of(obj)} does not conform:\n" + report.describe(limit=MAX_LISTED)
            )
        return report

    checker.__name__ = checker.__qualname__ = f"check_{name}"
    checker.__doc__ = doc + (
        "\n\n``dtype``, ``suite``, ``ops``, ``layouts``, ``seed``, ``require_all``: as "
        ":func:`bnconf.check`; ``family``: one of " + ", ".join(families) + " (others raise "
        "ValueError); ``device``: where the framework runs. Returns a :class:`bnconf.Report`."
    )
    asserter.__name__ = asserter.__qualname__ = f"assert_{name}_conforms"
    asserter.__doc__ = (
        f":func:`check_{name}`, then AssertionError naming the worst non-conforming cases "
        "unless it conforms. Returns the report when it does."
    )
    return checker, asserter
