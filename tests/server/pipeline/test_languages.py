#!/usr/bin/python3
"""Languages per request on the real nmt-server (CPU): one NLLB-shaped model (fam-gen's
tests/conformance/families/nllb, served from a temporary model repository beside the Marian
demo model) answers concurrent requests for three target languages (and two source
languages, greedy and beam 4 mixed), each output identical to the same request sent alone and
to transformers' reference (references.jsonl: ids, text, score within 1e-4), and a stream of
requests for several targets as the references; split_sentences
cuts by the requested source language's rules; the refusals (unknown language, one the model
lacks, an ambiguous alias, no target for a model without a default, a bilingual model asked
for another language) name what the model has; ListModels lists the model's languages before
and after it loads; HTTP /v1/translate takes the options, LibreTranslate's /translate selects
the multilingual model's languages and /languages lists them; the Python client (sync and
asyncio) passes them.

    test_languages.py REPO_ROOT NMT_SERVER PYTHON_CLIENT_BUILD_DIR
"""
import asyncio
import concurrent.futures
import json
import os
import sys
import urllib.error
import urllib.request

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import harness  # noqa: E402

check = harness.Checks()
NLLB_CODES = ["eng_Latn", "deu_Latn", "fra_Latn", "spa_Latn", "ita_Latn", "por_Latn", "rus_Cyrl", "ell_Grek",
              "zho_Hans", "zho_Hant"]
# transformers' generate(max_length=40) counts the decoder start token (meta.json).
MAX_DECODING_LENGTH = 39
# How a request may name each reference language: the model's code, an ISO 639-1 alias, a
# 639-3 one, another case.
NAMES = {"eng_Latn": ["eng_Latn", "en"], "deu_Latn": ["deu_Latn", "de", "deu"], "fra_Latn": ["fr", "FRA_LATN"],
         "zho_Hans": ["zho_Hans", "zh-Hans"]}


def http(port, path, body=None):
    """(status, parsed JSON body) of a GET (body None) or a JSON POST."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 method="POST" if data else "GET",
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    repo, binary, client_dir = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    nllb = os.path.join(repo, "tests", "conformance", "families", "nllb")
    demo = os.path.join(repo, "models", "m30k-en-de-small")
    tmp = harness.temp_dir("nmt-languages-")
    harness.generate_stubs(repo, tmp)
    import health_pb2
    import health_pb2_grpc
    from nmt.v1 import translation_pb2 as pb
    from nmt.v1 import translation_pb2_grpc as pb_grpc

    with open(os.path.join(nllb, "references.jsonl")) as f:
        refs = [json.loads(line) for line in f]
    targets = {r["target_language"] for r in refs if r["source_language"] == "eng_Latn"}
    check(len(targets) >= 3, f"the references hold three target languages from eng_Latn ({sorted(targets)})")

    repository = os.path.join(tmp, "repository")
    os.makedirs(repository)
    os.symlink(nllb, os.path.join(repository, "nllb"))
    config = os.path.join(tmp, "config.yaml")
    with open(config, "w") as f:
        f.write(f"model_repository:\n  path: {repository}\n"
                f"models:\n  - name: m30k\n    path: {demo}\n")
    http_port = harness.free_port()
    server = harness.Server(binary, config, extra_args=["--http-host", "127.0.0.1", "--http-port", str(http_port)])
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.TranslationServiceStub(channel)
            list_models_checks(stub, pb, "unloaded")
            served = concurrency_checks(stub, pb, refs)
            stream_checks(stub, pb, refs)
            split_checks(stub, pb, refs)
            refusal_checks(stub, pb)
            list_models_checks(stub, pb, "loaded")
            http_checks(stub, pb, http_port, refs)
        client_checks(client_dir, server.target, refs)
        check(served > 0, f"{served} sentences served")
    finally:
        harness.stop_and_report(check, server)
    check.exit()


def request(pb, text, source, target, greedy=False, **options):
    o = pb.TranslateOptions(beam_size=1 if greedy else 4, max_decoding_length=MAX_DECODING_LENGTH,
                            return_scores=True, return_token_ids=True, **options)
    if source is not None:
        o.source_language = source
    if target is not None:
        o.target_language = target
    return pb.TranslateRequest(model="nllb", texts=[text], options=o)


def hypothesis(response):
    h = response.translations[0].hypotheses[0]
    return list(h.token_ids), h.text, h.score


def concurrency_checks(stub, pb, refs):
    # Every reference sentence, greedy and beam 4, its languages named in turn by each of
    # their names: all in flight at once, so that a decode loop's steps hold sentences of
    # several target languages (and sources) together.
    jobs = []
    for i, r in enumerate(refs):
        for mode in ("greedy", "beam4"):
            src_names = NAMES.get(r["source_language"], [r["source_language"]])
            tgt_names = NAMES.get(r["target_language"], [r["target_language"]])
            jobs.append((r, mode, request(pb, r["source"], src_names[i % len(src_names)],
                                          tgt_names[i % len(tgt_names)], greedy=mode == "greedy")))
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        together = list(pool.map(lambda job: stub.Translate(job[2], timeout=300), jobs))
    alone = [stub.Translate(job[2], timeout=120) for job in jobs]

    mismatched, off_reference = [], []
    for (r, mode, _), got, single in zip(jobs, together, alone):
        what = f"{r['id']} {r['source_language']}->{r['target_language']} {mode}"
        if hypothesis(got)[:2] != hypothesis(single)[:2] or abs(hypothesis(got)[2] - hypothesis(single)[2]) > 1e-5:
            mismatched.append(what)
        ids, text, score = hypothesis(got)
        ref = r[mode]
        if ids != ref["ids"] or text != ref["text"] or abs(score - ref["score"]) > 1e-4:
            off_reference.append(f"{what}: {ids} {text!r} {score} vs {ref['ids']} {ref['text']!r} {ref['score']}")
    check(not mismatched, f"{len(jobs)} concurrent requests ({len({r['target_language'] for r in refs})} target "
          f"languages) each equal the request alone (different: {mismatched[:5]})")
    check(not off_reference, f"each equals transformers' reference, ids, text and score within 1e-4 "
          f"(different: {off_reference[:3]})")
    return len(jobs)


def stream_checks(stub, pb, refs):
    # One stream, a message per target language (and a refused one between them): each
    # answered in order, as the references.
    picks = [[r for r in refs if r["source_language"] == "eng_Latn" and r["target_language"] == t][0]
             for t in ("deu_Latn", "fra_Latn", "zho_Hans")]
    messages = [request(pb, r["source"], "eng_Latn", r["target_language"]) for r in picks]
    messages.insert(1, request(pb, picks[0]["source"], "eng_Latn", "zh"))
    for i, m in enumerate(messages):
        m.request_id = f"stream-{i}"
    answers = list(stub.TranslateStream(iter(messages), timeout=120))
    got = [(a.request_id, a.status_code,
            a.response.translations[0].hypotheses[0].text if a.status_code == 0 else "ambiguous" in a.status_message)
           for a in answers]
    want = [("stream-0", 0, picks[0]["beam4"]["text"]), ("stream-1", grpc.StatusCode.INVALID_ARGUMENT.value[0], True),
            ("stream-2", 0, picks[1]["beam4"]["text"]), ("stream-3", 0, picks[2]["beam4"]["text"])]
    check(got == want, f"TranslateStream: three target languages and an ambiguous one in one stream ({got})")


def split_checks(stub, pb, refs):
    # A paragraph of two reference sentences, split: each sentence as translated alone.
    a, b = [r for r in refs if r["source_language"] == "eng_Latn" and r["target_language"] == "fra_Latn"][:2]
    paragraph = a["source"] + "  " + b["source"]
    got = stub.Translate(request(pb, paragraph, "en", "fr", split_sentences=True), timeout=120)
    sentences = [s.source for s in got.translations[0].sentences]
    check(sentences == [a["source"], b["source"]], f"split_sentences cuts the paragraph in two ({sentences})")
    joined = a["beam4"]["text"] + "  " + b["beam4"]["text"]
    text = got.translations[0].hypotheses[0].text
    check(text == joined, f"the split paragraph's translation is its sentences' references joined ({text!r})")
    # The source language picks the sentence rules: English knows "Mr." as an abbreviation,
    # ICU's rules for Greek do not.
    text = "Mr. Smith is here. He waits."
    english = stub.Translate(request(pb, text, "eng_Latn", "deu_Latn", split_sentences=True), timeout=120)
    greek = stub.Translate(request(pb, text, "ell_Grek", "deu_Latn", split_sentences=True), timeout=120)
    n_en, n_el = len(english.translations[0].sentences), len(greek.translations[0].sentences)
    check(n_en == 2 and n_el == 3, f"'{text}': 2 sentences by English rules, 3 by Greek ones (got {n_en}, {n_el})")


def refused(stub, req):
    try:
        stub.Translate(req, timeout=60)
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, ""


def refusal_checks(stub, pb):
    text = "A dog runs across the yard."
    listed = ", ".join(NLLB_CODES)
    cases = [
        ("an unknown target", request(pb, text, "eng_Latn", "klingon"),
         ["target_language", "'klingon'", listed]),
        ("a target the model lacks (FLORES-200 jpn_Jpan)", request(pb, text, "eng_Latn", "jpn_Jpan"),
         ["target_language", "'jpn_Jpan'", listed]),
        ("an alias the model lacks (ja)", request(pb, text, None, "ja"), ["target_language", "'ja'", listed]),
        ("an unknown source", request(pb, text, "xx", "deu_Latn"), ["source_language", "'xx'", listed]),
        ("an ambiguous alias (zh)", request(pb, text, "eng_Latn", "zh"),
         ["target_language", "'zh'", "ambiguous", "zho_Hans and zho_Hant"]),
        ("no target: the model has no forced_bos_token_id", request(pb, text, "eng_Latn", None),
         ["target_language is required"]),
    ]
    marian = pb.TranslateRequest(model="m30k", texts=[text], options=pb.TranslateOptions(target_language="fr"))
    cases.append(("the bilingual en-de model asked for fr", marian, ["target_language 'fr'", "de"]))
    marian_source = pb.TranslateRequest(model="m30k", texts=[text], options=pb.TranslateOptions(source_language="de"))
    cases.append(("the bilingual en-de model asked for source de", marian_source, ["source_language 'de'", "en"]))
    for what, req, parts in cases:
        code, message = refused(stub, req)
        check(code == grpc.StatusCode.INVALID_ARGUMENT and all(p in message for p in parts),
              f"{what}: INVALID_ARGUMENT naming {parts} ({code}: {message})")
    # The bilingual model takes its own pair, named or not.
    ok = stub.Translate(pb.TranslateRequest(model="m30k", texts=[text], options=pb.TranslateOptions(
        source_language="en", target_language="deu_Latn")), timeout=60)
    plain = stub.Translate(pb.TranslateRequest(model="m30k", texts=[text]), timeout=60)
    check(ok.translations[0].hypotheses[0].text == plain.translations[0].hypotheses[0].text != "",
          "the bilingual model takes its own pair by name (en, deu_Latn) as without one")


def list_models_checks(stub, pb, nllb_state):
    models = {m.name: m for m in stub.ListModels(pb.ListModelsRequest(), timeout=30).models}
    n = models.get("nllb")
    check(n is not None and n.state == nllb_state and list(n.languages) == NLLB_CODES,
          f"ListModels ({nllb_state}): nllb lists its ten codes ({n and n.state} {n and list(n.languages)})")
    check(n is not None and n.source_language == "eng_Latn" and n.target_language == "",
          f"nllb's defaults: source eng_Latn, no target ({n and n.source_language!r} {n and n.target_language!r})")
    m = models.get("m30k")
    check(m is not None and list(m.languages) == [] and (m.source_language, m.target_language) == ("en", "de"),
          f"the Marian model: no language list, its pair en-de ({m and list(m.languages)})")


def http_checks(stub, pb, port, refs):
    r = [r for r in refs if r["source_language"] == "eng_Latn" and r["target_language"] == "zho_Hans"][0]
    status, body = http(port, "/v1/translate", {
        "model": "nllb", "texts": [r["source"]],
        "options": {"sourceLanguage": "eng_Latn", "targetLanguage": "zho_Hans", "beamSize": 4,
                    "maxDecodingLength": MAX_DECODING_LENGTH}})
    got = body.get("translations", [{}])[0].get("hypotheses", [{}])[0].get("text") if status == 200 else body
    check(status == 200 and got == r["beam4"]["text"], f"/v1/translate takes sourceLanguage/targetLanguage ({got!r})")
    status, body = http(port, "/v1/translate", {"model": "nllb", "texts": ["x"], "options": {"target_language": "zh"}})
    check(status == 400 and "ambiguous" in body.get("error", "") and body.get("code") == "INVALID_ARGUMENT",
          f"/v1/translate: an ambiguous alias is 400 ({status} {body})")

    # /languages: the Marian pair and the NLLB model's languages (ISO 639-1 where it names one
    # code alone; Chinese by the model's codes), each NLLB language going to every other.
    status, body = http(port, "/languages")
    listed = {entry["code"]: entry for entry in body} if status == 200 else {}
    nllb_listed = ["en", "de", "fr", "es", "it", "pt", "ru", "el", "zho_Hans", "zho_Hant"]
    check(sorted(listed) == sorted(nllb_listed), f"/languages lists the models' languages ({sorted(listed)})")
    wrong = [c for c in nllb_listed if c in listed and set(listed[c]["targets"]) != set(nllb_listed) - {c}]
    check(not wrong, f"/languages: each NLLB language goes to the nine others (wrong: {wrong})")
    names = {c: listed[c]["name"] for c in ("de", "zho_Hans", "zho_Hant") if c in listed}
    check(names.get("de") == "German" and names.get("zho_Hans", "").startswith("Chinese")
          and names.get("zho_Hans") != names.get("zho_Hant"), f"/languages names them ({names})")

    # LibreTranslate's /translate: en-de goes to the Marian model, en-fr to NLLB (its sentences
    # split, default beam), as the same gRPC requests.
    text = r["source"]
    status, body = http(port, "/translate", {"q": text, "source": "en", "target": "fr"})
    want = stub.Translate(pb.TranslateRequest(model="nllb", texts=[text], options=pb.TranslateOptions(
        source_language="en", target_language="fr", split_sentences=True)), timeout=60)
    check(status == 200 and body.get("translatedText") == want.translations[0].hypotheses[0].text,
          f"LibreTranslate en->fr is the NLLB model's translation ({status} {body})")
    status, body = http(port, "/translate", {"q": text, "source": "en", "target": "de"})
    want = stub.Translate(pb.TranslateRequest(model="m30k", texts=[text], options=pb.TranslateOptions(
        split_sentences=True)), timeout=60)
    check(status == 200 and body.get("translatedText") == want.translations[0].hypotheses[0].text,
          f"LibreTranslate en->de is the Marian model's ({status} {body})")
    status, body = http(port, "/translate", {"q": text, "source": "de", "target": "zho_Hant"})
    check(status == 200 and isinstance(body.get("translatedText"), str),
          f"LibreTranslate de->zho_Hant by the listed codes ({status} {body})")
    status, body = http(port, "/translate", {"q": text, "source": "en", "target": "zh"})
    check(status == 400 and body.get("error", "").startswith("zh is not supported") and "zho_Hans and zho_Hant"
          in body.get("error", ""), f"LibreTranslate target zh: 400 saying it is ambiguous ({status} {body})")
    status, body = http(port, "/translate", {"q": text, "source": "auto", "target": "de"})
    check(status == 400 and "source auto is not supported" in body.get("error", "") and "zho_Hans" in body["error"],
          f"LibreTranslate source auto: 400 listing the languages ({status} {body})")


def client_checks(client_dir, target, refs):
    sys.path.insert(0, client_dir)
    import nmt_client
    r = [r for r in refs if r["source_language"] == "eng_Latn" and r["target_language"] == "deu_Latn"][0]
    f = [r for r in refs if r["source_language"] == "fra_Latn"][0]
    with nmt_client.Client(target) as client:
        got = client.translate(r["source"], model="nllb", source_language="en", target_language="de",
                               beam_size=4, max_decoding_length=MAX_DECODING_LENGTH)
        check(got == r["beam4"]["text"], f"Client.translate(source_language, target_language) ({got!r})")
        best = client.translate_nbest([f["source"]], 4, model="nllb", source_language=f["source_language"],
                                      target_language=f["target_language"],
                                      max_decoding_length=MAX_DECODING_LENGTH)[0]
        check([list(h.token_ids) for h in best] == [h["ids"] for h in f["nbest4"]],
              f"Client.translate_nbest with languages: the reference 4-best ({[h.text for h in best]})")
        try:
            client.translate("x", model="nllb", target_language="zh")
            code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            code = e.code()
        check(code == grpc.StatusCode.INVALID_ARGUMENT, f"Client: an ambiguous alias is INVALID_ARGUMENT ({code})")

    async def run():
        async with nmt_client.AsyncClient(target) as client:
            return await client.translate([r["source"]], model="nllb", source_language="eng_Latn",
                                          target_language="deu_Latn", beam_size=4,
                                          max_decoding_length=MAX_DECODING_LENGTH)
    got = asyncio.run(run())
    check(got == [r["beam4"]["text"]], f"AsyncClient.translate with languages ({got!r})")


if __name__ == "__main__":
    main()
