"""The re-tune after an engine upgrade (``autotune study upgrade --study OLD --version NEW``): what it starts from.

The new study is the old study's space with the engine's version changed (written beside the new study:
``studies/NEW/space.yaml``), warm-started from the old study (``autotune.search.warm_start``): the old best and
then its baselines (the same defaults) are launched first on the new version, so the regression table
(``autotune.evidence.regression``) compares like with like; the old rules are re-checked once on the new version,
and the search goes on from there.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import optuna
import yaml

from autotune.errors import UsageError
from autotune.records import StudyRecord
from autotune.search.ranking import best_trial
from autotune.search.warm_start import finished, identity_of
from autotune.space.files import load_space
from autotune.space.schema import SearchSpace
from autotune.yamlload import load_yaml


def parse_versions(spec: str, engines: list[str]) -> dict[str, str]:
    """``--version``: ``NEW`` for a one-engine space, else ``ENGINE=NEW[,ENGINE=NEW...]``.

    Raises:
        UsageError: an empty version, an engine the space does not have, or a bare version for several engines.
    """
    spec = spec.strip()
    if "=" not in spec:
        if len(engines) != 1:
            raise UsageError(f"--version {spec!r}: the space has engines {', '.join(engines)}; fix: --version "
                             f"ENGINE=VERSION, e.g. --version {engines[0]}={spec}")  # fmt: skip
        versions = {engines[0]: spec}
    else:
        versions = dict(part.split("=", 1) for part in spec.split(",") if part.strip())
        versions = {name.strip(): version.strip() for name, version in versions.items()}
    for name, version in versions.items():
        if name not in engines:
            raise UsageError(f"--version: the space has no engine {name!r}; fix: one of {', '.join(engines)}")
        if not version:
            raise UsageError(f"--version: no version given for {name}; fix: --version {name}=X.Y.Z")
    return versions


def check_upgradable(old: optuna.Study, versions: dict[str, str]) -> SearchSpace:
    """The old study's space, after checking that it can be upgraded to ``versions``.

    Raises:
        UsageError: the old study has no measured trial, its space file is gone, or the version is the one it ran.
    """
    record = StudyRecord.of(old)
    if not finished(old):
        raise UsageError(f"study {old.study_name!r} has no finished, measured trial: there is nothing to compare "
                         f"a new version with; fix: run it first, `autotune study run {_space_arg(record)} "
                         f"--study {old.study_name}`")  # fmt: skip
    if record.space_path is None:  # an older autotune's study: the upgrade has no space to start from
        raise UsageError(f"study {old.study_name!r} did not record its space file; fix: set the new version in the "
                         "space it was run with and run that (`autotune study run SPACE --study NEW_NAME`)")  # fmt: skip
    if not Path(record.space_path).exists():
        raise UsageError(f"study {old.study_name!r}: its space file {record.space_path} is not there; fix: put the "
                         f"space the study was run with back at {record.space_path}")  # fmt: skip
    space = load_space(record.space_path)
    ran = (record.identity or identity_of(space)).engines
    same = [name for name, version in versions.items() if ran.get(name) == version]
    if same:
        raise UsageError(f"study {old.study_name!r} already ran {same[0]} {versions[same[0]]}; fix: --version with "
                         f"the new version (the old one is {ran[same[0]]})")  # fmt: skip
    if best_trial(old) is None:
        raise UsageError(f"study {old.study_name!r} has no feasible trial to re-measure; fix: run it first")
    return space


def _space_arg(record: StudyRecord) -> str:
    """The space argument of the command that runs the study again: the file it was made from, where it is known."""
    return shlex.quote(record.space_path) if record.space_path else "SPACE"


def upgraded_space(old_space_path: Path, versions: dict[str, str], out: Path) -> Path:
    """The old space file with each engine's ``version`` set, written to ``out`` (other paths kept as written:
    they are relative to where autotune runs, not to the file)."""
    data = load_yaml(old_space_path.read_text(encoding="utf-8"))
    for name, version in versions.items():
        data["engines"][name]["version"] = version
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# {old_space_path} with {', '.join(f'{n} {v}' for n, v in versions.items())} "
                   "(autotune study upgrade)\n" + yaml.safe_dump(data, sort_keys=False))  # fmt: skip
    return out


def first_launches(space: SearchSpace) -> int:
    """How many launches the upgrade makes before its regression table: the old best, then each engine's baseline."""
    return len(space.engines) + 1
