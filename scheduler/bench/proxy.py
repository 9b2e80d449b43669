"""A TCP forwarder that can partition its clients from the upstream (chaos test equipment).

:class:`PartitionProxy` listens on 127.0.0.1 and forwards every connection to one
upstream (an agent's Redis). :meth:`~PartitionProxy.partition` holds every byte in both
directions and every new connection (what a silent network partition does: no reset, the
peers just stop hearing each other, so clients notice only through their own timeouts);
:meth:`~PartitionProxy.heal` closes the connections that lived through the partition (as
their TCP timeouts would have) and forwards again. Not a product server: only the chaos
benchmark and tests use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class PartitionProxy:
    """Forward ``127.0.0.1:<port>`` to ``upstream_host:upstream_port``; see module doc.

    Use as a context manager (or :meth:`start` / :meth:`close`); :attr:`port` is the
    listening port once started.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._open: asyncio.Event | None = None
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:  # run a coroutine on the proxy's loop
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def start(self) -> PartitionProxy:
        """Start listening (a free port)."""
        self._thread.start()

        async def serve() -> int:
            self._open = asyncio.Event()
            self._open.set()
            self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            port: int = self._server.sockets[0].getsockname()[1]
            return port

        self.port = self._call(serve())
        return self

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        self._conns.add(writer)
        try:
            await self._open.wait()
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            self._conns.discard(writer)
            writer.close()
            return
        self._conns.add(up_w)
        await asyncio.gather(self._pump(reader, up_w), self._pump(up_r, writer))
        for w in (writer, up_w):
            self._conns.discard(w)
            w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        with contextlib.suppress(OSError, ConnectionError):
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self._open.wait()  # partitioned: hold the bytes
                if writer.is_closing():
                    break
                writer.write(data)
                await writer.drain()
        writer.close()

    def partition(self) -> None:
        """Stop forwarding (silently) until :meth:`heal`."""

        async def close_gate() -> None:
            assert self._open is not None
            self._open.clear()

        self._call(close_gate())

    def heal(self) -> None:
        """Close the connections that lived through the partition and forward again."""

        async def open_gate() -> None:
            assert self._open is not None
            for w in list(self._conns):
                w.close()
            self._conns.clear()
            self._open.set()

        self._call(open_gate())

    def close(self) -> None:
        """Stop listening, close every connection and the proxy's thread."""

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._conns):
                w.close()
            if self._open is not None:
                self._open.set()

        if self._thread.is_alive():
            self._call(shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> PartitionProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
