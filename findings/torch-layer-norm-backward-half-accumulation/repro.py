"""PyTorch's CPU layer_norm backward with float16 input and float32 weight/bias (the mixed
precision of torch.autocast and of models that keep norms in float32) returns
dbeta = [1, 1] where the exact value is 1 + 2**-11 = 1.00048828125, and the same half-precision
rounding in dgamma: the float32 parameter gradients are summed over the rows in float16.

Needs only torch (no bnconf). Prints expected vs got; exits 1 while the finding reproduces.
"""

import sys

import torch

torch.set_num_threads(1)
t = 2.0**-11
x = torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=torch.float16, requires_grad=True)
dy = torch.tensor([[1.0, 1.0], [t, t]], dtype=torch.float16)
gamma = torch.ones(2, dtype=torch.float32, requires_grad=True)
beta = torch.zeros(2, dtype=torch.float32, requires_grad=True)
y = torch.nn.functional.layer_norm(x, (2,), gamma, beta, 1e-5)
dx, dgamma, dbeta = torch.autograd.grad(y, (x, gamma, beta), dy)

# dbeta = sum over rows of dy = 1 + 2**-11 (a float32 number); dgamma = sum of dy * xhat with
# xhat = -+0.5/sqrt(0.25 + 1e-5) per row
xhat = 0.5 / (0.25 + 1e-5) ** 0.5
exp_dbeta = [1.0 + t, 1.0 + t]
exp_dgamma = [-(1.0 + t) * xhat, (1.0 + t) * xhat]
print(f"torch {torch.__version__}")
print(f"expected dbeta  = {exp_dbeta}")
print(f"got      dbeta  = {dbeta.tolist()}")
print(f"expected dgamma = {exp_dgamma}")
print(f"got      dgamma = {dgamma.tolist()}")
# float32 sums of the same terms give the exact dbeta:
print(f"float32 sum of dy over rows = {dy.float().sum(0).tolist()}")
bad = dbeta.tolist() != exp_dbeta
print("REPRODUCES" if bad else "fixed")
sys.exit(1 if bad else 0)
