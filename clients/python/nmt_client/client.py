"""The synchronous client."""
import time
from typing import List, Mapping, Optional

import grpc

from . import _common
from ._common import Hypothesis, RetryPolicy, ScoreResult, Texts
from ._proto import translation_pb2 as pb
from ._proto import translation_pb2_grpc as pb_grpc


class Client:
    """A channel to one nmt-server.

    target: "host:port". token: a bearer token (server.auth_token_file). tls: False
    (plaintext), True (TLS with the system's roots, or root_certificates as PEM bytes), or
    grpc.ChannelCredentials. timeout: the default deadline of a call in seconds, retries
    included (None = none). retry: RetryPolicy (RetryPolicy(max_attempts=1) = no retries).
    """

    def __init__(self, target: str, token: Optional[str] = None, tls=False,
                 root_certificates: Optional[bytes] = None, timeout: Optional[float] = 60.0,
                 retry: RetryPolicy = RetryPolicy(), options=()):
        credentials = _common.channel_credentials(tls, root_certificates)
        self._channel = (grpc.secure_channel(target, credentials, options=options) if credentials
                         else grpc.insecure_channel(target, options=options))
        self._stub = pb_grpc.TranslationServiceStub(self._channel)
        self._metadata = _common.metadata(token)
        self._timeout = timeout
        self._retry = retry
        self.retries = 0  # retries made over the client's life (observability, tests)

    def translate(self, texts: Texts, model: Optional[str] = None, beam_size: Optional[int] = None,
                  split_sentences: Optional[bool] = None, length_penalty: Optional[float] = None,
                  max_decoding_length: Optional[int] = None, min_decoding_length: Optional[int] = None,
                  source_language: Optional[str] = None, target_language: Optional[str] = None,
                  no_repeat_ngram_size: Optional[int] = None, repetition_penalty: Optional[float] = None,
                  suppress_sequences: Optional[List[str]] = None, suppress_token_ids: Optional[List[int]] = None,
                  target_prefix: Optional[str] = None, target_prefix_ids: Optional[List[int]] = None,
                  glossary: Optional[Mapping[str, str]] = None, ignore_model_glossary: Optional[bool] = None,
                  format: Optional[str] = None,
                  sampling_topk: Optional[int] = None, sampling_topp: Optional[float] = None,
                  sampling_temperature: Optional[float] = None, seed: Optional[int] = None,
                  timeout: Optional[float] = None):
        """The best translation of each text (a list), or of the one text given as a str (a
        str). Each text is translated sentence by sentence and joined with its own whitespace
        (the server's default, limits.split_sentences); split_sentences=False sends each text
        as one sentence.
        source_language / target_language: a multilingual model's languages (deu_Latn, or an
        alias such as "de"); None takes the model's default.
        format: "html" or "markdown" translates the texts' text and keeps their markup, each
        tag around the words it covered (README, "Translate HTML and Markdown").
        Sampling (CTranslate2's names): sampling_topk 0 (the whole vocabulary) or k > 1 samples
        instead of searching (1, the default, is greedy), with sampling_topp (0, 1] and
        sampling_temperature (> 0; 0 is greedy); seed makes it reproducible.
        glossary: {source term: target term}; where a source term occurs (whole words,
        case-sensitive) the translation holds its target term (beam search only);
        ignore_model_glossary: the model's own glossary does not apply."""
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
        best = _common.best_texts(self._call(self._stub.Translate, request, timeout))
        return best[0] if single else best

    def translate_nbest(self, texts: Texts, num_hypotheses: int, model: Optional[str] = None,
                        beam_size: Optional[int] = None, split_sentences: Optional[bool] = None,
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
        """num_hypotheses hypotheses per text, best first, with scores and token ids (beam_size
        defaults to max(4, num_hypotheses); when sampling, to 1: the hypotheses are then
        num_hypotheses independent samples). A text of several sentences (split, the server's
        default) has one joined hypothesis: use translate_response() for the per-sentence
        n-best, or split_sentences=False."""
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
        return _common.nbest(self._call(self._stub.Translate, request, timeout))

    def translate_alignments(self, texts: Texts, model: Optional[str] = None,
                             beam_size: Optional[int] = None, split_sentences: Optional[bool] = None,
                             source_language: Optional[str] = None,
                             target_language: Optional[str] = None, timeout: Optional[float] = None):
        """(best translation, alignments) per text (return_alignments): per target token an
        Alignment(source_token, target_token, source (begin, end), target (begin, end),
        sentence), byte ranges of the UTF-8 texts (the request's text, the translation)."""
        request, single = _common.request(
            texts, model, beam_size=beam_size, split_sentences=split_sentences, return_alignments=True,
            source_language=source_language, target_language=target_language)
        out = _common.alignments(self._call(self._stub.Translate, request, timeout))
        return out[0] if single else out

    def translate_response(self, request: pb.TranslateRequest,
                           timeout: Optional[float] = None) -> pb.TranslateResponse:
        """Sends a TranslateRequest as built by the caller; the whole TranslateResponse."""
        return self._call(self._stub.Translate, request, timeout)

    def score(self, sources: List[str], targets: List[str], model: Optional[str] = None,
              length_penalty: Optional[float] = None, max_decoding_length: Optional[int] = None,
              source_language: Optional[str] = None, target_language: Optional[str] = None,
              timeout: Optional[float] = None) -> List[ScoreResult]:
        """The model's log-probs of each target given its source (rpc Score): one ScoreResult
        per pair, its score normalised as a translation's (scoring the model's own best
        translation gives its score)."""
        request = _common.score_request(sources, targets, model, length_penalty=length_penalty,
                                        max_decoding_length=max_decoding_length,
                                        source_language=source_language, target_language=target_language)
        return _common.score_results(self._call(self._stub.Score, request, timeout))

    def list_models(self, timeout: Optional[float] = None):
        return list(self._call(self._stub.ListModels, pb.ListModelsRequest(), timeout).models)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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
