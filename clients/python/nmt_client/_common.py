"""What the sync and async clients share: channel credentials, request building, the retry
policy and the answers' shapes."""
import dataclasses
import random
import time
from typing import Optional, Sequence, Tuple, Union

import grpc

from ._proto import translation_pb2 as pb

Texts = Union[str, Sequence[str]]

# The server's transient refusals: shutting down or not up yet (UNAVAILABLE), busy
# (RESOURCE_EXHAUSTED: server.max_concurrent_calls or a full queue). Nothing else is retried.
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)


@dataclasses.dataclass(frozen=True)
class Hypothesis:
    text: str
    score: float               # sum(log p) / length ** length_penalty
    token_ids: Tuple[int, ...]  # target ids, EOS included
    token_scores: Tuple[float, ...] = ()  # per token id, its log-prob (0: forced, a target_prefix's)


@dataclasses.dataclass(frozen=True)
class ScoreResult:
    """Score of one (source, target) pair: score normalised as a hypothesis' score."""
    score: float
    token_scores: Tuple[float, ...]  # per token id
    token_ids: Tuple[int, ...]       # the language token (NLLB ...), the target's, </s>


@dataclasses.dataclass(frozen=True)
class Alignment:
    """return_alignments: a target token and the source token it aligns to, with their byte
    ranges [begin, end) in the request's text and the translation (README, "return_alignments")."""
    source_token: int
    target_token: int
    source: Tuple[int, int]
    target: Tuple[int, int]
    sentence: int  # with split_sentences: the sentence the token indices count in


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: before retry n (1-based) the client sleeps a
    random time up to min(max_backoff, initial_backoff * multiplier ** (n - 1)) seconds. A
    retry never outlives the call's deadline."""
    max_attempts: int = 5
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0

    def delay(self, retry: int) -> float:
        return random.uniform(0, min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1)))

    def backoff(self, code: grpc.StatusCode, attempt: int, end: Optional[float]) -> Optional[float]:
        """The sleep before retrying a call whose `attempt` failed with `code`, or None when
        the error is final: not transient, the last attempt, or the sleep would pass `end`
        (time.monotonic() of the call's deadline; None = no deadline). Shared by the sync and
        asyncio clients, which differ only in how they call and sleep."""
        if code not in RETRYABLE or attempt == self.max_attempts:
            return None
        delay = self.delay(attempt)
        if end is not None and time.monotonic() + delay >= end:
            return None
        return delay


def channel_credentials(tls, root_certificates: Optional[bytes]) -> Optional[grpc.ChannelCredentials]:
    """None for plaintext (tls=False), else TLS credentials (tls=True: the system's roots or
    root_certificates; or tls given as grpc.ChannelCredentials)."""
    if isinstance(tls, grpc.ChannelCredentials):
        return tls
    if tls:
        return grpc.ssl_channel_credentials(root_certificates=root_certificates)
    if root_certificates is not None:
        raise ValueError("root_certificates given with tls=False")
    return None


def metadata(token: Optional[str]):
    return (("authorization", f"Bearer {token}"),) if token else ()


def translate_options(options) -> pb.TranslateOptions:
    """TranslateOptions of the options given (None: the server's default); an unknown name
    raises TypeError naming the fields there are."""
    set_options = {k: v for k, v in options.items() if v is not None}
    known = pb.TranslateOptions.DESCRIPTOR.fields_by_name
    unknown = sorted(k for k in set_options if k not in known)
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; TranslateOptions has: {', '.join(sorted(known))}")
    # glossary: {source term: target term} (README, "### glossary") as GlossaryEntry messages
    if "glossary" in set_options:
        set_options["glossary"] = [pb.GlossaryEntry(source=k, target=v) for k, v in set_options["glossary"].items()]
    return pb.TranslateOptions(**set_options)


def request(texts: Texts, model: Optional[str], **options) -> Tuple[pb.TranslateRequest, bool]:
    """The TranslateRequest, and whether `texts` was a single string."""
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    return pb.TranslateRequest(model=model or "", texts=texts, options=translate_options(options)), single


def one_or_all(answers, single: bool):
    """The one answer of a call given a single str, else the list."""
    return answers[0] if single else answers


def alignments(response: pb.TranslateResponse):
    """(best text, [Alignment...]) per text of a response to return_alignments."""
    return [(t.hypotheses[0].text,
             [Alignment(a.source_token, a.target_token, (a.source_begin, a.source_end),
                        (a.target_begin, a.target_end), a.sentence)
              for a in t.hypotheses[0].alignments])
            for t in response.translations]


def score_request(sources: Sequence[str], targets: Sequence[str], model: Optional[str],
                  **options) -> pb.ScoreRequest:
    """The ScoreRequest of the pairs (sources[i], targets[i])."""
    return pb.ScoreRequest(model=model or "", sources=list(sources), targets=list(targets),
                           options=translate_options(options))


def score_results(response: pb.ScoreResponse):
    return [ScoreResult(r.score, tuple(r.token_scores), tuple(r.token_ids)) for r in response.results]


def nbest_beam(num_hypotheses: int, sampling_topk: Optional[int], sampling_temperature: Optional[float]):
    """translate_nbest's default beam: max(4, num_hypotheses) for beam search; None (the
    server's 1) when sampling, whose hypotheses are independent samples."""
    sampling = sampling_topk not in (None, 1) and sampling_temperature != 0
    return None if sampling else max(4, num_hypotheses)


def best_texts(response: pb.TranslateResponse):
    return [t.hypotheses[0].text for t in response.translations]


def nbest(response: pb.TranslateResponse):
    return [[Hypothesis(h.text, h.score, tuple(h.token_ids), tuple(h.token_scores)) for h in t.hypotheses]
            for t in response.translations]
