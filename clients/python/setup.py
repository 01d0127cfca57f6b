"""Generates the gRPC stubs from the repository's proto/ while the package is built (so that
they always match the server's API and are never committed). The project's metadata is in
pyproject.toml. NMT_PROTO_DIR overrides where proto/ is (default: ../../proto)."""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_stubs  # noqa: E402


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        build_stubs.generate(build_stubs.default_proto_dir(),
                             os.path.join(self.build_lib, "nmt_client", "_proto"))


setup(cmdclass={"build_py": BuildPyWithStubs})
