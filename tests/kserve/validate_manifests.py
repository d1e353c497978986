#!/usr/bin/env python3
"""Validates sluice's Kubernetes manifests offline, as strictly as an API server would.

Every YAML document of every `*.yaml` file given (default: `deploy/kserve/*.yaml` of the
repository) is checked against a schema, and a document whose kind has none fails:

- built-in kinds (Secret, HorizontalPodAutoscaler, ...) with `kubernetes-validate` in
  strict mode (unknown fields rejected) against the Kubernetes version it ships
  (`--kubernetes-version`, default the newest it has; its schemas are in the package, no
  network);
- KServe's kinds (ClusterServingRuntime, ServingRuntime, InferenceService, TrainedModel)
  against the `openAPIV3Schema` of their CustomResourceDefinitions (KServe v0.20.0, the
  directory `--crds`, else `$SLUICE_KSERVE_CRDS`, else `<repo>/../shared/kserve-crds-v0.20.0`),
  with `jsonschema`. Unknown fields are rejected as `kubectl apply` (field validation
  `Strict`) rejects them: every object schema with `properties`, no `additionalProperties`
  and no `x-kubernetes-preserve-unknown-fields` gets `additionalProperties: false`. The
  document's `apiVersion` must be the CRD's group and a served version, and its
  `metadata` must be an ObjectMeta (strict, from kubernetes-validate).

Prints `ok <file> <kind> <name>` or `FAIL <file> <kind> <name>: <path>: <message>` per
document, then `<n> passed, <m> failed`; exits 1 if anything failed, 2 on a usage error.
"""

import argparse
import copy
import glob
import json
import os
import sys

import importlib_resources
import jsonschema
import kubernetes_validate
import referencing
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CRDS = os.path.join(os.path.dirname(REPO), "shared", "kserve-crds-v0.20.0")
# libyaml's loader where PyYAML has it: the InferenceService CRD alone is 39,000 lines.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def strict(schema):
    """A copy of an openAPIV3Schema in which objects with declared properties take no others."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields", False)
        ):
            node["additionalProperties"] = False
        for key in ("properties", "patternProperties"):
            for child in node.get(key, {}).values():
                walk(child)
        for key in ("items", "additionalProperties", "not"):
            if isinstance(node.get(key), (dict, list)):
                walk(node[key])
        for key in ("anyOf", "allOf", "oneOf"):
            walk(node.get(key, []))

    walk(schema)
    return schema


def load_crds(directory):
    """{(group, kind): {"versions": {version: strict schema}, "scope": ...}} of a CRD directory."""
    crds = {}
    paths = sorted(glob.glob(os.path.join(directory, "*.yaml")))
    if not paths:
        raise SystemExit(f"validate_manifests: no CRDs (*.yaml) in {directory} (--crds or SLUICE_KSERVE_CRDS)")
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for doc in yaml.load_all(f, Loader=LOADER):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                versions = {
                    v["name"]: strict(v["schema"]["openAPIV3Schema"])
                    for v in spec["versions"]
                    if v.get("served", False)
                }
                crds[(spec["group"], spec["names"]["kind"])] = {"versions": versions, "scope": spec["scope"]}
    return crds


class ObjectMeta:
    """ObjectMeta's strict schema from kubernetes-validate, for the custom resources' metadata."""

    def __init__(self, version):
        base = importlib_resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
        directory = base.joinpath(f"v{version}-local-strict")
        meta = json.loads(directory.joinpath("objectmeta-meta-v1.json").read_text())
        definitions = json.loads(directory.joinpath("_definitions.json").read_text())
        registry = referencing.Registry().with_resources(
            [
                ("objectmeta-meta-v1.json", referencing.Resource.from_contents(meta)),
                (definitions["$id"], referencing.Resource.from_contents(definitions)),
            ]
        )
        registry = referencing.Resource.from_contents(definitions) @ registry
        self.validator = jsonschema.Draft202012Validator(meta, registry=registry)

    def errors(self, metadata):
        return self.validator.iter_errors(metadata)


def where(error, prefix=()):
    parts = list(prefix) + list(error.absolute_path)
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def check_custom(doc, crd, meta):
    """Error strings of a KServe document against its CRD."""
    group = doc["apiVersion"].split("/")[0] if "/" in doc["apiVersion"] else ""
    version = doc["apiVersion"].split("/", 1)[1] if "/" in doc["apiVersion"] else doc["apiVersion"]
    served = sorted(crd["versions"])
    if version not in crd["versions"]:
        return [
            f"apiVersion: {doc['apiVersion']} is not served for {doc['kind']} "
            f"(served: {', '.join(f'{group}/{v}' for v in served)})"
        ]
    problems = []
    validator = jsonschema.Draft202012Validator(crd["versions"][version])
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        problems.append(f"{where(error)}: {error.message}")
    if isinstance(doc.get("metadata"), dict):
        for error in meta.errors(doc["metadata"]):
            problems.append(f"{where(error, ('metadata',))}: {error.message}")
        if crd["scope"] == "Cluster" and "namespace" in doc["metadata"]:
            problems.append(f"metadata.namespace: {doc['kind']} is cluster-scoped")
    else:
        problems.append("metadata: missing")
    return problems


def check_builtin(doc, version):
    """Error strings of a built-in kind with kubernetes-validate (strict), or None if it has no schema."""
    try:
        kubernetes_validate.validate(doc, version, strict=True)
        return []
    except kubernetes_validate.ValidationError as error:
        return [f"{where(error)}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return None


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="YAML files (default: deploy/kserve/*.yaml of the repository)")
    parser.add_argument("--crds", default=os.environ.get("SLUICE_KSERVE_CRDS") or DEFAULT_CRDS)
    parser.add_argument("--kubernetes-version", default=kubernetes_validate.utils.latest_version())
    args = parser.parse_args(argv)

    files = args.files or sorted(glob.glob(os.path.join(REPO, "deploy", "kserve", "*.yaml")))
    if not files:
        print("validate_manifests: no YAML files to validate", file=sys.stderr)
        return 2
    crds = load_crds(args.crds)
    crd_kinds = {kind: group for (group, kind) in crds}
    version = args.kubernetes_version
    meta = ObjectMeta(version)
    print(
        f"# Kubernetes {version} (kubernetes-validate {kubernetes_validate.__version__}, strict); "
        f"CRDs from {args.crds}: {', '.join(sorted(crd_kinds))}"
    )

    passed = failed = 0
    for path in files:
        shown = os.path.relpath(path, REPO) if os.path.abspath(path).startswith(REPO + os.sep) else path
        try:
            with open(path, encoding="utf-8") as f:
                docs = [d for d in yaml.safe_load_all(f) if d is not None]
        except (OSError, yaml.YAMLError) as error:
            print(f"FAIL {shown}: {error}")
            failed += 1
            continue
        if not docs:
            print(f"FAIL {shown}: no YAML documents")
            failed += 1
        for doc in docs:
            if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str) or not isinstance(
                doc.get("apiVersion"), str
            ):
                print(f"FAIL {shown}: a document without apiVersion and kind")
                failed += 1
                continue
            kind = doc["kind"]
            name = (doc.get("metadata") or {}).get("name", "<unnamed>")
            group = doc["apiVersion"].split("/")[0] if "/" in doc["apiVersion"] else ""
            if (group, kind) in crds:
                problems = check_custom(doc, crds[(group, kind)], meta)
            elif kind in crd_kinds:
                problems = [f"apiVersion: {doc['apiVersion']}: {kind} belongs to the group {crd_kinds[kind]}"]
            else:
                problems = check_builtin(doc, version)
                if problems is None:
                    problems = [
                        f"no schema for kind {kind} ({doc['apiVersion']}): not a Kubernetes {version} "
                        f"built-in kind nor one of the CRDs in {args.crds}"
                    ]
            if problems:
                failed += 1
                for problem in problems:
                    print(f"FAIL {shown} {kind} {name}: {problem}")
            else:
                passed += 1
                print(f"ok {shown} {kind} {name}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
