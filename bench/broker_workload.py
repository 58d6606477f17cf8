"""A program that knows nothing of the broker: holds WEIGHTS of parameters on its device
and computes DUTY of the time (matmuls), idling (I/O stand-in) the rest.

    python bench/broker_workload.py --gb 40 --steps 20 --compute-ms 500 --duty 0.25 --device cuda
"""

import argparse
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--gb", type=float, required=True)
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--compute-ms", type=float, default=200)
ap.add_argument("--duty", type=float, default=0.25)
ap.add_argument("--device", default="cuda")
a = ap.parse_args()

dev = torch.device(a.device)
chunk = 256 * 1024 * 1024  # bytes per parameter tensor
n = max(1, int(a.gb * 1024**3) // chunk)
weights = [
    torch.nn.Parameter(torch.ones(chunk // 2, dtype=torch.float16, device=dev)) for _ in range(n)
]
x = torch.randn(1024, 1024, device=dev)
for _ in range(a.steps):
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1000 < a.compute_ms:
        x = torch.tanh(x @ x)
        weights[0].data[:1] += 0  # touch the weights: they must be resident
        if dev.type == "cuda":
            torch.cuda.synchronize()
    time.sleep(a.compute_ms / 1000 * (1 - a.duty) / a.duty)
print("done", float(x.sum()))
