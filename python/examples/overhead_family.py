"""Per-case overhead of `bnconf.check(..., family="all")` on the normalization family's default
suite (every op of layer_norm, rms_norm, group_norm) in float32, through the binary (export +
kernel + check, a temporary directory) and in process (the extension module), side by side on
the same numpy kernel (python/tests/test_family.py's); then hypothesis examples per second
with `bnconf.hypothesis.cases(family=...)` and `bnconf.judge`.

    python python/examples/overhead_family.py

Overhead per case = (wall time of bnconf.check - time inside the kernel) / cases; the best
of REPEATS runs of each. Both paths compute every case's exact goldens (in process: when
the case is judged); the in-process time spent in the extension module's judge (goldens,
budgets, judging) is shown apart."""

import os
import sys
import time

import bnconf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from test_family import numpy_family  # noqa: E402

REPEATS = int(os.environ.get("REPEATS", "3"))


class _Timed:
    """A native family suite with the time spent in ``judge`` (prepare + judge) counted."""

    def __init__(self, suite, spent):
        self.suite, self.spent = suite, spent

    def __getattr__(self, name):
        return getattr(self.suite, name)

    def __len__(self):
        return len(self.suite)

    def judge(self, *args):
        t = time.perf_counter()
        try:
            return self.suite.judge(*args)
        finally:
            self.spent[0] += time.perf_counter() - t


def measure(in_process):
    from bnconf import _inproc

    best = None
    for _ in range(REPEATS):
        native = _inproc._native
        judged = [0.0]

        class Patched:
            def __getattr__(self, name):
                return getattr(native, name)

            def open_family_suite(self, *args):
                return _Timed(native.open_family_suite(*args), judged)

        _inproc._native = Patched()
        spent = [0.0]

        def kernel(case):
            t = time.perf_counter()
            try:
                return numpy_family(case)
            finally:
                spent[0] += time.perf_counter() - t

        t0 = time.perf_counter()
        try:
            r = bnconf.check(kernel, family="all", dtype="float32", in_process=in_process)
        finally:
            _inproc._native = native
        wall = time.perf_counter() - t0
        assert r.ok, r
        n = len(r.cases)
        row = (wall, spent[0], n, (wall - spent[0]) / n, judged[0] / n)
        best = row if best is None or row[3] < best[3] else best
    return best


def hypothesis_rate(n=300):
    from hypothesis import HealthCheck, given, settings

    import bnconf.hypothesis

    for family in ("layer_norm", "rms_norm", "group_norm"):

        @settings(max_examples=n // 3, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(bnconf.hypothesis.cases(family=family))
        def prop(case):
            assert bnconf.judge(case, numpy_family(case)).ok

        if family == "layer_norm":
            t0 = time.perf_counter()
        prop()
    return n / (time.perf_counter() - t0)


def main():
    print(f"bnconf {bnconf.__version__}, Python {sys.version.split()[0]}, family all, default suite, float32")
    rows = {"binary + temporary directory": measure(False), "in process": measure(True)}
    for name, (wall, kern, n, per, _) in rows.items():
        print(f"{name:30s} {n} cases  wall {wall:.3f} s  kernel {kern:.3f} s  overhead {1e3 * per:.2f} ms/case")
    before, after = rows["binary + temporary directory"][3], rows["in process"][3]
    print(f"overhead ratio (binary / in process): {before / after:.1f}x")
    ref = rows["in process"][4]
    print(
        f"in process, inside the module's judge (exact goldens, budgets, judging): {1e3 * ref:.2f} ms/case; "
        f"the rest (case generation, arrays, Python): {1e3 * (after - ref):.2f} ms/case"
    )
    print(f"hypothesis (family cases, bnconf.judge): {hypothesis_rate():.0f} examples/s")


if __name__ == "__main__":
    main()
