#!/usr/bin/env python3
"""StableHLO BatchNorm compiled by XLA:CPU or IREE (llvm-cpu), speaking the kernel directory protocol.

Usage: python adapters/stablehlo/shlo_bn.py --engine xla|iree [--module TEMPLATE.mlir] DIR
       (bash adapters/setup.sh --stablehlo makes the venv adapters/.venv-stablehlo;
        docs/ADAPTERS.md, "StableHLO")

Without --module: StableHLO's own BatchNorm ops, one hand-written module per case shape,
dtype and eps, every tensor in the case dtype:
- forward:  `stablehlo.batch_norm_training(x, gamma, beta)` -> (y, batch mean, batch var).
- backward: `stablehlo.batch_norm_training(x, gamma, 0)` feeding its mean/var to
  `stablehlo.batch_norm_grad(x, gamma, mean, var, dy)` -> (dx, dgamma, dbeta), in one module.
- eval:     `stablehlo.batch_norm_inference(x, gamma, beta, mean, var)` -> y.
- feature_index 1 for nchw, 3 for nhwc; other layouts and ops are unsupported.
- `epsilon` is an f32 attribute in StableHLO, so an f64 module holds float32(eps).

With --module TEMPLATE.mlir: MLIR text in which string.Template placeholders are substituted
per case: ${X_SHAPE} (e.g. 2x3x4x4, in the layout's order), ${C}, ${T} (f32 | f64),
${EPS} (a float literal with a '.', e.g. 1.00000000000000008e-05, that parses to the case's
eps rounded to T), ${FEATURE_INDEX} (1 nchw, 3 nhwc), ${REDUCE_DIMS} (e.g. `0, 2, 3`) and
${M} (cells per channel, an integer). It may define `func.func @forward(x, gamma, beta) ->
(y, mean, var)`, `@backward(x, dy, gamma) -> (dx, dgamma, dbeta)` and
`@eval(x, gamma, beta, mean, var) -> (y)`; an op whose function it does not define is
unsupported. The functions may sit in a named module (`module @name { ... }`) or an unnamed one
(bare functions or `module { ... }`); both engines run either (IREE's VM module takes the MLIR
module's name, and the adapter looks the function up in the module IREE compiled). Each case compiles only its own function (the others are made private and
dropped by `symbol-dce` before the engine sees the module), so one function the engine
refuses does not take the others with it.

Both modes compile once per distinct (function, shape, dtype, eps) (a cache). A compile error
that is a legalization failure ("failed to legalize ...") makes the case `unsupported` with
the compiler's message; any other error is printed on stderr and the case gets no outputs, so
bnconf counts it as not conforming.

Engines:
- xla:  the PJRT CPU client of jaxlib (`jax._src.xla_bridge.get_backend("cpu")`), which
  compiles MLIR text with `compile_and_load` (StableHLO -> HLO -> XLA:CPU), default
  CompileOptions; inputs and outputs through jax arrays (jax_enable_x64 for f64).
  XLA_FLAGS works as usual (e.g. --xla_dump_to=DIR --xla_dump_hlo_pass_re=.*).
- iree: `iree.compiler.compile_str(..., target_backends=["llvm-cpu"], input_type="stablehlo")`
  with `--iree-input-demote-f64-to-f32=false` (else f64 would silently become f32) and
  `--iree-llvmcpu-target-cpu=host` (as XLA:CPU, code for this machine's CPU; SHLO_IREE_CPU=generic
  etc. overrides), run by `iree.runtime` on the `local-sync` driver. SHLO_IREE_FLAGS adds
  compiler flags (split on spaces), e.g. `--mlir-print-ir-after=iree-stablehlo-to-stablehlo-preprocessing`.

Diagnostics (not how anyone calls these ops; docs/ADAPTERS.md):
- SHLO_BN_EPS=fold (built-in eval only): `batch_norm_inference` with epsilon = 0 and the
  variance handed in as `var + eps` added in T by a `stablehlo.add` with eps in T, so an f64
  module sees eps at full precision; separates the f32 attribute from the engine's arithmetic.
  (adapters/stablehlo/vs_eps32.py looks from the other side: it judges against float32(eps).)"""

import argparse
import os
import string
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _protocol import AXES, Unsupported, main  # noqa: E402

LAYOUTS = ("nchw", "nhwc")
SIGNATURES = {  # op -> (function name, inputs, outputs)
    "forward": ("forward", ("x", "gamma", "beta"), ("y", "mean", "var")),
    "backward": ("backward", ("x", "dy", "gamma"), ("dx", "dgamma", "dbeta")),
    "eval": ("eval", ("x", "gamma", "beta", "mean", "var"), ("y",)),
}
EPS_MODE = os.environ.get("SHLO_BN_EPS", "")


def mlir_float(v):
    """A float literal MLIR parses back to exactly the double v (17 significant digits, with '.')."""
    return "%.17e" % float(v)


def eps_in(case, t):
    """The case's eps rounded to dtype t, as a double (exact in t)."""
    e = float(case["eps"])
    return float(np.float32(e)) if t == "f32" else e


# ---------------------------------------------------------------- built-in modules


def builtin_module(op, shape, t, eps, fi):
    x = "tensor<%sx%s>" % ("x".join(map(str, shape)), t)
    c = "tensor<%dx%s>" % (shape[fi], t)
    attr = "{epsilon = %s : f32, feature_index = %d : i64}" % (mlir_float(np.float32(eps)), fi)
    if op == "forward":
        return f"""func.func @main(%x: {x}, %gamma: {c}, %beta: {c}) -> ({x}, {c}, {c}) {{
  %y, %mean, %var = "stablehlo.batch_norm_training"(%x, %gamma, %beta) {attr} : ({x}, {c}, {c}) -> ({x}, {c}, {c})
  return %y, %mean, %var : {x}, {c}, {c}
}}
"""
    if op == "backward":
        return f"""func.func @main(%x: {x}, %dy: {x}, %gamma: {c}) -> ({x}, {c}, {c}) {{
  %beta = stablehlo.constant dense<0.0> : {c}
  %y, %mean, %var = "stablehlo.batch_norm_training"(%x, %gamma, %beta) {attr} : ({x}, {c}, {c}) -> ({x}, {c}, {c})
  %dx, %dgamma, %dbeta = "stablehlo.batch_norm_grad"(%x, %gamma, %mean, %var, %dy) {attr} : ({x}, {c}, {c}, {c}, {x}) -> ({x}, {c}, {c})
  return %dx, %dgamma, %dbeta : {x}, {c}, {c}
}}
"""
    if op == "eval" and EPS_MODE == "fold":
        attr0 = "{epsilon = 0.0 : f32, feature_index = %d : i64}" % fi
        return f"""func.func @main(%x: {x}, %gamma: {c}, %beta: {c}, %mean: {c}, %var: {c}) -> {x} {{
  %eps = stablehlo.constant dense<{mlir_float(eps)}> : {c}
  %ve = stablehlo.add %var, %eps : {c}
  %y = "stablehlo.batch_norm_inference"(%x, %gamma, %beta, %mean, %ve) {attr0} : ({x}, {c}, {c}, {c}, {c}) -> {x}
  return %y : {x}
}}
"""
    if op == "eval":
        return f"""func.func @main(%x: {x}, %gamma: {c}, %beta: {c}, %mean: {c}, %var: {c}) -> {x} {{
  %y = "stablehlo.batch_norm_inference"(%x, %gamma, %beta, %mean, %var) {attr} : ({x}, {c}, {c}, {c}, {c}) -> {x}
  return %y : {x}
}}
"""
    raise AssertionError(op)


# ---------------------------------------------------------------- templates


def substitutions(case, t, eps):
    shape = case["shape"]
    fi, red = AXES[case["layout"]]
    m = 1
    for a in red:
        m *= shape[a]
    return {
        "X_SHAPE": "x".join(map(str, shape)),
        "C": str(shape[fi]),
        "T": t,
        "EPS": mlir_float(eps),
        "FEATURE_INDEX": str(fi),
        "REDUCE_DIMS": ", ".join(map(str, red)),
        "M": str(m),
    }


def select_function(ir, passmanager, text, fname, entry):
    """Parse text, keep only @fname (renamed to @entry if given) and what it calls.
    Returns (module text, arg count, result count), or None if @fname is not defined."""
    mod = ir.Module.parse(text)
    funcs = {}
    for op in mod.body.operations:
        if op.operation.name == "func.func":
            funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
    if fname not in funcs:
        return None
    target = funcs[fname]
    for name, op in funcs.items():
        if op is not target:
            op.attributes["sym_visibility"] = ir.StringAttr.get("private")
    if "sym_visibility" in target.attributes:
        del target.attributes["sym_visibility"]
    if entry and entry != fname:
        if entry in funcs:  # make room: the user's own @main becomes a private helper
            spare = "__shlo_bn_user_" + entry
            ir.SymbolTable.replace_all_symbol_uses(entry, spare, mod.operation)
            funcs[entry].attributes["sym_name"] = ir.StringAttr.get(spare)
        ir.SymbolTable.replace_all_symbol_uses(fname, entry, mod.operation)
        target.attributes["sym_name"] = ir.StringAttr.get(entry)
    passmanager.PassManager.parse("builtin.module(symbol-dce)").run(mod.operation)
    ftype = ir.FunctionType(ir.TypeAttr(target.attributes["function_type"]).value)
    return str(mod), len(ftype.inputs), len(ftype.results)


# ---------------------------------------------------------------- engines


class CompileError(Exception):
    pass


def legalization_message(msg):
    """The compiler's 'failed to legalize' diagnostic, or None if msg is not one."""
    if "failed to legalize" not in msg:
        return None
    for line in msg.splitlines():
        if "failed to legalize" in line:
            line = line.strip()
            # drop the echoed operation after "illegal:" / "legalize operation '...'"
            cut = line.find(" that was explicitly marked illegal")
            if cut >= 0:
                line = line[: cut + len(" that was explicitly marked illegal")]
            return line[:400]
    return None


class XLA:
    name = "xla"
    entry = "main"

    def __init__(self):
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax
        from jax._src import xla_bridge
        from jax._src.interpreters import mlir as jmlir
        from jax._src.lib import xla_client
        from jax._src.lib.mlir import ir, passmanager

        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_platforms", "cpu")
        self.jax, self.xc = jax, xla_client
        self.backend = xla_bridge.get_backend("cpu")
        self.device = self.backend.devices()[0]
        self.ir, self.passmanager, self.make_context = ir, passmanager, jmlir.make_ir_context
        self.version = "jax/jaxlib %s (%s)" % (jax.__version__, self.backend.platform_version)

    def select(self, text, fname):
        with self.make_context():
            return select_function(self.ir, self.passmanager, text, fname, self.entry)

    def compile(self, text, fname):
        try:
            ex = self.backend.compile_and_load(text, self.xc.DeviceList((self.device,)), self.xc.CompileOptions())
        except Exception as e:  # noqa: BLE001  (XlaRuntimeError and friends)
            raise CompileError(f"XLA: {type(e).__name__}: {e}") from None
        return ex

    def call(self, ex, args):
        outs = ex.execute([self.jax.device_put(a, self.device) for a in args])
        return [np.asarray(o) for o in outs]


class IREE:
    name = "iree"
    entry = None

    def __init__(self):
        import iree.compiler as ic
        import iree.runtime as rt
        from iree.compiler import ir, passmanager

        self.ic, self.rt, self.ir, self.passmanager = ic, rt, ir, passmanager
        self.config = rt.Config("local-sync")
        self.flags = ["--iree-input-demote-f64-to-f32=false",
                      "--iree-llvmcpu-target-cpu=" + os.environ.get("SHLO_IREE_CPU", "host")]
        self.flags += os.environ.get("SHLO_IREE_FLAGS", "").split()
        from importlib.metadata import version

        self.version = "iree-base-compiler %s, iree-base-runtime %s" % (version("iree-base-compiler"), version("iree-base-runtime"))

    def select(self, text, fname):
        with self.ir.Context():
            return select_function(self.ir, self.passmanager, text, fname, self.entry)

    def compile(self, text, fname):
        try:
            vmfb = self.ic.compile_str(text, target_backends=["llvm-cpu"], input_type="stablehlo", extra_args=self.flags)
        except self.ic.CompilerToolError as e:
            raise CompileError(f"IREE: {e}") from None
        ctx = self.rt.SystemContext(config=self.config)
        vm = self.rt.VmModule.copy_buffer(ctx.instance, vmfb)
        ctx.add_vm_module(vm)
        # The VM module is named after the MLIR module's symbol (`module @bn { ... }` -> "bn"),
        # and "module" only when the MLIR module is unnamed: look the function up under the
        # name of the module IREE actually compiled, not under the default.
        if vm.lookup_function(fname) is None:
            raise CompileError(f"IREE: the compiled VM module '{vm.name}' exports no function "
                               f"'{fname}' (it exports {', '.join(vm.function_names) or 'none'})")
        return ctx.modules[vm.name][fname]

    def call(self, fn, args):
        outs = fn(*args)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        return [np.asarray(o.to_host()) if hasattr(o, "to_host") else np.asarray(o) for o in outs]


# ---------------------------------------------------------------- the adapter


class Adapter:
    def __init__(self, engine, template_path):
        self.engine = engine
        self.template = None
        if template_path:
            with open(template_path) as f:
                self.template = string.Template(f.read())
        self.cache = {}  # key -> ("ok", executable) | ("unsupported", reason) | ("error", message)
        base = os.path.splitext(os.path.basename(template_path))[0] if template_path else ""
        self.name = f"shlo_{engine.name}" + (f"[{base}]" if base else "") + (f"(eps={EPS_MODE})" if EPS_MODE else "")

    def executable(self, case, op, t, eps):
        fname = SIGNATURES[op][0]
        fi = AXES[case["layout"]][0]
        key = (fname, tuple(case["shape"]), case["layout"], t, eps)
        if key not in self.cache:
            self.cache[key] = self._build(case, op, t, eps, fi)
        kind, val = self.cache[key]
        if kind == "unsupported":
            raise Unsupported(val)
        if kind == "error":
            raise RuntimeError(val)
        return val

    def _build(self, case, op, t, eps, fi):
        fname, ins, outs = SIGNATURES[op]
        if self.template is None:
            text = builtin_module(op, case["shape"], t, eps, fi)
            run_name = "main"
        else:
            try:
                text = self.template.substitute(substitutions(case, t, eps))
            except (KeyError, ValueError) as e:
                return ("error", f"{self.name}: template substitution failed: {type(e).__name__}: {e}")
            try:
                sel = self.engine.select(text, fname)
            except Exception as e:  # noqa: BLE001  (MLIR parse errors)
                return ("error", f"{self.name}: the module does not parse: {type(e).__name__}: {e}")
            if sel is None:
                return ("unsupported", f"{self.name}: the module defines no func.func @{fname} (op {op})")
            text, nin, nout = sel
            if (nin, nout) != (len(ins), len(outs)):
                return ("error", f"{self.name}: @{fname} takes {nin} arguments and returns {nout} results; "
                                 f"the protocol wants ({', '.join(ins)}) -> ({', '.join(outs)})")
            run_name = self.engine.entry or fname
        try:
            return ("ok", self.engine.compile(text, run_name))
        except CompileError as e:
            leg = legalization_message(str(e))
            if leg is not None:
                return ("unsupported", f"{self.name}: {self.engine.name} refuses the module: {leg}")
            return ("error", f"{self.name}: compile failed:\n{e}")

    def run_case(self, case, inp):
        op, layout, t = case["op"], case["layout"], case["dtype"]
        if op not in SIGNATURES:
            raise Unsupported(f"{self.name}: StableHLO has no op for {op} (only batch_norm_training/_grad/_inference)")
        if layout not in LAYOUTS:
            raise Unsupported(f"{self.name}: layout {layout} not wired (nchw: feature_index 1, nhwc: 3)")
        if EPS_MODE == "fold" and (self.template is not None or op != "eval"):
            raise Unsupported(f"{self.name}: SHLO_BN_EPS=fold is a diagnostic of the built-in eval only")
        eps = eps_in(case, t)
        ex = self.executable(case, op, t, eps)
        _, ins, outs = SIGNATURES[op]
        res = self.engine.call(ex, [inp[n] for n in ins])
        if len(res) != len(outs):
            raise RuntimeError(f"{self.name}: got {len(res)} results, expected {len(outs)}")
        return dict(zip(outs, res))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", required=True, choices=("xla", "iree"))
    ap.add_argument("--module", metavar="TEMPLATE.mlir", help="MLIR text with ${X_SHAPE}, ${C}, ${T}, ${EPS}, "
                    "${FEATURE_INDEX}, ${REDUCE_DIMS}, ${M}, defining any of @forward, @backward, @eval")
    ap.add_argument("dir", metavar="DIR")
    return ap.parse_args(argv)


if __name__ == "__main__":
    a = parse_args(sys.argv[1:])
    if EPS_MODE not in ("", "fold"):
        sys.exit(f"shlo_bn.py: SHLO_BN_EPS={EPS_MODE!r}: expected fold (or unset)")
    eng = XLA() if a.engine == "xla" else IREE()
    ad = Adapter(eng, a.module)
    print(f"{ad.name}: {eng.version}", file=sys.stderr)
    sys.argv = [sys.argv[0], a.dir]
    main(ad.run_case, ad.name)
    print(f"{ad.name}: {sum(1 for k, _ in ad.cache.values() if k == 'ok')} modules compiled, "
          f"{len(ad.cache)} distinct (function, shape, layout, dtype, eps)", file=sys.stderr)
