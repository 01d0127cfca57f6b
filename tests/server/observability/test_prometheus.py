#!/usr/bin/python3
"""A real Prometheus server (Debian's `prometheus`, loopback, temp storage, 1 s scrapes)
scrapes nmt-server's /metrics while requests flow, and answers the p99 latency query of the
dashboards with a non-empty, finite result.

    test_prometheus.py REPO_ROOT NMT_SERVER PROMETHEUS
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
import urllib.request

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import harness  # noqa: E402

check = harness.Checks()
P99 = "histogram_quantile(0.99, sum by (le) (rate(nmt_request_duration_seconds_bucket[1m])))"


def query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    return body["data"]["result"] if body.get("status") == "success" else None


def wait_for(what, fn, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            value = fn()
            if value:
                return value
        except OSError:
            pass
        time.sleep(0.5)
    check(False, f"{what} within {seconds} s")
    return None


def main():
    repo, binary, prometheus = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    tmp = harness.temp_dir("nmt-prometheus-")
    harness.generate_stubs(repo, tmp)
    import health_pb2
    import health_pb2_grpc
    from nmt.v1 import translation_pb2 as pb
    from nmt.v1 import translation_pb2_grpc as pb_grpc

    config = os.path.join(tmp, "config.yaml")
    harness.write_config(config, os.path.join(repo, "models/m30k-en-de-small"))
    server = harness.Server(binary, config)
    prom_port = harness.free_port()
    prom_config = os.path.join(tmp, "prometheus.yml")
    with open(prom_config, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: nmt\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{server.metrics_port}']\n")
    prom_log = tempfile.TemporaryFile("w+")
    prom = subprocess.Popen([prometheus, f"--config.file={prom_config}",
                             f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=prom_log, stderr=subprocess.STDOUT)
    stop = threading.Event()
    sent = [0]
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)

        def load():
            with grpc.insecure_channel(server.target) as channel:
                stub = pb_grpc.TranslationServiceStub(channel)
                req = pb.TranslateRequest(texts=["A dog runs in the park."],
                                          options=pb.TranslateOptions(beam_size=2))
                while not stop.is_set():
                    stub.Translate(req, timeout=30)
                    sent[0] += 1
                    time.sleep(0.05)

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        ready = wait_for("Prometheus ready", lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{prom_port}/-/ready", timeout=5).status == 200, 60)
        check(bool(ready), "Prometheus is up on loopback")
        up = wait_for("target up", lambda: [r for r in query(prom_port, 'up{job="nmt"}') or []
                                            if r["value"][1] == "1"], 60)
        check(bool(up), "Prometheus scrapes nmt-server's /metrics (up == 1)")
        result = wait_for("non-empty p99", lambda: [r for r in query(prom_port, P99) or []
                                                    if r["value"][1] not in ("NaN", "+Inf")], 90)
        value = float(result[0]["value"][1]) if result else float("nan")
        check(result is not None and math.isfinite(value) and 0 < value <= 10,
              f"{P99} = {value:.4f} s")
        loaded = query(prom_port, "max(nmt_model_loaded)") or []
        check(loaded and loaded[0]["value"][1] == "1", "nmt_model_loaded is 1 in Prometheus")
        stop.set()
        loader.join(timeout=30)
        total = wait_for("request count scraped", lambda: [
            r for r in query(prom_port, 'sum(nmt_requests_total{code="OK"})') or []
            if float(r["value"][1]) == sent[0]], 15)
        check(bool(total), f"Prometheus' nmt_requests_total{{code=OK}} equals the {sent[0]} requests sent")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        stop.set()
        prom.terminate()
        try:
            prom.wait(timeout=30)
        except subprocess.TimeoutExpired:
            prom.kill()
        rc = server.stop()
        check(rc == 0, f"nmt-server exits 0 (got {rc})")
        if check.failures:
            prom_log.seek(0)
            print(prom_log.read()[-3000:])
            print(server.output()[-3000:])
    check.exit()


if __name__ == "__main__":
    main()
