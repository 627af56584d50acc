#!/usr/bin/env python3
"""Validate fabperf's Kubernetes files against schemas.

Built-in kinds: the upstream Kubernetes OpenAPI schemas shipped by the PyPI
package kubernetes-validate (strict: unknown fields are errors).
NetworkAttachmentDefinition and NicClusterPolicy: the CRD schemas in
ci/k8s/schemas/ (authored from the upstream CRDs, see their $comment), with
ObjectMeta taken from the upstream Kubernetes definitions. Embedded JSON
(NAD spec.config, the RDMA shared device plugin config.json in the ConfigMap
and NicClusterPolicy) and the CNI Helm values are checked too.

Usage: validate.py [--quiet] PATH...   (files or directories, searched recursively)
Exit status: 0 when every document is valid, 1 otherwise.
"""

import json
import os
import sys

import jsonschema
import kubernetes_validate
import referencing
import yaml
from kubernetes_validate import utils as kv

K8S_VERSION = "1.37.0"
HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = os.path.join(HERE, "schemas")


def load_schema(name):
    with open(os.path.join(SCHEMAS, name)) as f:
        return json.load(f)


def k8s_definitions():
    """The upstream definitions document (for ObjectMeta references)."""
    return kv.schema_contents(
        "kubernetes-json-schema/v%s-local-strict/_definitions.json" % K8S_VERSION, K8S_VERSION
    )


REGISTRY = referencing.Registry().with_resource(
    "https://kubernetes.io/api/_definitions.json",
    referencing.Resource.from_contents(k8s_definitions()),
)


def validator(name):
    schema = load_schema(name)
    return jsonschema.Draft202012Validator(schema, registry=REGISTRY)


CRDS = {
    ("k8s.cni.cncf.io/v1", "NetworkAttachmentDefinition"): validator("network-attachment-definition-v1.json"),
    ("mellanox.com/v1alpha1", "NicClusterPolicy"): validator("nicclusterpolicy-v1alpha1.json"),
    ("nv-ipam.nvidia.com/v1alpha1", "IPPool"): validator("nv-ipam-ippool-v1alpha1.json"),
    ("sriovnetwork.openshift.io/v1", "SriovNetworkNodePolicy"): validator("sriovnetworknodepolicy-v1.json"),
    ("sriovnetwork.openshift.io/v1", "SriovNetwork"): validator("sriovnetwork-v1.json"),
    ("sriovnetwork.openshift.io/v1", "SriovIBNetwork"): validator("sriovibnetwork-v1.json"),
    ("sriovnetwork.openshift.io/v1", "SriovNetworkPoolConfig"): validator("sriovnetworkpoolconfig-v1.json"),
}

# The network-operator release the CRD schemas were authored from: every
# component version a NicClusterPolicy names must be that release's.
NCP_RELEASE = load_schema("nicclusterpolicy-v1alpha1.json")["x-fabperf-upstream"]["version"]
NCP_COMPONENT_VERSION = "network-operator-" + NCP_RELEASE


def ncp_version_errors(doc):
    out = []
    spec = doc.get("spec") or {}
    def walk(path, node):
        if isinstance(node, dict):
            if "image" in node and "version" in node and node["version"] != NCP_COMPONENT_VERSION:
                out.append("%s.version: %r, but the schema is network-operator %s's API (component version %s); "
                           "re-author ci/k8s/schemas from the new release or pin %s"
                           % (path, node["version"], NCP_RELEASE, NCP_COMPONENT_VERSION, NCP_COMPONENT_VERSION))
            for k, v in node.items():
                walk(path + "." + k, v)
    walk("spec", spec)
    return out
CNI_CONFIG = validator("cni-config.json")
CNI_IPAM = jsonschema.Draft202012Validator(load_schema("cni-config.json")["properties"]["ipam"], registry=REGISTRY)
PLUGIN_CONFIG = validator("rdma-shared-dev-plugin-config.json")
VALUES = {
    "antrea-values.yaml": validator("helm-values-antrea.json"),
    "calico-values.yaml": validator("helm-values-calico.json"),
    "cilium-values.yaml": validator("helm-values-cilium.json"),
    "flannel-values.yaml": validator("helm-values-flannel.json"),
}


def schema_errors(v, doc):
    out = []
    for e in sorted(v.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(p) for p in e.absolute_path) or "(root)"
        out.append("%s: %s" % (path, e.message))
    return out


def embedded_json(text, v, where):
    try:
        doc = json.loads(text)
    except ValueError as e:
        return ["%s: not JSON: %s" % (where, e)]
    return ["%s: %s" % (where, m) for m in schema_errors(v, doc)]


def check_object(doc):
    """Errors for one Kubernetes object (empty list when valid)."""
    api, kind = doc.get("apiVersion"), doc.get("kind")
    if (api, kind) in CRDS:
        errs = schema_errors(CRDS[(api, kind)], doc)
        if errs:
            return errs
        if kind == "NetworkAttachmentDefinition":
            return embedded_json(doc["spec"]["config"], CNI_CONFIG, "spec.config")
        if kind in ("SriovNetwork", "SriovIBNetwork"):
            ipam = doc["spec"].get("ipam")
            if ipam is not None:
                errs = embedded_json(ipam, CNI_IPAM, "spec.ipam")
                if errs:
                    return errs
            meta = doc["spec"].get("metaPlugins")
            if meta is not None:
                try:
                    m = json.loads(meta)
                except ValueError as e:
                    return ["spec.metaPlugins: not JSON: %s" % e]
                if not isinstance(m, dict) or not isinstance(m.get("type"), str):
                    return ["spec.metaPlugins: must be one CNI plugin object with a type"]
            return []
        if kind != "NicClusterPolicy":
            return []
        errs = ncp_version_errors(doc)
        if errs:
            return errs
        cfg = doc["spec"].get("rdmaSharedDevicePlugin", {}).get("config")
        if cfg is not None:
            return embedded_json(cfg, PLUGIN_CONFIG, "spec.rdmaSharedDevicePlugin.config")
        return []
    try:
        kv.validate(doc, K8S_VERSION, strict=True)
    except kv.ValidationError as e:
        path = ".".join(str(p) for p in e.path) or "(root)"
        return ["%s: %s" % (path, e.message)]
    except kv.SchemaNotFoundError as e:
        return [e.message]
    if kind == "ConfigMap" and doc.get("metadata", {}).get("name") == "rdma-devices":
        data = doc.get("data") or {}
        if "config.json" not in data:
            return ["data: the rdma-devices ConfigMap needs the key config.json"]
        return embedded_json(data["config.json"], PLUGIN_CONFIG, "data.config.json")
    return []


def check_file(path):
    """(documents checked, list of error lines) for one file."""
    base = os.path.basename(path)
    with open(path) as f:
        text = f.read()
    if path.endswith(".json"):
        if base == "config.json":
            errs = ["%s: %s" % (path, m) for m in embedded_json(text, PLUGIN_CONFIG, "(file)")]
            if not errs and not QUIET:
                print("ok    %s: rdma shared device plugin config" % path)
            return 1, errs
        return 0, ["%s: unrecognised JSON file (expected the device plugin config.json)" % path]
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        return 0, ["%s: not YAML: %s" % (path, e)]
    if not docs:
        return 0, ["%s: no YAML documents" % path]
    errors, n = [], 0
    for i, doc in enumerate(docs):
        n += 1
        if not isinstance(doc, dict):
            errors.append("%s: document %d is not a mapping" % (path, i + 1))
            continue
        values_kind = next((k for k in VALUES if base.endswith(k)), None)
        if values_kind and "kind" not in doc:
            label = "helm values %s" % values_kind
            errs = schema_errors(VALUES[values_kind], doc)
        elif "apiVersion" in doc and "kind" in doc:
            name = (doc.get("metadata") or {}).get("name", "?")
            label = "%s/%s" % (doc["kind"], name)
            errs = check_object(doc)
        else:
            label = "document %d" % (i + 1)
            errs = ["neither a Kubernetes object (apiVersion/kind) nor known Helm values"]
        if errs:
            errors.extend("%s: %s: %s" % (path, label, m) for m in errs)
        elif not QUIET:
            print("ok    %s: %s" % (path, label))
    return n, errors


def files(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in sorted(os.walk(p)):
                for n in sorted(names):
                    if n.endswith((".yaml", ".yml", ".json")):
                        yield os.path.join(root, n)
        else:
            yield p


QUIET = False


def main(argv):
    global QUIET
    args = [a for a in argv if a != "--quiet"]
    QUIET = len(args) != len(argv)
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    total, errors = 0, []
    for f in files(args):
        n, errs = check_file(f)
        total += n
        errors.extend(errs)
    for e in errors:
        print("ERROR " + e)
    if total == 0:
        print("ERROR nothing to validate in %s" % " ".join(args))
        return 1
    print("%d document(s) checked against Kubernetes %s schemas (kubernetes-validate %s), %d error(s)"
          % (total, K8S_VERSION, kubernetes_validate.__version__ if hasattr(kubernetes_validate, "__version__") else "?", len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
