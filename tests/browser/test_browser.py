#!/usr/bin/python3
"""The web page and the npm registry's LibreTranslate clients against the real nmt-server
(CPU, the demo model), with its HTTP API on a loopback port:

    test_browser.py npm_ci WORK                               npm ci of package-lock.json in WORK
    test_browser.py web_page WORK REPO NMT_SERVER ARTIFACTS   the page in Debian's chromium
    test_browser.py npm_clients WORK REPO NMT_SERVER ARTIFACTS  `libretranslate` and `translate`

The expected translations are the server's own POST /translate answers (urllib), asked before
the page or the clients ask theirs. web_page uploads a .docx made here with python3-docx and
checks the downloaded translation paragraph by paragraph. Exit 77 (SKIPPED) with the reason
when chromium (NMT_CHROMIUM, else /usr/bin/chromium), node or npm is missing."""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server", "support"))
import harness  # noqa: E402

CHROMIUM = os.environ.get("NMT_CHROMIUM", "/usr/bin/chromium")  # Debian's (scripts/setup.sh)
SKIP = 77
# One sentence (LibreTranslate's alternatives are a one-sentence text's) and a paragraph.
SENTENCE = "Two dogs play in the snow."
PARAGRAPH = "Two dogs play in the snow. A man is riding a bike."
DOCX_PARAGRAPHS = ["A man in a blue shirt is riding a bike.", "Two black dogs are playing in the deep snow."]

TOKEN = "npm-client-key"  # npm_clients: the server asks for an API key
check = harness.Checks()


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(SKIP)


def need(program, hint):
    path = shutil.which(program)
    if not path:
        skip(f"{program} not found ({hint})")
    return path


def npm_ci(work):
    npm = need("npm", "Node.js and npm from the machine's packages")
    r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=work, capture_output=True,
                       text=True, timeout=280)
    print(r.stdout[-3000:], r.stderr[-3000:])
    sys.exit(r.returncode)


def post_json(url, body):
    """(status, JSON answer) of a POST with a JSON body."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait_http(base, server, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end and server.proc.poll() is None:
        try:
            with urllib.request.urlopen(base + "/languages", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError("the HTTP API did not answer GET /languages in time:\n" + server.output()[-3000:])


def translate(base, q, source="en", **fields):
    status, body = post_json(base + "/translate", {"q": q, "source": source, "target": "de", **fields})
    if status != 200:
        raise RuntimeError(f"POST /translate of {q!r}: {status} {body}")
    return body


def make_docx(path):
    import docx  # python3-docx
    document = docx.Document()
    for text in DOCX_PARAGRAPHS:
        document.add_paragraph(text)
    document.save(path)


def docx_paragraphs(path):
    import docx
    return [p.text for p in docx.Document(path).paragraphs if p.text.strip()]


def run_node(work, script, config):
    node = need("node", "Node.js from the machine's packages")
    r = subprocess.run([node, os.path.join(work, script), json.dumps(config)], cwd=work,
                       capture_output=True, text=True, timeout=240)
    print(r.stdout, r.stderr[-4000:], sep="")
    check(r.returncode == 0, f"{script} exits 0 (got {r.returncode})")


def web_page(work, base, artifacts):
    config = {"url": base + "/", "chromium": CHROMIUM, "artifacts": artifacts, "sentence": SENTENCE,
              "paragraph": PARAGRAPH}
    one = translate(base, SENTENCE, alternatives=3)
    config["expected"] = {"text": one["translatedText"], "alternatives": one["alternatives"]}
    config["expected_auto"] = translate(base, PARAGRAPH, source="auto")
    config["docx"] = os.path.join(artifacts, "upload.docx")
    config["docx_out"] = os.path.join(artifacts, "upload.de.docx")
    make_docx(config["docx"])
    if os.path.exists(config["docx_out"]):
        os.remove(config["docx_out"])
    run_node(work, "web_page.mjs", config)
    if check(os.path.exists(config["docx_out"]), "the translated .docx was downloaded"):
        want = [translate(base, p)["translatedText"] for p in DOCX_PARAGRAPHS]
        got = docx_paragraphs(config["docx_out"])
        check(got == want, f"the downloaded .docx holds the translations of its paragraphs: {got} (want {want})")
    shot = os.path.join(artifacts, "web_page.png")
    if check(os.path.exists(shot), f"the screenshot is kept: {shot}"):
        print(f"artifact: {shot} (the page after a translation)")


def need_chromium():
    if not os.access(CHROMIUM, os.X_OK):
        skip(f"{CHROMIUM} not found (scripts/setup.sh installs Debian's chromium)")


def npm_clients(work, base):
    """The clients with an API key (the server's bearer token), as a deployment asks them."""
    key = {"api_key": TOKEN}
    config = {"base": base, "key": TOKEN, "sentence": SENTENCE, "paragraph": PARAGRAPH,
              "expected": translate(base, SENTENCE, **key)["translatedText"],
              "expected_paragraph": translate(base, PARAGRAPH, **key)["translatedText"],
              "expected_auto": translate(base, PARAGRAPH, source="auto", **key)["translatedText"],
              "refused": post_json(base + "/translate", {"q": SENTENCE, "source": "en", "target": "fr", **key})[1],
              "no_key": post_json(base + "/translate", {"q": SENTENCE, "source": "en", "target": "de"})[1]}
    run_node(work, "npm_clients.mjs", config)


def main():
    mode, work = sys.argv[1], os.path.abspath(sys.argv[2])
    if mode == "npm_ci":
        return npm_ci(work)
    repo, binary, artifacts = os.path.abspath(sys.argv[3]), sys.argv[4], os.path.abspath(sys.argv[5])
    need("node", "Node.js from the machine's packages")
    if mode == "web_page":
        need_chromium()
    if not os.path.isdir(os.path.join(work, "node_modules")):
        check(False, f"{work}/node_modules is missing: the fixture browser.npm_ci did not run")
        check.exit()
    os.makedirs(artifacts, exist_ok=True)
    tmp = harness.temp_dir("nmt-browser-")
    config = os.path.join(tmp, "config.yaml")
    server_section = {}
    if mode == "npm_clients":
        tokens = os.path.join(tmp, "tokens.txt")
        with open(tokens, "w") as f:
            f.write(TOKEN + "\n")
        server_section["auth_token_file"] = tokens
    harness.write_config(config, os.path.join(repo, "models/m30k-en-de-small"), server=server_section)
    port = harness.free_port()
    server = harness.Server(binary, config, extra_args=["--http-host", "127.0.0.1", "--http-port", str(port)])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base, server)
        if mode == "web_page":
            web_page(work, base, artifacts)
        else:
            npm_clients(work, base)
    except Exception as e:  # a crash of the test is a failure with its reason
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        harness.stop_and_report(check, server)
    check.exit()


if __name__ == "__main__":
    main()
