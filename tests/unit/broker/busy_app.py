"""An unmodified PyTorch program that computes without pauses, for the restart test.

Every step is one device call that lasts ``OP_SECONDS`` (a 1-element ``apply_`` whose
Python body sleeps), then an in-place add on ``DATA_MB`` of data. Inside the call it
marks itself busy (``LOG.busy``) and then appends ``start end`` (time.monotonic(), which
all processes share) to ``LOG``, so a test can tell that no two programs computed at
once. It stops once ``STOP`` exists and prints its step count and a checksum of its data,
which survive evictions only if they were restored intact.

    python busy_app.py LOG STOP [OP_SECONDS] [DATA_MB]
"""

import os
import sys
import time

import torch

log, stop = sys.argv[1], sys.argv[2]
op_seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
data_mb = int(sys.argv[4]) if len(sys.argv) > 4 else 8

torch.set_num_threads(1)
data = torch.ones(data_mb * 1024 * 256)  # float32: DATA_MB MB
x = torch.zeros(1)
busy = f"{log}.busy"
spans = open(log, "a", buffering=1)  # noqa: SIM115 - open for the whole run


def work(value: float) -> float:
    t0 = time.monotonic()
    open(busy, "w").close()
    time.sleep(op_seconds)
    os.unlink(busy)
    spans.write(f"{t0:.6f} {time.monotonic():.6f}\n")
    return value


steps = 0
while not os.path.exists(stop):
    x.apply_(work)  # the device call
    data.add_(1)
    steps += 1
print(f"steps {steps} ok {int(data.min().item()) == int(data.max().item()) == steps + 1}")
