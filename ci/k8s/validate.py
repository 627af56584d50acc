#!/usr/bin/env python3
"""Validate fabperf's Kubernetes files against schemas.

Built-in kinds: the upstream Kubernetes OpenAPI schemas shipped by the PyPI
package kubernetes-validate (strict: unknown fields are errors).
NetworkAttachmentDefinition and NicClusterPolicy: the CRD schemas in
ci/k8s/schemas/ (authored from the upstream CRDs, see their $comment), with
ObjectMeta taken from the upstream Kubernetes definitions. Embedded JSON
(NAD spec.config, the RDMA shared device plugin config.json in the ConfigMap
and NicClusterPolicy) and the CNI Helm values are checked too, and so are the
Job and CronJob rules the API server enforces beyond the schema (pod failure
policy, restart policy, generated jobTemplate selector, schedule TZ, timeZone).

Usage: validate.py [--quiet] PATH...   (files or directories, searched recursively)
Exit status: 0 when every document is valid, 1 otherwise.
"""

import json
import os
import re
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
    if (api, kind) in (("batch/v1", "Job"), ("batch/v1", "CronJob")):
        return batch_errors(doc)
    if kind == "ConfigMap" and doc.get("metadata", {}).get("name") == "rdma-devices":
        data = doc.get("data") or {}
        if "config.json" not in data:
            return ["data: the rdma-devices ConfigMap needs the key config.json"]
        return embedded_json(data["config.json"], PLUGIN_CONFIG, "data.config.json")
    return []


# What the API server checks in a Job beyond its OpenAPI schema
# (kubernetes pkg/apis/batch/validation/validation.go: validateJobSpec,
# validatePodFailurePolicy*, ValidateJobTemplateSpec, validateScheduleFormat,
# validateTimeZone); kubernetes-validate only has the schema.
POD_FAILURE_ACTIONS = {"Count", "FailJob", "Ignore", "FailIndex"}
CONDITION_STATUSES = {"True", "False", "Unknown"}


def job_spec_errors(spec, where):
    out = []
    pod = (spec.get("template") or {}).get("spec") or {}
    restart = pod.get("restartPolicy")
    if restart not in ("OnFailure", "Never"):
        out.append("%s.template.spec.restartPolicy: %r; a Job's pods need OnFailure or Never" % (where, restart))
    pfp = spec.get("podFailurePolicy")
    if pfp is None:
        return out
    if restart != "Never":
        out.append("%s.template.spec.restartPolicy: only Never is supported with podFailurePolicy" % where)
    names = {c.get("name") for c in pod.get("containers", []) + pod.get("initContainers", [])}
    rules = pfp.get("rules") or []
    if len(rules) > 20:
        out.append("%s.podFailurePolicy.rules: more than 20" % where)
    for i, rule in enumerate(rules):
        at = "%s.podFailurePolicy.rules[%d]" % (where, i)
        action = rule.get("action")
        if action not in POD_FAILURE_ACTIONS:
            out.append("%s.action: %r is not one of %s" % (at, action, sorted(POD_FAILURE_ACTIONS)))
        if action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            out.append("%s.action: FailIndex requires backoffLimitPerIndex" % at)
        codes, conds = rule.get("onExitCodes"), rule.get("onPodConditions")
        if (codes is None) == (not conds):
            out.append("%s: exactly one of onExitCodes and onPodConditions is required" % at)
        if codes is not None:
            op, values = codes.get("operator"), codes.get("values") or []
            if op not in ("In", "NotIn"):
                out.append("%s.onExitCodes.operator: %r is not In or NotIn" % (at, op))
            cn = codes.get("containerName")
            if cn is not None and cn not in names:
                out.append("%s.onExitCodes.containerName: %r must be one of the pod's containers %s" % (at, cn, sorted(names)))
            if not values or len(values) > 255:
                out.append("%s.onExitCodes.values: 1 to 255 values are required" % at)
            if op == "In" and 0 in values:
                out.append("%s.onExitCodes.values: must not be 0 for the In operator" % at)
            if len(set(values)) != len(values):
                out.append("%s.onExitCodes.values: duplicate values" % at)
            if values != sorted(values):
                out.append("%s.onExitCodes.values: must be ordered" % at)
        for j, c in enumerate(conds or []):
            if c.get("status") not in CONDITION_STATUSES:
                out.append("%s.onPodConditions[%d].status: %r is not one of %s" % (at, j, c.get("status"), sorted(CONDITION_STATUSES)))
    return out


def time_zone_errors(tz, where):
    if tz is None:
        return []
    if tz == "" or tz.lower() == "local":
        return ["%s: must be an explicit IANA zone" % where]
    for part in tz.split("/"):
        if part in (".", "..") or part.startswith("-") or not re.fullmatch(r"[A-Za-z.\-_0-9+]{1,14}", part):
            return ["%s: unknown time zone %s" % (where, tz)]
    return []


def batch_errors(doc):
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind == "Job":
        return job_spec_errors(spec, "spec")
    out = []
    if "TZ" in spec.get("schedule", ""):
        out.append("spec.schedule: cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
    out += time_zone_errors(spec.get("timeZone"), "spec.timeZone")
    jt = (spec.get("jobTemplate") or {}).get("spec") or {}
    if jt.get("selector") is not None:
        out.append("spec.jobTemplate.spec.selector: `selector` will be auto-generated")
    return out + job_spec_errors(jt, "spec.jobTemplate.spec")


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
