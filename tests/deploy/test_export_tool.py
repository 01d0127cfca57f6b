#!/usr/bin/python3
"""tools/export_hf_model.py: --check accepts the demo model and the conformance models of every
family, names what is wrong with broken copies and with the refused folders (offline: the check
reads files only); the export itself, with stand-ins for torch and transformers (neither is
installed here), writes the served layout from a hub-style folder and says what it wrote.

    test_export_tool.py REPO_ROOT
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile


def run_check(tool, path):
    r = subprocess.run([sys.executable, tool, "--check", path], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def broken_copy(src, tmp, name, damage):
    dst = os.path.join(tmp, name)
    shutil.copytree(src, dst)
    damage(dst)
    return dst


def edit_json(path, **changes):
    with open(path) as f:
        d = json.load(f)
    d.update(changes)
    with open(path, "w") as f:
        json.dump(d, f)


def truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


def drop_tensor(path, name):
    """Rewrites a safetensors file without one tensor (header only: the data stays, unreferenced)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    del header[name]
    head = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + data)


# Stand-ins for torch and transformers: from_pretrained of a folder, save_pretrained copying its
# model files (as transformers would rewrite them) and, for the tokenizer, a tokenizer.json
# taken from STUB_TOKENIZER_JSON. Enough to run export()'s file handling.
STUB_TORCH = "float16, float32, bfloat16 = 'float16', 'float32', 'bfloat16'\n"
STUB_TRANSFORMERS = '''
import json, os, shutil

class _Config:
    def __init__(self, d):
        self.__dict__.update(d)

class AutoConfig:
    @staticmethod
    def from_pretrained(model, revision=None):
        with open(os.path.join(model, "config.json")) as f:
            return _Config(json.load(f))

class _Model:
    def __init__(self, folder):
        self.folder, self.config = folder, AutoConfig.from_pretrained(folder)
    @classmethod
    def from_pretrained(cls, folder, revision=None):
        return cls(folder)
    def to(self, dtype):
        return self
    def save_pretrained(self, out):
        for name in ("config.json", "model.safetensors", "generation_config.json"):
            shutil.copyfile(os.path.join(self.folder, name), os.path.join(out, name))

class MarianMTModel(_Model): pass
class M2M100ForConditionalGeneration(_Model): pass
class MBartForConditionalGeneration(_Model): pass

class NllbTokenizer:
    def save_pretrained(self, out):
        shutil.copyfile(os.environ["STUB_TOKENIZER_JSON"], os.path.join(out, "tokenizer.json"))
        with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
            f.write("{}")

class AutoTokenizer:
    @staticmethod
    def from_pretrained(model, revision=None):
        return NllbTokenizer()
'''


def check_export(tool, repo):
    """export() of a hub-style NLLB folder without tokenizer.json (as some hub repositories
    are) and with special_tokens_map.json: the served layout, tokenizer.json written by the
    tokenizer, the hub's own files copied unchanged, and a line for every file."""
    failures = []
    nllb = os.path.join(repo, "tests", "conformance", "families", "nllb")
    with tempfile.TemporaryDirectory() as tmp:
        stubs = os.path.join(tmp, "stubs")
        for name, text in (("torch", STUB_TORCH), ("transformers", STUB_TRANSFORMERS)):
            os.makedirs(os.path.join(stubs, name))
            with open(os.path.join(stubs, name, "__init__.py"), "w") as f:
                f.write(text)
        hub = os.path.join(tmp, "hub")
        shutil.copytree(nllb, hub)
        os.remove(os.path.join(hub, "tokenizer.json"))
        with open(os.path.join(hub, "special_tokens_map.json"), "w") as f:
            json.dump({"eos_token": "</s>"}, f)
        out = os.path.join(tmp, "out")
        env = dict(os.environ, PYTHONPATH=stubs, STUB_TOKENIZER_JSON=os.path.join(nllb, "tokenizer.json"))
        r = subprocess.run([sys.executable, tool, hub, out, "--dtype", "float16"], capture_output=True, text=True,
                           timeout=60, env=env)
        print(f"--- export: rc={r.returncode}\n{r.stdout}{r.stderr}", end="")
        want_lines = ["wrote config.json", "wrote model.safetensors", "wrote generation_config.json",
                      "wrote tokenizer_config.json", "wrote sentencepiece.bpe.model", "wrote special_tokens_map.json",
                      "wrote tokenizer.json (", "written by NllbTokenizer.save_pretrained",
                      f"OK: {out}: m2m_100 (NLLB-200), d_model 32, 2+2 layers, vocab 612, 10 languages"]
        for line in want_lines:
            if line not in r.stdout:
                failures.append(f"export: expected {line!r} in its output, got rc={r.returncode}: {r.stdout!r} {r.stderr!r}")
        for name in ("sentencepiece.bpe.model", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
            src = os.path.join(hub if name != "tokenizer.json" else nllb, name)
            got = os.path.join(out, name)
            if not os.path.isfile(got) or open(got, "rb").read() != open(src, "rb").read():
                failures.append(f"export: {name} is not the original file")
        if r.returncode != 0:
            failures.append(f"export: rc={r.returncode}")
    return failures


def main():
    repo = sys.argv[1]
    tool = os.path.join(repo, "tools", "export_hf_model.py")
    demo = os.path.join(repo, "models", "m30k-en-de-small")
    failures = []

    rc, out = run_check(tool, demo)
    print(out, end="")
    if rc != 0 or not out.startswith("OK: ") or "marian, d_model 256, 3+3 layers, vocab 8001" not in out:
        failures.append(f"demo model: expected OK with its shape, got rc={rc}: {out!r}")

    cases = [
        ("no-target-spm", lambda d: os.remove(os.path.join(d, "target.spm")), "missing target.spm"),
        ("bart", lambda d: edit_json(os.path.join(d, "config.json"), model_type="bart"),
         "config.json: model_type is 'bart', expected one of 'marian', 'm2m_100', 'mbart'"),
        ("no-d-model", lambda d: edit_json(os.path.join(d, "config.json"), d_model=None),
         "config.json: d_model must be a positive integer, found None"),
        ("relu6", lambda d: edit_json(os.path.join(d, "config.json"), activation_function="relu6"),
         "activation_function 'relu6' is not supported"),
        ("four-layers", lambda d: edit_json(os.path.join(d, "config.json"), encoder_layers=4),
         "model.safetensors: 16 encoder tensors missing, first model.encoder.layers.3.self_attn.q_proj.weight"),
        ("truncated", lambda d: truncate(os.path.join(d, "model.safetensors"), 1000),
         "model.safetensors is truncated: header of 14288 bytes in a 1000-byte file"),
        ("pad-mismatch", lambda d: edit_json(os.path.join(d, "config.json"), pad_token_id=7),
         "vocab.json: <pad> has id 8000, config.json pad_token_id is 7"),
        ("separate-vocabs", lambda d: edit_json(os.path.join(d, "tokenizer_config.json"), separate_vocabs=True),
         "missing target_vocab.json (tokenizer_config.json: separate_vocabs is true)"),
        ("pre-norm", lambda d: edit_json(os.path.join(d, "config.json"), normalize_before=True),
         "config.json: normalize_before True is not supported (marian: False)"),
        ("untied-no-head", lambda d: edit_json(os.path.join(d, "config.json"), tie_word_embeddings=False),
         "model.safetensors: no lm_head.weight (tie_word_embeddings is false)"),
        ("decoder-vocab", lambda d: edit_json(os.path.join(d, "config.json"), share_encoder_decoder_embeddings=False,
                                              decoder_vocab_size=9000),
         "model.safetensors: no model.decoder.embed_tokens.weight (share_encoder_decoder_embeddings is false)"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name, damage, message in cases:
            path = broken_copy(demo, tmp, name, damage)
            rc, out = run_check(tool, path)
            print(f"--- {name}: rc={rc}\n{out}", end="")
            if rc != 1 or not out.startswith(f"FAIL: {path} is not loadable") or message not in out:
                failures.append(f"{name}: expected rc=1 and {message!r}, got rc={rc}: {out!r}")

    nllb = os.path.join(repo, "tests", "conformance", "families", "nllb")
    mbart = os.path.join(repo, "tests", "conformance", "families", "mbart50")
    m2m = os.path.join(repo, "tests", "conformance", "families", "m2m100")
    family_cases = [
        (nllb, "nllb-no-tokenizer-json", lambda d: os.remove(os.path.join(d, "tokenizer.json")), "missing tokenizer.json"),
        (nllb, "nllb-post-norm", lambda d: edit_json(os.path.join(d, "config.json"), normalize_before=False),
         "config.json: normalize_before False is not supported (m2m_100: True)"),
        (nllb, "nllb-small-vocab", lambda d: edit_json(os.path.join(d, "config.json"), vocab_size=610),
         "tokenizer.json: id 611 is not below vocab_size 610"),
        (nllb, "nllb-no-final-norm", lambda d: drop_tensor(os.path.join(d, "model.safetensors"), "model.decoder.layer_norm.bias"),
         "model.safetensors: no model.decoder.layer_norm.bias (m2m_100 has it)"),
        (mbart, "mbart-no-positions", lambda d: drop_tensor(os.path.join(d, "model.safetensors"),
                                                          "model.encoder.embed_positions.weight"),
         "model.safetensors: no model.encoder.embed_positions.weight (mBART's learned positions)"),
        (mbart, "mbart-positions-shape", lambda d: edit_json(os.path.join(d, "config.json"), max_position_embeddings=300),
         "model.safetensors: model.encoder.embed_positions.weight has shape [258, 32], config.json says [302, 32]"),
        (m2m, "m2m100-codes-overflow", lambda d: edit_json(os.path.join(d, "config.json"), vocab_size=650),
         "vocab.json: 597 pieces + 100 language codes exceed vocab_size 650"),
        (m2m, "m2m100-pad", lambda d: edit_json(os.path.join(d, "config.json"), pad_token_id=5),
         "vocab.json: <pad> has id 1, config.json pad_token_id is 5"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for src, name, damage, message in family_cases:
            path = broken_copy(src, tmp, name, damage)
            rc, out = run_check(tool, path)
            print(f"--- {name}: rc={rc}\n{out}", end="")
            if rc != 1 or message not in out:
                failures.append(f"{name}: expected rc=1 and {message!r}, got rc={rc}: {out!r}")

    # Every conformance model folder passes; every refused one fails naming its field.
    conformance = os.path.join(repo, "tests", "conformance")
    for kind in ("models", "families", "refused"):
        root = os.path.join(conformance, kind)
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            path = os.path.join(root, name)
            rc, out = run_check(tool, path)
            print(f"--- {kind}/{name}: rc={rc}\n{out}", end="")
            if kind in ("models", "families") and rc != 0:
                failures.append(f"{kind}/{name}: expected OK, got rc={rc}: {out!r}")
            if kind == "refused":
                with open(os.path.join(path, "meta.json")) as f:
                    field = json.load(f)["refuse_field"]
                if rc != 1 or field not in out:
                    failures.append(f"{kind}/{name}: expected rc=1 naming {field}, got rc={rc}: {out!r}")

    failures += check_export(tool, repo)

    rc, out = run_check(tool, os.path.join(repo, "no-such-model"))
    if rc != 1 or "is not a folder" not in out:
        failures.append(f"missing folder: expected 'is not a folder', got rc={rc}: {out!r}")

    for f in failures:
        print("FAILED:", f)
    print("export tool check: %d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
