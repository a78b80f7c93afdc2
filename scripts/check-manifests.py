#!/usr/bin/env python3
"""Checks deploy/: every manifest against the Kubernetes OpenAPI schemas, the kustomizations
render, and the manifests agree with the profiles and the installer.

- Kubernetes objects (base resources, examples, the uninstall DaemonSet, the rendered base and
  overlays) are validated strictly (unknown fields are errors) with kubernetes-validate, which
  carries the upstream schemas and needs no network, for each version in K8S_VERSIONS: the
  oldest it carries (1.25; the device plugin's oldest kubelet, 1.20, has no schema there), the
  releases between, DRA's first (1.34) and the newest the tests run (1.37).
- KubeSchedulerConfiguration has no published OpenAPI schema: its fields are checked here
  against the kubescheduler.config.k8s.io/v1 types (profiles, pluginConfig, NodeResourcesFitArgs
  scoringStrategy) or, for the 1.19-1.21 variant, the v1beta1 ones (the NodeResourcesMostAllocated
  score plugin and its args), and its resources against the profiles; every shipped scheduler
  configuration must give the same resources the same weights.
- Kustomizations: with kubectl (kustomize built in) every one is rendered, and deploy/devinject.yaml
  must equal the render of deploy/base, deploy/devinject-nri.yaml that of deploy/overlays/nri,
  deploy/devinject-webhook.yaml that of deploy/overlays/webhook, deploy/devinject-dra.yaml that of
  deploy/overlays/dra (objects of API versions newer than K8S_VERSIONS are checked against the
  versions that serve them). Without kubectl, every file a kustomization names must
  exist and parse, and the render is reported as skipped.
- The Helm chart (deploy/helm/devinject): with helm (DEVINJECT_HELM, or the one
  scripts/helm-build.sh built), `helm lint --strict` passes, and for each values file
  ci/<name>-values.yaml `helm template` renders the same objects as the kustomization it names
  (deploy/base for `base`, deploy/uninstall's DaemonSet for `uninstall`, deploy/overlays/<name>
  otherwise), the base and every overlay having one. Set aside in the comparison: Helm's own labels
  (helm.sh/chart, app.kubernetes.io/managed-by), the chart's checksum/profiles annotation and
  kustomize's hash suffix on the profiles ConfigMap (the two ways of rolling the pods when the
  profiles change), and the order of volumes, mounts and containers (named, not ordered; the
  engines mount parents before children whatever the order). Where the cluster serves the
  ServiceMonitor API (`--api-versions`), each path's render adds a Service over the node pods'
  metrics ports and a ServiceMonitor scraping them. Without helm the chart is reported as
  skipped.
- deploy/base/profiles/ holds exactly the repository's profiles/, every profile has an example
  pod asking for its resource, and the RuntimeClass handler is the installer's runtime name.

Usage: scripts/check-manifests.py [--require-kubectl] [--require-helm]
Exit 0 when everything holds.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib

import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S_VERSIONS = ["1.25.0", "1.29.0", "1.33.0", "1.34.0", "1.37.0"]
RUNTIME_NAME = "devinject"
SCHEDULER_NAME = "devinject-binpack"
# The kustomizations (under deploy/) rendered into plain manifests by scripts/render-manifests.sh.
RENDERED = {
    "base": "devinject.yaml",
    "overlays/nri": "devinject-nri.yaml",
    "overlays/webhook": "devinject-webhook.yaml",
    "overlays/dra": "devinject-dra.yaml",
}
# API versions newer than some of K8S_VERSIONS: their objects are checked against the versions
# that serve them, and at least against NEWEST.
NEWEST = "1.37.0"
INTRODUCED = {
    ("resource.k8s.io/v1", None): "1.34.0",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): "1.30.0",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): "1.30.0",
}

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL {msg}")


def docs_of(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def validate_objects(label, docs):
    for doc in docs:
        kind = doc.get("kind")
        name = doc.get("metadata", {}).get("name", "?")
        if kind == "KubeSchedulerConfiguration":
            check_scheduler_config(f"{label}: {kind}/{name}", doc)
            continue
        for version in versions_for(doc.get("apiVersion"), kind):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                fail(f"{label}: {kind}/{name} against {version}: {e.message} at {list(e.path)}")
            except kubernetes_validate.SchemaNotFoundError:
                fail(f"{label}: {kind}/{name}: no schema for {doc.get('apiVersion')} in {version}")
    print(f"ok   {label}: {len(docs)} object(s)")


def versions_for(api_version, kind):
    """The versions in K8S_VERSIONS (and NEWEST) that serve kind in api_version."""
    since = INTRODUCED.get((api_version, kind), INTRODUCED.get((api_version, None)))
    if since is None:
        return K8S_VERSIONS
    key = lambda v: tuple(int(x) for x in v.split("."))
    return sorted({v for v in K8S_VERSIONS + [NEWEST] if key(v) >= key(since)}, key=key)


def profiles():
    out = {}
    for p in sorted((ROOT / "profiles").glob("*.toml")):
        data = tomllib.loads(p.read_text())
        out[p.name] = data
    return out


# The top-level fields of KubeSchedulerConfiguration, by API version (the upstream types).
SCHEDULER_TOP_FIELDS = {
    "kubescheduler.config.k8s.io/v1": {
        "apiVersion", "kind", "clientConnection", "leaderElection", "profiles", "parallelism",
        "percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds",
        "extenders", "delayCacheUntilActive", "enableProfiling", "enableContentionProfiling",
        "featureGates"},
    "kubescheduler.config.k8s.io/v1beta1": {
        "apiVersion", "kind", "clientConnection", "leaderElection", "profiles",
        "parallelism", "percentageOfNodesToScore", "podInitialBackoffSeconds",
        "podMaxBackoffSeconds", "extenders", "healthzBindAddress", "metricsBindAddress",
        "enableProfiling", "enableContentionProfiling"},
}
# The resource weights of the devinject-binpack profile of every scheduler configuration checked,
# by label: they must all be the same.
scheduler_weights = {}


def check_scheduler_config(label, doc):
    """The KubeSchedulerConfiguration fields this repository uses, by the upstream types."""
    version = doc.get("apiVersion")
    known_top = SCHEDULER_TOP_FIELDS.get(version)
    if known_top is None:
        fail(f"{label}: apiVersion must be one of {sorted(SCHEDULER_TOP_FIELDS)}")
        return
    for k in doc:
        if k not in known_top:
            fail(f"{label}: unknown field {k}")
    found = False
    for prof in doc.get("profiles", []):
        for k in prof:
            if k not in {"schedulerName", "plugins", "pluginConfig", "percentageOfNodesToScore"}:
                fail(f"{label}: unknown profile field {k}")
        if prof.get("schedulerName") != SCHEDULER_NAME:
            continue
        found = True
        for pc in prof.get("pluginConfig", []):
            if set(pc) - {"name", "args"}:
                fail(f"{label}: unknown pluginConfig field in {pc}")
        if version.endswith("/v1"):
            resources = most_allocated_resources_v1(label, prof)
        else:
            resources = most_allocated_resources_v1beta1(label, prof)
        if resources is not None:
            scheduler_weights[label] = check_resources(label, resources)
    if not found:
        fail(f"{label}: no profile named {SCHEDULER_NAME}")
    print(f"ok   {label}")


def most_allocated_resources_v1(label, prof):
    """v1 (1.25+): NodeResourcesFit with the MostAllocated scoring strategy; its resources."""
    for pc in prof.get("pluginConfig", []):
        if pc.get("name") != "NodeResourcesFit":
            continue
        args = pc.get("args", {})
        if args.get("kind", "NodeResourcesFitArgs") != "NodeResourcesFitArgs":
            fail(f"{label}: NodeResourcesFit args kind {args.get('kind')}")
        strategy = args.get("scoringStrategy", {})
        if strategy.get("type") != "MostAllocated":
            fail(f"{label}: scoringStrategy.type is {strategy.get('type')}, not MostAllocated")
        return strategy.get("resources", [])
    fail(f"{label}: no NodeResourcesFit pluginConfig")
    return None


def most_allocated_resources_v1beta1(label, prof):
    """v1beta1 (1.19-1.21): the NodeResourcesMostAllocated score plugin enabled in place of
    NodeResourcesLeastAllocated, and the resources of its args."""
    score = prof.get("plugins", {}).get("score", {})
    for k in prof.get("plugins", {}):
        if k not in {"queueSort", "preFilter", "filter", "postFilter", "preScore", "score",
                     "reserve", "permit", "preBind", "bind", "postBind"}:
            fail(f"{label}: unknown plugins field {k}")
    enabled = {p.get("name"): p.get("weight", 1) for p in score.get("enabled", [])}
    disabled = {p.get("name") for p in score.get("disabled", [])}
    if "NodeResourcesMostAllocated" not in enabled:
        fail(f"{label}: the NodeResourcesMostAllocated score plugin is not enabled")
    if "NodeResourcesLeastAllocated" not in disabled:
        fail(f"{label}: the NodeResourcesLeastAllocated score plugin is not disabled")
    for name, weight in enabled.items():
        if not isinstance(weight, int) or weight < 1:
            fail(f"{label}: score plugin {name} has weight {weight}")
    for pc in prof.get("pluginConfig", []):
        if pc.get("name") != "NodeResourcesMostAllocated":
            continue
        args = pc.get("args", {})
        if args.get("kind", "NodeResourcesMostAllocatedArgs") != "NodeResourcesMostAllocatedArgs":
            fail(f"{label}: NodeResourcesMostAllocated args kind {args.get('kind')}")
        if set(args) - {"apiVersion", "kind", "resources"}:
            fail(f"{label}: unknown NodeResourcesMostAllocatedArgs field in {sorted(args)}")
        return args.get("resources", [])
    fail(f"{label}: no NodeResourcesMostAllocated pluginConfig")
    return None


def check_resources(label, resources):
    """Each resource's weight is 1..100 and every profile's resource is listed; returns the
    weights by resource."""
    weights = {}
    for r in resources:
        if set(r) - {"name", "weight"}:
            fail(f"{label}: unknown resource field in {r}")
        w = r.get("weight")
        if not isinstance(w, int) or not 1 <= w <= 100:
            fail(f"{label}: weight of {r.get('name')} must be 1..100")
        if r.get("name") in weights:
            fail(f"{label}: {r.get('name')} is listed twice")
        weights[r.get("name")] = w
    wanted = {p["resource"] for p in profiles().values()}
    missing = wanted - set(weights)
    if missing:
        fail(f"{label}: no MostAllocated weight for {sorted(missing)}")
    return weights


def check_scheduler_weights_agree():
    """Every shipped scheduler configuration weighs the same resources the same."""
    labels = sorted(scheduler_weights)
    for label in labels[1:]:
        if scheduler_weights[label] != scheduler_weights[labels[0]]:
            ours, theirs = scheduler_weights[label], scheduler_weights[labels[0]]
            diff = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
            fail(f"{label} and {labels[0]} weigh resources differently: {diff}")
    print(f"ok   {len(labels)} scheduler configurations weigh the same resources the same")


def kustomization_files(kdir):
    k = yaml.safe_load((kdir / "kustomization.yaml").read_text())
    files = list(k.get("resources", []))
    files += [p["path"] for p in k.get("patches", []) if "path" in p]
    files += k.get("components", [])
    for g in k.get("configMapGenerator", []):
        files += [f.split("=", 1)[-1] for f in g.get("files", [])]
    return k, files


def check_kustomizations(kubectl):
    kdirs = sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))
    for kdir in kdirs:
        label = str(kdir.relative_to(ROOT))
        _, files = kustomization_files(kdir)
        for f in files:
            target = (kdir / f).resolve()
            if not target.exists():
                fail(f"{label}: names {f}, which does not exist")
            elif target.is_file() and target.suffix in (".yaml", ".yml"):
                docs_of(target)
            elif target.is_file() and target.suffix == ".toml":
                tomllib.loads(target.read_text())
        if kubectl is None:
            print(f"skip {label}: kustomize render (no kubectl); referenced files exist and parse")
            continue
        if yaml.safe_load((kdir / "kustomization.yaml").read_text()).get("kind") == "Component":
            # A component renders only inside a kustomization that lists it.
            continue
        out = subprocess.run([kubectl, "kustomize", str(kdir)], capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"{label}: kubectl kustomize failed: {out.stderr.strip()}")
            continue
        rendered = [d for d in yaml.safe_load_all(out.stdout) if d is not None]
        validate_objects(f"{label} (rendered)", rendered)
        plain = RENDERED.get(kdir.relative_to(DEPLOY).as_posix())
        if plain is not None:
            check_rendered_file(label, plain, out.stdout)
        if kdir == DEPLOY / "base":
            check_rendered_base(rendered)
        if kdir == DEPLOY / "overlays/dra":
            check_rendered_dra(rendered)


def check_rendered_file(label, name, render):
    """deploy/`name` must be the render of the kustomization `label`, but for its comments."""
    plain = DEPLOY / name
    text = plain.read_text() if plain.exists() else ""
    body = "\n".join(l for l in text.splitlines() if not l.startswith("#")).strip()
    if body != render.strip():
        fail(f"deploy/{name} is not the render of {label}: run scripts/render-manifests.sh")
    else:
        print(f"ok   deploy/{name} is the render of {label}")


def check_rendered_dra(rendered):
    """The DRA overlay runs the driver instead of the device plugin, unprivileged, with its
    token, RBAC, the slice policy and a DeviceClass per profile."""
    kinds = {(d["kind"], d["metadata"]["name"]) for d in rendered}
    for want in [("ClusterRole", "devinject-dra"), ("ClusterRoleBinding", "devinject-dra"),
                 ("ValidatingAdmissionPolicy", "devinject-dra-resourceslices"),
                 ("ValidatingAdmissionPolicyBinding", "devinject-dra-resourceslices")]:
        if want not in kinds:
            fail(f"overlays/dra has no {want[0]}/{want[1]}")
    classes = {d["metadata"]["name"] for d in rendered if d["kind"] == "DeviceClass"}
    for name, data in profiles().items():
        profile = data.get("name", name.removesuffix(".toml"))
        if not any(c.startswith(f"{profile}.") for c in classes):
            fail(f"overlays/dra has no DeviceClass for profile {profile}")
    for d in rendered:
        if d["kind"] != "DaemonSet":
            continue
        names = [c["name"] for c in d["spec"]["template"]["spec"]["containers"]]
        if names != ["dra"]:
            fail(f"overlays/dra: the DaemonSet runs {names}, not the dra container alone")
        for c in d["spec"]["template"]["spec"]["containers"]:
            if c.get("securityContext", {}).get("privileged"):
                fail("overlays/dra: the driver must not be privileged")


def check_rendered_base(rendered):
    kinds = {(d["kind"], d["metadata"]["name"]) for d in rendered}
    for want in [("Namespace", "devinject-system"), ("ServiceAccount", "devinject"),
                 ("RuntimeClass", "devinject"), ("DaemonSet", "devinject")]:
        if want not in kinds:
            fail(f"the base has no {want[0]}/{want[1]}")
    for d in rendered:
        if d["kind"] == "RuntimeClass" and "namespace" in d["metadata"]:
            fail("RuntimeClass is cluster-scoped but got a namespace")
        if d["kind"] == "DaemonSet":
            spec = d["spec"]["template"]["spec"]
            if spec.get("priorityClassName") != "system-node-critical":
                fail("DaemonSet: priorityClassName must be system-node-critical")
            if not spec.get("tolerations"):
                fail("DaemonSet: no tolerations")
            plugin = spec["containers"][0]
            if "readinessProbe" not in plugin or "livenessProbe" not in plugin:
                fail("DaemonSet: the plugin needs readiness and liveness probes")
            if plugin.get("securityContext", {}).get("privileged"):
                fail("DaemonSet: the plugin must not be privileged")
            paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
            for p in ["/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources",
                      "/dev", "/sys", "/opt/devinject", "/etc/devinject", "/etc/containerd"]:
                if p not in paths:
                    fail(f"DaemonSet: no hostPath volume for {p}")


def check_profiles_and_examples():
    shipped = profiles()
    copies = {p.name: p.read_bytes() for p in (DEPLOY / "base/profiles").glob("*.toml")}
    for name in sorted(set(shipped) | set(copies)):
        src = ROOT / "profiles" / name
        if name not in copies:
            fail(f"deploy/base/profiles/{name} is missing (copy profiles/{name})")
        elif not src.exists():
            fail(f"deploy/base/profiles/{name} has no profiles/{name}")
        elif copies[name] != src.read_bytes():
            fail(f"deploy/base/profiles/{name} differs from profiles/{name}")
    k = yaml.safe_load((DEPLOY / "base/kustomization.yaml").read_text())
    listed = {pathlib.Path(f).name for g in k.get("configMapGenerator", []) for f in g["files"]}
    if listed != set(shipped):
        fail(f"the profiles ConfigMap lists {sorted(listed)}, profiles/ has {sorted(shipped)}")
    for fname, data in shipped.items():
        ex = DEPLOY / "examples" / f"{data['name']}.yaml"
        if not ex.exists():
            fail(f"no example pod deploy/examples/{ex.name} for profile {data['name']}")
            continue
        pods = docs_of(ex)
        validate_objects(str(ex.relative_to(ROOT)), pods)
        pod = pods[0]
        limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
        if data["resource"] not in limits:
            fail(f"{ex.name}: does not ask for {data['resource']}")
        if pod["spec"].get("runtimeClassName") != RUNTIME_NAME:
            fail(f"{ex.name}: runtimeClassName is not {RUNTIME_NAME}")
    rc = docs_of(DEPLOY / "base/runtimeclass.yaml")[0]
    if rc.get("handler") != RUNTIME_NAME:
        fail(f"RuntimeClass handler {rc.get('handler')} is not {RUNTIME_NAME}")


def find_kubectl():
    """kubectl with a kustomize that knows `patches` (v4+, kubectl 1.24+), or None."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    out = subprocess.run([kubectl, "version", "--client", "-o", "json"],
                         capture_output=True, text=True)
    try:
        import json
        version = json.loads(out.stdout).get("kustomizeVersion", "")
    except ValueError:
        version = ""
    major = version.lstrip("v").split(".")[0]
    if not major.isdigit() or int(major) < 4:
        print(f"note {kubectl} has kustomize {version or 'unknown'}; v4+ is needed to render")
        return None
    return kubectl


CHART = DEPLOY / "helm/devinject"
# Labels and annotations only one of the two renders has (see the docstring).
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
PROFILES_HASH = re.compile(r"^(devinject-profiles)-[a-z0-9]{10}$")
NAMED_LISTS = ("volumes", "volumeMounts", "containers", "initContainers")


def comparable(obj):
    """`obj` with what only one of the renders has set aside (see the docstring)."""
    if isinstance(obj, list):
        items = [comparable(v) for v in obj]
        return items
    if not isinstance(obj, dict):
        if isinstance(obj, str):
            m = PROFILES_HASH.match(obj)
            return m.group(1) if m else obj
        return obj
    out = {}
    for k, v in obj.items():
        if k == "labels" and isinstance(v, dict):
            v = {lk: lv for lk, lv in v.items() if lk not in HELM_LABELS}
            if not v:
                continue
        if k == "annotations" and isinstance(v, dict):
            v = {ak: av for ak, av in v.items() if ak != "checksum/profiles"}
            if not v:
                continue
        v = comparable(v)
        if k in NAMED_LISTS and isinstance(v, list):
            v = sorted(v, key=lambda i: i.get("name", "") + "\0" + i.get("mountPath", ""))
        out[k] = v
    return out


def keyed(docs):
    return {(d["kind"], d["metadata"].get("namespace", ""), comparable(d["metadata"]["name"])):
            comparable(d) for d in docs}


def first_difference(a, b, path=""):
    """Where `a` and `b` first differ, as a path and the two values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: {a.get(k, '(absent)')!r} != {b.get(k, '(absent)')!r}"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def find_helm():
    """helm from DEVINJECT_HELM, or the one scripts/helm-build.sh built, or None."""
    helm = os.environ.get("DEVINJECT_HELM")
    if helm:
        if not os.access(helm, os.X_OK):
            fail(f"DEVINJECT_HELM={helm} is not an executable: unset it, or point it at helm")
            return None
        return helm
    out = subprocess.run([str(ROOT / "scripts/helm-build.sh"), "--if-built"],
                         capture_output=True, text=True)
    return f"{out.stdout.strip()}/helm" if out.returncode == 0 else None


def check_chart(helm, kubectl):
    if helm is None or kubectl is None:
        print("skip deploy/helm/devinject: no helm (scripts/helm-build.sh) or kubectl")
        return
    out = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"helm lint --strict deploy/helm/devinject: {out.stdout}{out.stderr}")
    else:
        print("ok   helm lint --strict deploy/helm/devinject")
    kdirs = {p.parent.relative_to(DEPLOY).as_posix()
             for p in [DEPLOY / "base/kustomization.yaml",
                       *DEPLOY.glob("overlays/*/kustomization.yaml")]}
    covered = set()
    for values in sorted((CHART / "ci").glob("*-values.yaml")):
        name = values.name.removesuffix("-values.yaml")
        out = subprocess.run([helm, "template", "devinject", str(CHART), "--namespace",
                              "devinject-system", "-f", str(values)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"helm template -f ci/{values.name}: {out.stderr.strip()}")
            continue
        chart = [d for d in yaml.safe_load_all(out.stdout) if d is not None]
        validate_objects(f"deploy/helm/devinject with ci/{values.name}", chart)
        if name == "uninstall":
            label = "deploy/uninstall/daemonset.yaml"
            want = docs_of(DEPLOY / "uninstall/daemonset.yaml")
            chart = [d for d in chart if d["kind"] == "DaemonSet"]
        else:
            kdir = "base" if name == "base" else f"overlays/{name}"
            label = f"deploy/{kdir}"
            covered.add(kdir)
            if kdir not in kdirs:
                fail(f"deploy/helm/devinject/ci/{values.name} names no kustomization ({label})")
                continue
            render = subprocess.run([kubectl, "kustomize", str(DEPLOY / kdir)],
                                    capture_output=True, text=True)
            want = [d for d in yaml.safe_load_all(render.stdout) if d is not None]
        a, b = keyed(chart), keyed(want)
        problems = [f"only helm renders {k[0]}/{k[2]}" for k in sorted(set(a) - set(b))]
        problems += [f"only {label} has {k[0]}/{k[2]}" for k in sorted(set(b) - set(a))]
        for k in sorted(set(a) & set(b)):
            d = first_difference(a[k], b[k])
            if d:
                problems.append(f"{k[0]}/{k[2]} differs at {d} (helm != kustomize)")
        if problems:
            for p in problems:
                fail(f"helm template -f ci/{values.name} against {label}: {p}")
        else:
            print(f"ok   helm template -f ci/{values.name} renders the objects of {label}")
    check_service_monitor(helm)
    for kdir in sorted(kdirs - covered):
        fail(f"deploy/{kdir} has no values file deploy/helm/devinject/ci/"
             f"{'base' if kdir == 'base' else kdir.removeprefix('overlays/')}-values.yaml")


def check_service_monitor(helm):
    """Where the cluster serves the Prometheus Operator's ServiceMonitor, the chart adds a
    headless Service over the node pods' metrics ports and a ServiceMonitor scraping them, for
    each path; elsewhere neither (the comparison with kustomize holds that)."""
    for path, ports in [("runtime", {"device-plugin": 9470}),
                        ("nri", {"device-plugin": 9470, "nri": 9471}),
                        ("dra", {"dra": 9473})]:
        label = f"helm template --set path={path} with the ServiceMonitor API"
        out = subprocess.run([helm, "template", "devinject", str(CHART),
                              "--namespace", "devinject-system", "--set", f"path={path}",
                              "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"{label}: {out.stderr.strip()}")
            continue
        docs = [d for d in yaml.safe_load_all(out.stdout) if d is not None]
        by_kind = {d["kind"]: d for d in docs
                   if d["kind"] in ("Service", "ServiceMonitor", "DaemonSet")}
        service, monitor, ds = (by_kind.get(k) for k in ("Service", "ServiceMonitor", "DaemonSet"))
        if service is None or monitor is None:
            fail(f"{label}: renders no {'Service' if service is None else 'ServiceMonitor'}")
            continue
        validate_objects(label, [service])
        pod = ds["spec"]["template"]
        if any(pod["metadata"]["labels"].get(k) != v
               for k, v in service["spec"]["selector"].items()):
            fail(f"{label}: the Service's selector {service['spec']['selector']} misses the pods")
        served = {p["containerPort"] for c in pod["spec"]["containers"]
                  for p in c.get("ports", []) if p["name"] == "metrics"}
        named = {p["name"]: p["port"] for p in service["spec"]["ports"]}
        if named != ports or set(named.values()) != served:
            fail(f"{label}: the Service's ports {named} are not the pods' metrics ports "
                 f"{sorted(served)}")
        scraped = {e["port"] for e in monitor["spec"]["endpoints"]}
        selects = all(service["metadata"]["labels"].get(k) == v
                      for k, v in monitor["spec"]["selector"]["matchLabels"].items())
        if scraped != set(named) or not selects:
            fail(f"{label}: the ServiceMonitor scrapes {sorted(scraped)}, "
                 "not the ports of the Service it must select")
        else:
            print(f"ok   {label}: a Service and a ServiceMonitor over the ports {named}")


def main():
    kubectl = find_kubectl()
    helm = find_helm()
    if "--require-helm" in sys.argv and helm is None:
        print("helm is required for --require-helm (scripts/helm-build.sh, or DEVINJECT_HELM)")
        return 1
    if "--require-kubectl" in sys.argv and kubectl is None:
        print("kubectl 1.24+ (kustomize v4+) is required for --require-kubectl")
        return 1
    for f in sorted((DEPLOY / "base").glob("*.yaml")):
        if f.name != "kustomization.yaml":
            validate_objects(str(f.relative_to(ROOT)), docs_of(f))
    for f in sorted((DEPLOY / "uninstall").glob("*.yaml")):
        validate_objects(str(f.relative_to(ROOT)), docs_of(f))
    for f in [DEPLOY / "scheduler/kube-scheduler-config.yaml",
              DEPLOY / "scheduler/kube-scheduler-config-v1beta1.yaml",
              DEPLOY / "scheduler/second-scheduler/config.yaml"]:
        validate_objects(str(f.relative_to(ROOT)), docs_of(f))
    check_scheduler_weights_agree()
    for f in ["rbac.yaml", "deployment.yaml"]:
        p = DEPLOY / "scheduler/second-scheduler" / f
        validate_objects(str(p.relative_to(ROOT)), docs_of(p))
    check_kustomizations(kubectl)
    check_chart(helm, kubectl)
    check_profiles_and_examples()
    if failures:
        print(f"{len(failures)} problem(s)")
        return 1
    print("all manifests check out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
