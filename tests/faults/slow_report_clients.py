"""A hostile caller of the report service: N connections that each send a request one
byte at a time, a byte every INTERVAL seconds, and open again when the service cuts
them. Run as another user by test_fault_hostile_users.py.

    python slow_report_clients.py SOCKET N INTERVAL

Prints ``open N`` once all N are connected, then one line per connection the service
ended: ``cut SECONDS MESSAGE`` (how long it was held, what the service answered); a
refused one is opened again at the next tick. Ends on SIGTERM, or after 300 s whatever
happens (a test's bound).
"""

from __future__ import annotations

import selectors
import socket
import sys
import time

REQUEST = b'{"options": {"by": "user"}}\n'


class Callers:
    def __init__(self, path: str) -> None:
        self.path = path
        self.sel = selectors.DefaultSelector()
        self.born: dict[socket.socket, float] = {}
        self.sent: dict[socket.socket, int] = {}

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.path)
        s.setblocking(False)
        self.sel.register(s, selectors.EVENT_READ)
        self.born[s], self.sent[s] = time.monotonic(), 0

    def cut(self, s: socket.socket) -> None:
        """The service answered (and closes): print what, forget the connection."""
        try:
            answer = s.recv(4096)
        except OSError:
            answer = b""
        self.sel.unregister(s)
        s.close()
        held = time.monotonic() - self.born.pop(s)
        self.sent.pop(s)
        lines = answer.split(b"\n", 2)
        text = (lines[1] if len(lines) > 1 else lines[0]).decode(errors="replace")
        print(f"cut {held:.1f} {text}", flush=True)

    def send_a_byte(self) -> None:
        for s, k in list(self.sent.items()):
            if k < len(REQUEST) - 1:  # never the newline: the request never ends
                try:
                    s.send(REQUEST[k : k + 1])
                    self.sent[s] = k + 1
                except OSError:
                    pass


def main() -> None:
    path, n, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    callers = Callers(path)
    for _ in range(n):
        callers.connect()
    print(f"open {n}", flush=True)
    end = time.monotonic() + 300
    tick = time.monotonic()
    while time.monotonic() < end:
        for key, _ in callers.sel.select(timeout=max(0.0, tick - time.monotonic())):
            callers.cut(key.fileobj)  # type: ignore[arg-type]
        if time.monotonic() >= tick:
            tick = time.monotonic() + interval
            # Open again at the next tick, not at once: a refused caller that reconnects
            # in a tight loop would only measure how fast this machine's 2 cores spin.
            for _ in range(n - len(callers.sent)):
                callers.connect()
            callers.send_a_byte()


if __name__ == "__main__":
    main()
