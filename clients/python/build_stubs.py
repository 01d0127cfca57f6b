#!/usr/bin/env python3
"""Generates nmt_client's gRPC stubs (nmt_client/_proto/translation_pb2*.py) from proto/ with
grpc_tools.protoc. Used by setup.py when the package is built, and by the tests' build step:

    build_stubs.py OUT_DIR        copies the nmt_client package to OUT_DIR/nmt_client and
                                  generates its stubs there
"""
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = "nmt/v1/translation.proto"


def default_proto_dir():
    return os.environ.get("NMT_PROTO_DIR", os.path.join(HERE, "..", "..", "proto"))


def generate(proto_dir, out_dir):
    """Writes translation_pb2.py and translation_pb2_grpc.py into out_dir (a package)."""
    from grpc_tools import protoc

    if not os.path.isfile(os.path.join(proto_dir, PROTO)):
        raise RuntimeError(f"{PROTO} not found under {proto_dir} (set NMT_PROTO_DIR)")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        rc = protoc.main(["grpc_tools.protoc", f"-I{proto_dir}", f"--python_out={tmp}",
                          f"--grpc_python_out={tmp}", os.path.join(proto_dir, PROTO)])
        if rc != 0:
            raise RuntimeError(f"grpc_tools.protoc failed on {PROTO} ({rc})")
        generated = os.path.join(tmp, "nmt", "v1")
        shutil.copy(os.path.join(generated, "translation_pb2.py"), out_dir)
        with open(os.path.join(generated, "translation_pb2_grpc.py")) as f:
            grpc_code = f.read()
        # protoc imports the messages by the proto's path (nmt.v1); inside the package they
        # are a sibling module.
        grpc_code, n = re.subn(r"^from nmt\.v1 import translation_pb2", "from . import translation_pb2",
                               grpc_code, flags=re.M)
        if n != 1:
            raise RuntimeError("unexpected import line in the generated translation_pb2_grpc.py")
        with open(os.path.join(out_dir, "translation_pb2_grpc.py"), "w") as f:
            f.write(grpc_code)
    init = os.path.join(out_dir, "__init__.py")
    if not os.path.exists(init):
        with open(init, "w") as f:
            f.write('"""Stubs generated from proto/nmt/v1/translation.proto at build time."""\n')


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = os.path.join(os.path.abspath(sys.argv[1]), "nmt_client")
    if os.path.isdir(out):
        shutil.rmtree(out)
    shutil.copytree(os.path.join(HERE, "nmt_client"), out,
                    ignore=shutil.ignore_patterns("__pycache__", "_proto"))
    generate(default_proto_dir(), os.path.join(out, "_proto"))


if __name__ == "__main__":
    main()
