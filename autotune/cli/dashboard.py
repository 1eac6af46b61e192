"""``autotune dashboard NAME``: optuna-dashboard on the study's storage (seen through ``DashboardView``: a trial that
was never measured has no value there) and its artifact store."""

from __future__ import annotations

from typing import Annotated

import typer

from autotune.cli.options import StorageOpt, StudyOpt, load_study, storage_url
from autotune.errors import UsageError
from autotune.search.study import open_storage
from autotune.settings import Settings


def dashboard(
    study_name: StudyOpt = None,
    storage: StorageOpt = None,
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 8080,
) -> None:
    """Browse a study in optuna-dashboard: trials, metric names, and each trial's server log, benchmark JSON and
    launch command (Optuna artifacts). Serves on 127.0.0.1 until interrupted."""
    try:
        from optuna_dashboard import run_server
    except ImportError:  # a dependency of autotune: only a broken install lacks it
        raise UsageError("optuna-dashboard is missing; fix: pip install --force-reinstall autotune") from None
    from optuna.artifacts import FileSystemArtifactStore

    from autotune.evidence.dashboard import DashboardView

    settings = Settings()
    name = study_name or load_study(None, storage).study_name
    artifacts = settings.studies_dir / name / "artifacts"
    if not artifacts.is_dir():
        raise UsageError(f"no artifacts at {artifacts}; fix: run the study first, "
                         f"`autotune study run SPACE --study {name}` (or set AUTOTUNE_STUDIES_DIR)")  # fmt: skip
    url = storage_url(name, storage)
    print(f"optuna-dashboard for {name} on http://127.0.0.1:{port}/dashboard (Ctrl-C stops it)", flush=True)
    run_server(
        DashboardView(open_storage(url)),
        host="127.0.0.1",
        port=port,
        artifact_store=FileSystemArtifactStore(str(artifacts)),
    )
