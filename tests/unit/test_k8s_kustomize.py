"""The kustomizations of k8s/, rendered by kustomize itself: the base renders to exactly the documents of
its files (no transformer changes them), and every overlay renders to documents the strict schemas
accept, with no placeholder of the base left and nothing changed but what the overlay sets (the image,
the bucket, the storage class, the Prometheus release label).

kustomize is a Go program: `GOBIN=/usr/local/bin go install sigs.k8s.io/kustomize/kustomize/v5@v5.8.2`
(the Go module proxy; about 2 minutes of compiling, one 30 MB binary; docs/decisions/3840). The tests
look for $KUSTOMIZE, then `kustomize` on PATH, then Go's default install folder, and skip without it.
"""
from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_k8s_manifests import BASE, DOCS, K8S, Loader, schema_errors

KUSTOMIZE_VERSION = "v5.8.2"
INSTALL = f"GOBIN=/usr/local/bin go install sigs.k8s.io/kustomize/kustomize/v5@{KUSTOMIZE_VERSION}"
OVERLAYS = sorted(path.parent for path in (K8S / "overlays").glob("*/kustomization.yaml"))
PLACEHOLDERS = ("registry.example.org", "CHANGE-ME", "example.org/crawler")


def kustomize_binary() -> str | None:
    candidates = [os.environ.get("KUSTOMIZE"), shutil.which("kustomize"),
                  str(Path(os.environ.get("GOPATH", Path.home() / "go")) / "bin" / "kustomize")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


KUSTOMIZE = kustomize_binary()
pytestmark = pytest.mark.skipif(KUSTOMIZE is None, reason=f"kustomize is not installed (install it: {INSTALL})")


def render(folder: Path) -> list[dict[str, Any]]:
    out = subprocess.run([KUSTOMIZE, "build", str(folder)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.load_all(out.stdout, Loader=Loader) if doc is not None]


def _key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


@pytest.fixture(scope="module")
def base() -> dict[tuple[str, str], dict[str, Any]]:
    return {_key(doc): doc for doc in render(BASE)}


@pytest.fixture(scope="module", params=OVERLAYS, ids=[path.name for path in OVERLAYS])
def overlay(request) -> tuple[Path, dict[tuple[str, str], dict[str, Any]]]:
    return request.param, {_key(doc): doc for doc in render(request.param)}


def test_there_is_an_overlay():
    assert [path.name for path in OVERLAYS] == ["local"] or len(OVERLAYS) > 1


def test_base_renders_to_exactly_its_files(base):
    files = {_key(doc): doc for _, _, doc in DOCS}
    assert len(files) == len(DOCS), "(kind, name) is unique"
    assert base == files


def test_overlay_renders_to_valid_documents(overlay):
    _, docs = overlay
    errors = {f"{kind}/{name}": schema_errors(doc) for (kind, name), doc in docs.items()}
    assert {key: found for key, found in errors.items() if found} == {}


def test_overlay_leaves_no_placeholder(overlay):
    _, docs = overlay
    text = yaml.safe_dump(list(docs.values()))
    assert not [p for p in PLACEHOLDERS if p in text]


def _settings(folder: Path) -> dict[str, Any]:
    return yaml.load((folder / "kustomization.yaml").read_text(encoding="utf-8"), Loader=Loader)


def _images(doc: dict[str, Any]) -> list[str]:
    if doc["kind"] == "FlinkDeployment":
        return [doc["spec"]["image"]]
    if doc["kind"] == "Deployment":
        spec = doc["spec"]["template"]["spec"]
        return [c["image"] for c in spec["containers"] + spec.get("initContainers", [])]
    return []


def test_overlay_sets_one_image_everywhere(overlay):
    folder, docs = overlay
    (image,) = _settings(folder)["images"]
    wanted = f"{image['newName']}:{image['newTag']}"
    found = {found for doc in docs.values() for found in _images(doc)}
    assert found == {wanted}


def test_overlay_sets_bucket_and_storage_class(overlay):
    _, docs = overlay
    (flink,) = [doc for doc in docs.values() if doc["kind"] == "FlinkDeployment"]
    conf = flink["spec"]["flinkConfiguration"]
    buckets = {conf[key].split("/")[2] for key in ("execution.checkpointing.dir",
                                                    "execution.checkpointing.savepoint-dir",
                                                    "high-availability.storageDir")}
    assert len(buckets) == 1, "checkpoints, savepoints and HA metadata in one bucket"
    claims = [doc for doc in docs.values() if doc["kind"] == "PersistentVolumeClaim"]
    assert claims and all(doc["spec"].get("storageClassName") for doc in claims)


def _undo(doc: dict[str, Any], base_doc: dict[str, Any]) -> dict[str, Any]:
    """The overlay's document with what an overlay may set put back to the base's values."""
    doc = copy.deepcopy(doc)
    if doc["kind"] == "FlinkDeployment":
        doc["spec"]["image"] = base_doc["spec"]["image"]
        for key, value in base_doc["spec"]["flinkConfiguration"].items():
            if isinstance(value, str) and value.startswith("s3://"):
                doc["spec"]["flinkConfiguration"][key] = value
        for key in set(doc["spec"]["flinkConfiguration"]) - set(base_doc["spec"]["flinkConfiguration"]):
            assert key.startswith("s3."), f"an overlay adds only S3 settings to flinkConfiguration, not {key}"
            del doc["spec"]["flinkConfiguration"][key]
    if doc["kind"] == "Deployment":
        spec, base_spec = doc["spec"]["template"]["spec"], base_doc["spec"]["template"]["spec"]
        for key in ("containers", "initContainers"):
            for container, base_container in zip(spec.get(key, []), base_spec.get(key, [])):
                container["image"] = base_container["image"]
    if doc["kind"] == "PersistentVolumeClaim" and "storageClassName" not in base_doc["spec"]:
        doc["spec"].pop("storageClassName", None)
    if doc["apiVersion"].startswith("monitoring.coreos.com/"):
        doc["metadata"]["labels"].pop("release", None)
    return doc


def test_overlay_changes_nothing_else(base, overlay):
    _, docs = overlay
    assert set(docs) == set(base)
    for key, doc in docs.items():
        assert _undo(doc, base[key]) == base[key], key


def test_overlay_monitoring_is_selected_by_one_release_label(overlay):
    _, docs = overlay
    monitoring = [doc for doc in docs.values() if doc["apiVersion"].startswith("monitoring.coreos.com/")]
    assert {doc["metadata"]["labels"].get("release") for doc in monitoring} != {None}
    assert len({doc["metadata"]["labels"].get("release") for doc in monitoring}) == 1
