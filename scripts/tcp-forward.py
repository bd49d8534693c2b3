"""A TCP forwarder: listen on HOST:PORT, connect each client to TARGET_HOST:PORT (second-engine.sh)."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading


def pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def main(listen: str, target: str) -> None:
    host, port = listen.rsplit(":", 1)
    to_host, to_port = target.rsplit(":", 1)
    server = socket.create_server((host, int(port)), reuse_port=False)
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection((to_host, int(to_port)), timeout=10)
            upstream.settimeout(None)
        except OSError:
            client.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
