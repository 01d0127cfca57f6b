#!/usr/bin/python3
"""Glossaries on the real nmt-server, CPU, demo model (docs/decoding.md, "Glossary"): the model's
glossary (glossary.tsv in its folder) and a request's (TranslateOptions.glossary) put each
required target term into every hypothesis where the source term occurs (whole words,
case-sensitive); a sentence where no source term occurs gets exactly the plain translation
(ids and scores); HTTP /v1/translate takes the glossary in the proto's JSON mapping; the
refusals name the field; the cache keys on the terms; the Python client (clients/python)
sends a glossary as a dict; SIGHUP after glossary.tsv changes
reloads the model, and new requests get the new term.

The model folder is a copy of links to models/m30k-en-de-small plus a glossary.tsv.

    test_glossary_server.py REPO_ROOT NMT_SERVER PYTHON_CLIENT_DIR
"""
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))

import grpc  # noqa: E402

import harness  # noqa: E402

check = harness.Checks()

DOG = "A dog runs across the yard."
PARK = "Two men are playing chess in the park."
PLAIN = ["The children are eating ice cream.", "A hotdog stand is on the corner.", "Dogs and a Dog play."]


def series(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return 0.0


def main():
    repo, binary, client_dir = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    tmp = harness.temp_dir("nmt-glossary-")
    harness.generate_stubs(repo, tmp)
    import health_pb2
    import health_pb2_grpc
    from nmt.v1 import translation_pb2 as pb
    from nmt.v1 import translation_pb2_grpc as pb_grpc

    demo = os.path.join(repo, "models", "m30k-en-de-small")
    model = os.path.join(tmp, "m30k")
    os.makedirs(model)
    for name in os.listdir(demo):
        os.symlink(os.path.join(demo, name), os.path.join(model, name))
    glossary = os.path.join(model, "glossary.tsv")
    with open(glossary, "w") as f:
        f.write("# the model's glossary\ndog\tWelpe\n")
    config = os.path.join(tmp, "config.yaml")
    harness.write_config(config, model, server={"translation_cache_mb": 64},
                         limits={"max_glossary_entries": 4, "max_glossary_term_characters": 20})
    http_port = harness.free_port()
    server = harness.Server(binary, config, ["--http-host", "127.0.0.1", "--http-port", str(http_port)])
    server.wait_serving(health_pb2, health_pb2_grpc)
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.TranslationServiceStub(channel)

        def translate(texts, **options):
            try:
                r = stub.Translate(pb.TranslateRequest(texts=texts, options=pb.TranslateOptions(**options)),
                                   timeout=120)
                return "OK", r
            except grpc.RpcError as e:
                return e.code().name, e.details()

        nbest = dict(beam_size=4, num_hypotheses=3, return_scores=True, return_token_ids=True)

        def hyps(r, i=0):
            return [(h.text, h.score, list(h.token_ids)) for h in r.translations[i].hypotheses]

        # The model's glossary: dog -> Welpe in every hypothesis; ignored on request.
        code, r = translate([DOG], **nbest)
        check(code == "OK" and all("Welpe" in h[0] for h in hyps(r)),
              f"the model's glossary: every hypothesis holds Welpe ({code}: {r if code != 'OK' else hyps(r)})")
        code, plain_dog = translate([DOG], ignore_model_glossary=True, **nbest)
        check(code == "OK" and all("Welpe" not in h[0] for h in hyps(plain_dog)),
              f"ignore_model_glossary: the plain translation ({hyps(plain_dog) if code == 'OK' else plain_dog})")

        # A request's entries: two terms, one of several tokens.
        entries = [pb.GlossaryEntry(source="park", target="Grünanlage"), pb.GlossaryEntry(source="men", target="Herren")]
        code, r = translate([PARK], glossary=entries, **nbest)
        check(code == "OK" and all("Grünanlage" in h[0] and "Herren" in h[0] for h in hyps(r)),
              f"the request's glossary: each hypothesis holds both terms ({r if code != 'OK' else hyps(r)})")

        # No source term occurs (whole words, case-sensitive: not "hotdog", "Dogs", "Dog"):
        # exactly the plain search, with the model's glossary and a request's entry that
        # does not occur.
        unused = [pb.GlossaryEntry(source="elephant", target="Elefant")]
        code_a, a = translate(PLAIN, ignore_model_glossary=True, **nbest)
        code_b, b = translate(PLAIN, glossary=unused, **nbest)
        same = code_a == "OK" and code_b == "OK" and all(hyps(a, i) == hyps(b, i) for i in range(len(PLAIN)))
        check(same, "sentences where no source term occurs: the same ids and scores as without a glossary")

        # Sentences of one paragraph (split_sentences): only the one holding the term changes.
        code, para = translate([DOG + " " + PLAIN[0]], split_sentences=True, glossary=entries, **nbest)
        check(code == "OK" and len(para.translations[0].sentences) == 2
              and "Welpe" in para.translations[0].sentences[0].hypotheses[0].text
              and [(h.text, h.score, list(h.token_ids)) for h in para.translations[0].sentences[1].hypotheses]
              == hyps(a, 0), "a paragraph: the glossary sentence holds its term, the other is plain")

        # The cache keys on the terms: a repeat is a hit and the same; other terms are not.
        before = server.metrics()
        code1, first = translate([PARK], glossary=entries, **nbest)
        mid = server.metrics()
        other = [pb.GlossaryEntry(source="park", target="Stadtpark")]
        code2, second = translate([PARK], glossary=other, **nbest)
        after = server.metrics()
        check(code1 == "OK" and series(mid, "nmt_cache_hits_total") - series(before, "nmt_cache_hits_total") == 1,
              "the same glossary request again: a cache hit")
        check(code2 == "OK" and series(after, "nmt_cache_misses_total") - series(mid, "nmt_cache_misses_total") == 1
              and all("Stadtpark" in h[0] for h in hyps(second)), "another target term: a miss, with its term")

        # Refusals naming the field.
        def refused(what, words, texts=None, **options):
            code, details = translate(texts or [PARK], **options)
            check(code == "INVALID_ARGUMENT" and words in str(details), f"{what}: {code} {details}")
        refused("an empty source term", "options.glossary[0].source is empty",
                glossary=[pb.GlossaryEntry(source="", target="x")])
        refused("an empty target term", "options.glossary[1].target is empty",
                glossary=[entries[0], pb.GlossaryEntry(source="men", target=" ")])
        refused("too many entries", "limits.max_glossary_entries",
                glossary=[pb.GlossaryEntry(source=f"w{i}", target="x") for i in range(5)])
        refused("a term too long", "options.glossary[0].target has 21 characters",
                glossary=[pb.GlossaryEntry(source="park", target="x" * 21)])
        refused("terms longer than max_decoding_length allows", "max_decoding_length",
                glossary=entries, max_decoding_length=4)
        refused("with sampling", "options.glossary cannot be combined with sampling",
                glossary=entries, sampling_topk=0)
        refused("greedy", "options.glossary needs beam search", glossary=entries, beam_size=1)
        refused("with target_prefix", "options.glossary cannot be combined with target_prefix",
                glossary=entries, target_prefix="Zwei")
        refused("the model's glossary with sampling", "ignore_model_glossary", texts=[DOG], sampling_topk=0)
        try:
            stub.Score(pb.ScoreRequest(sources=[PARK], targets=["Zwei Männer."],
                                       options=pb.TranslateOptions(glossary=entries)), timeout=60)
            code, details = "OK", ""
        except grpc.RpcError as e:
            code, details = e.code().name, e.details()
        check(code == "INVALID_ARGUMENT" and "options.glossary does not apply to Score" in details,
              f"Score with a glossary: {code} {details}")

        # HTTP /v1/translate: the proto's JSON mapping.
        body = json.dumps({"texts": [PARK], "options": {"glossary": [{"source": "park", "target": "Grünanlage"}]}})
        req = urllib.request.Request(f"http://127.0.0.1:{http_port}/v1/translate", data=body.encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=60) as resp:
            got = json.loads(resp.read())
        check("Grünanlage" in got["translations"][0]["hypotheses"][0]["text"],
              f"/v1/translate with a glossary: {got['translations'][0]['hypotheses'][0]['text']}")

        # The Python client: a dict of terms.
        sys.path.insert(0, client_dir)
        import nmt_client
        with nmt_client.Client(server.target) as client:
            got = client.translate(PARK, glossary={"park": "Grünanlage"})
            best = client.translate_nbest([PARK], 3, glossary={"park": "Grünanlage"})[0]
        check("Grünanlage" in got and len(best) == 3 and all("Grünanlage" in h.text for h in best),
              f"Client.translate / translate_nbest with glossary: {got!r}")

        # SIGHUP: glossary.tsv changed -> the model reloads, new requests get the new term.
        with open(glossary, "w") as f:
            f.write("dog\tKöter\n")
        server.proc.send_signal(signal.SIGHUP)
        end, text = time.monotonic() + 90, ""
        while time.monotonic() < end:
            code, r = translate([DOG], **nbest)
            text = r.translations[0].hypotheses[0].text if code == "OK" else str(r)
            if "Köter" in text:
                break
            time.sleep(0.5)
        check("Köter" in text and "Welpe" not in text, f"after SIGHUP the new glossary applies: {text}")
        # a broken file: the reload is refused and the version before keeps serving
        with open(glossary, "w") as f:
            f.write("dog without a tab\n")
        server.proc.send_signal(signal.SIGHUP)
        # the rescan has refused it once ListModels gives the reason (polled: no fixed wait)
        end, reason = time.monotonic() + 90, ""
        while time.monotonic() < end and not reason:
            reason = next((m.reason for m in stub.ListModels(pb.ListModelsRequest(), timeout=30).models), "")
            if not reason:
                time.sleep(0.5)
        check("glossary" in reason, f"a malformed glossary.tsv: the reload refused with a reason ({reason!r})")
        code, r = translate([DOG], **nbest)
        check(code == "OK" and "Köter" in r.translations[0].hypotheses[0].text,
              f"a malformed glossary.tsv: the loaded version keeps serving ({code})")
    harness.stop_and_report(check, server)
    check.exit()


if __name__ == "__main__":
    main()
