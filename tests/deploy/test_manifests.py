"""Deployment files: Kubernetes manifests (schema-validated offline), compose file, Dockerfile."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
EXAMPLE_CONFIG = DEPLOY / "config" / "loopwarden.json5"

# Kubernetes version whose bundled JSON schemas the manifests must satisfy (strict: no unknown fields).
K8S_VERSIONS = ("1.29", "1.37")
CRD_KINDS = {"PodMonitor", "PrometheusRule"}


def k8s_docs() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path.name, doc))
    return out


def by_kind(kind: str) -> dict:
    found = [doc for _name, doc in k8s_docs() if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def setting_env_names() -> set[str]:
    from loopwarden.worker.settings import Settings, env_name

    return {env_name(f.name) for f in msgspec.structs.fields(Settings)}


def worker_container() -> dict:
    containers = by_kind("StatefulSet")["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "worker")


def container_env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


# --- Kubernetes ----------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_manifests_validate_against_kubernetes_schemas(version):
    import kubernetes_validate

    checked = []
    for _name, doc in k8s_docs():
        if doc["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError
        checked.append(doc["kind"])
    assert {"StatefulSet", "Service", "ConfigMap", "PodDisruptionBudget", "Namespace"} <= set(checked), checked


def test_validator_rejects_broken_manifests():
    """The schema check can fail: a wrong type and an unknown field are both refused."""
    import kubernetes_validate
    from kubernetes_validate.utils import ValidationError

    sts = by_kind("StatefulSet")
    bad_type = copy.deepcopy(sts)
    bad_type["spec"]["replicas"] = "two"
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(bad_type, K8S_VERSIONS[0], strict=True)
    unknown = copy.deepcopy(sts)
    unknown["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(unknown, K8S_VERSIONS[0], strict=True)


def test_every_manifest_is_in_the_kustomization_and_namespaced():
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files
    for name, doc in k8s_docs():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == kust["namespace"], name


def test_statefulset_has_a_volume_per_worker_for_rocksdb():
    sts = by_kind("StatefulSet")
    container = worker_container()
    env = container_env(container)
    claims = {c["metadata"]["name"]: c for c in sts["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    data_dir = env["LOOPWARDEN_DATA_DIR"]
    assert mounts.get(data_dir) in claims, f"{data_dir} is not on a volumeClaimTemplate: {mounts}"
    claim = claims[mounts[data_dir]]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"]
    assert sts["spec"]["serviceName"] == by_kind("Service")["metadata"]["name"]


def test_statefulset_probes_resources_and_security():
    container = worker_container()
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = container_env(container)
    assert port_names["http"] == int(env["LOOPWARDEN_PORT"])
    assert env["LOOPWARDEN_HOST"] == "0.0.0.0", "the HTTP server must listen beyond loopback in a pod"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind]), kind
    pod = by_kind("StatefulSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["args"] == ["worker"]


def test_worker_env_names_are_real_settings():
    env = container_env(worker_container())
    lw = {k for k in env if k.startswith("LOOPWARDEN_")}
    assert {
        "LOOPWARDEN_BROKER",
        "LOOPWARDEN_EVENTS_TOPIC",
        "LOOPWARDEN_CONTROL_TOPIC",
        "LOOPWARDEN_CONFIG_TOPIC",
        "LOOPWARDEN_DEAD_LETTER_TOPIC",
    } <= lw
    assert lw - setting_env_names() == set(), f"unknown settings: {lw - setting_env_names()}"
    from loopwarden.worker.settings import from_sources

    settings = from_sources({}, environ=env)
    assert settings.port == 6066 and settings.host == "0.0.0.0"
    assert all(b.startswith("kafka://") for b in settings.brokers) and len(settings.brokers) == 3


def test_configmap_holds_the_example_config_and_it_loads(tmp_path):
    from loopwarden.schemas.config import load_config

    container = worker_container()
    env = container_env(container)
    cm = by_kind("ConfigMap")
    pod = by_kind("StatefulSet")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v.get("configMap", {}).get("name") == cm["metadata"]["name"])
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    config_path = Path(env["LOOPWARDEN_CONFIG"])
    assert config_path.parent == Path(mount["mountPath"])
    text = cm["data"][config_path.name]
    assert text == EXAMPLE_CONFIG.read_text(), "configmap.yaml and deploy/config/loopwarden.json5 differ"
    (tmp_path / config_path.name).write_text(text)
    fleet = load_config(tmp_path / config_path.name)
    default = fleet.resolve("any-agent")
    assert default.enabled and default.warning_threshold == 10 and default.critical_threshold == 20
    monitor = fleet.resolve("ops-monitor")
    assert monitor.enabled and monitor.warning_threshold == 20 and monitor.critical_threshold == 40
    assert monitor.global_circuit_breaker_threshold == 41  # clamped above critical (RULES.md §1.5)


def test_service_and_podmonitor_select_the_worker_pods():
    pod_labels = by_kind("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    port_names = {p["name"] for p in worker_container()["ports"]}
    svc = by_kind("Service")
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert all(p["targetPort"] in port_names for p in svc["spec"]["ports"])
    pm = by_kind("PodMonitor")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    endpoints = pm["spec"]["podMetricsEndpoints"]
    assert endpoints and all(e["port"] in port_names and e["path"] == "/metrics" for e in endpoints)
    # the dashboard and alerts select job="loopwarden": the job label comes from this pod label
    assert pod_labels[pm["spec"]["jobLabel"]] == "loopwarden"


def test_prometheusrule_is_generated_from_rules_yml(tmp_path, promtool):
    res = subprocess.run([sys.executable, str(K8S / "gen_prometheusrule.py"), "--check"], cwd=REPO)
    assert res.returncode == 0, "deploy/k8s/prometheusrule.yaml is stale: run python deploy/k8s/gen_prometheusrule.py"
    rule = by_kind("PrometheusRule")
    source = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    assert rule["spec"]["groups"] == source["groups"]
    path = tmp_path / "k8s-rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


# --- the secure overlay (deploy/k8s/secure: TLS/SASL, signed records) ------------------

SECURE = K8S / "secure"


def secure_statefulset() -> dict:
    """The base StatefulSet with the overlay's strategic-merge patch applied (env and mounts merged by name)."""
    sts = copy.deepcopy(by_kind("StatefulSet"))
    patch = yaml.safe_load((SECURE / "statefulset-security.yaml").read_text())
    pod, pod_patch = sts["spec"]["template"]["spec"], patch["spec"]["template"]["spec"]
    for c_patch in pod_patch["containers"]:
        container = next(c for c in pod["containers"] if c["name"] == c_patch["name"])
        for field, key in (("env", "name"), ("volumeMounts", "mountPath")):
            merged = {item[key]: item for item in container.get(field, [])}
            merged.update({item[key]: item for item in c_patch.get(field, [])})
            container[field] = list(merged.values())
    pod["volumes"] = pod["volumes"] + pod_patch["volumes"]
    return sts


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_secure_overlay_validates_and_reads_every_secret_from_a_file(version):
    import kubernetes_validate

    kust = yaml.safe_load((SECURE / "kustomization.yaml").read_text())
    assert kust["resources"] == ["../", "secret.yaml"]
    assert [p["path"] for p in kust["patches"]] == ["statefulset-security.yaml"]
    secret = yaml.safe_load((SECURE / "secret.yaml").read_text())
    sts = secure_statefulset()
    kubernetes_validate.validate(secret, version, strict=True)
    kubernetes_validate.validate(sts, version, strict=True)

    container = next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "worker")
    env = container_env(container)
    assert {k for k in env if k.startswith("LOOPWARDEN_")} <= setting_env_names()
    assert "LOOPWARDEN_SASL_PASSWORD" not in env and "LOOPWARDEN_SIGNING_KEY" not in env  # files only
    volume = next(v for v in sts["spec"]["template"]["spec"]["volumes"] if "secret" in v)
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert mount["readOnly"] is True
    files = [v for k, v in env.items() if k.endswith("_FILE") or k == "LOOPWARDEN_SSL_CAFILE"]
    assert len(files) == 5 and {Path(f).name for f in files} == set(secret["stringData"])
    assert all(Path(f).parent == Path(mount["mountPath"]) for f in files)

    from loopwarden.kafka.connection import kafka_auth
    from loopwarden.worker.settings import from_sources

    settings = from_sources({}, environ=env)
    assert settings.security_protocol == "SASL_SSL" and settings.sasl_password is None
    with pytest.raises(OSError):  # the password is read from the (here absent) mounted file
        kafka_auth(msgspec.structs.replace(settings, ssl_cafile=None))


# --- compose ---------------------------------------------------------------------------


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_validates_against_the_compose_spec(tmp_path):
    cmd = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
    ok = subprocess.run(cmd + [str(COMPOSE)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = compose()
    broken["services"]["worker-1"]["depends_on"]["kafka"]["condition"] = "when_it_feels_like_it"
    bad = tmp_path / "compose.yaml"
    bad.write_text(yaml.safe_dump(broken))
    res = subprocess.run(cmd + [str(bad)], capture_output=True, text=True)
    assert res.returncode != 0, "the compose schema check accepted an invalid depends_on condition"


def test_compose_services_and_kafka_kraft():
    doc = compose()
    services = doc["services"]
    assert set(services) == {"kafka", "worker-1", "worker-2", "prometheus", "grafana"}
    assert not any("zookeeper" in name for name in services)
    kafka_env = services["kafka"]["environment"]
    assert "controller" in kafka_env["KAFKA_PROCESS_ROLES"] and "broker" in kafka_env["KAFKA_PROCESS_ROLES"]
    assert kafka_env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{kafka_env['KAFKA_NODE_ID']}@kafka:")
    assert not any(k.startswith("KAFKA_ZOOKEEPER") for k in kafka_env)
    assert services["kafka"]["image"].startswith("apache/kafka:")
    for name, svc in services.items():
        assert "healthcheck" in svc and svc["healthcheck"]["test"], f"{name} has no healthcheck"


def test_compose_workers():
    doc = compose()
    services = doc["services"]
    kafka_env = services["kafka"]["environment"]
    data_volumes = []
    for name in ("worker-1", "worker-2"):
        svc = services[name]
        assert svc["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert (COMPOSE.parent / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve() == DOCKERFILE
        assert svc["depends_on"]["kafka"]["condition"] == "service_healthy"
        env = svc["environment"]
        assert set(env) <= setting_env_names(), set(env) - setting_env_names()
        assert env["LOOPWARDEN_BROKER"].removeprefix("kafka://") in kafka_env["KAFKA_ADVERTISED_LISTENERS"]
        mounts = {}
        for spec in svc["volumes"]:
            source, target = spec.split(":")[:2]
            mounts[target] = source
            if source.startswith("."):
                assert (COMPOSE.parent / source).exists(), spec
        data = mounts[env["LOOPWARDEN_DATA_DIR"]]
        assert data in doc["volumes"], f"{name}: RocksDB dir is not on a named volume"
        data_volumes.append(data)
        assert mounts[env["LOOPWARDEN_CONFIG"]] == "./config/loopwarden.json5"
    assert len(set(data_volumes)) == 2, "each worker needs its own RocksDB volume"


def test_compose_prometheus_and_grafana_provisioning():
    doc = compose()
    services = doc["services"]
    prom_mounts = dict(v.split(":")[:2][::-1] for v in services["prometheus"]["volumes"])
    assert prom_mounts["/etc/prometheus/rules.yml"] == "./prometheus/rules.yml"
    prom_cfg = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert prom_mounts["/etc/prometheus/prometheus.yml"] == "./prometheus/prometheus.yml"
    assert prom_cfg["rule_files"] == ["rules.yml"]
    job = next(j for j in prom_cfg["scrape_configs"] if j["job_name"] == "loopwarden")
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    expected = {
        f"{services[w]['hostname']}:{services[w]['environment']['LOOPWARDEN_PORT']}" for w in ("worker-1", "worker-2")
    }
    assert targets == expected

    graf = services["grafana"]
    graf_mounts = dict(v.split(":")[:2][::-1] for v in graf["volumes"])
    assert graf_mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    providers = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/loopwarden.yaml").read_text())
    dash_dir = providers["providers"][0]["options"]["path"]
    dash_mount = next(t for t, s in graf_mounts.items() if s == "./grafana/loopwarden.json")
    assert str(Path(dash_mount).parent) == dash_dir
    sources = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    ds = sources["datasources"][0]
    assert ds["type"] == "prometheus" and ds["isDefault"] is True
    assert ds["url"] == "http://prometheus:9090" and "prometheus" in services
    assert graf["depends_on"]["prometheus"]["condition"] == "service_healthy"


# --- Dockerfile ------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_dockerfile_is_slim_non_root_with_a_data_volume():
    ins = dockerfile_instructions()
    args = dict(re.match(r"(\w+)=(\S+)", rest).groups() for op, rest in ins if op == "ARG" and "=" in rest)
    bases = [rest.split()[0] for op, rest in ins if op == "FROM"]
    assert bases and all(re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", args.get(b.strip("${}"), b)) for b in bases), (
        bases
    )
    users = [rest for op, rest in ins if op == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    assert ins[-1] == ("CMD", '["worker"]') and ("ENTRYPOINT", '["loopwarden"]') in ins
    env = dict(re.findall(r"(LOOPWARDEN_\w+)=(\S+)", " ".join(rest for op, rest in ins if op == "ENV")))
    assert set(env) <= setting_env_names(), set(env) - setting_env_names()
    assert env["LOOPWARDEN_HOST"] == "0.0.0.0"
    volumes = [v for op, rest in ins if op == "VOLUME" for v in re.findall(r'"([^"]+)"', rest)]
    assert env["LOOPWARDEN_DATA_DIR"] in volumes
    assert any(op == "HEALTHCHECK" and "/healthz" in rest for op, rest in ins)
    for op, rest in ins:
        if op == "COPY" and not rest.startswith("--from"):
            for src in rest.split()[:-1]:
                assert (REPO / src).exists() or src == "README.md", f"COPY source {src} missing"
