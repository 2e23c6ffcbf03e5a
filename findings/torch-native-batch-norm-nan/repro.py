#!/usr/bin/env python3
"""PyTorch: torch.native_batch_norm makes the running variance NaN with one value per channel.

Needs only torch (tested: torch 2.15.0, CPU).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

One channel, one value: x = [[0.]] (shape [N=1, C=1]), running_mean = [0.], running_var = [1.],
training = True, momentum = 0.3, eps = 1e-5, float32.
Expected (docs/FORMAT.md running_update, pytorch convention, m = 1 takes the Bessel factor as
1, as TensorFlow's fused batch norm does): new_mean = 0.7*0 + 0.3*0 = 0,
new_var = 0.7*1 + 0.3*0 = 0.7 exactly, correctly rounded to float32 0x1.666666p-1.
torch.nn.functional.batch_norm refuses this input ("Expected more than 1 value per channel
when training"); the ATen op it calls, and everything that calls the op directly, does not.
"""
import sys

import torch

EXPECTED_MEAN, EXPECTED_VAR = 0.0, float.fromhex("0x1.666666p-1")
torch.set_num_threads(1)
x = torch.zeros(1, 1, dtype=torch.float32)
rm = torch.zeros(1, dtype=torch.float32)
rv = torch.ones(1, dtype=torch.float32)
torch.native_batch_norm(x, None, None, rm, rv, True, 0.3, 1e-5)
got_mean, got_var = rm.item(), rv.item()
print(f"torch {torch.__version__}, CPU, float32")
print(f"expected running_mean = {EXPECTED_MEAN!r}   got {got_mean!r}")
print(f"expected running_var  = {EXPECTED_VAR!r} ({EXPECTED_VAR.hex()})   got {got_var!r}")
try:
    torch.nn.functional.batch_norm(x, torch.zeros(1), torch.ones(1), training=True, momentum=0.3)
    print("F.batch_norm: accepted")
except ValueError as e:
    print(f"F.batch_norm refuses it: {e}")
reproduced = got_var != got_var  # NaN
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
