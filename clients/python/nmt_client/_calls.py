"""The calls of Client and AsyncClient, written once: each builds its request, and the client's
_answer() sends it (with retries) and shapes the response, synchronously for Client and as an
awaitable for AsyncClient."""
from typing import Optional, Sequence

from . import _common
from ._common import RetryPolicy, Texts
from ._proto import translation_pb2 as pb
from ._proto import translation_pb2_grpc as pb_grpc


class Calls:
    """Translation options are TranslateOptions' fields, by name (proto/nmt/v1/translation.proto;
    README, "Decoding options"); an option left out takes the server's default, an unknown name
    raises TypeError naming the fields there are."""

    _channels = None  # the gRPC module whose channels the client opens: grpc or grpc.aio

    def __init__(self, target: str, token: Optional[str] = None, tls=False,
                 root_certificates: Optional[bytes] = None, timeout: Optional[float] = 60.0,
                 retry: RetryPolicy = RetryPolicy(), options=()):
        credentials = _common.channel_credentials(tls, root_certificates)
        self._channel = (self._channels.secure_channel(target, credentials, options=options) if credentials
                         else self._channels.insecure_channel(target, options=options))
        self._stub = pb_grpc.TranslationServiceStub(self._channel)
        self._metadata = _common.metadata(token)
        self._timeout = timeout
        self._retry = retry
        self.retries = 0  # retries made over the client's life (observability, tests)

    def translate(self, texts: Texts, model: Optional[str] = None, *, timeout: Optional[float] = None,
                  **options):
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
        request, single = _common.request(texts, model, **options)
        return self._answer(self._stub.Translate, request, timeout,
                            lambda response: _common.one_or_all(_common.best_texts(response), single))

    def translate_nbest(self, texts: Texts, num_hypotheses: int, model: Optional[str] = None, *,
                        timeout: Optional[float] = None, **options):
        """num_hypotheses hypotheses per text, best first, with scores and token ids (beam_size
        defaults to max(4, num_hypotheses); when sampling, to 1: the hypotheses are then
        num_hypotheses independent samples). A text of several sentences (split, the server's
        default) has one joined hypothesis: use translate_response() for the per-sentence
        n-best, or split_sentences=False."""
        if options.get("beam_size") is None:
            options["beam_size"] = _common.nbest_beam(num_hypotheses, options.get("sampling_topk"),
                                                      options.get("sampling_temperature"))
        request, _ = _common.request(texts, model, num_hypotheses=num_hypotheses, return_scores=True,
                                     return_token_ids=True, **options)
        return self._answer(self._stub.Translate, request, timeout, _common.nbest)

    def translate_alignments(self, texts: Texts, model: Optional[str] = None, *,
                             timeout: Optional[float] = None, **options):
        """(best translation, alignments) per text (return_alignments): per target token an
        Alignment(source_token, target_token, source (begin, end), target (begin, end),
        sentence), byte ranges of the UTF-8 texts (the request's text, the translation)."""
        request, single = _common.request(texts, model, return_alignments=True, **options)
        return self._answer(self._stub.Translate, request, timeout,
                            lambda response: _common.one_or_all(_common.alignments(response), single))

    def translate_response(self, request: pb.TranslateRequest, timeout: Optional[float] = None):
        """Sends a TranslateRequest as built by the caller; the whole TranslateResponse."""
        return self._answer(self._stub.Translate, request, timeout, lambda response: response)

    def score(self, sources: Sequence[str], targets: Sequence[str], model: Optional[str] = None, *,
              timeout: Optional[float] = None, **options):
        """The model's log-probs of each target given its source (rpc Score): one ScoreResult
        per pair, its score normalised as a translation's (scoring the model's own best
        translation gives its score). Options as translate's that apply to scoring:
        length_penalty, max_decoding_length, source_language, target_language."""
        request = _common.score_request(sources, targets, model, **options)
        return self._answer(self._stub.Score, request, timeout, _common.score_results)

    def list_models(self, timeout: Optional[float] = None):
        return self._answer(self._stub.ListModels, pb.ListModelsRequest(), timeout,
                            lambda response: list(response.models))
