"""What optuna-dashboard's API returns for `autotune dashboard`'s view of a study: a trial that was never measured
(rejected, crashed, a duplicate) has no value and is not Complete, so the history plot (which draws Complete trials,
feasible ones in colour and infeasible ones grey) does not draw it at 0; a measured trial that misses its SLO carries
its constraints, so the dashboard draws it as infeasible; the best trial is the best feasible one. The storage itself
is unchanged: the samplers still see the rejected trial as COMPLETE with its pessimistic value."""

from __future__ import annotations

import io
import json
import wsgiref.util

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autotune.evidence.dashboard import DashboardView

SPACE = {"max_num_seqs": CategoricalDistribution([8, 32, 128, 256])}


def _trial(seqs: int, value: float, constraints: dict, **attrs):
    return optuna.trial.create_trial(value=value, params={"max_num_seqs": seqs}, distributions=SPACE,
                                     constraints=constraints, user_attrs=attrs)  # fmt: skip


@pytest.fixture
def storage(tmp_path):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'view.db'}")
    study = optuna.create_study(study_name="view", storage=storage, direction="maximize")
    study.add_trial(_trial(8, 900.0, {"launch": 0.0, "slo:p99_tpot_ms": -0.1}, outcome="measured"))
    study.add_trial(_trial(32, 0.0, {"launch": 1.0, "slo:p99_tpot_ms": 1.0}, outcome="rejected",
                           failure_kind="rejected", rejected_by="oom_dominance:0"))  # fmt: skip
    study.add_trial(_trial(128, 0.0, {"launch": 1.0, "slo:p99_tpot_ms": 1.0}, outcome="crash", failure_kind="crash"))
    study.add_trial(_trial(8, 900.0, {"launch": 0.0, "slo:p99_tpot_ms": -0.1}, outcome="duplicate", duplicate_of=0))
    study.add_trial(_trial(256, 1500.0, {"launch": 0.0, "slo:p99_tpot_ms": 0.26}, outcome="misses_slo"))
    return storage


def _api(storage, path: str) -> dict:
    from optuna_dashboard._app import create_app

    app = create_app(storage)
    environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO()}
    wsgiref.util.setup_testing_defaults(environ)
    status: list[str] = []
    body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    assert status[0].startswith("200"), status
    return json.loads(body)


def test_the_dashboard_draws_no_value_for_a_trial_never_measured(storage) -> None:
    pytest.importorskip("optuna_dashboard")
    study_id = storage.get_study_id_from_name("view")
    shown = {t["number"]: t for t in _api(DashboardView(storage), f"/api/studies/{study_id}")["trials"]}
    for number in (1, 2, 3):  # rejected, crashed, duplicate: no value of their own
        assert shown[number]["state"] == "Fail" and not shown[number].get("values"), shown[number]
    assert shown[0]["state"] == "Complete" and shown[0]["values"] == [900.0]
    assert all(c <= 0 for c in shown[0]["constraints"])
    # the SLO miss is drawn as infeasible (the dashboard greys a Complete trial with a constraint > 0)
    assert shown[4]["state"] == "Complete" and any(c > 0 for c in shown[4]["constraints"])
    detail = _api(DashboardView(storage), f"/api/studies/{study_id}")
    assert [t["number"] for t in detail["best_trials"]] == [0]  # the best feasible, not the faster SLO miss


def test_without_the_view_the_dashboard_shows_a_measured_looking_zero(storage) -> None:
    # why the view exists: on the raw storage the rejected trial is "Complete" with value 0 and no constraint
    pytest.importorskip("optuna_dashboard")
    study_id = storage.get_study_id_from_name("view")
    raw = {t["number"]: t for t in _api(storage, f"/api/studies/{study_id}")["trials"]}
    assert raw[1]["state"] == "Complete" and raw[1]["values"] == [0.0] and raw[1]["constraints"] == []


def test_the_samplers_still_learn_from_the_stored_trial(storage) -> None:
    stored = optuna.load_study(study_name="view", storage=storage).trials[1]
    assert stored.state == TrialState.COMPLETE and stored.values == [0.0] and stored.constraints["launch"] == 1.0


def test_autotune_dashboard_serves_the_view(tmp_path, monkeypatch) -> None:
    optuna_dashboard = pytest.importorskip("optuna_dashboard")
    from typer.testing import CliRunner

    from autotune.cli import app

    monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(tmp_path))
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    optuna.create_study(study_name="served", storage=f"sqlite:///{tmp_path / 'served.db'}")
    (tmp_path / "served" / "artifacts").mkdir(parents=True)
    served = []
    monkeypatch.setattr(optuna_dashboard, "run_server", lambda storage, **kwargs: served.append(storage))
    done = CliRunner().invoke(app, ["dashboard", "--study", "served"])
    assert done.exit_code == 0, done.output
    assert isinstance(served[0], DashboardView)


def test_optuna_dashboard_is_a_dependency_so_every_trial_gets_its_note() -> None:
    import tomllib

    from tests.conftest import REPO

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("optuna-dashboard") for dep in project["dependencies"])
    assert not project["optional-dependencies"]["dashboard"]  # kept as an empty alias for old install lines
