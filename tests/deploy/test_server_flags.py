#!/usr/bin/python3
"""The flags that the Dockerfile, compose (GPU and CPU variants) and the Kubernetes Deployment
pass to nmt-server exist in its --help, and the real server starts with each of those
command lines (config mapped from the container path to the repository, CPU, loopback
ports), serves /metrics, answers the health check the image uses and exits 0 on SIGTERM.

    test_server_flags.py REPO_ROOT NMT_SERVER [--loadgen NMT_LOADGEN]
"""
import os
import re
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_files as df  # noqa: E402

from deploy_files import check, failures  # noqa: E402
CONTRACT_FLAGS = {"--config", "--host", "--port", "--metrics-host", "--metrics-port", "--device",
                  "--precision", "--log-format", "--log-level", "--help"}



def help_lines(text):
    """{flag: its help line} from --help output."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*(--[a-z][a-z0-9-]*)", line)
        if m:
            out[m.group(1)] = line
    return out


def check_args(source, args, helps):
    for i, a in enumerate(args):
        if not a.startswith("--"):
            continue
        flag, _, inline = a.partition("=")
        if not check(flag in helps, f"{source}: {flag} is a flag of nmt-server --help"):
            continue
        value = inline or (args[i + 1] if i + 1 < len(args) else "")
        choices = re.findall(r"[a-z0-9]+(?:\s*\|\s*[a-z0-9]+)+", helps[flag])
        if choices:
            allowed = {c.strip() for c in choices[0].split("|")}
            check(value in allowed, f"{source}: {flag} {value} is one of {sorted(allowed)}")


def run_server(server, source, args, loadgen):
    """Starts nmt-server with a deployment's arguments plus CPU and loopback overrides."""
    port, mport = df.free_port(), df.free_port()
    cmd = [server] + args + ["--device", "cpu", "--host", "127.0.0.1", "--port", str(port),
                             "--metrics-host", "127.0.0.1", "--metrics-port", str(mport)]
    print("run:", " ".join(cmd))
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            # /metrics may answer while the model is still loading: wait for the loaded gauge.
            loaded = df.wait_until(f"{source}: /metrics with nmt_model_loaded",
                                   lambda: "nmt_model_loaded{" in df.http_get(f"http://127.0.0.1:{mport}/metrics")[1], 90, proc)
            check(loaded, f"{source}: the server starts and serves /metrics with nmt_model_loaded")
            if loadgen:
                hc = [loadgen, "--health-check", "--target", f"127.0.0.1:{port}"]
                r = df.wait_until(f"{source}: health check", lambda: subprocess.run(hc, capture_output=True, timeout=10).returncode == 0, 60, proc)
                check(r, f"{source}: the image's HEALTHCHECK command passes against the serving server")
        except RuntimeError as e:
            check(False, f"{source}: {e}")
        finally:
            rc = df.stop(proc, timeout=45)
            log.seek(0)
            text = log.read()
        check(rc == 0, f"{source}: exits 0 on SIGTERM (got {rc})")
        if failures:
            print(text[-3000:])


def main():
    repo = os.path.abspath(sys.argv[1])
    server = sys.argv[2]
    loadgen = sys.argv[sys.argv.index("--loadgen") + 1] if "--loadgen" in sys.argv else None

    r = subprocess.run([server, "--help"], capture_output=True, text=True, timeout=30)
    helps = help_lines(r.stdout + r.stderr)
    check(r.returncode == 0 and helps, f"nmt-server --help exits 0 and lists flags ({len(helps)})")
    missing = CONTRACT_FLAGS - set(helps)
    check(not missing, f"nmt-server --help has the contract flags {sorted(missing) or ''}")

    # Dockerfile: ENTRYPOINT ["nmt-server"] + CMD.
    stages = df.dockerfile_stages(os.path.join(repo, "Dockerfile"))
    rt = stages[-1]["ins"]
    entry = [df.exec_form(t) for i, t in rt if i == "ENTRYPOINT"][-1]
    cmd = [df.exec_form(t) for i, t in rt if i == "CMD"][-1]
    check(entry == ["nmt-server"], "Dockerfile ENTRYPOINT runs nmt-server")
    check_args("Dockerfile CMD", cmd, helps)
    image_cfg = df.flag_value(cmd, "--config")
    docker_args = [os.path.join(repo, "configs", os.path.relpath(a, "/opt/nmt/configs")) if a == image_cfg else a for a in cmd]

    # Compose: the base command and the CPU override's.
    d = os.path.join(repo, "deploy")
    base = df.load_yaml(os.path.join(d, "docker-compose.yml"))
    cpu = df.compose_merge(base, df.load_yaml(os.path.join(d, "docker-compose.cpu.yml")))
    mounts = df.compose_mounts(base["services"]["translator"], d)
    compose_runs = []
    for source, compose in (("compose", base), ("compose+cpu", cpu)):
        args = compose["services"]["translator"]["command"]
        check_args(source, args, helps)
        compose_runs.append((source, [df.host_path(a, mounts) if a == df.flag_value(args, "--config") else a for a in args]))

    # Kubernetes: the Deployment's args with the ConfigMap's config, model paths mapped into the repository.
    kdir = os.path.join(repo, "deploy/k8s")
    dep = df.load_yaml_all(os.path.join(kdir, "deployment.yaml"))[0]
    kargs = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    check_args("k8s Deployment", kargs, helps)
    cm = df.load_yaml_all(os.path.join(kdir, "configmap.yaml"))[0]
    kcfg = yaml.safe_load(cm["data"][os.path.basename(df.flag_value(kargs, "--config"))])
    for m in kcfg["models"]:
        m["path"] = os.path.join(repo, "models", os.path.relpath(m["path"], "/opt/nmt/models"))

    with tempfile.TemporaryDirectory() as tmp:
        # The model repository claim: a fresh volume, empty.
        if "model_repository" in kcfg:
            kcfg["model_repository"]["path"] = os.path.join(tmp, "repository")
            os.makedirs(kcfg["model_repository"]["path"])
        kpath = os.path.join(tmp, "config.yaml")
        with open(kpath, "w") as f:
            yaml.safe_dump(kcfg, f)
        k8s_args = [kpath if a == df.flag_value(kargs, "--config") else a for a in kargs]

        if loadgen:
            r = subprocess.run([loadgen, "--help"], capture_output=True, text=True, timeout=30)
            text = r.stdout + r.stderr
            check("--health-check" in text and "--target" in text, "nmt-loadgen --help has --health-check and --target (Dockerfile HEALTHCHECK)")
            closed = df.free_port()
            r = subprocess.run([loadgen, "--health-check", "--target", f"127.0.0.1:{closed}"], capture_output=True, timeout=60)
            check(r.returncode != 0, "nmt-loadgen --health-check fails when no server listens")

        for source, args in [("Dockerfile CMD", docker_args)] + compose_runs + [("k8s Deployment + ConfigMap", k8s_args)]:
            run_server(server, source, args, loadgen)

    print(f"\n{len(failures)} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
