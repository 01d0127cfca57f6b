#!/usr/bin/python3
"""LibreTranslate's POST /translate_file of the real nmt-server, with documents made here by
Debian's tools: python3-docx (.docx), python3-odf (.odt; and an .odp that LibreOffice's
headless soffice, libreoffice-impress-nogui, converts to the .pptx: python-pptx is not packaged
by Debian 12), .txt, .srt, .html and .md as text. Each is uploaded
as a multipart form, its translatedFileUrl downloaded, opened again with the same tool, and
checked: every paragraph equals /translate's plain translation of it, and the bold and
italic runs are still there, each holding a proper part of it. Then each bound refused with
its reason through the server (a zip bomb, too many entries, deep XML, a billion-laughs DTD,
the file size, an unsupported extension, a full store, an archive over documents.max_concurrent_mb), the API key, the download's errors.

    test_translate_file.py REPO_ROOT NMT_SERVER
"""
import html.parser
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
import xml.etree.ElementTree as ET
import zipfile

import docx
from odf import teletype
from odf.draw import Frame, Page, TextBox
from odf.opendocument import OpenDocumentPresentation, OpenDocumentText, load as load_odt
from odf.style import MasterPage, PageLayout, PageLayoutProperties, Style, TextProperties
from odf.text import P, Span

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import harness  # noqa: E402

check = harness.Checks()
TOKEN = "doc-key-1"
A = "A man in a blue shirt is riding a red bike down the street."
B = "Two black dogs are playing in the deep snow."
C = "A woman is reading a book in the park."
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
DML = "http://schemas.openxmlformats.org/drawingml/2006/main"


def request(port, method, path, body=None, headers=None):
    """(status, body bytes, headers) of one request."""
    return harness.http_request(port, method, path, body, headers)


def upload(port, filename, data, source="en", target="de", api_key=TOKEN, headers=None):
    """POST /translate_file as a browser's multipart form: (status, parsed JSON, headers)."""
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in (("source", source), ("target", target), ("api_key", api_key)):
        if value is not None:
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    if data is not None:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                     f'Content-Type: application/octet-stream\r\n\r\n'.encode() + data + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    status, raw, headers = request(port, "POST", "/translate_file", body,
                                   {"Content-Type": f"multipart/form-data; boundary={boundary}", **(headers or {})})
    try:
        return status, json.loads(raw), headers
    except ValueError:
        return status, {"unparsed": raw[:200]}, headers


def translate_file(port, filename, data):
    """The translated file's bytes, or None (the failed check says why)."""
    status, body, _ = upload(port, filename, data)
    url = body.get("translatedFileUrl", "") if isinstance(body, dict) else ""
    prefix = f"http://127.0.0.1:{port}/download_file/"
    if not check(status == 200 and list(body) == ["translatedFileUrl"] and url.startswith(prefix)
                 and url.endswith("." + filename),
                 f"{filename}: 200 {{translatedFileUrl: {prefix}<id>.{filename}}} (got {status} {body})"):
        return None
    status, raw, headers = request(port, "GET", url[len(f"http://127.0.0.1:{port}"):])
    check(status == 200 and headers.get("Content-Disposition") == f'attachment; filename="{filename}"',
          f"{filename}: downloaded, as an attachment of its name (got {status} {headers.get('Content-Disposition')})")
    return raw


def plain(port, text):
    status, raw, _ = request(port, "POST", "/translate",
                             json.dumps({"q": text, "source": "en", "target": "de", "api_key": TOKEN}).encode(),
                             {"Content-Type": "application/json"})
    return json.loads(raw)["translatedText"] if status == 200 else None


def proper_part(run_text, paragraph):
    return run_text.strip() != "" and run_text.strip() != paragraph.strip() and run_text in paragraph


def docx_checks(port):
    d = docx.Document()
    p = d.add_paragraph("A man in a blue shirt is riding a ")
    p.add_run("red").bold = True
    p.add_run(" bike down the street.")
    q = d.add_paragraph("Two black dogs are playing in the ")
    q.add_run("deep").italic = True
    q.add_run(" snow.")
    d.add_paragraph("")
    d.add_paragraph(C)
    buf = io.BytesIO()
    d.save(buf)
    raw = translate_file(port, "report.docx", buf.getvalue())
    if raw is None:
        return
    out = docx.Document(io.BytesIO(raw))  # opens with the tool that made it
    texts = [p.text for p in out.paragraphs]
    want = [plain(port, A), plain(port, B), "", plain(port, C)]
    check(texts == want, f".docx: each paragraph is its plain translation ({texts} vs {want})")
    bold = [r.text for r in out.paragraphs[0].runs if r.bold]
    italic = [r.text for r in out.paragraphs[1].runs if r.italic]
    check(len(bold) == 1 and proper_part(bold[0], texts[0]), f".docx: one bold run, a part of its paragraph ({bold})")
    check(len(italic) == 1 and proper_part(italic[0], texts[1]), f".docx: one italic run, a part of its paragraph ({italic})")
    check(not any(r.bold or r.italic for r in out.paragraphs[3].runs), f".docx: a plain paragraph stays plain")


def odt_checks(port):
    doc = OpenDocumentText()
    bold = Style(name="Strong", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    p = P(text="A man in a blue shirt is riding a ")
    p.addElement(Span(stylename=bold, text="red"))
    p.addText(" bike down the street.")
    doc.text.addElement(p)
    doc.text.addElement(P(text=B))
    buf = io.BytesIO()
    doc.save(buf)
    raw = translate_file(port, "story.odt", buf.getvalue())
    if raw is None:
        return
    out = load_odt(io.BytesIO(raw))
    paragraphs = out.getElementsByType(P)
    texts = [teletype.extractText(p) for p in paragraphs]
    want = [plain(port, A), plain(port, B)]
    check(texts == want, f".odt: each paragraph is its plain translation ({texts} vs {want})")
    spans = [(s.getAttribute("stylename"), teletype.extractText(s)) for s in paragraphs[0].getElementsByType(Span)]
    check(len(spans) == 1 and spans[0][0] == "Strong" and proper_part(spans[0][1], texts[0]),
          f".odt: the bold span kept, a part of its paragraph ({spans})")
    check(zipfile.ZipFile(io.BytesIO(raw)).infolist()[0].filename == "mimetype", ".odt: mimetype still first")


def pptx_bytes(slides):
    """A presentation as PowerPoint writes it (masters, layouts, theme, runs with their full
    properties): an .odp made with python3-odf, each slide one text box of paragraphs, each a
    list of (text, bold), converted by LibreOffice (soffice --headless --convert-to pptx)."""
    soffice = shutil.which("soffice")
    if soffice is None:
        raise SystemExit("FAIL: soffice not found: scripts/setup.sh installs libreoffice-impress-nogui, "
                         "which makes the .pptx of this test")
    doc = OpenDocumentPresentation()
    layout = PageLayout(name="Layout")
    layout.addElement(PageLayoutProperties(margin="0cm", pagewidth="28cm", pageheight="21cm",
                                           printorientation="landscape"))
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    doc.masterstyles.addElement(master)
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    for paragraphs in slides:
        page = Page(masterpagename=master)
        doc.presentation.addElement(page)
        frame = Frame(width="24cm", height="8cm", x="2cm", y="2cm")
        page.addElement(frame)
        box = TextBox()
        frame.addElement(box)
        for runs in paragraphs:
            p = P()
            for text, b in runs:
                if b:
                    p.addElement(Span(stylename=bold, text=text))
                else:
                    p.addText(text)
            box.addElement(p)
    with tempfile.TemporaryDirectory(prefix="nmt-pptx-") as work:
        doc.save(os.path.join(work, "deck.odp"))
        # A profile of its own (HOME): no user's settings, no lock held by another soffice.
        done = subprocess.run([soffice, "--headless", "--convert-to", "pptx", "--outdir", work,
                               os.path.join(work, "deck.odp")], env={**os.environ, "HOME": work},
                              capture_output=True, text=True, timeout=180)
        out = os.path.join(work, "deck.pptx")
        if done.returncode != 0 or not os.path.exists(out):
            raise SystemExit(f"FAIL: soffice did not convert the .odp (rc {done.returncode}): {done.stderr[-500:]}")
        with open(out, "rb") as f:
            return f.read()


def pptx_checks(port):
    raw = translate_file(port, "deck.pptx", pptx_bytes([[[("A man in a blue shirt is riding a ", False), ("red", True),
                                                          (" bike down the street.", False)]], [[(B, False)]]]))
    if raw is None:
        return
    z = zipfile.ZipFile(io.BytesIO(raw))
    slides = []
    for n in (1, 2):
        root = ET.fromstring(z.read(f"ppt/slides/slide{n}.xml"))
        for p in root.iter(f"{{{DML}}}p"):
            runs = [("".join(t.text or "" for t in r.iter(f"{{{DML}}}t")), r.find(f"{{{DML}}}rPr") is not None
                     and r.find(f"{{{DML}}}rPr").get("b") == "1") for r in p.findall(f"{{{DML}}}r")]
            slides.append((runs, [c.tag.split("}")[1] for c in p][-1]))
    texts = ["".join(t for t, _ in runs) for runs, _ in slides]
    want = [plain(port, A), plain(port, B)]
    check(texts == want, f".pptx: each paragraph is its plain translation ({texts} vs {want})")
    bold = [t for t, b in slides[0][0] if b]
    check(len(bold) == 1 and proper_part(bold[0], texts[0]), f".pptx: one bold run, a part of its paragraph ({bold})")
    check(all(last == "endParaRPr" for _, last in slides), ".pptx: a:endParaRPr still ends each paragraph")


def forwarded_checks(port):
    # server.trust_forwarded_headers is off here: a client's X-Forwarded-* change nothing
    # (the trusted case: tests/server/http/test_download_base.cc).
    status, body, _ = upload(port, "notes.txt", f"{A}\n".encode(),
                             headers={"X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.test"})
    url = body.get("translatedFileUrl", "")
    check(status == 200 and url.startswith(f"http://127.0.0.1:{port}/download_file/"),
          f"untrusted X-Forwarded-Proto/-Host ignored: http:// and the Host header ({status} {body})")


def text_checks(port):
    raw = translate_file(port, "notes.txt", f"{A}\r\n\r\n{B}\r\n".encode())
    want = f"{plain(port, A)}\r\n\r\n{plain(port, B)}\r\n"
    check(raw is not None and raw.decode() == want, f".txt: lines translated, blank lines and CRLF kept ({raw!r})")
    srt = f"1\n00:00:01,000 --> 00:00:03,500\n{A[:33]}\n{A[34:]}\n\n2\n00:00:04,000 --> 00:00:06,000\n{B}\n"
    raw = translate_file(port, "film.srt", srt.encode())
    want = f"1\n00:00:01,000 --> 00:00:03,500\n{plain(port, A)}\n\n2\n00:00:04,000 --> 00:00:06,000\n{plain(port, B)}\n"
    check(raw is not None and raw.decode() == want, f".srt: each cue's lines translated as one, timing kept ({raw!r})")


class Html(html.parser.HTMLParser):
    """The text of each <p>, and the text inside each <b> of it."""

    def __init__(self):
        super().__init__()
        self.paragraphs, self.bold, self.where = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "p":
            self.paragraphs.append("")
            self.bold.append([])
        elif tag == "b":
            self.bold[-1].append("")
        self.where = tag if tag in ("p", "b") else self.where

    def handle_endtag(self, tag):
        if tag == "b":
            self.where = "p"

    def handle_data(self, data):
        if self.paragraphs:
            self.paragraphs[-1] += data
            if self.where == "b":
                self.bold[-1][-1] += data


def markup_checks(port):
    page = f"<!DOCTYPE html><html><body><p>A man in a blue shirt is riding a <b>red</b> bike down the street.</p><p>{B}</p></body></html>"
    raw = translate_file(port, "page.html", page.encode())
    if raw is not None:
        parsed = Html()
        parsed.feed(raw.decode())
        want = [plain(port, A), plain(port, B)]
        check(parsed.paragraphs == want, f".html: each paragraph is its plain translation ({parsed.paragraphs} vs {want})")
        check(len(parsed.bold[0]) == 1 and proper_part(parsed.bold[0][0], parsed.paragraphs[0]) and parsed.bold[1] == [],
              f".html: the <b> kept once, around a part of its paragraph ({parsed.bold})")
    raw = translate_file(port, "notes.md", f"# Notes\n\nA man in a blue shirt is riding a **red** bike down the street.\n".encode())
    if raw is not None:
        lines = [line for line in raw.decode().split("\n") if line]
        check(len(lines) == 2 and lines[0].startswith("# ") and lines[1].count("**") == 2
              and lines[1].replace("**", "") == plain(port, A),
              f".md: heading kept, the paragraph its plain translation with one strong part ({lines})")


def docx_with(document_xml, extra=()):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", document_xml)
        for name, data in extra:
            z.writestr(name, data)
    return buf.getvalue()


def refused(port, what, filename, data, status, reason, **fields):
    got, body, _ = upload(port, filename, data, **fields)
    error = body.get("error", "") if isinstance(body, dict) else ""
    check(got == status and reason in error, f"{what}: {status} naming '{reason}' (got {got} {body})")


def bound_checks(port):
    para = f'<w:document xmlns:w="{W[1:-1]}"><w:body><w:p><w:r><w:t>{A}</w:t></w:r></w:p></w:body></w:document>'
    refused(port, "zip bomb", "bomb.docx", docx_with(para, [("word/media/zeros.bin", b"\0" * (30 << 20))]), 400,
            "word/media/zeros.bin is compressed")
    refused(port, "too many entries", "many.docx", docx_with(para, [(f"customXml/item{i}.xml", "<a/>") for i in range(1001)]),
            400, "1003 entries, over documents.max_archive_entries (1000)")
    deep = f'<w:document xmlns:w="{W[1:-1]}"><w:body>' + "<w:sdt>" * 200 + "</w:sdt>" * 200 + "</w:body></w:document>"
    refused(port, "deep XML", "deep.docx", docx_with(deep), 400, "over documents.max_xml_depth (128)")
    lol = '<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY lol "lol">' + "".join(
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">' for i in range(1, 10)) + \
        f']><w:document xmlns:w="{W[1:-1]}"><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>'
    refused(port, "billion laughs", "lol.docx", docx_with(lol), 400, "word/document.xml has a document type declaration")
    refused(port, "not an archive", "fake.docx", b"plain bytes", 400, "not a readable zip archive")
    refused(port, "file size", "big.txt", b"x" * 1_100_000, 413, "over documents.max_file_bytes (1000000)")
    refused(port, "unsupported extension", "program.exe", b"MZ\x90\0", 400,
            "Invalid request: file format not supported (.exe; supported: .txt, .srt, .html, .htm, .md, .docx, .odt, .pptx)")
    refused(port, "no file", "x.txt", None, 400, "Invalid request: missing file parameter")
    refused(port, "no source", "x.txt", b"Hello.", 400, "Invalid request: missing source parameter", source=None)
    refused(port, "unknown target", "x.txt", A.encode(), 400, "zz is not supported", target="zz")
    refused(port, "no API key", "x.txt", A.encode(), 400, "api_key", api_key=None)
    refused(port, "wrong API key", "x.txt", A.encode(), 403, "Invalid API key", api_key="nope")
    # A part without a name (libmicrohttpd hands it over with a null key: fuzz_multipart found
    # that it ended the server): ignored, the request refused for what is missing.
    nameless = b'--B\r\nContent-Disposition: form-data\r\n\r\nx\r\n--B--\r\n'
    status, body, _ = request(port, "POST", "/translate_file", nameless, {"Content-Type": "multipart/form-data; boundary=B"})
    check(status == 400, f"a nameless multipart part: 400, the server still up ({status} {body[:100]})")
    status, body, _ = request(port, "GET", "/download_file/..")
    check(status == 400 and json.loads(body) == {"error": "Invalid filename"}, f"download of '..': 400 Invalid filename ({status} {body})")
    status, body, _ = request(port, "GET", "/download_file/0123456789abcdef0123456789abcdef.a.txt")
    check(status == 404 and "documents.store_seconds" in json.loads(body)["error"], f"download of no file: 404 ({status} {body})")
    # The store (documents.store_mb 1) holds one file with 700 KB of picture, not two.
    picture = [("word/media/image1.bin", random.Random(7).randbytes(700_000))]
    first = upload(port, "photo.docx", docx_with(para, picture))
    check(first[0] == 200, f"a file with a 700 KB picture is kept ({first[0]} {first[1]})")
    second = upload(port, "photo.docx", docx_with(para, picture))
    check(second[0] == 429 and "documents.store_bytes" in second[1].get("error", "") and int(second[2].get("Retry-After", 0)) > 0,
          f"a second while the first waits: 429 naming documents.store_bytes, Retry-After ({second[0]} {second[1]})")


def concurrent_bound_checks(repo, binary):
    """documents.max_concurrent_mb through a server of its own with a 1 MiB bound: an archive
    charged more than that alone (20 KB that may inflate 100-fold) is refused whole with 413
    naming the key, a small .txt beside it translated. (A second upload refused while a first
    holds its share is UploadBudget's unit test: no timing here.)"""
    server, port, _, _ = harness.http_server(repo, binary, "nmt-documents-bound-", TOKEN,
                                             extra_args=["--documents-max-concurrent-mb", "1"])
    try:
        para = f'<w:document xmlns:w="{W[1:-1]}"><w:body><w:p><w:r><w:t>{A}</w:t></w:r></w:p></w:body></w:document>'
        noise = [("word/media/image1.bin", random.Random(5).randbytes(20_000))]
        refused(port, "an archive charged over documents.max_concurrent_mb", "photo.docx", docx_with(para, noise), 413,
                "MiB while it is translated, over documents.max_concurrent_mb (1)")
        status, body, _ = upload(port, "notes.txt", f"{A}\n".encode())
        check(status == 200 and "translatedFileUrl" in body, f"a small .txt under the same bound: 200 ({status} {body})")
    finally:
        harness.stop_and_report(check, server, "nmt-server (max_concurrent_mb 1)")


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    server, port, _, _ = harness.http_server(repo, binary, "nmt-documents-", TOKEN, extra_args=[
        "--documents-max-file-bytes", "1000000", "--documents-store-mb", "1"])
    try:
        docx_checks(port)
        odt_checks(port)
        pptx_checks(port)
        text_checks(port)
        forwarded_checks(port)
        markup_checks(port)
        bound_checks(port)
        served = harness.metric(server.metrics(), 'nmt_http_requests_total{endpoint="/download_file",status="200"}')
        check(served is not None and served >= 7, f"downloads counted under one endpoint label ({served})")
    finally:
        harness.stop_and_report(check, server)
    concurrent_bound_checks(repo, binary)
    check.exit()


if __name__ == "__main__":
    main()
