"""A small, unmodified PyTorch training program (knows nothing of the broker).

Each step "loads" a batch on the CPU side (pure Python + a sleep standing for I/O),
then trains a small MLP with Adam. Prints one line: a hash of the final weights and
optimizer state, so runs can be compared bit for bit.
"""

import hashlib
import random
import sys
import time
from pathlib import Path

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
io_seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 0.03
# Optional start gate (a folder): say "ready", then wait for "go", so that concurrent
# runs really overlap however long each takes to start.
gate = Path(sys.argv[4]) if len(sys.argv) > 4 else None

torch.set_num_threads(1)
torch.manual_seed(seed)
rng = random.Random(seed)
model = torch.nn.Sequential(
    torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.BatchNorm1d(128), torch.nn.Linear(128, 4)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

if gate is not None:
    (gate / f"ready-{seed}").touch()
    while not (gate / "go").exists():
        time.sleep(0.01)

for _ in range(steps):
    # The program's CPU / I/O phase: no tensor work.
    rows = [[rng.gauss(0.0, 1.0) for _ in range(64)] for _ in range(32)]
    labels = [rng.randrange(4) for _ in range(32)]
    time.sleep(io_seconds)
    x = torch.tensor(rows)
    y = torch.tensor(labels)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()

h = hashlib.sha256()
for t in list(model.state_dict().values()) + [
    v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)
]:
    h.update(bytes(t.detach().contiguous().flatten().view(torch.uint8).tolist()))
print(f"final {h.hexdigest()} loss {loss.item():.6f}")
