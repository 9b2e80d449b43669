"""The example programs' training protocol: framed messages of numpy arrays over TCP.

A message is one frame: an 8-byte big-endian length, then an ``.npz`` archive (numpy's own
format, read with ``allow_pickle=False`` so a peer can never make us unpickle code) holding
the arrays plus a small JSON header under the key ``__meta__``. This is the training
programs' data plane between tasks, not a service API, so it stays on the standard library
``socket`` module and numpy.

Connection set-up follows what gang jobs need: a server task listens on its discovery port;
client tasks connect with retries until a deadline, because tasks of one gang start in any
order on different nodes.
"""

from __future__ import annotations

import io
import json
import socket
import struct
import time
from typing import Any

import numpy as np

_LEN = struct.Struct("!Q")
MAX_FRAME_BYTES = 256 * 1024 * 1024  # a message larger than this is a protocol error


class ProtocolError(ConnectionError):
    """The peer sent something that is not a frame of this protocol, or closed mid-frame."""


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ProtocolError(f"peer closed the connection after {got} of {n} bytes")
        got += k
    return bytes(buf)


def send(sock: socket.socket, meta: dict[str, Any] | None = None, **arrays: np.ndarray) -> int:
    """Send one message: a JSON-able ``meta`` dict and named arrays.

    Returns:
        The frame size in bytes (payload, without the 8-byte length).
    """
    out = io.BytesIO()
    header = np.frombuffer(json.dumps(meta or {}).encode(), dtype=np.uint8)
    named: dict[str, Any] = {"__meta__": header, **{k: np.asarray(v) for k, v in arrays.items()}}
    np.savez(out, **named)
    payload = out.getvalue()
    sock.sendall(_LEN.pack(len(payload)) + payload)
    return len(payload)


def recv(sock: socket.socket) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Receive one message sent by :func:`send`.

    Returns:
        ``(meta, arrays)``.

    Raises:
        ProtocolError: the peer closed the connection, or the frame is too large or not an
            archive of this protocol.
        TimeoutError: the socket has a timeout and it expired.
    """
    (n,) = _LEN.unpack(_recv_exactly(sock, _LEN.size))
    if n > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {n} bytes exceeds {MAX_FRAME_BYTES}")
    payload = _recv_exactly(sock, n)
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files}
    except (ValueError, OSError) as exc:
        raise ProtocolError(f"frame is not an npz archive: {exc}") from exc
    if "__meta__" not in arrays:
        raise ProtocolError("frame has no __meta__ header")
    meta = json.loads(arrays.pop("__meta__").tobytes().decode())
    return meta, arrays


def listen(port: int, host: str = "0.0.0.0", backlog: int = 64) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``SO_REUSEADDR`` so a retried task can rebind)."""
    return socket.create_server((host, port), backlog=backlog, reuse_port=False)


def accept(server: socket.socket, count: int, timeout_s: float) -> list[socket.socket]:
    """Accept ``count`` connections within ``timeout_s`` seconds.

    Raises:
        TimeoutError: fewer than ``count`` peers connected in time (names how many did).
    """
    deadline = time.monotonic() + timeout_s
    conns: list[socket.socket] = []
    while len(conns) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            for c in conns:
                c.close()
            raise TimeoutError(f"only {len(conns)} of {count} peers connected in {timeout_s:.0f} s")
        server.settimeout(remaining)
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append(conn)
    return conns


def connect(address: tuple[str, int], timeout_s: float, interval_s: float = 0.2) -> socket.socket:
    """Connect to ``address``, retrying while the peer is not listening yet.

    Args:
        address: ``(host, port)``.
        timeout_s: give up after this many seconds.
        interval_s: pause between attempts.

    Raises:
        TimeoutError: no connection within ``timeout_s`` (names the address and last error).
    """
    deadline = time.monotonic() + timeout_s
    last: OSError | None = None
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection(address, timeout=max(0.5, interval_s))
        except OSError as exc:  # refused, unreachable, DNS not ready: the peer may start late
            last = exc
            time.sleep(interval_s)
            continue
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise TimeoutError(
        f"could not connect to {address[0]}:{address[1]} in {timeout_s:.0f} s: {last}"
    )
