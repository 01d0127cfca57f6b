"""The asyncio client (grpc.aio): the same calls as Client, awaited."""
import asyncio
import time

import grpc
import grpc.aio

from ._calls import Calls


class AsyncClient(Calls):
    """Client's asyncio twin: each call returns an awaitable. Create it inside the event loop
    that uses it. Arguments as Client's."""

    _channels = grpc.aio

    async def close(self):
        await self._channel.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def _answer(self, method, request, timeout, shape):
        async def answer():
            return shape(await self._call(method, request, timeout))
        return answer()

    async def _call(self, method, request, timeout):
        timeout = self._timeout if timeout is None else timeout
        end = None if timeout is None else time.monotonic() + timeout
        for attempt in range(1, self._retry.max_attempts + 1):
            remaining = None if end is None else max(0.0, end - time.monotonic())
            try:
                return await method(request, timeout=remaining, metadata=self._metadata)
            except grpc.aio.AioRpcError as e:
                delay = self._retry.backoff(e.code(), attempt, end)
                if delay is None:
                    raise
                self.retries += 1
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")
