#!/usr/bin/python3
"""The compose stack, Grafana provisioning, dashboard, Prometheus config and Kubernetes
manifests parse, and agree with each other and with the repository: ports with
configs/default.yaml, mounted paths with files that exist, service names with the URLs that
name them, metric names with what nmt-server exports.

    test_manifests.py REPO_ROOT
"""
import json
import os
import re
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_files as df  # noqa: E402

from deploy_files import check, failures  # noqa: E402


def check_model_paths(cfg, config_container_dir, to_host, where):
    """Every model path of a config, as the server resolves it in the container, is on the host."""
    for m in cfg.get("models", []):
        p = m["path"] if os.path.isabs(m["path"]) else os.path.normpath(os.path.join(config_container_dir, m["path"]))
        host = to_host(p)
        check(host is not None and os.path.isfile(os.path.join(host, "config.json")),
              f"{where}: model {m['name']} at {p} maps to a model folder in the repository ({host})")


def check_compose(repo, cfg):
    d = os.path.join(repo, "deploy")
    base = df.load_yaml(os.path.join(d, "docker-compose.yml"))
    cpu = df.load_yaml(os.path.join(d, "docker-compose.cpu.yml"))
    services = base.get("services", {})
    check({"translator", "prometheus", "grafana"} <= set(services), "compose: translator, prometheus, grafana services")
    tr = services["translator"]
    build = tr.get("build", {})
    check(os.path.isfile(os.path.join(d, build.get("context", "?"), build.get("dockerfile", "Dockerfile"))),
          "compose: translator builds the repository's Dockerfile")

    port, mport = cfg["server"]["port"], cfg["server"]["metrics_port"]
    published = [str(p).split(":")[-1] for p in tr.get("ports", [])]
    check(str(port) in published, f"compose: translator publishes the gRPC port {port} of configs/default.yaml")
    check(str(mport) in [str(p) for p in tr.get("expose", [])] + published,
          f"compose: translator exposes the metrics port {mport}")
    cmd = tr.get("command", [])
    check(df.flag_value(cmd, "--metrics-host") == "0.0.0.0", "compose: translator overrides --metrics-host 0.0.0.0")

    mounts = df.compose_mounts(tr, d)
    for src, dst, bind in mounts:
        if bind:
            check(os.path.isdir(src), f"compose: translator mount {dst} comes from an existing folder {src}")
    config_path = df.flag_value(cmd, "--config")
    host_cfg = df.host_path(config_path or "", mounts)
    check(host_cfg is not None and os.path.isfile(host_cfg),
          f"compose: --config {config_path} is a mounted repository file ({host_cfg})")
    if host_cfg and os.path.isfile(host_cfg):
        check_model_paths(df.load_config(host_cfg), os.path.dirname(config_path),
                          lambda p: df.host_path(p, mounts), "compose")
    devices = tr.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    check(any(dev.get("driver") == "nvidia" and "gpu" in dev.get("capabilities", []) for dev in devices),
          "compose: translator reserves an NVIDIA GPU")
    grace = tr.get("stop_grace_period", "10s")
    check(int(re.sub(r"s$", "", str(grace))) > cfg["server"]["shutdown_grace_seconds"],
          f"compose: stop_grace_period {grace} exceeds shutdown_grace_seconds")

    merged = df.compose_merge(base, cpu)["services"]["translator"]
    mdev = merged.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")
    check(not mdev, "compose + cpu override: no GPU reservation left")
    check(merged.get("command") == cmd + ["--device", "cpu"],
          "compose + cpu override: the same command plus --device cpu")

    prom = services["prometheus"]
    pcmd = prom.get("command", [])
    pm = df.compose_mounts(prom, d)
    config_file = next((a.split("=", 1)[1] for a in pcmd if a.startswith("--config.file=")), None)
    prom_yml = df.host_path(config_file or "", pm)
    check(prom_yml is not None and os.path.samefile(prom_yml, os.path.join(d, "prometheus", "prometheus.yml")),
          f"compose: prometheus --config.file {config_file} is deploy/prometheus/prometheus.yml")
    check(any(re.fullmatch(r"--storage\.tsdb\.retention\.time=\d+[smhdwy]", a) for a in pcmd),
          "compose: prometheus sets --storage.tsdb.retention.time")
    pconf = df.load_yaml(os.path.join(d, "prometheus", "prometheus.yml"))
    targets = [t for sc in pconf["scrape_configs"] for s in sc.get("static_configs", []) for t in s["targets"]]
    check(f"translator:{mport}" in targets, f"prometheus.yml scrapes translator:{mport}")
    for rf in pconf.get("rule_files", []):
        check(os.path.isfile(os.path.join(d, "prometheus", rf)), f"prometheus.yml rule file {rf} exists")
    prom_port = next((str(p).split(":")[-1] for p in prom.get("ports", [])), None)

    gr = services["grafana"]
    gm = df.compose_mounts(gr, d)
    for src, dst, bind in gm:
        if bind:
            check(os.path.isdir(src), f"compose: grafana mount {dst} comes from an existing folder {src}")
    prov = df.host_path("/etc/grafana/provisioning", gm)
    check(prov is not None and os.path.isdir(os.path.join(prov, "datasources")) and os.path.isdir(os.path.join(prov, "dashboards")),
          "compose: grafana provisioning (datasources, dashboards) mounted at /etc/grafana/provisioning")
    ds_files = [os.path.join(d, "grafana/provisioning/datasources", f) for f in os.listdir(os.path.join(d, "grafana/provisioning/datasources"))]
    datasources = [ds for f in ds_files for ds in df.load_yaml(f).get("datasources", [])]
    check(any(ds.get("url") == f"http://prometheus:{prom_port}" and ds.get("type") == "prometheus" for ds in datasources),
          f"grafana datasource points at the prometheus service (http://prometheus:{prom_port})")
    uids = {ds.get("uid") for ds in datasources}
    dash_dir = os.path.join(d, "grafana/provisioning/dashboards")
    providers = [p for f in os.listdir(dash_dir) for p in df.load_yaml(os.path.join(dash_dir, f)).get("providers", [])]
    check(len(providers) > 0, "grafana: a dashboards provider is provisioned")
    for p in providers:
        host = df.host_path(p.get("options", {}).get("path", ""), gm)
        check(host is not None and os.path.isfile(os.path.join(host, "nmt-latency.json")),
              f"grafana provider {p.get('name')} reads a mounted folder holding nmt-latency.json ({host})")
    home = gr.get("environment", {}).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    check(home is None or (df.host_path(home, gm) and os.path.isfile(df.host_path(home, gm))),
          f"grafana home dashboard {home} is a mounted file")
    named = set(base.get("volumes", {}) or {})
    for svc_name, svc in services.items():
        for src, dst, bind in df.compose_mounts(svc, d):
            if not bind:
                check(src in named, f"compose: {svc_name} named volume {src} is declared")
    return uids


def check_dashboard(repo, ds_uids):
    with open(os.path.join(repo, "deploy/grafana/dashboards/nmt-latency.json")) as f:
        dash = json.load(f)
    check(dash.get("title") == "NMT latency", "dashboard title is 'NMT latency'")
    targets = df.dashboard_targets(dash)
    exprs = [t["expr"] for _, t in targets]
    ids = [p["id"] for p in df.dashboard_panels(dash)]
    check(len(ids) == len(set(ids)), "dashboard panel ids are unique")
    for p, t in targets:
        uid = (t.get("datasource") or p.get("datasource") or {}).get("uid")
        check(uid in ds_uids, f"dashboard panel '{p['title']}' uses the provisioned datasource uid ({uid})")
        unknown = df.nmt_metric_names(t["expr"]) - df.series_names()
        check(not unknown, f"dashboard panel '{p['title']}' reads only exported metrics {sorted(unknown) or ''}")
    quantiles = {family: ("0.5", "0.95", "0.99") for family in (
        "nmt_request_duration_seconds", "nmt_queue_wait_seconds", "nmt_encode_seconds", "nmt_decode_seconds")}
    quantiles.update({family: ("0.5", "0.99") for family in (
        "nmt_step_duration_seconds", "nmt_time_to_first_step_seconds", "nmt_admitted_sentences")})
    for family, qs in quantiles.items():
        for q in qs:
            check(any(f"histogram_quantile({q}," in e and f"{family}_bucket" in e for e in exprs),
                  f"dashboard has the p{int(float(q) * 100)} of {family}")
    wanted = {
        "requests/s by code": lambda e: "nmt_requests_total" in e and "by (code)" in e and "rate(" in e,
        "input tokens/s": lambda e: "rate(nmt_input_tokens_total" in e,
        "output tokens/s": lambda e: "rate(nmt_output_tokens_total" in e,
        "active rows by model": lambda e: "nmt_active_rows" in e and "by (model)" in e,
        "active sentences by model": lambda e: "nmt_active_sentences" in e and "by (model)" in e,
        "admitted sentences/s": lambda e: "rate(nmt_admitted_sentences_sum" in e,
        "in-flight requests": lambda e: "nmt_inflight_requests" in e,
        "GPU memory": lambda e: "nmt_gpu_memory_bytes" in e,
        "queue refusals by key": lambda e: "rate(nmt_queue_refusals_total" in e and "by (key)" in e,
        "quota refusals by key": lambda e: "rate(nmt_quota_refusals_total" in e and "by (key, quota)" in e,
        "cache hit ratio": lambda e: "rate(nmt_cache_hits_total" in e and "rate(nmt_cache_misses_total" in e,
        "HTTP connections": lambda e: "nmt_http_connections" in e and "server" in e,
    }
    for what, match in wanted.items():
        check(any(match(e) for e in exprs), f"dashboard shows {what}")
    check(any(p.get("type") == "heatmap" and any("nmt_admitted_sentences_bucket" in t.get("expr", "") for t in p.get("targets", []))
              for p in df.dashboard_panels(dash)), "dashboard shows the admitted sentences per step as a heatmap")


def check_rules(repo):
    rules = df.load_yaml(os.path.join(repo, "deploy/prometheus/rules.yml"))
    for g in rules["groups"]:
        for r in g["rules"]:
            unknown = df.nmt_metric_names(r["expr"]) - df.series_names()
            check(not unknown, f"rule {r.get('record') or r.get('alert')} reads only exported metrics {sorted(unknown) or ''}")


def check_k8s(repo, cfg):
    kdir = os.path.join(repo, "deploy/k8s")
    files = sorted(f for f in os.listdir(kdir) if f.endswith((".yaml", ".yml")))
    docs = {}
    for f in files:
        for doc in df.load_yaml_all(os.path.join(kdir, f)):
            ok = all(k in doc for k in ("apiVersion", "kind")) and (doc["kind"] == "Kustomization" or "name" in doc.get("metadata", {}))
            check(ok, f"k8s/{f}: {doc.get('kind')} has apiVersion, kind and metadata.name")
            docs.setdefault(doc["kind"], []).append(doc)
    kust = docs["Kustomization"][0]
    check(set(kust["resources"]) == set(files) - {"kustomization.yaml"},
          "k8s/kustomization.yaml lists every manifest of deploy/k8s")
    dep = docs["Deployment"][0]
    svc = docs["Service"][0]
    cms = {c["metadata"]["name"]: c for c in docs["ConfigMap"]}
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    check(all(labels.get(k) == v for k, v in dep["spec"]["selector"]["matchLabels"].items()),
          "Deployment selector matches its pod labels")
    c = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    res = c.get("resources", {})
    check(int(res.get("limits", {}).get("nvidia.com/gpu", 0)) >= 1, "Deployment requests an nvidia.com/gpu (limits)")

    # The config the pod reads: --config through a volumeMount of a ConfigMap volume.
    config_path = df.flag_value(c.get("args", []), "--config")
    mount = next((m for m in c.get("volumeMounts", []) if config_path and config_path.startswith(m["mountPath"].rstrip("/") + "/")), None)
    vol = next((v for v in pod["spec"].get("volumes", []) if mount and v["name"] == mount["name"]), None)
    cm = cms.get((vol or {}).get("configMap", {}).get("name"))
    key = os.path.relpath(config_path, mount["mountPath"]) if mount else None
    check(cm is not None and key in cm["data"], f"Deployment --config {config_path} is a key of a ConfigMap manifest")
    if cm is None or key not in cm["data"]:
        return
    kcfg = yaml.safe_load(cm["data"][key])

    def same_keys(a, b, path):
        for k, v in a.items():
            check(k in b, f"k8s config key {path}{k} exists in configs/default.yaml")
            if k in b and isinstance(v, dict):
                same_keys(v, b[k], f"{path}{k}.")
    same_keys(kcfg, cfg, "")
    check(kcfg["server"]["port"] == cfg["server"]["port"] == ports.get("grpc"),
          f"k8s: gRPC port agrees (config {kcfg['server']['port']}, default.yaml {cfg['server']['port']}, container {ports.get('grpc')})")
    check(kcfg["server"]["metrics_port"] == cfg["server"]["metrics_port"] == ports.get("metrics"),
          "k8s: metrics port agrees between ConfigMap, default.yaml and the container")
    check(kcfg["server"]["metrics_host"] == "0.0.0.0", "k8s: metrics bind 0.0.0.0 so the pod IP can be scraped")
    # The image copies models/ to /opt/nmt/models (checked against the Dockerfile in test_dockerfile.py).
    check_model_paths(kcfg, os.path.dirname(config_path),
                      lambda p: os.path.join(repo, "models", os.path.relpath(p, "/opt/nmt/models"))
                      if p.startswith("/opt/nmt/models/") else None, "k8s")

    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        pr = c.get(probe)
        check(pr is not None and pr.get("grpc", {}).get("port") == kcfg["server"]["port"],
              f"k8s: {probe} is a gRPC health probe on port {kcfg['server']['port']}")
    pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    pre_sleep = int(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else 0
    tgps = pod["spec"].get("terminationGracePeriodSeconds", 30)
    check(tgps > kcfg["server"]["shutdown_grace_seconds"] + pre_sleep,
          f"k8s: terminationGracePeriodSeconds {tgps} > shutdown_grace_seconds {kcfg['server']['shutdown_grace_seconds']} + preStop {pre_sleep}")
    check(pod["spec"].get("securityContext", {}).get("runAsNonRoot") is True, "k8s: pod runs as non-root")

    check(svc["spec"].get("clusterIP") == "None", "k8s: Service is headless (clusterIP: None)")
    check(all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "k8s: Service selects the Deployment's pods")
    for p in svc["spec"]["ports"]:
        target = p.get("targetPort")
        check(ports.get(target) == p["port"] or target == p["port"],
              f"k8s: Service port {p['name']} ({p['port']}) targets the container port {target}")
    sm = docs["ServiceMonitor"][0]
    svc_ports = {p["name"] for p in svc["spec"]["ports"]}
    check(all(svc["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items()),
          "k8s: ServiceMonitor selects the Service")
    for ep in sm["spec"]["endpoints"]:
        check(ep["port"] in svc_ports and ep.get("path", "/metrics") == "/metrics",
              f"k8s: ServiceMonitor scrapes the Service's {ep['port']} port at /metrics")

    hpa = docs["HorizontalPodAutoscaler"][0]
    check(hpa["apiVersion"] == "autoscaling/v2", "k8s: HPA is autoscaling/v2")
    ref = hpa["spec"]["scaleTargetRef"]
    check(ref["kind"] == "Deployment" and ref["name"] == dep["metadata"]["name"], "k8s: HPA scales the Deployment")
    check(1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"], "k8s: HPA min <= max replicas")
    adapter = next((cm for cm in docs["ConfigMap"] if "rules" in yaml.safe_load(next(iter(cm["data"].values()))) ), None)
    check(adapter is not None, "k8s: a ConfigMap holds the Prometheus Adapter rules")
    arules = yaml.safe_load(next(iter(adapter["data"].values())))["rules"] if adapter else []
    served = {r["name"]["as"] for r in arules}
    custom = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    check(len(custom) > 0, "k8s: HPA scales on a custom per-pod metric")
    for name in custom:
        check(name in served, f"k8s: HPA metric {name} is served by a Prometheus Adapter rule")
    for r in arules:
        series = re.match(r"\s*([a-z_:]+)", r["seriesQuery"]).group(1)
        check(series in df.series_names(), f"k8s: adapter rule {r['name']['as']} reads the exported series {series}")
        unknown = df.nmt_metric_names(r["metricsQuery"]) - df.series_names()
        check(not unknown and "<<.LabelMatchers>>" in r["metricsQuery"] and "<<.GroupBy>>" in r["metricsQuery"],
              f"k8s: adapter rule {r['name']['as']} query uses exported metrics and the adapter's placeholders")


def main():
    repo = os.path.abspath(sys.argv[1])
    cfg = df.load_config(os.path.join(repo, "configs/default.yaml"))
    uids = check_compose(repo, cfg)
    check_dashboard(repo, uids)
    check_rules(repo)
    check_k8s(repo, cfg)
    print(f"\n{len(failures)} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
