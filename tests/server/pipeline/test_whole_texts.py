#!/usr/bin/python3
"""Whole texts and language detection on the real nmt-server (CPU), issue 55:
- "Two dogs play in the snow. A man is riding a bike." comes back whole, both sentences
  translated, by default from gRPC Translate, TranslateStream, HTTP /v1/translate and
  LibreTranslate's /translate (nmt-translate: tests/model/test_translate_cli.cc; the Python
  client: tests/clients/test_nmt_client.py), equal to its sentences translated one by one;
- a text of exactly limits.max_characters_per_request (20,000 here) characters, paragraphs
  and odd whitespace included, translates in full and equals its sentences translated one by
  one with the text's whitespace between them; one character more is refused naming the
  limit (gRPC and LibreTranslate); a text of more sentences than batching.max_queue_sentences
  is refused naming the queue bound (the documented choice, README limits);
- POST /detect answers LibreTranslate's shape and tells the served languages; an
  undetectable text is a 400 naming it; `source: auto` on /translate routes an English text
  to the Marian demo model and a French one to the multilingual (NLLB-shaped) model, each as
  the request naming its language; gRPC `source_language: "auto"` likewise, and on the
  bilingual model (one source language) without detection.

    test_whole_texts.py REPO_ROOT NMT_SERVER
"""
import json
import os
import sys
import urllib.error
import urllib.request

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import harness  # noqa: E402

check = harness.Checks()
TWO = "Two dogs play in the snow. A man is riding a bike."
MAX_CHARACTERS = 20000
QUEUE = 1024
# Sentences written for this test (none from a corpus), the long text's building blocks.
BLOCKS = ["A woman is reading a book in the park.", "Two children are playing with a red ball!",
          "The man in the blue shirt is cooking dinner.", "Is the dog sleeping under the table?",
          "A group of people are walking on the beach.", "The girl is riding her bike down the street.",
          "An old man sits on a bench and feeds the birds.", "Three boys are jumping into the lake.",
          "A woman in a hat is selling flowers at the market.", "The team is celebrating after the game!",
          "A musician plays the guitar on the corner.", "Where is the little cat hiding?"]
FRENCH = "Le train pour la côte part tous les matins à sept heures et demie."
ENGLISH = "My grandmother keeps her old letters in a wooden box under the bed."


def http(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def long_text(target_chars):
    """(text, pieces): sentences of BLOCKS separated by spaces, double spaces, line and
    paragraph breaks, exactly target_chars characters (trailing spaces pad it)."""
    gaps = [" ", "  ", "\n", "\n\n", " ", "\t"]
    pieces, text, i = [], "", 0
    while True:
        sentence = BLOCKS[(i * 7) % len(BLOCKS)]
        gap = gaps[i % len(gaps)] if i else "  "  # leading whitespace kept too
        if len(text) + len(gap) + len(sentence) + 1 > target_chars:
            break
        pieces.append((gap, sentence))
        text += gap + sentence
        i += 1
    tail = " " * (target_chars - len(text))
    return text + tail, pieces, tail


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp = harness.temp_dir("nmt-whole-texts-")
    harness.generate_stubs(repo, tmp)
    import health_pb2
    import health_pb2_grpc
    from nmt.v1 import translation_pb2 as pb
    from nmt.v1 import translation_pb2_grpc as pb_grpc

    repository = os.path.join(tmp, "repository")
    os.makedirs(repository)
    os.symlink(os.path.join(repo, "tests", "conformance", "families", "nllb"), os.path.join(repository, "nllb"))
    config = os.path.join(tmp, "config.yaml")
    with open(config, "w") as f:
        f.write(f"limits:\n  max_characters_per_request: {MAX_CHARACTERS}\n  max_input_tokens: 48\n"
                f"batching:\n  max_queue_sentences: {QUEUE}\n"
                f"model_repository:\n  path: {repository}\n"
                f"models:\n  - name: m30k\n    path: {os.path.join(repo, 'models/m30k-en-de-small')}\n")
    port = harness.free_port()
    server = harness.Server(binary, config, extra_args=["--http-host", "127.0.0.1", "--http-port", str(port)])
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.TranslationServiceStub(channel)
            whole_text_checks(stub, pb, port)
            long_text_checks(stub, pb, port)
            detection_checks(stub, pb, port)
    except Exception as e:  # a crash of the test is a failure with its reason
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        harness.stop_and_report(check, server)
    check.exit()


def one_by_one(stub, pb, sentences, **options):
    """Each sentence translated alone, unsplit: the reference."""
    r = stub.Translate(pb.TranslateRequest(model="m30k", texts=sentences,
                                           options=pb.TranslateOptions(split_sentences=False, **options)), timeout=300)
    return [t.hypotheses[0].text for t in r.translations]


def whole_text_checks(stub, pb, port):
    a, b = one_by_one(stub, pb, ["Two dogs play in the snow.", "A man is riding a bike."])
    want = a + " " + b
    r = stub.Translate(pb.TranslateRequest(texts=[TWO]), timeout=120)
    got = r.translations[0].hypotheses[0].text
    check(got == want and len(r.translations[0].sentences) == 2,
          f"gRPC Translate, no options: the two sentences come back ({got!r} == {want!r})")
    unsplit = stub.Translate(pb.TranslateRequest(texts=[TWO], options=pb.TranslateOptions(split_sentences=False)),
                             timeout=120).translations[0].hypotheses[0].text
    check(unsplit != want, f"split_sentences=false opts out: the text is one sentence ({unsplit!r})")
    answers = list(stub.TranslateStream(iter([pb.TranslateRequest(texts=[TWO], request_id="s-0")]), timeout=120))
    got = answers[0].response.translations[0].hypotheses[0].text if answers and answers[0].status_code == 0 else None
    check(got == want, f"TranslateStream, no options: whole ({got!r})")
    status, body = http(port, "/v1/translate", {"texts": [TWO]})
    got = body["translations"][0]["hypotheses"][0]["text"] if status == 200 else body
    check(got == want, f"POST /v1/translate, no options: whole ({got!r})")
    status, body = http(port, "/translate", {"q": TWO, "source": "en", "target": "de"})
    check(status == 200 and body == {"translatedText": want}, f"LibreTranslate /translate: whole ({status} {body})")
    # A text of one sentence still answers with its own n-best and scores (as unsplit).
    r = stub.Translate(pb.TranslateRequest(texts=["A man is riding a bike."], options=pb.TranslateOptions(
        num_hypotheses=3, return_scores=True)), timeout=120)
    h = r.translations[0].hypotheses
    check(len(h) == 3 and h[0].text == b and h[0].score < 0, f"one sentence: its 3-best with scores ({len(h)})")


def long_text_checks(stub, pb, port):
    text, pieces, tail = long_text(MAX_CHARACTERS)
    check(len(text) == MAX_CHARACTERS and len(pieces) > 300,
          f"the long text: {len(text)} characters, {len(pieces)} sentences, {text.count(chr(10) * 2)} paragraph breaks")
    translated = dict(zip(BLOCKS, one_by_one(stub, pb, BLOCKS, beam_size=1)))
    want = "".join(gap + translated[s] for gap, s in pieces) + tail
    r = stub.Translate(pb.TranslateRequest(texts=[text], options=pb.TranslateOptions(beam_size=1)), timeout=600)
    got = r.translations[0].hypotheses[0].text
    check(len(r.translations[0].sentences) == len(pieces), f"every sentence translated ({len(r.translations[0].sentences)})")
    differ = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
    check(got == want, f"{len(text)} characters in full: equal to the sentences one by one with the text's whitespace"
          + ("" if got == want else f" (first difference at character {differ}: {got[differ:differ + 60]!r})"))

    over = text + "x"
    refusal = (f"the texts have {MAX_CHARACTERS + 1} characters, more than limits.max_characters_per_request "
               f"({MAX_CHARACTERS}); send the text in several requests")
    try:
        stub.Translate(pb.TranslateRequest(texts=[over]), timeout=60)
        check(False, "one character over the limit is refused")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details() == refusal,
              f"one character over: INVALID_ARGUMENT naming the limit ({e.details()})")
    status, body = http(port, "/translate", {"q": [text[:10000], text[10000:] + "x"], "source": "en", "target": "de"})
    check(status == 400 and body == {"error": refusal}, f"LibreTranslate: the same char limit over a list q ({status} {body})")

    many = "Dogs run. " * 1500  # within the characters, more sentences than the queue holds
    try:
        stub.Translate(pb.TranslateRequest(texts=[many]), timeout=60)
        check(False, "more sentences than the queue holds are refused")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details() ==
              f"the request has 1500 sentences, more than the queue holds (batching.max_queue_sentences = {QUEUE}); "
              "send the text in parts", f"more sentences than the queue: refused naming its bound ({e.details()})")


def detection_checks(stub, pb, port):
    for text, language in [(ENGLISH, "en"), ("Meine Großmutter bewahrt ihre alten Briefe in einer Holzkiste auf.", "de"),
                           (FRENCH, "fr"), ("El tren a la costa sale todas las mañanas a las siete y media.", "es")]:
        status, body = http(port, "/detect", {"q": text})
        ok = (status == 200 and isinstance(body, list) and body and body[0]["language"] == language
              and isinstance(body[0]["confidence"], float) and 50 < body[0]["confidence"] <= 100)
        check(ok, f"/detect {language}: [{{confidence, language}}] ({status} {body})")
    status, body = http(port, "/detect", {"q": [ENGLISH, FRENCH]})
    check(status == 200 and [d[0]["language"] for d in body] == ["en", "fr"], f"/detect, a list q: a list each ({body})")
    status, body = http(port, "/detect", {"q": "ok"})
    check(status == 400 and body == {"error": 'Cannot detect the language of "ok" (too short, or mixed): name the '
                                              'source language'}, f"/detect of 'ok': 400 naming it ({status} {body})")
    status, body = http(port, "/detect", {})
    check(status == 400 and body == {"error": "Invalid request: missing q parameter"}, f"/detect without q ({body})")

    # LibreTranslate source auto: English -> the demo model, French -> the multilingual one.
    status, named = http(port, "/translate", {"q": ENGLISH, "source": "en", "target": "de"})
    status2, auto = http(port, "/translate", {"q": ENGLISH, "source": "auto", "target": "de"})
    check(status == status2 == 200 and auto.get("translatedText") == named["translatedText"]
          and auto.get("detectedLanguage", {}).get("language") == "en",
          f"/translate source auto, an English text: as source en, detectedLanguage en ({auto})")
    status, named = http(port, "/translate", {"q": FRENCH, "source": "fr", "target": "de"})
    status2, auto = http(port, "/translate", {"q": FRENCH, "source": "auto", "target": "de"})
    check(status == status2 == 200 and auto.get("translatedText") == named["translatedText"]
          and auto.get("detectedLanguage", {}).get("language") == "fr",
          f"/translate source auto, a French text: routed as source fr (the multilingual model) ({status2} {auto})")
    status, body = http(port, "/translate", {"q": "ok", "source": "auto", "target": "de"})
    check(status == 400 and "Cannot detect the language of \"ok\"" in body.get("error", ""),
          f"/translate source auto on 'ok': 400 naming the text ({body})")

    # gRPC source_language auto on the multilingual model, and on the bilingual one.
    def best(model, text, source, target=""):
        return stub.Translate(pb.TranslateRequest(model=model, texts=[text], options=pb.TranslateOptions(
            source_language=source, target_language=target, beam_size=1, max_decoding_length=39,
            return_token_ids=True)), timeout=120).translations[0].hypotheses[0]
    auto_fr, named_fr = best("nllb", FRENCH, "auto", "deu_Latn"), best("nllb", FRENCH, "fra_Latn", "deu_Latn")
    check(list(auto_fr.token_ids) == list(named_fr.token_ids),
          "gRPC source_language auto on the NLLB-shaped model: a French text as fra_Latn")
    check(best("m30k", TWO, "auto").text == best("m30k", TWO, "").text,
          "gRPC source_language auto on the bilingual model: its one source language, no detection")
    try:
        best("nllb", "ok", "auto", "deu_Latn")
        check(False, "gRPC auto on an undetectable text is refused")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details() ==
              'options.source_language auto: cannot tell the language of "ok" (too short, or mixed); name the source '
              'language', f"gRPC auto on 'ok': INVALID_ARGUMENT naming the text ({e.details()})")


if __name__ == "__main__":
    main()
