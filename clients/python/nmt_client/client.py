"""The synchronous client."""
import time

import grpc

from ._calls import Calls


class Client(Calls):
    """A channel to one nmt-server.

    target: "host:port". token: a bearer token (server.auth_token_file). tls: False
    (plaintext), True (TLS with the system's roots, or root_certificates as PEM bytes), or
    grpc.ChannelCredentials. timeout: the default deadline of a call in seconds, retries
    included (None = none). retry: RetryPolicy (RetryPolicy(max_attempts=1) = no retries).
    The calls (translate, translate_nbest, translate_alignments, translate_response, score,
    list_models) are Calls'.
    """

    _channels = grpc

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _answer(self, method, request, timeout, shape):
        return shape(self._call(method, request, timeout))

    def _call(self, method, request, timeout):
        timeout = self._timeout if timeout is None else timeout
        end = None if timeout is None else time.monotonic() + timeout
        for attempt in range(1, self._retry.max_attempts + 1):
            remaining = None if end is None else max(0.0, end - time.monotonic())
            try:
                return method(request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as e:
                delay = self._retry.backoff(e.code(), attempt, end)
                if delay is None:
                    raise
                self.retries += 1
                time.sleep(delay)
        raise AssertionError("unreachable")
