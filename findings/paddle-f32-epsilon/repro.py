#!/usr/bin/env python3
"""PaddlePaddle: a float64 batch_norm computes with float32(epsilon) and float32(momentum).

Needs only paddlepaddle (tested: paddlepaddle 3.3.1, CPU).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

1. eval (training=False), float64, one channel, one value: x = [[-1.]], running_mean = [0.],
   running_var = [1.], weight = [1.], bias = [0.], epsilon = 1e-5.
   Expected: y = -1/sqrt(1 + 1e-5), correctly rounded to float64 -0x1.ffff583aa62f5p-1.
   Paddle's CPU kernel takes `float epsilon`, so it computes -1/sqrt(1 + float32(1e-5))
   (float32(1e-5) = 9.999999747378752e-06).
2. running statistics (training=True), float64: x = [[0.], [0.]] (N=2, C=1),
   running_mean = [1.], momentum = 0.7: expected new running_mean = 0.7*1 + 0.3*0 = 0.7
   (float64 0.7); the kernel's `float momentum` makes it float32(0.7) = 0.699999988079071.
"""
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402

paddle.set_device("cpu")


def t(v):
    return paddle.to_tensor(np.array(v, np.float64))


want_y = float.fromhex("-0x1.ffff583aa62f5p-1")
y = F.batch_norm(t([[-1.0]]), t([0.0]), t([1.0]), t([1.0]), t([0.0]), training=False, epsilon=1e-5).numpy().item()
f32_y = -1 / np.sqrt(1 + np.float64(np.float32(1e-5)))
rm, rv = t([1.0]), t([1.0])
F.batch_norm(t([[0.0], [0.0]]), rm, rv, None, None, training=True, momentum=0.7)
got_rm = rm.numpy().item()
print(f"paddlepaddle {paddle.__version__}, CPU, float64")
print(f"eval y:       expected {want_y!r} ({want_y.hex()})  got {y!r} ({y.hex()}); with float32(eps): {float(f32_y)!r}")
ulps = abs(np.float64(y).view(np.int64) - np.float64(want_y).view(np.int64))
print(f"              {ulps} ulp off")
print(f"running_mean: expected {0.7!r}  got {got_rm!r}; float32(0.7) = {float(np.float32(0.7))!r}")
reproduced = y != want_y or got_rm != 0.7
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
