"""The asyncio client (grpc.aio): the same calls as Client, awaited."""
import asyncio
import time
from typing import List, Mapping, Optional

import grpc
import grpc.aio

from . import _common
from ._common import Hypothesis, RetryPolicy, ScoreResult, Texts
from ._proto import translation_pb2 as pb
from ._proto import translation_pb2_grpc as pb_grpc


class AsyncClient:
    """Client's asyncio twin; create it inside the event loop that uses it. Arguments as
    Client's."""

    def __init__(self, target: str, token: Optional[str] = None, tls=False,
                 root_certificates: Optional[bytes] = None, timeout: Optional[float] = 60.0,
                 retry: RetryPolicy = RetryPolicy(), options=()):
        credentials = _common.channel_credentials(tls, root_certificates)
        self._channel = (grpc.aio.secure_channel(target, credentials, options=options) if credentials
                         else grpc.aio.insecure_channel(target, options=options))
        self._stub = pb_grpc.TranslationServiceStub(self._channel)
        self._metadata = _common.metadata(token)
        self._timeout = timeout
        self._retry = retry
        self.retries = 0

    async def translate(self, texts: Texts, model: Optional[str] = None,
                        beam_size: Optional[int] = None, split_sentences: Optional[bool] = None,
                        length_penalty: Optional[float] = None,
                        max_decoding_length: Optional[int] = None,
                        min_decoding_length: Optional[int] = None,
                        source_language: Optional[str] = None, target_language: Optional[str] = None,
                        no_repeat_ngram_size: Optional[int] = None, repetition_penalty: Optional[float] = None,
                        suppress_sequences: Optional[List[str]] = None, suppress_token_ids: Optional[List[int]] = None,
                  target_prefix: Optional[str] = None, target_prefix_ids: Optional[List[int]] = None,
                  glossary: Optional[Mapping[str, str]] = None, ignore_model_glossary: Optional[bool] = None,
                        format: Optional[str] = None,
                        sampling_topk: Optional[int] = None, sampling_topp: Optional[float] = None,
                        sampling_temperature: Optional[float] = None, seed: Optional[int] = None,
                        timeout: Optional[float] = None):
        request, single = _common.request(
            texts, model, beam_size=beam_size, split_sentences=split_sentences,
            length_penalty=length_penalty, max_decoding_length=max_decoding_length,
            min_decoding_length=min_decoding_length,
            source_language=source_language, target_language=target_language,
            no_repeat_ngram_size=no_repeat_ngram_size, repetition_penalty=repetition_penalty,
            suppress_sequences=suppress_sequences, suppress_token_ids=suppress_token_ids,
            target_prefix=target_prefix, target_prefix_ids=target_prefix_ids,
            glossary=glossary, ignore_model_glossary=ignore_model_glossary, format=format,
            sampling_topk=sampling_topk, sampling_topp=sampling_topp,
            sampling_temperature=sampling_temperature, seed=seed)
        best = _common.best_texts(await self._call(self._stub.Translate, request, timeout))
        return best[0] if single else best

    async def translate_nbest(self, texts: Texts, num_hypotheses: int, model: Optional[str] = None,
                              beam_size: Optional[int] = None,
                              split_sentences: Optional[bool] = None,
                              length_penalty: Optional[float] = None,
                              max_decoding_length: Optional[int] = None,
                              min_decoding_length: Optional[int] = None,
                              source_language: Optional[str] = None, target_language: Optional[str] = None,
                              no_repeat_ngram_size: Optional[int] = None, repetition_penalty: Optional[float] = None,
                              suppress_sequences: Optional[List[str]] = None, suppress_token_ids: Optional[List[int]] = None,
                  target_prefix: Optional[str] = None, target_prefix_ids: Optional[List[int]] = None,
                  glossary: Optional[Mapping[str, str]] = None, ignore_model_glossary: Optional[bool] = None,
                              sampling_topk: Optional[int] = None, sampling_topp: Optional[float] = None,
                              sampling_temperature: Optional[float] = None, seed: Optional[int] = None,
                              timeout: Optional[float] = None) -> List[List[Hypothesis]]:
        request, _ = _common.request(
            texts, model, beam_size=beam_size or _common.nbest_beam(num_hypotheses, sampling_topk, sampling_temperature),
            num_hypotheses=num_hypotheses,
            return_scores=True, return_token_ids=True, split_sentences=split_sentences,
            length_penalty=length_penalty, max_decoding_length=max_decoding_length,
            min_decoding_length=min_decoding_length,
            source_language=source_language, target_language=target_language,
            no_repeat_ngram_size=no_repeat_ngram_size, repetition_penalty=repetition_penalty,
            suppress_sequences=suppress_sequences, suppress_token_ids=suppress_token_ids,
            target_prefix=target_prefix, target_prefix_ids=target_prefix_ids,
            glossary=glossary, ignore_model_glossary=ignore_model_glossary,
            sampling_topk=sampling_topk, sampling_topp=sampling_topp,
            sampling_temperature=sampling_temperature, seed=seed)
        return _common.nbest(await self._call(self._stub.Translate, request, timeout))

    async def translate_response(self, request: pb.TranslateRequest,
                                 timeout: Optional[float] = None) -> pb.TranslateResponse:
        return await self._call(self._stub.Translate, request, timeout)

    async def score(self, sources: List[str], targets: List[str], model: Optional[str] = None,
              length_penalty: Optional[float] = None, max_decoding_length: Optional[int] = None,
              source_language: Optional[str] = None, target_language: Optional[str] = None,
              timeout: Optional[float] = None) -> List[ScoreResult]:
        """The model's log-probs of each target given its source (rpc Score): one ScoreResult
        per pair, its score normalised as a translation's (scoring the model's own best
        translation gives its score)."""
        request = _common.score_request(sources, targets, model, length_penalty=length_penalty,
                                        max_decoding_length=max_decoding_length,
                                        source_language=source_language, target_language=target_language)
        return _common.score_results(await self._call(self._stub.Score, request, timeout))

    async def list_models(self, timeout: Optional[float] = None):
        return list((await self._call(self._stub.ListModels, pb.ListModelsRequest(), timeout)).models)

    async def close(self):
        await self._channel.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

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
