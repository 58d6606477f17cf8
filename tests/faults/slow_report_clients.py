"""A hostile caller of the report service: N connections that each send a request one
byte at a time, a byte every INTERVAL seconds, and open again when the service cuts
them. Run as another user by test_fault_report_service.py.

    python slow_report_clients.py SOCKET N INTERVAL

Prints ``open N`` once all N are connected, then one line per connection the service
ended: ``cut SECONDS MESSAGE`` (how long it was held, what the service answered); a
refused one is opened again at the next tick.
Ends on SIGTERM, or after 300 s whatever happens (a test's bound).
"""

from __future__ import annotations

import selectors
import socket
import sys
import time

REQUEST = b'{"options": {"by": "user"}}\n'


def main() -> None:
    path, n, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    sel = selectors.DefaultSelector()
    born: dict[socket.socket, float] = {}
    sent: dict[socket.socket, int] = {}

    def connect() -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        born[s], sent[s] = time.monotonic(), 0

    for _ in range(n):
        connect()
    print(f"open {n}", flush=True)
    end = time.monotonic() + 300
    next_byte = time.monotonic()
    again = 0
    while time.monotonic() < end:
        for key, _ in sel.select(timeout=max(0.0, next_byte - time.monotonic())):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                answer = s.recv(4096)
            except OSError:
                answer = b""
            sel.unregister(s)
            s.close()
            held = time.monotonic() - born.pop(s)
            sent.pop(s)
            first = answer.split(b"\n", 2)
            text = (first[1] if len(first) > 1 else first[0]).decode(errors="replace")
            print(f"cut {held:.1f} {text}", flush=True)
            again += 1
        if time.monotonic() >= next_byte:
            next_byte = time.monotonic() + interval
            # Open again at the next tick, not at once: a refused caller that reconnects
            # in a tight loop would only measure how fast this machine's 2 cores spin.
            for _ in range(again):
                connect()
            again = 0
            for s, k in list(sent.items()):
                if k < len(REQUEST) - 1:  # never the newline: the request never ends
                    try:
                        s.send(REQUEST[k : k + 1])
                        sent[s] = k + 1
                    except OSError:
                        pass


if __name__ == "__main__":
    main()
