"""Readers shared by the deploy tests: YAML with Compose's merge tags, the compose override
merge, Dockerfile instructions, the Grafana dashboard's PromQL, the exporter's metric names."""
import json
import os
import re
import shlex

import yaml

# The metric families nmt-server exports (docs/server.md, "Observability"); histograms add _bucket/_sum/_count.
METRIC_FAMILIES = {
    "nmt_requests_total": "counter",
    "nmt_request_duration_seconds": "histogram",
    "nmt_queue_wait_seconds": "histogram",
    "nmt_encode_seconds": "histogram",
    "nmt_decode_seconds": "histogram",
    "nmt_active_rows": "gauge",
    "nmt_active_sentences": "gauge",
    "nmt_admitted_sentences": "histogram",
    "nmt_step_duration_seconds": "histogram",
    "nmt_time_to_first_step_seconds": "histogram",
    "nmt_input_tokens_total": "counter",
    "nmt_output_tokens_total": "counter",
    "nmt_inflight_requests": "gauge",
    "nmt_gpu_memory_bytes": "gauge",
    "nmt_model_loaded": "gauge",
    "nmt_models_loaded": "gauge",
    "nmt_model_loads_total": "counter",
    "nmt_model_load_seconds": "histogram",
    "nmt_model_evictions_total": "counter",
    "nmt_queue_refusals_total": "counter",
    "nmt_cache_hits_total": "counter",
    "nmt_cache_misses_total": "counter",
    "nmt_http_connections": "gauge",
}


# Every test prints one line per check and fails at the end if any failed, so that one run
# shows all that is wrong.
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)
    return cond


# Families with no series until their first event (a key refused by its quota): on /metrics
# only from then on, so the live test cannot look for them; the dashboard may read them.
SPARSE_FAMILIES = {
    "nmt_quota_refusals_total": "counter",
}


def series_names():
    names = set()
    for family, kind in {**METRIC_FAMILIES, **SPARSE_FAMILIES}.items():
        names.add(family)
        if kind == "histogram":
            names.update(family + s for s in ("_bucket", "_sum", "_count"))
    return names


def nmt_metric_names(expr):
    """The nmt_* metric names an expression reads (recording-rule names contain ':')."""
    return set(re.findall(r"(?<![\w:])nmt_[a-z_]+(?![\w:])", expr))


class Reset:
    """Compose's `!reset` tag: the override removes the key."""


class _ComposeLoader(yaml.SafeLoader):
    pass


_ComposeLoader.add_constructor("!reset", lambda loader, node: Reset())
_ComposeLoader.add_constructor(
    "!override",
    lambda loader, node: loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode)
    else loader.construct_mapping(node))


def load_yaml(path):
    with open(path) as f:
        return yaml.load(f, Loader=_ComposeLoader)


def load_yaml_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def compose_merge(base, override):
    """Compose's merge of an override file: mappings merge, sequences of `command` and
    scalars are replaced, `!reset` removes the key."""
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, Reset):
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = compose_merge(out[k], v)
        else:
            out[k] = v
    return out


def expand_env_default(s):
    """`${VAR:-default}` as Compose reads it with VAR unset."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", s)


def compose_mounts(service, compose_dir):
    """[(host path or volume name, container path, is_bind)] of a service's short-syntax volumes."""
    mounts = []
    for v in service.get("volumes", []):
        parts = expand_env_default(v).split(":")
        src, dst = parts[0], parts[1]
        bind = src.startswith((".", "/"))
        mounts.append((os.path.normpath(os.path.join(compose_dir, src)) if bind else src, dst, bind))
    return mounts


def host_path(container_path, mounts):
    """Maps a container path through bind mounts to the host path (None when not mounted)."""
    best = None
    for src, dst, bind in mounts:
        if bind and (container_path == dst or container_path.startswith(dst.rstrip("/") + "/")):
            if best is None or len(dst) > len(best[1]):
                best = (src, dst)
    if best is None:
        return None
    return os.path.join(best[0], os.path.relpath(container_path, best[1]))


def flag_value(args, flag):
    """The value after `flag` in an argument list (last one wins, as for overrides)."""
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def flags(args):
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


# ---- Dockerfile ----

def dockerfile_instructions(path):
    """[(INSTRUCTION, text)] with continuation lines joined and comments dropped."""
    out, cur = [], ""
    with open(path) as f:
        for line in f:
            s = line.rstrip("\n")
            if not cur and (s.strip().startswith("#") or not s.strip()):
                continue
            if cur and s.strip().startswith("#"):
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            cur = ""
    return out


def dockerfile_stages(path):
    """[{"from": image, "name": alias, "args": {ARG defaults before FROM}, "ins": [...]}]"""
    global_args, stages = {}, []
    for ins, text in dockerfile_instructions(path):
        if ins == "ARG" and not stages:
            k, _, v = text.partition("=")
            global_args[k] = v.strip('"')
        elif ins == "FROM":
            parts = text.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: global_args.get(m.group(1), m.group(0)), parts[0])
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append({"from": image, "name": name, "ins": []})
        else:
            stages[-1]["ins"].append((ins, text))
    return stages


def exec_form(text):
    """A JSON exec-form argument list (ENTRYPOINT/CMD/HEALTHCHECK CMD), else a shell split."""
    text = text.strip()
    if text.startswith("["):
        return json.loads(text)
    return shlex.split(text)


# ---- Grafana ----

def dashboard_panels(dash):
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])  # collapsed rows


def dashboard_targets(dash):
    """[(panel, target)] for every target with a PromQL expression."""
    return [(p, t) for p in dashboard_panels(dash) for t in p.get("targets", []) if t.get("expr")]


def substitute_grafana_vars(expr, rate_interval="1m"):
    """The query Grafana would send with every variable at its "All" value."""
    expr = expr.replace("$__rate_interval", rate_interval).replace("$__interval", rate_interval)
    expr = expr.replace("${__rate_interval}", rate_interval)
    return re.sub(r"\$\{?instance\}?", ".*", expr)


def load_config(path):
    with open(path) as f:
        return yaml.safe_load(f)


# ---- processes on loopback ----

def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    import urllib.request
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_until(what, probe, timeout, proc=None, interval=0.5):
    """Polls probe() until it returns a true value; fails after timeout or when proc dies."""
    import time
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: process exited with {proc.returncode} while waiting")
        try:
            v = probe()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - not up yet
            last = e
        time.sleep(interval)
    raise RuntimeError(f"{what}: not reached within {timeout} s (last error: {last})")


def stop(proc, timeout=30):
    """SIGTERM, then SIGKILL after timeout; returns the exit status."""
    import signal
    import subprocess
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
