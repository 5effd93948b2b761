"""The Kubernetes manifests and the sample Alertmanager route, checked with the real tools (issue 17):
kubernetes-validate against the Kubernetes 1.30 schemas (strict: unknown fields are errors), amtool for the
Alertmanager file; the PrometheusRule is the promtool-tested rules file, generated; the ConfigMap's config is a
valid Sentinel config."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import validate
from kubernetes_validate.utils import ValidationError

from sentinel.config import from_mapping

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
K8S = DEPLOY / "kubernetes"
CORE_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet",
              "Deployment", "StatefulSet"}


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, doc) for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())]


def test_every_core_manifest_is_valid_against_the_kubernetes_schemas() -> None:
    docs = documents()
    assert {doc["kind"] for _, doc in docs} >= CORE_KINDS | {"PodMonitor", "PrometheusRule"}
    for name, doc in docs:
        if doc["kind"] in CORE_KINDS:
            validate(doc, "1.30", strict=True)  # raises with the path of the first error
        assert doc["metadata"].get("namespace", "sentinel") == "sentinel", name


def test_the_validator_does_catch_a_mistake() -> None:
    [(_, agent)] = [(n, d) for n, d in documents() if d["kind"] == "DaemonSet"]
    broken = copy.deepcopy(agent)
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(ValidationError):
        validate(broken, "1.30", strict=True)


def test_the_prometheus_rule_is_the_tested_rules_file() -> None:
    spec = importlib.util.spec_from_file_location("generate_rules", K8S / "generate_rules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (K8S / "prometheusrule.yaml").read_text() == module.render()  # regenerate: see generate_rules.py
    [(_, rule)] = [(n, d) for n, d in documents() if d["kind"] == "PrometheusRule"]
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert "SentinelBreakerOpen" in alerts and all(r.get("expr") for g in rule["spec"]["groups"] for r in g["rules"])


def test_the_pod_monitor_scrapes_the_port_every_sentinel_pod_names() -> None:
    docs = documents()
    [(_, monitor)] = [(n, d) for n, d in docs if d["kind"] == "PodMonitor"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    port = monitor["spec"]["podMetricsEndpoints"][0]["port"]
    workloads = [d for _, d in docs if d["kind"] in ("DaemonSet", "Deployment", "StatefulSet")]
    assert len(workloads) == 3
    for w in workloads:
        template = w["spec"]["template"]
        assert selector.items() <= template["metadata"]["labels"].items()
        assert [p["name"] for c in template["spec"]["containers"] for p in c["ports"]] == [port]


def test_the_configmap_holds_a_valid_sentinel_config_and_rbac_grants_only_what_the_actuator_uses() -> None:
    docs = documents()
    [(_, cm)] = [(n, d) for n, d in docs if d["kind"] == "ConfigMap"]
    config = from_mapping(tomllib.loads(cm["data"]["sentinel.toml"]))
    assert config.actuator.kind == "kubernetes" and config.policy.mode == "observe"
    [(_, role)] = [(n, d) for n, d in docs if d["kind"] == "ClusterRole"]
    granted = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    assert granted == {("nodes", "get"), ("nodes", "list"), ("nodes", "patch"), ("pods", "get"), ("pods", "list"),
                       ("pods", "patch"), ("pods/eviction", "create")}


def test_the_sample_alertmanager_route_passes_amtool_and_pages_only_critical_alerts() -> None:
    path = str(DEPLOY / "alertmanager" / "alertmanager.yml")
    done = subprocess.run(["amtool", "check-config", path], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    for labels, receiver in ((["severity=critical", "alertname=SentinelFatalGpuFault"], "sentinel-pager"),
                             (["severity=warning", "alertname=SentinelPipelineLag"], "sentinel-chat"),
                             (["severity=info", "alertname=SentinelModelStale"], "sentinel-ticket")):
        routed = subprocess.run(["amtool", "config", "routes", "test", f"--config.file={path}", *labels],
                                capture_output=True, text=True, timeout=30)
        assert routed.stdout.strip() == receiver, (labels, routed.stdout, routed.stderr)


def test_the_manifests_run_the_image_the_containerfile_builds() -> None:
    """No container daemon runs here, so the image is not built in tests; what can drift is checked: the
    manifests name sentinel:<the project's version> and run as the user the Containerfile creates."""
    version = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())["project"]["version"]
    containerfile = (DEPLOY / "container" / "Containerfile").read_text()
    assert f"ARG VERSION={version}\n" in containerfile and "USER 10001:10001" in containerfile
    images, users = set(), set()
    for _, doc in documents():
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        images |= {c["image"] for c in [*pod.get("initContainers", []), *pod.get("containers", [])]}
        if pod.get("securityContext", {}).get("runAsNonRoot"):
            users.add((pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]))
    assert images == {f"sentinel:{version}"}
    assert users == {(10001, 10001)}
