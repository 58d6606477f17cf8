"""A stand-in worker for test_serve_orphan.py: it starts a "server" (``sleep``), tells
the gateway its pid, says it is ready, and then never exits, whatever becomes of its
server: the worker the gateway's watchdog must kill."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import time

from acbslurm.serve.protocol import encode

parser = argparse.ArgumentParser()
parser.add_argument("--socket", required=True)
args, _ = parser.parse_known_args()
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(args.socket)
listener.listen(1)
conn, _ = listener.accept()
server = subprocess.Popen(["sleep", "600"], start_new_session=True)
shm = f"/dev/shm/psm_acbslurm_test_{os.getpid()}"
with open(shm, "w") as f:
    f.write("queue")
conn.sendall(encode({"type": "server", "pid": server.pid, "shm": [shm], "folder": ""}))
conn.sendall(
    encode(
        {"type": "ready", "weights_bytes": 0, "max_context": 8, "max_prompt_chars": 8, "routes": []}
    )
)
server.wait()  # reaped: its pid is gone, as a worker's watch thread leaves it
while True:
    time.sleep(60)
