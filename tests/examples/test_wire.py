"""The examples' framed-numpy protocol over real sockets (scheduler.examples.wire)."""

import socket
import struct
import threading
import time

import numpy as np
import pytest

from scheduler.examples import wire


def test_round_trip_keeps_meta_dtypes_and_shapes():
    a, b = socket.socketpair()
    with a, b:
        sent = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "i": np.array([1, 2], np.int64)}
        wire.send(a, {"step": 3, "tag": "x"}, **sent)
        meta, arrays = wire.recv(b)
    assert meta == {"step": 3, "tag": "x"}
    assert arrays.keys() == sent.keys()
    for k, v in sent.items():
        assert arrays[k].dtype == v.dtype and np.array_equal(arrays[k], v)


def test_peer_closing_mid_frame_is_a_protocol_error():
    a, b = socket.socketpair()
    with b:
        a.sendall(struct.pack("!Q", 100) + b"short")
        a.close()
        with pytest.raises(wire.ProtocolError, match="after 5 of 100 bytes"):
            wire.recv(b)


def test_garbage_frame_and_oversized_frame_are_rejected():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack("!Q", 4) + b"junk")
        with pytest.raises(wire.ProtocolError, match="not an npz archive"):
            wire.recv(b)
        a.sendall(struct.pack("!Q", wire.MAX_FRAME_BYTES + 1))
        with pytest.raises(wire.ProtocolError, match="exceeds"):
            wire.recv(b)


def test_connect_retries_until_the_server_listens(free_port):
    port = free_port()
    accepted = []

    def late_server():
        time.sleep(0.6)
        with wire.listen(port, host="127.0.0.1") as server:
            accepted.extend(wire.accept(server, 1, timeout_s=5))

    t = threading.Thread(target=late_server)
    t.start()
    sock = wire.connect(("127.0.0.1", port), timeout_s=10, interval_s=0.1)
    t.join()
    sock.close()
    for c in accepted:
        c.close()
    assert len(accepted) == 1


def test_connect_and_accept_give_up_at_their_deadlines(free_port):
    port = free_port()
    with pytest.raises(TimeoutError, match=f"127.0.0.1:{port}"):
        wire.connect(("127.0.0.1", port), timeout_s=0.5, interval_s=0.1)
    with wire.listen(0, host="127.0.0.1") as server, pytest.raises(TimeoutError, match="0 of 2"):
        wire.accept(server, 2, timeout_s=0.3)
