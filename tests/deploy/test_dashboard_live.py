#!/usr/bin/python3
"""Every PromQL expression of the Grafana dashboard "NMT latency" (and of the Prometheus
rules and the Prometheus Adapter rules) evaluates without error against a real Prometheus
that scrapes a real nmt-server, and the panels return data after some requests.

Everything runs on 127.0.0.1 with free ports and temporary folders: nmt-server on the CPU
with configs/default.yaml, Prometheus with deploy/prometheus/prometheus.yml's translator
job retargeted to it (scrape interval 1 s) and its rules file, gRPC stubs generated now
from proto/nmt/v1/translation.proto.

    test_dashboard_live.py REPO_ROOT NMT_SERVER PROMETHEUS
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_files as df  # noqa: E402

from deploy_files import check, failures  # noqa: E402
RATE_WINDOW = "1m"  # >= 4 x the 1 s scrape interval
SCRAPE = "1s"
SENTENCES = [
    "A man is riding a bicycle down the street.",
    "Two dogs are playing in the snow.",
    "A woman in a red dress is singing on a stage.",
    "Children are playing soccer in a park.",
    "A group of people are standing in front of a building.",
    "The little girl is climbing a tree.",
]
HEALTH_PROTO = """syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }
"""


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def generate_stubs(repo, out):
    """Python gRPC stubs for the service and grpc.health.v1, made with Debian's
    python3-grpc-tools. The health proto is written here under another folder name: Debian's
    python3-grpcio has no health package, and stubs under grpc/ would shadow the grpc module."""
    os.makedirs(os.path.join(out, "nmt_health"))
    with open(os.path.join(out, "nmt_health", "health.proto"), "w") as f:
        f.write(HEALTH_PROTO)
    for inc, proto in ((os.path.join(repo, "proto"), "nmt/v1/translation.proto"), (out, "nmt_health/health.proto")):
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", inc, f"--python_out={out}",
                        f"--grpc_python_out={out}", os.path.join(inc, proto)], check=True, timeout=120)
    sys.path.insert(0, out)


def prometheus_config(repo, metrics_target, prom_port, path):
    """deploy/prometheus/prometheus.yml with 1 s intervals, the translator job pointed at
    the local server and the rules file by absolute path."""
    src = os.path.join(repo, "deploy/prometheus")
    cfg = df.load_yaml(os.path.join(src, "prometheus.yml"))
    cfg["global"].update(scrape_interval=SCRAPE, evaluation_interval=SCRAPE)
    cfg["rule_files"] = [os.path.join(src, r) for r in cfg.get("rule_files", [])]
    jobs = {sc["job_name"]: sc for sc in cfg["scrape_configs"]}
    check("nmt-translator" in jobs, "prometheus.yml has the nmt-translator job")
    jobs["nmt-translator"].update(scrape_interval=SCRAPE, static_configs=[{"targets": [metrics_target]}])
    if "prometheus" in jobs:
        jobs["prometheus"]["static_configs"] = [{"targets": [f"127.0.0.1:{prom_port}"]}]
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)


def compose_prometheus_flags(repo):
    """The compose stack's Prometheus flags other than paths (retention, ...), so the real
    binary validates them too."""
    base = df.load_yaml(os.path.join(repo, "deploy/docker-compose.yml"))
    return [a for a in base["services"]["prometheus"]["command"]
            if not a.startswith(("--config.file", "--storage.tsdb.path"))]


def query(prom, expr):
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        _, body = df.http_get(url, timeout=10)
        return json.loads(body)
    except Exception as e:  # noqa: BLE001 - HTTP 400 carries Prometheus' error
        body = getattr(e, "read", lambda: b"")().decode()
        return json.loads(body) if body.startswith("{") else {"status": "error", "error": str(e)}


def finite_values(result):
    vals = []
    for r in result.get("data", {}).get("result", []):
        v = float(r["value"][1])
        if math.isfinite(v):
            vals.append(v)
    return vals


class Load(threading.Thread):
    """Sends Translate requests (and a few invalid ones) until stopped."""

    def __init__(self, target):
        super().__init__(daemon=True)
        import grpc
        from nmt.v1 import translation_pb2 as pb, translation_pb2_grpc as pbg
        self.grpc, self.pb = grpc, pb
        self.channel = grpc.insecure_channel(target)
        self.stub = pbg.TranslationServiceStub(self.channel)
        self.stop_event = threading.Event()
        self.counts = {}
        self.errors = []

    def send(self, texts, beam):
        req = self.pb.TranslateRequest(texts=list(texts),
                                       options=self.pb.TranslateOptions(beam_size=beam, max_decoding_length=40))
        try:
            resp = self.stub.Translate(req, timeout=60)
            code = "OK" if len(resp.translations) == len(texts) else "BAD_RESPONSE"
        except self.grpc.RpcError as e:
            code = e.code().name
            if code != "INVALID_ARGUMENT":
                self.errors.append(f"{code}: {e.details()}")
        self.counts[code] = self.counts.get(code, 0) + 1

    def run(self):
        i = 0
        while not self.stop_event.is_set():
            n = 1 + i % 4
            self.send([SENTENCES[(i + k) % len(SENTENCES)] for k in range(n)], beam=1 + i % 2)
            if i % 10 == 0:
                self.send(["x" * 50001], beam=1)  # > limits.max_characters_per_request: INVALID_ARGUMENT
            i += 1
            time.sleep(0.05)

    def stop(self):
        self.stop_event.set()
        self.join(timeout=90)
        self.channel.close()


def check_health(target):
    import grpc
    from nmt_health import health_pb2 as h, health_pb2_grpc as hg
    with grpc.insecure_channel(target) as ch:
        stub = hg.HealthStub(ch)
        # The Kubernetes grpc probes (no `service:` set) and nmt-loadgen --health-check ask "".
        st = df.wait_until("health ''", lambda: stub.Check(h.HealthCheckRequest(service=""), timeout=5).status == 1, 90)
        check(st, "grpc.health.v1 Check('') is SERVING, as the Kubernetes gRPC probes ask")


def evaluate_all(prom, dash, rules_cfg, adapter_rules, final):
    """Returns the failures of one evaluation round (final: report them)."""
    problems = []

    def expect(cond, what):
        if final:
            check(cond, what)
        elif not cond:
            problems.append(what)

    for panel, t in df.dashboard_targets(dash):
        expr = df.substitute_grafana_vars(t["expr"], RATE_WINDOW)
        r = query(prom, expr)
        ok = r.get("status") == "success"
        expect(ok, f"panel '{panel['title']}' {t['refId']}: evaluates ({r.get('error', '')}) {expr}")
        if not ok:
            continue
        if "nmt_gpu_memory_bytes" in expr:
            continue  # a CPU-only server has no GPU memory to report
        vals = finite_values(r)
        if panel["fieldConfig"]["defaults"].get("unit") == "s":
            expect(bool(vals) and all(v >= 0 for v in vals) and max(vals) > 0,
                   f"latency panel '{panel['title']}' {t['legendFormat']}: returns data {vals}")
        else:
            expect(bool(r["data"]["result"]), f"panel '{panel['title']}' {t['refId']}: returns data")

    for g in rules_cfg["groups"]:
        for rule in g["rules"]:
            if "record" in rule:
                r = query(prom, rule["record"])
                expect(r.get("status") == "success" and bool(r["data"]["result"]),
                       f"recording rule {rule['record']} has been evaluated to data")
    for rule in adapter_rules:
        expr = (rule["metricsQuery"].replace("<<.Series>>", rule["seriesQuery"].split("{")[0])
                .replace("<<.LabelMatchers>>", 'job="nmt-translator"').replace("<<.GroupBy>>", "instance"))
        r = query(prom, expr)
        expect(r.get("status") == "success" and bool(r["data"]["result"]),
               f"adapter rule {rule['name']['as']}: {expr} returns data")
    return problems


def main():
    repo, server, prometheus = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    with open(os.path.join(repo, "deploy/grafana/dashboards/nmt-latency.json")) as f:
        dash = json.load(f)
    rules_cfg = df.load_yaml(os.path.join(repo, "deploy/prometheus/rules.yml"))
    adapter_cm = df.load_yaml_all(os.path.join(repo, "deploy/k8s/prometheus-adapter-config.yaml"))[0]
    adapter_rules = yaml.safe_load(next(iter(adapter_cm["data"].values())))["rules"]

    tmp = tempfile.mkdtemp(prefix="nmt-deploy-live-")
    procs = []
    load = None
    try:
        generate_stubs(repo, os.path.join(tmp, "stubs"))
        port, mport, pport = df.free_port(), df.free_port(), df.free_port()
        target, mtarget, prom = f"127.0.0.1:{port}", f"127.0.0.1:{mport}", f"http://127.0.0.1:{pport}"
        slog = open(os.path.join(tmp, "server.log"), "w")
        srv = subprocess.Popen([server, "--config", os.path.join(repo, "configs/default.yaml"), "--device", "cpu",
                                "--host", "127.0.0.1", "--port", str(port),
                                "--metrics-host", "127.0.0.1", "--metrics-port", str(mport),
                                # The load repeats its sentences, which the translation cache
                                # would answer without a queue wait or a decoder step: the
                                # latency panels would have nothing to show.
                                "--translation-cache-mb", "0"],
                               stdout=slog, stderr=subprocess.STDOUT)
        procs.append(("nmt-server", srv, slog.name))
        df.wait_until("nmt-server /metrics", lambda: df.http_get(f"http://{mtarget}/metrics")[0] == 200, 90, srv)
        check_health(target)

        pcfg = os.path.join(tmp, "prometheus.yml")
        prometheus_config(repo, mtarget, pport, pcfg)
        plog = open(os.path.join(tmp, "prometheus.log"), "w")
        pflags = compose_prometheus_flags(repo)
        prom_proc = subprocess.Popen([prometheus, f"--config.file={pcfg}", f"--storage.tsdb.path={tmp}/data",
                                      f"--web.listen-address=127.0.0.1:{pport}"] + pflags,
                                     stdout=plog, stderr=subprocess.STDOUT)
        procs.append(("prometheus", prom_proc, plog.name))
        df.wait_until("prometheus ready", lambda: df.http_get(f"{prom}/-/ready")[0] == 200, 60, prom_proc)
        check(True, f"prometheus starts with the compose flags {pflags}")

        load = Load(target)
        load.start()
        # Enough scrapes for rate() over the window and requests in it, then poll until every
        # expression returns data (bounded).
        time.sleep(12)
        deadline = time.monotonic() + 120
        problems = ["not evaluated"]
        while problems and time.monotonic() < deadline:
            problems = evaluate_all(prom, dash, rules_cfg, adapter_rules, final=False)
            if problems and all(": evaluates (" in p for p in problems):
                break  # queries Prometheus refuses will not get better by waiting
            if problems:
                print(f"waiting: {len(problems)} expressions without data yet, e.g. {problems[0]}", flush=True)
                time.sleep(3)
        evaluate_all(prom, dash, rules_cfg, adapter_rules, final=True)

        up = query(prom, 'up{job="nmt-translator"}')
        check(finite_values(up) == [1.0], "Prometheus scrapes the translator (up == 1)")
        codes = {r["metric"].get("code") for r in query(prom, "nmt_requests_total")["data"]["result"]}
        check({"OK", "INVALID_ARGUMENT"} <= codes,
              f"nmt_requests_total code labels are gRPC code names as the rules expect ({sorted(codes)})")
        _, rules_body = df.http_get(f"{prom}/api/v1/rules")
        rules = [r for g in json.loads(rules_body)["data"]["groups"] for r in g["rules"]]
        check(len(rules) == sum(len(g["rules"]) for g in rules_cfg["groups"]), f"Prometheus loaded the {len(rules)} rules of rules.yml")
        for r in rules:
            check(r.get("health") == "ok", f"rule {r['name']} evaluates without error ({r.get('lastError', '')})")
        _, label_body = df.http_get(f"{prom}/api/v1/label/instance/values?" + urllib.parse.urlencode({"match[]": "nmt_requests_total"}))
        check(mtarget in json.loads(label_body)["data"], "the dashboard's $instance variable query finds the server")
        _, body = df.http_get(f"http://{mtarget}/metrics")
        for family, kind in df.METRIC_FAMILIES.items():
            check(f"# TYPE {family} {kind}" in body, f"/metrics exports {family} as a {kind}")
        load.stop()
        check(not load.errors, f"requests succeeded or were refused as INVALID_ARGUMENT ({load.counts}, {load.errors[:3]})")
        load = None
    except Exception as e:  # noqa: BLE001 - report and fail
        check(False, f"live stack: {type(e).__name__}: {e}")
    finally:
        if load is not None:
            load.stop_event.set()
        for name, p, log in reversed(procs):
            rc = df.stop(p, timeout=45)
            print(f"{name} stopped with {rc}")
            if failures:
                with open(log) as f:
                    print(f"--- {name} log (tail) ---\n" + f.read()[-3000:])
        subprocess.run(["rm", "-rf", tmp])
    print(f"\n{len(failures)} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
