#!/usr/bin/python3
"""Faults at startup: a missing or corrupt model (each file of the OPUS-MT layout), unreadable
TLS or token files, and a certificate that is not PEM all make nmt-server exit non-zero within
seconds with one line that names the cause; nothing is served half-loaded.

    test_startup.py REPO_ROOT NMT_SERVER
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rel  # noqa: E402

check = rel.Checks()


def start_failure(binary, config, what, expect_text, extra=(), rc=1):
    args = [binary, "--config", config, "--device", "cpu", "--host", "127.0.0.1",
            "--port", str(rel.free_port()), "--metrics-host", "127.0.0.1",
            "--metrics-port", str(rel.free_port()), *extra]
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        check(False, f"{what}: exits instead of serving")
        return
    out = (r.stdout + r.stderr).strip()
    lines = [line for line in out.splitlines() if expect_text in line]
    ok = r.returncode == rc and len(lines) == 1 and "serving" not in out
    check(ok, f"{what}: exit {r.returncode}, one line with '{expect_text}': {lines[:1] or out[-300:]}")


def broken_copy(model, tmp, name, damage):
    path = os.path.join(tmp, name)
    shutil.copytree(model, path)
    damage(path)
    return path


def write(path, data, mode="w"):
    with open(path, mode) as f:
        f.write(data)
    return path


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp = rel.temp_dir("nmt-startup-")
    model = os.path.join(repo, "models/m30k-en-de-small")

    def config_for(model_dir, name, server=None):
        path = os.path.join(tmp, name + ".yaml")
        rel.write_config(path, model_dir, server=server)
        return path

    cases = [
        ("missing folder", lambda p: shutil.rmtree(p), ""),
        ("missing config.json", lambda p: os.remove(os.path.join(p, "config.json")), "config.json"),
        ("config.json not JSON", lambda p: write(os.path.join(p, "config.json"), "{\"d_model\": 25"), "config.json"),
        ("config.json unsupported activation",
         lambda p: write(os.path.join(p, "config.json"),
                         open(os.path.join(model, "config.json")).read().replace('"swish"', '"tanh"')),
         "activation_function"),
        ("missing model.safetensors", lambda p: os.remove(os.path.join(p, "model.safetensors")), "model.safetensors"),
        ("model.safetensors header garbage",
         lambda p: write(os.path.join(p, "model.safetensors"), b"\xff" * 64, "r+b"), "model.safetensors"),
        ("model.safetensors truncated",
         lambda p: os.truncate(os.path.join(p, "model.safetensors"), 100000), "model.safetensors"),
        ("missing source.spm", lambda p: os.remove(os.path.join(p, "source.spm")), "source.spm"),
        ("source.spm garbage", lambda p: write(os.path.join(p, "source.spm"), b"not a model", "wb"), "source.spm"),
        ("vocab.json garbage", lambda p: write(os.path.join(p, "vocab.json"), "[1, 2"), "vocab.json"),
    ]
    for i, (what, damage, text) in enumerate(cases):
        path = broken_copy(model, tmp, f"model{i}", damage)
        start_failure(binary, config_for(path, f"c{i}"), what, f"cannot load model 'm30k' from {path}")
        if text:
            start_failure(binary, config_for(path, f"c{i}"), what + " (the line names the file)", text)

    good = config_for(model, "good")
    start_failure(binary, good, "missing TLS files", "cannot read server.tls_",
                  ["--tls-cert-file", os.path.join(tmp, "none.pem"), "--tls-key-file", os.path.join(tmp, "none.key")])
    write(os.path.join(tmp, "bad.pem"), "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    start_failure(binary, good, "certificate that is not PEM", "cannot listen",
                  ["--tls-cert-file", os.path.join(tmp, "bad.pem"), "--tls-key-file", os.path.join(tmp, "bad.pem")])
    start_failure(binary, good, "TLS certificate without key", "tls_key_file go together",
                  ["--tls-cert-file", os.path.join(tmp, "bad.pem")], rc=2)
    start_failure(binary, good, "missing token file", "cannot read server.auth_token_file",
                  ["--auth-token-file", os.path.join(tmp, "none.txt")])
    write(os.path.join(tmp, "empty.txt"), "\n  \n")
    start_failure(binary, good, "token file without a token", "holds no token",
                  ["--auth-token-file", os.path.join(tmp, "empty.txt")])
    check.exit()


if __name__ == "__main__":
    main()
