#!/usr/bin/python3
"""tools/export_hf_marian.py --check: accepts the demo model, names what is wrong with broken
copies of it (offline: the check reads files only).

    test_export_tool.py REPO_ROOT
"""
import json
import os
import shutil
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


def main():
    repo = sys.argv[1]
    tool = os.path.join(repo, "tools", "export_hf_marian.py")
    demo = os.path.join(repo, "models", "m30k-en-de-small")
    failures = []

    rc, out = run_check(tool, demo)
    print(out, end="")
    if rc != 0 or not out.startswith("OK: ") or "marian, d_model 256, 3+3 layers, vocab 8001" not in out:
        failures.append(f"demo model: expected OK with its shape, got rc={rc}: {out!r}")

    cases = [
        ("no-target-spm", lambda d: os.remove(os.path.join(d, "target.spm")), "missing target.spm"),
        ("bart", lambda d: edit_json(os.path.join(d, "config.json"), model_type="bart"),
         "config.json: model_type is 'bart', expected 'marian'"),
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
         "config.json: normalize_before True is not supported (Marian: False)"),
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

    # Every conformance model folder passes; every refused one fails naming its field.
    conformance = os.path.join(repo, "tests", "conformance")
    for kind in ("models", "refused"):
        root = os.path.join(conformance, kind)
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            path = os.path.join(root, name)
            rc, out = run_check(tool, path)
            print(f"--- {kind}/{name}: rc={rc}\n{out}", end="")
            if kind == "models" and rc != 0:
                failures.append(f"{kind}/{name}: expected OK, got rc={rc}: {out!r}")
            if kind == "refused":
                with open(os.path.join(path, "meta.json")) as f:
                    field = json.load(f)["refuse_field"]
                if rc != 1 or field not in out:
                    failures.append(f"{kind}/{name}: expected rc=1 naming {field}, got rc={rc}: {out!r}")

    rc, out = run_check(tool, os.path.join(repo, "no-such-model"))
    if rc != 1 or "is not a folder" not in out:
        failures.append(f"missing folder: expected 'is not a folder', got rc={rc}: {out!r}")

    for f in failures:
        print("FAILED:", f)
    print("export tool check: %d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
