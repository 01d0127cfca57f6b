"""Python client of nmt-serve (nmt.v1.TranslationService).

    from nmt_client import Client
    with Client("localhost:50051") as client:
        print(client.translate(["A man is riding a bike."]))

Client is synchronous, AsyncClient the same on asyncio (grpc.aio). Both retry UNAVAILABLE
and RESOURCE_EXHAUSTED with exponential backoff within the call's deadline; other errors
raise grpc.RpcError at once.
"""
from ._common import Alignment, Hypothesis, RetryPolicy, ScoreResult
from .aio import AsyncClient
from .client import Client

__all__ = ["Alignment", "AsyncClient", "Client", "Hypothesis", "RetryPolicy", "ScoreResult"]
