#!/usr/bin/env python3
"""PaddlePaddle: batch_norm in training mode with one value per channel skips the batch norm:
y = x, the running statistics are left as they were, and the gradient is dx = dy, dbeta = 0.

Needs only paddlepaddle (tested: paddlepaddle 3.3.1, CPU).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

One channel, one value: x = [[2.]] (shape [N=1, C=1], data_format "NC"), gamma = [1.],
beta = [0.5], running_mean = [0.], running_var = [1.], momentum = 0.9, epsilon = 1e-3,
training = True, float32, dy = [[1.]].
Expected (batch normalization over one value: the batch mean is the value, the biased batch
variance 0, so x - mean = 0): y = beta = 0.5; running_mean = 0.9*0 + 0.1*2 = 0.2 and
running_var = 0.9*1 + 0.1*0 = 0.9 (Paddle's convention, `momentum*running +
(1-momentum)*batch`); dx = gamma/sqrt(0 + eps) * (dy - mean(dy) - 0) = 0, dgamma =
sum(dy * xhat) = 0, dbeta = sum(dy) = 1.
"""
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402

paddle.set_device("cpu")
f32 = np.float32
x = paddle.to_tensor(np.array([[2.0]], f32), stop_gradient=False)
gamma = paddle.to_tensor(np.array([1.0], f32), stop_gradient=False)
beta = paddle.to_tensor(np.array([0.5], f32), stop_gradient=False)
rm = paddle.to_tensor(np.array([0.0], f32))
rv = paddle.to_tensor(np.array([1.0], f32))
y = F.batch_norm(x, rm, rv, gamma, beta, training=True, momentum=0.9, epsilon=1e-3)
paddle.autograd.backward([y], [paddle.to_tensor(np.array([[1.0]], f32))])

rows = [
    ("y", 0.5, y.numpy().item()),
    ("running_mean", float(f32(0.2)), rm.numpy().item()),
    ("running_var", float(f32(0.9)), rv.numpy().item()),
    ("dx", 0.0, x.grad.numpy().item()),
    ("dgamma", 0.0, gamma.grad.numpy().item()),
    ("dbeta", 1.0, beta.grad.numpy().item()),
]
print(f"paddlepaddle {paddle.__version__}, CPU, float32, training=True, one value per channel")
wrong = 0
for name, want, got in rows:
    ok = abs(got - want) <= 1e-6 * max(1.0, abs(want))
    wrong += not ok
    print(f"{name:13s} expected {want!r:22s} got {got!r:22s} {'ok' if ok else 'WRONG'}")
reproduced = wrong > 0
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
