"""The Kubernetes manifests under deploy/, checked offline (no cluster, no network).

1. yamllint --strict over deploy/ (.yamllint at the repo root).
2. Every kustomization (deploy/base, deploy/overlays/*) renders with
   `kubectl kustomize` (kubectl from scripts/install-deps.sh).
3. Every rendered object, and every other manifest under deploy/ (the extras,
   deploy/monitoring when present), is validated against the Kubernetes
   1.30 JSON schemas (kubernetes-validate, strict: unknown fields fail).
   Custom resources, which those schemas lack, get their required fields
   checked here; a kind that neither covers fails the test.
4. Semantics: the container's args are started as a real `brisk serve`
   (model and key paths swapped for local files), and the probe paths and
   /metrics answer on it; the grace period covers preStop + --drain-timeout;
   the HPA scales the Deployment on the adapter's metric names; the AKS
   overlay lands on the GPU pool; the pod is locked down and no Secret
   (no key) is committed.
"""

import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from deploy_helpers import REPO, Serve, brisk_bin, get, serve_help, smollm2_path, tool

DEPLOY = REPO / "deploy"
K8S_VERSION = "1.30.0"
KUSTOMIZATIONS = ["base", "overlays/aks", "overlays/cpu"]
HPA_METRICS = {"brisk_requests_waiting", "brisk_requests_running"}  # the Prometheus Adapter contract
PROBES = {"startupProbe": "/health", "readinessProbe": "/readyz", "livenessProbe": "/livez"}


def render(kdir):
    r = subprocess.run([tool("kubectl"), "kustomize", str(DEPLOY / kdir)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"kubectl kustomize {kdir} failed:\n{r.stderr}"
    return [d for d in yaml.safe_load_all(r.stdout) if d]


@pytest.fixture(scope="module")
def rendered():
    return {k: render(k) for k in KUSTOMIZATIONS}


def find(objs, kind, name="brisk"):
    hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"expected one {kind}/{name}, found {len(hits)}"
    return hits[0]


def container(objs):
    dep = find(objs, "Deployment")
    (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "brisk"]
    return dep, c


def other_manifests():
    """Objects in deploy/**.yaml files that are not kustomize inputs of the
    rendered trees: they are applied on their own (extras, monitoring)."""
    out = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        rel = path.relative_to(DEPLOY)
        if rel.parts[0] in ("base", "overlays"):
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            # Plain config files (e.g. a Helm values file) have no kind.
            if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc:
                out.append((str(rel), doc))
    return out


# ---- custom resources: the required fields of their CRDs ---------------------

def check_endpoints(eps, what):
    assert isinstance(eps, list) and eps, f"{what}: no endpoints"
    for ep in eps:
        assert ep.get("port") or ep.get("targetPort") or ep.get("portNumber"), f"{what}: endpoint without port"
        assert ep.get("path", "/metrics").startswith("/"), f"{what}: bad path"


def check_custom(obj):
    kind, spec = obj["kind"], obj.get("spec")
    api = obj["apiVersion"]
    name = obj.get("metadata", {}).get("name")
    assert name and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name), f"{kind}: bad metadata.name {name!r}"
    assert isinstance(spec, dict), f"{kind}/{name}: no spec"
    if kind in ("PodMonitor", "ServiceMonitor", "PrometheusRule"):
        assert api == "monitoring.coreos.com/v1", f"{kind}/{name}: apiVersion {api}"
    if kind == "PodMonitor":
        assert isinstance(spec.get("selector"), dict), "PodMonitor: spec.selector is required"
        check_endpoints(spec.get("podMetricsEndpoints"), f"PodMonitor/{name}")
    elif kind == "ServiceMonitor":
        assert isinstance(spec.get("selector"), dict), "ServiceMonitor: spec.selector is required"
        check_endpoints(spec.get("endpoints"), f"ServiceMonitor/{name}")
    elif kind == "PrometheusRule":
        groups = spec.get("groups")
        assert isinstance(groups, list) and groups, f"PrometheusRule/{name}: no groups"
        for g in groups:
            assert g.get("name"), f"PrometheusRule/{name}: group without name"
            for rule in g.get("rules") or []:
                assert ("alert" in rule) != ("record" in rule), f"{name}: rule needs exactly one of alert/record"
                assert str(rule.get("expr", "")).strip(), f"{name}: rule without expr"
    elif kind in ("ScaledObject",):
        assert api == "keda.sh/v1alpha1", f"ScaledObject/{name}: apiVersion {api}"
        assert spec.get("scaleTargetRef", {}).get("name"), "ScaledObject: spec.scaleTargetRef.name is required"
        triggers = spec.get("triggers")
        assert isinstance(triggers, list) and triggers, "ScaledObject: spec.triggers is required"
        for t in triggers:
            assert t.get("type") and isinstance(t.get("metadata"), dict), f"ScaledObject/{name}: bad trigger {t}"
    elif kind in ("TriggerAuthentication", "ClusterTriggerAuthentication"):
        assert api == "keda.sh/v1alpha1", f"{kind}/{name}: apiVersion {api}"
        assert spec, f"{kind}/{name}: empty spec"
    else:
        raise AssertionError(f"{api} {kind}/{name}: no schema and no check for this kind")


def validate(obj, where):
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        check_custom(obj)
    except kubernetes_validate.ValidationError as e:
        pytest.fail(f"{where}: {obj['kind']}/{obj['metadata'].get('name')}: {e.message} "
                    f"at {'/'.join(map(str, e.path))}", pytrace=False)


# ---- lint, render, schemas ---------------------------------------------------

def test_yamllint():
    r = subprocess.run([tool("yamllint"), "--strict", "-c", str(REPO / ".yamllint"), str(DEPLOY)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_rendered_objects_validate(rendered, kdir):
    objs = rendered[kdir]
    kinds = sorted(o["kind"] for o in objs)
    for kind in ("Namespace", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy",
                 "HorizontalPodAutoscaler", "PodMonitor", "PersistentVolumeClaim", "ServiceAccount"):
        assert kind in kinds, f"{kdir}: no {kind} in {kinds}"
    for o in objs:
        if o["kind"] != "Namespace":
            assert o["metadata"].get("namespace") == "brisk", f"{kdir}: {o['kind']} not in namespace brisk"
        validate(o, kdir)


def test_other_manifests_validate():
    objs = other_manifests()
    assert any(o["kind"] == "ServiceMonitor" for _, o in objs), "deploy/extras/servicemonitor.yaml missing"
    for where, o in objs:
        validate(o, where)
        # The KEDA alternative must scale the same Deployment the base defines.
        if o["kind"] == "ScaledObject":
            ref = o["spec"]["scaleTargetRef"]
            assert ref["name"] == "brisk" and ref.get("kind", "Deployment") == "Deployment", ref
            assert o["metadata"].get("namespace", "brisk") == "brisk", f"{where}: not in namespace brisk"


def test_validation_catches_errors():
    """The validators reject what they should, so a pass means something."""
    bad_dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
               "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "x", "imagee": "y"}]}}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad_dep, K8S_VERSION, strict=True)
    with pytest.raises(AssertionError, match="no endpoints"):
        check_custom({"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
                      "metadata": {"name": "x"}, "spec": {"selector": {}, "podMetricsEndpoints": []}})
    with pytest.raises(AssertionError, match="no schema and no check"):
        check_custom({"apiVersion": "example.com/v1", "kind": "Unknown", "metadata": {"name": "x"}, "spec": {}})


# ---- semantics ---------------------------------------------------------------

def flag_value(args, flag):
    assert flag in args, f"{flag} not in {args}"
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_args_are_brisk_serve_flags(rendered, kdir):
    _, c = container(rendered[kdir])
    args = c["args"]
    assert args[0] == "serve", args
    known = serve_help()
    for a in args:
        if a.startswith("--"):
            assert a in known, f"{kdir}: {a} is not a `brisk serve` flag"
    assert flag_value(args, "--host") == "0.0.0.0"
    port = int(flag_value(args, "--port"))
    assert {"name": "http", "containerPort": port, "protocol": "TCP"} in c["ports"]


def test_deployment_args_serve(rendered, tmp_path):
    """The base Deployment's exact argument list starts a working server: only
    the paths (model, key file) and the address are swapped for local ones
    (and a small KV pool added, for speed)."""
    dep, c = container(rendered["base"])
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    key_file = flag_value(c["args"], "--api-key-file")
    assert str(Path(key_file).parent) in mounts, f"{key_file} is not on a mounted volume"
    model = flag_value(c["args"], "--model")
    assert str(Path(model).parent) in mounts, f"{model} is not on a mounted volume"
    key = "test-key-not-a-secret"
    (tmp_path / "api-key").write_text(key + "\n")
    swap = {model: str(smollm2_path()), key_file: str(tmp_path / "api-key"), "0.0.0.0": "127.0.0.1"}
    args = [swap.get(a, a) for a in c["args"]]
    args[args.index("--port") + 1] = "0"
    # A small KV pool: the default 1 GiB takes seconds to set up, and no
    # request here generates anything.
    args += ["--kv-cache-bytes", "32M"]
    srv = Serve([brisk_bin()] + args, tmp_path / "serve.log").start()
    try:
        for probe, path in PROBES.items():
            assert c[probe]["httpGet"]["path"] == path, f"{probe} must GET {path}"
            assert c[probe]["httpGet"]["port"] == "http"
            status, body = get(srv.port, path)
            assert status == 200, f"{probe} {path}: {status} {body[:200]!r}"
        # The API needs the key from the Secret; the probes above did not.
        assert get(srv.port, "/v1/models")[0] == 401
        assert get(srv.port, "/v1/models", {"Authorization": f"Bearer {key}"})[0] == 200
        # The PodMonitor's path serves the series the adapter turns into the HPA's metrics.
        pm = find(rendered["base"], "PodMonitor")
        (ep,) = pm["spec"]["podMetricsEndpoints"]
        status, body = get(srv.port, ep["path"])
        assert status == 200
        for series in ("vllm:num_requests_waiting", "vllm:num_requests_running"):
            assert re.search(rf"^{re.escape(series)}(\{{[^}}]*\}})? ", body.decode(), re.M), f"no {series}"
    finally:
        srv.stop()


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_grace_period_covers_prestop_and_drain(rendered, kdir):
    dep, c = container(rendered[kdir])
    spec = dep["spec"]["template"]["spec"]
    cmd = c["lifecycle"]["preStop"]["exec"]["command"]
    assert cmd[0] == "sleep" and len(cmd) == 2, cmd
    pre_stop = float(cmd[1])
    drain = float(flag_value(c["args"], "--drain-timeout"))
    assert pre_stop >= 5 and drain > 0
    assert spec["terminationGracePeriodSeconds"] >= pre_stop + drain + 5, (
        f"terminationGracePeriodSeconds {spec['terminationGracePeriodSeconds']} < "
        f"preStop {pre_stop} + drain {drain} + 5")


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_hpa_scales_on_adapter_metrics(rendered, kdir):
    objs = rendered[kdir]
    dep, _ = container(objs)
    hpa = find(objs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == ("apps/v1", "Deployment", dep["metadata"]["name"])
    assert "replicas" not in dep["spec"], "the HPA owns replicas; apply would reset them"
    names = set()
    for m in hpa["spec"]["metrics"]:
        assert m["type"] == "Pods", m
        assert m["pods"]["target"]["type"] == "AverageValue", m
        names.add(m["pods"]["metric"]["name"])
    assert "brisk_requests_waiting" in names and names <= HPA_METRICS, names
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300
    # H4's adapter config, when present, must publish exactly these names.
    adapter = DEPLOY / "monitoring" / "prometheus-adapter.yaml"
    if adapter.exists():
        text = adapter.read_text()
        for name in names:
            assert name in text, f"{name} not in {adapter.relative_to(REPO)}"


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_scrape_and_network_policy_match_the_pod(rendered, kdir):
    objs = rendered[kdir]
    dep, c = container(objs)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["app.kubernetes.io/name"] == "brisk"
    port_names = {p["name"] for p in c["ports"]}
    pm = find(objs, "PodMonitor")
    assert pm["spec"]["jobLabel"] == "app.kubernetes.io/name"  # -> job="brisk"
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pm["spec"]["namespaceSelector"]["matchNames"] == ["brisk"]
    assert {ep["port"] for ep in pm["spec"]["podMetricsEndpoints"]} <= port_names
    svc = find(objs, "Service")
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    np_ = find(objs, "NetworkPolicy")
    assert np_["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert np_["spec"]["policyTypes"] == ["Ingress"]
    peers = set()
    for rule in np_["spec"]["ingress"]:
        assert {p["port"] for p in rule["ports"]} <= port_names
        for f in rule["from"]:
            # Namespaces only: no ipBlock or empty selector that opens the port to everyone.
            peers.add(f["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"])
    assert "monitoring" in peers and len(peers) == 2, peers
    pdb = find(objs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_pod_is_locked_down_and_no_key_is_committed(rendered, kdir):
    objs = rendered[kdir]
    dep, c = container(objs)
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["automountServiceAccountToken"] is False
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    assert "memory" in c["resources"]["requests"] and "cpu" in c["resources"]["requests"]
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["models"]["readOnly"] is True
    secret = vols[mounts["api-key"]["name"]]["secret"]
    assert secret["secretName"] == "brisk-api-key" and not secret.get("optional", False)
    assert not [o for o in objs if o["kind"] == "Secret"], "a Secret (an API key) is committed"
    assert "--api-key" not in c["args"], "the key must come from the Secret file, not the command line"
    assert not any("key" in e.get("name", "").lower() and "value" in e for e in c.get("env", []))


def test_aks_overlay_targets_the_gpu_pool(rendered):
    objs = rendered["overlays/aks"]
    dep, c = container(objs)
    pod = dep["spec"]["template"]["spec"]
    assert {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"] == {"kubernetes.azure.com/agentpool": "gpu"}
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert flag_value(c["args"], "--device") == "cuda", "a GPU pod must run the model on its GPU"
    assert c["image"].endswith(":0.1.0-cuda12.6.3") and "azurecr.io/" in c["image"]
    pvc = find(objs, "PersistentVolumeClaim", "brisk-models")
    assert pvc["spec"]["storageClassName"].startswith("azurefile-csi")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    peers = {f["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
             for r in find(objs, "NetworkPolicy")["spec"]["ingress"] for f in r["from"]}
    assert peers == {"monitoring", "app-routing-system"}
    ing = find(objs, "Ingress")
    paths = [p for r in ing["spec"]["rules"] for p in r["http"]["paths"]]
    assert paths and all(p["path"] == "/v1" and p["pathType"] == "Prefix" for p in paths), \
        "only /v1 may be routed from outside (keeps /metrics internal)"
    assert all(p["backend"]["service"]["name"] == "brisk" for p in paths)
    # The base (and the CPU overlay) ask for no GPU.
    _, cpu_c = container(rendered["overlays/cpu"])
    assert "nvidia.com/gpu" not in cpu_c["resources"].get("limits", {})
    assert "--device" not in cpu_c["args"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-ra"]))
