#!/usr/bin/python3
"""The Dockerfile installs its packages through scripts/setup.sh only (one package list),
builds the release binaries for the user GPUs, and its runtime stage carries only the
binaries, the libraries they load, configs/ and models/, as a non-root user with a gRPC
health check. scripts/setup.sh runs against stub apt tools to see what NMT_SETUP_TEST_TOOLS=0
really installs, and deploy/docker/collect-runtime-libs.sh runs against real executables.

    test_dockerfile.py REPO_ROOT [EXECUTABLE...]   (executables for collect-runtime-libs.sh; default python3)
"""
import fnmatch
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_files as df  # noqa: E402

from deploy_files import check, failures  # noqa: E402


def write_stub(d, name, body):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(p, 0o755)


def setup_sh_installs(repo, env_extra):
    """Runs scripts/setup.sh with stub dpkg-query/apt-get/sudo that record the install list."""
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "apt.log")
        write_stub(d, "dpkg-query", "exit 1")  # nothing installed
        write_stub(d, "apt-get", f'echo "$@" >> {log}')
        write_stub(d, "sudo", '"$@"')
        env = dict(os.environ, PATH=d + ":" + os.environ["PATH"], **env_extra)
        r = subprocess.run(["bash", os.path.join(repo, "scripts/setup.sh")], env=env, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return None
        with open(log) as f:
            lines = [line.split() for line in f if " install " in f" {line}"]
        return {w for line in lines for w in line if not w.startswith("-") and w != "install"}


def dockerignored(repo, rel):
    with open(os.path.join(repo, ".dockerignore")) as f:
        patterns = [p.strip().rstrip("/") for p in f if p.strip() and not p.startswith("#")]
    return any(fnmatch.fnmatch(rel.rstrip("/"), p) or rel.startswith(p + "/") for p in patterns)


def check_collect_libs(repo, exes):
    script = os.path.join(repo, "deploy/docker/collect-runtime-libs.sh")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "lib")
        r = subprocess.run(["bash", script, out] + exes, capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"collect-runtime-libs.sh {' '.join(exes)}: exit 0 ({r.stderr.strip()})")
        got = set(os.listdir(out)) if os.path.isdir(out) else set()
        needed = set()
        for e in exes:
            ldd = subprocess.run(["ldd", e], capture_output=True, text=True).stdout
            needed |= {m.group(1) for m in re.finditer(r"^\s*(\S+) => /", ldd, re.M)}
        # glibc, the C++ runtime and the CUDA runtime libraries come with the runtime base image.
        base = {n for n in needed
                if re.match(r"(libc|libm|libdl|librt|libpthread|libresolv|libutil|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt)\.so", n)}
        check(bool(needed - base) and needed - base <= got,
              f"collect-runtime-libs.sh copied every non-base library the executables load ({len(got)} files)")
        check(not (got & base), f"collect-runtime-libs.sh left out glibc/libstdc++ of the base image {sorted(got & base)}")
        for name in got:
            check(os.path.isfile(os.path.join(out, name)) and not os.path.islink(os.path.join(out, name)),
                  f"collect-runtime-libs.sh copied {name} as a file, not a link")
        # A library nobody installed must stop the image build; a missing driver must not.
        stub = os.path.join(d, "bin")
        os.makedirs(stub)
        for missing, want_rc, want_msg in (("libcuda.so.1", 0, ""), ("libsentencepiece.so.0", 1, "needs libsentencepiece.so.0")):
            write_stub(stub, "ldd", f'echo "\t{missing} => not found"')
            r = subprocess.run(["bash", script, os.path.join(d, "lib2"), exes[0]], capture_output=True, text=True,
                               env=dict(os.environ, PATH=stub + ":" + os.environ["PATH"]), timeout=60)
            check(r.returncode == want_rc and want_msg in r.stderr,
                  f"collect-runtime-libs.sh with {missing} not found exits {want_rc} {want_msg} (got {r.returncode}: {r.stderr.strip()})")


def main():
    repo = os.path.abspath(sys.argv[1])
    exes = sys.argv[2:] or [os.path.realpath(sys.executable)]
    for e in exes:
        check(os.access(e, os.X_OK), f"executable {e} exists (build it first)")
    dockerfile = os.path.join(repo, "Dockerfile")
    stages = df.dockerfile_stages(dockerfile)
    check(len(stages) == 2, f"Dockerfile has a build and a runtime stage ({len(stages)} stages)")
    build, runtime = stages[0], stages[-1]
    m = re.fullmatch(r"nvidia/cuda:(13\.\d+\.\d+)-devel-(ubuntu24\.04)", build["from"])
    check(m is not None, f"build stage is FROM an NVIDIA CUDA 13 devel Ubuntu 24.04 image ({build['from']})")
    if m:
        check(runtime["from"] == f"nvidia/cuda:{m.group(1)}-runtime-{m.group(2)}",
              f"runtime stage is FROM the matching CUDA runtime image ({runtime['from']})")

    all_ins = [(i, t) for s in stages for i, t in s["ins"]]
    runs = [t for i, t in all_ins if i == "RUN"]
    check(any(re.search(r"(^|\s)NMT_SETUP_TEST_TOOLS=0 bash scripts/setup\.sh(\s|$)", r) for r in build_runs(build)),
          "build stage runs NMT_SETUP_TEST_TOOLS=0 bash scripts/setup.sh")
    check(("COPY", "scripts/setup.sh scripts/setup.sh") in build["ins"], "build stage COPYs scripts/setup.sh before running it")
    installers = [r for r in runs if re.search(r"\b(apt-get|apt|dpkg|pip3?|conda)\s+(-\S+\s+)*install\b", r)]
    check(not installers, f"no package installs of its own in the Dockerfile: {installers}")

    test_tools = setup_sh_installs(repo, {"NMT_SETUP_TEST_TOOLS": "0"})
    all_tools = setup_sh_installs(repo, {})
    check(test_tools is not None and all_tools is not None, "scripts/setup.sh runs against stub apt tools")
    if test_tools is not None and all_tools is not None:
        check("prometheus" in all_tools and "prometheus" not in test_tools,
              "setup.sh installs the prometheus test tool by default and skips it with NMT_SETUP_TEST_TOOLS=0")
        needed = {"cmake", "ninja-build", "libgrpc++-dev", "protobuf-compiler-grpc", "libsentencepiece-dev",
                  "prometheus-cpp-dev", "libyaml-cpp-dev", "libspdlog-dev", "nlohmann-json3-dev", "libdnnl-dev", "libicu-dev",
                  "libmicrohttpd-dev", "libcld2-dev"}
        check(needed <= test_tools, f"the image's setup.sh run installs the build dependencies {sorted(needed - test_tools)}")

    cmake = " ".join(r for r in build_runs(build) if "cmake" in r)
    check(re.search(r'-DCMAKE_CUDA_ARCHITECTURES="\$\{CUDA_ARCHITECTURES\}"', cmake) is not None and
          any(i == "ARG" and t == 'CUDA_ARCHITECTURES="80;86;89;90"' for i, t in build["ins"]),
          "build stage compiles for CMAKE_CUDA_ARCHITECTURES 80;86;89;90")
    check("-DNMT_BUILD_TESTS=OFF" in cmake, "build stage configures with -DNMT_BUILD_TESTS=OFF")
    binaries = ("nmt-server", "nmt-translate", "nmt-loadgen")
    check(all(re.search(rf"--target [^&]*\b{b}\b", cmake) for b in binaries), f"build stage builds {', '.join(binaries)}")
    check(all(f"build/bin/{b}" in " ".join(build_runs(build)) for b in binaries), "build stage stages the three binaries from build/bin")
    check(any("deploy/docker/collect-runtime-libs.sh /opt/nmt/lib /opt/nmt/bin/*" in r for r in build_runs(build)),
          "build stage collects the binaries' shared libraries with collect-runtime-libs.sh")

    # Every COPY from the build context exists and is not excluded by .dockerignore.
    for s in stages:
        for ins, text in s["ins"]:
            if ins == "COPY" and not text.startswith("--from"):
                src = text.split()[0]
                if src != ".":
                    check(os.path.exists(os.path.join(repo, src)) and not dockerignored(repo, src),
                          f"COPY {src} exists in the repository and is in the build context")
    for script in sorted({m for r in runs for m in re.findall(r"\b(?:scripts|deploy)/[\w./-]+\.sh\b", r)}):
        check(os.path.isfile(os.path.join(repo, script)) and not dockerignored(repo, script),
              f"RUN uses {script}, which exists and is in the build context")
    for p in ("build*", ".git", ".devbundle"):
        check(dockerignored(repo, p.replace("*", "-x")), f".dockerignore excludes {p}")

    rcopies = [t.split() for i, t in runtime["ins"] if i == "COPY"]
    dests = sorted(c[-1].rstrip("/") for c in rcopies)
    check(dests == ["/opt/nmt/bin", "/opt/nmt/configs", "/opt/nmt/lib", "/opt/nmt/models"],
          f"runtime stage carries only bin, lib, configs, models ({dests})")
    check(["configs/", "/opt/nmt/configs/"] in rcopies and ["models/", "/opt/nmt/models/"] in rcopies,
          "runtime stage copies configs/ and models/ to /opt/nmt")
    check(all(c[0] == "--from=build" for c in rcopies if c[-1].startswith(("/opt/nmt/bin", "/opt/nmt/lib"))),
          "runtime binaries and libraries come from the build stage")
    user = [t for i, t in runtime["ins"] if i == "USER"]
    check(bool(user) and user[-1] not in ("root", "0") and any(f"useradd" in r and user[-1] in r for r in build_runs(runtime)),
          f"runtime stage runs as a created non-root user ({user})")
    check([t for i, t in runtime["ins"] if i == "WORKDIR"] == ["/opt/nmt"], "runtime WORKDIR is /opt/nmt")

    cfg = df.load_config(os.path.join(repo, "configs/default.yaml"))
    port, mport = cfg["server"]["port"], cfg["server"]["metrics_port"]
    exposed = sorted(int(p) for i, t in runtime["ins"] if i == "EXPOSE" for p in t.split())
    check(exposed == sorted([port, mport]), f"EXPOSE {exposed} are the gRPC and metrics ports of configs/default.yaml")
    hc = [t for i, t in runtime["ins"] if i == "HEALTHCHECK"]
    hc_cmd = df.exec_form(hc[0].split(" CMD ", 1)[1]) if hc and " CMD " in hc[0] else []
    check(hc_cmd == ["nmt-loadgen", "--health-check", "--target", f"127.0.0.1:{port}"],
          f"HEALTHCHECK asks grpc.health.v1 through nmt-loadgen --health-check on 127.0.0.1:{port} ({hc_cmd})")
    entry = [df.exec_form(t) for i, t in runtime["ins"] if i == "ENTRYPOINT"]
    cmd = [df.exec_form(t) for i, t in runtime["ins"] if i == "CMD"]
    check(entry == [["nmt-server"]], f"ENTRYPOINT is [\"nmt-server\"] ({entry})")
    check(cmd == [["--config", "/opt/nmt/configs/default.yaml"]], f"CMD is --config /opt/nmt/configs/default.yaml ({cmd})")
    # The config's relative model paths resolve inside the image's /opt/nmt/models copy.
    for mdl in cfg["models"]:
        in_image = os.path.normpath(os.path.join("/opt/nmt/configs", mdl["path"]))
        host = os.path.join(repo, "models", os.path.relpath(in_image, "/opt/nmt/models"))
        check(in_image.startswith("/opt/nmt/models/") and os.path.isfile(os.path.join(host, "config.json")),
              f"default.yaml model {mdl['name']} resolves to {in_image}, copied from the repository's models/")
    env_path = " ".join(t for i, t in runtime["ins"] if i == "ENV")
    check("/opt/nmt/bin" in env_path, "runtime PATH holds /opt/nmt/bin (ENTRYPOINT and HEALTHCHECK find the binaries)")

    check_collect_libs(repo, exes)
    print(f"\n{len(failures)} failed checks")
    return 1 if failures else 0


def build_runs(stage):
    return [t for i, t in stage["ins"] if i == "RUN"]


if __name__ == "__main__":
    sys.exit(main())
