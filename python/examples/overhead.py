"""Per-case overhead of `bnconf.check`, through the binary (export + kernel + check, a
temporary directory) and in process (the extension module), side by side on the same
kernel and cases; then hypothesis examples per second with `bnconf.judge`.

    python python/examples/overhead.py            # default suite, forward, float32

Overhead per case = (wall time of bnconf.check - time inside the kernel) / cases; the best
of REPEATS runs of each."""

import os
import sys
import time

import numpy as np

import bnconf

REPEATS = int(os.environ.get("REPEATS", "3"))


def forward(case):
    x, g, b = case.inputs["x"], case.inputs["gamma"], case.inputs["beta"]
    ax = case.reduce_axes
    shape = [-1 if i == case.channel_axis else 1 for i in range(x.ndim)]
    mean, var = x.mean(axis=ax, keepdims=True), x.var(axis=ax, keepdims=True)
    y = g.reshape(shape) * (x - mean) / np.sqrt(var + x.dtype.type(case.eps)) + b.reshape(shape)
    return {"y": y, "mean": mean.reshape(-1), "var": var.reshape(-1)}


def measure(in_process):
    from bnconf import _inproc

    best = None
    for _ in range(REPEATS):
        timed = _inproc._native = _Timed(_inproc._native)
        spent = [0.0]

        def kernel(case):
            t = time.perf_counter()
            try:
                return forward(case)
            finally:
                spent[0] += time.perf_counter() - t

        t0 = time.perf_counter()
        r = bnconf.check(kernel, suite="default", dtype="float32", ops=["forward"], in_process=in_process)
        wall = time.perf_counter() - t0
        _inproc._native = timed.module
        assert r.ok, r
        n = len(r.cases)
        row = (wall, spent[0], n, (wall - spent[0]) / n, timed.spent / n)
        best = row if best is None or row[3] < best[3] else best
    return best


class _Timed:
    """The extension module, with the time spent in ``open_suite`` (generating the cases and
    their exact goldens, which `bnconf check DIR` does too) counted."""

    def __init__(self, module):
        self.module, self.spent = module, 0.0

    def __getattr__(self, name):
        return getattr(self.module, name)

    def open_suite(self, *args):
        t = time.perf_counter()
        try:
            return self.module.open_suite(*args)
        finally:
            self.spent += time.perf_counter() - t


def hypothesis_rate(n=200):
    from hypothesis import HealthCheck, given, settings

    import bnconf.hypothesis

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(bnconf.hypothesis.cases(ops=["forward"]))
    def prop(case):
        assert bnconf.judge(case, forward(case)).ok

    t0 = time.perf_counter()
    prop()
    return n / (time.perf_counter() - t0)


def main():
    print(f"bnconf {bnconf.__version__}, Python {sys.version.split()[0]}, default suite, forward, float32")
    rows = {"binary + temporary directory": measure(False), "in process": measure(True)}
    for name, (wall, kern, n, per, _) in rows.items():
        print(f"{name:30s} {n} cases  wall {wall:.3f} s  kernel {kern:.3f} s  overhead {1e3 * per:.2f} ms/case")
    before, after = rows["binary + temporary directory"][3], rows["in process"][3]
    print(f"overhead ratio (binary / in process): {before / after:.1f}x")
    ref = rows["in process"][4]
    print(
        f"of which the exact reference (cases + goldens, computed by both; timed in process): {1e3 * ref:.2f} ms/case; "
        f"the rest: binary {1e3 * (before - ref):.2f} ms/case, in process {1e3 * (after - ref):.2f} "
        f"ms/case ({(before - ref) / max(after - ref, 1e-9):.0f}x)"
    )
    print(f"hypothesis (forward cases, bnconf.judge): {hypothesis_rate():.0f} examples/s")


if __name__ == "__main__":
    main()
