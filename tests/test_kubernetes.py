"""The Kubernetes manifests (``deploy/kubernetes``): each overlay rendered by
``kubectl kustomize``, every object validated against the Kubernetes API schemas of the
``kubernetes-validate`` package (strict: an unknown field fails), the ServiceMonitor
(a Prometheus Operator resource, in no such package) against the fields it uses, and
the whole checked for fitting together: selectors, ports, probes, the configuration
file the ConfigMap carries, the secrets the pods read."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gateway import load_config

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("single", "production")
KUBERNETES = "1.30"  # the oldest release the manifests are written for
LABEL = {"app.kubernetes.io/name": "toolgate"}

# The ServiceMonitor fields the manifests use, as monitoring.coreos.com/v1 has them.
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": {"type": "object"}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "authorization": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["credentials"],
                                "properties": {
                                    "type": {"type": "string"},
                                    "credentials": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["name", "key"],
                                        "properties": {
                                            "name": {"type": "string"},
                                            "key": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is needed to render the manifests (kubectl kustomize)")
    result = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for obj in objects:
        assert obj["kind"] not in found, f"two {obj['kind']} objects"
        found[obj["kind"]] = obj
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_fits_its_schema(overlay: str) -> None:
    for obj in render(overlay):
        if obj["kind"] == "ServiceMonitor":
            jsonschema.validate(obj, SERVICE_MONITOR)
            continue
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def test_the_overlays_ship_what_each_needs() -> None:
    single = by_kind(render("single"))
    production = by_kind(render("production"))
    assert set(single) == {"ConfigMap", "Service", "Deployment"}
    assert set(production) == {
        "ConfigMap",
        "Service",
        "Deployment",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ServiceMonitor",
        "NetworkPolicy",
    }
    assert single["Deployment"]["spec"]["replicas"] == 1
    assert production["Deployment"]["spec"]["replicas"] >= 2
    assert all(obj["metadata"]["namespace"] == "toolgate" for obj in production.values())


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (found,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(found)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_pod_is_locked_down_and_probed_where_the_gateway_answers(overlay: str) -> None:
    deployment = by_kind(render(overlay))["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    main = container(deployment)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # the image's user (Dockerfile)
    assert pod["automountServiceAccountToken"] is False
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    assert main["securityContext"]["allowPrivilegeEscalation"] is False
    assert main["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert main["resources"]["requests"]["cpu"]
    assert main["resources"]["limits"]["memory"]
    (port,) = main["ports"]
    assert (port["name"], port["containerPort"]) == ("http", 8080)
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert "subPath" not in mounts["/etc/toolgate"]  # a subPath mount never updates
    assert "/tmp" in mounts  # the root filesystem is read-only
    args = main["args"]
    assert args[args.index("--config") + 1] == "/etc/toolgate/gateway.yaml"
    # In-flight streams drain: the preStop pause, then the longest request's time.
    pause = int(main["lifecycle"]["preStop"]["exec"]["command"][-1])
    config = gateway_config(overlay)
    longest = max(t.limits.request_timeout_s for t in config.tenants or [])
    assert pod["terminationGracePeriodSeconds"] >= pause + longest


def gateway_config(overlay: str, **env: str) -> Any:
    """The ConfigMap's file as a pod loads it, with what its secrets hold."""
    objects = by_kind(render(overlay))
    text = objects["ConfigMap"]["data"]["gateway.yaml"]
    environment = {
        e["name"]: f"value-of-{e['name'].lower()}"
        for e in container(objects["Deployment"]).get("env", [])
    }
    environment["UPSTREAM_BASE_URL"] = "https://api.example.com/v1"
    if "REDIS_URL" in environment:
        environment["REDIS_URL"] = "redis+cluster://redis.data:6379/0"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gateway.yaml"
        path.write_text(text)
        return load_config(path, env=environment | env)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_configmap_loads_with_what_the_pod_is_given(overlay: str) -> None:
    objects = by_kind(render(overlay))
    text = objects["ConfigMap"]["data"]["gateway.yaml"]
    env = {e["name"]: e for e in container(objects["Deployment"]).get("env", [])}
    used = set(re.findall(r"\$\{([A-Z_]+)", text))
    optional = set(re.findall(r"\$\{([A-Z_]+):-", text))
    assert used - optional <= set(env), f"not given to the pod: {used - optional - set(env)}"
    for variable in env.values():  # every secret the pods read is the one Secret's
        assert variable["valueFrom"]["secretKeyRef"]["name"] == "toolgate-secrets"
    config = gateway_config(overlay)
    assert config.server.watch_config is True
    assert config.server.host == "0.0.0.0"
    assert config.tenants, "listening beyond loopback needs tenants"
    assert config.server.metrics_token is not None
    replicas = objects["Deployment"]["spec"]["replicas"]
    assert config.store.url.startswith("redis") == (replicas > 1)  # replicas share Redis


def test_production_scales_survives_disruption_is_scraped_and_fenced() -> None:
    objects = by_kind(render("production"))
    deployment, service = objects["Deployment"], objects["Service"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]

    def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
        wanted = selector.get("matchLabels", {})
        return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())

    assert selects(deployment["spec"]["selector"], pod_labels)
    assert all(pod_labels.get(k) == v for k, v in service["spec"]["selector"].items())
    assert service["spec"]["ports"][0]["targetPort"] == container(deployment)["ports"][0]["name"]

    hpa = objects["HorizontalPodAutoscaler"]
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert hpa["spec"]["minReplicas"] >= 2

    pdb = objects["PodDisruptionBudget"]
    assert selects(pdb["spec"]["selector"], pod_labels)
    assert pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"]  # a node can drain

    monitor = objects["ServiceMonitor"]
    assert selects(monitor["spec"]["selector"], service["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"]["credentials"]["key"] == "metrics-token"

    policy = objects["NetworkPolicy"]
    assert selects(policy["spec"]["podSelector"], pod_labels)
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    egress = policy["spec"]["egress"]
    ports = {p["port"] for rule in egress for p in rule.get("ports", [])}
    assert {53, 6379} <= ports  # DNS and Redis
    public = [
        peer["ipBlock"] for rule in egress for peer in rule.get("to", []) if "ipBlock" in peer
    ]
    (anywhere,) = public
    assert "169.254.0.0/16" in anywhere["except"]  # never the cloud metadata service
    assert "10.0.0.0/8" in anywhere["except"]  # private ranges only by label
