"""``autotune doctor``: what a first run needs, checked and printed; exit 1 when a space's engine cannot start."""

from __future__ import annotations

import importlib.util
import json
import platform
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

import optuna
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotune import __version__
from autotune.cli.options import JsonOpt, SpaceArg, storage_urls
from autotune.engines import get_engine
from autotune.errors import AutotuneError
from autotune.search.preflight import preflight
from autotune.search.study import engine_as_launched, open_storage
from autotune.serving.process import program_missing, prove_engine_starts
from autotune.settings import Settings
from autotune.space.files import find_space, load_space
from autotune.space.schema import SearchSpace

_QUICK_PROOF_S = 5.0  # an engine's proof, where a missing dataset, tokenizer or file stops every launch anyway
_EXTRAS = {"optuna_dashboard": "dashboard", "psycopg": "postgres", "aiconfigurator": "aiconfigurator"}


def doctor(space_ref: SpaceArg = "quickstart", as_json: JsonOpt = False) -> None:
    """Check what a study of SPACE needs: each engine's executable and version, the workload's dataset, the model's
    tokenizer (and where it was found), files the engines read, GPUs and their free memory, optional extras, the
    storage, and the studies directory. Exit 1 when an engine cannot be started or a launch lacks what it needs."""
    space = load_space(space_ref)
    checks = [{"check": "autotune", "ok": True, "detail": f"{__version__} (Python {platform.python_version()})"}]
    needs = [
        (check.model_dump(exclude={"needed", "key"}), check.fails) for check in preflight(space, find_space(space_ref))
    ]
    # what is missing stops every launch already: then an engine slow to answer its version (vLLM imports torch,
    # ~20 s) is not waited for, and the answer comes in seconds
    checks += _engine_checks(space, _QUICK_PROOF_S if any(fails for _, fails in needs) else None)
    checks += [shown for shown, _ in needs]
    checks.append(_gpu_check(space.hardware.gpus))
    checks += [_extra_check(module, extra) for module, extra in _EXTRAS.items()]
    checks += [_storage_check(), _studies_dir_check()]
    # an engine that cannot start, or what no launch can do without, fails the run; the rest are facts to act on
    failed = [c for c in checks if c["check"].startswith("engine") and not c["ok"] and not c.get("unproven")]
    failed += [shown for shown, fails in needs if fails]
    if as_json:
        print(json.dumps({"space": str(space_ref), "ok": not failed, "checks": checks}, indent=1))
    else:
        table = Table("check", "status", "detail", title=f"autotune doctor ({space_ref})")
        for check in checks:
            status = "[green]ok[/]" if check["ok"] else ("[red]FAIL[/]" if check in failed else "[yellow]missing[/]")
            status = "[yellow]unproven[/]" if check.get("unproven") else status
            table.add_row(check["check"], status, escape(check["detail"]))
        Console().print(table)
    if failed:
        raise AutotuneError(f"{len(failed)} check(s) of {space_ref} fail, so no launch can start: "
                            + " | ".join(f"{c['check']}: {c['detail']}" for c in failed))  # fmt: skip


def _engine_checks(space: SearchSpace, timeout_s: float | None = None) -> list[dict]:
    """One check per engine of the space, proven at once (each may take a while: vLLM imports torch to answer);
    ``timeout_s`` shortens the wait (None: the proof's own limit)."""
    if space.simulate is not None:
        return [_engine_check(name, [], simulated=True) for name in space.engines]
    launched = [engine_as_launched(space, name) for name in space.engines]
    with ThreadPoolExecutor(max_workers=len(launched)) as pool:
        return list(pool.map(lambda found: _engine_check(found[0].name, list(found[0].executable), False, found[1],
                                                         timeout_s), launched))  # fmt: skip


def _engine_check(engine: str, executable: list[str], simulated: bool, env: dict[str, str] | None = None,
                  timeout_s: float | None = None) -> dict:  # fmt: skip
    """Whether ``engine`` started as ``executable`` (in the environment ``env`` adds) can start here: proven by
    running it (``prove_engine_starts``), not by finding its program, which proves nothing for ``python3 -m X``."""
    name = f"engine {engine}"
    if simulated:
        return {"check": name, "ok": True, "detail": "simulated space: autotune's simulator serves it"}
    adapter = get_engine(engine, executable)
    command = " ".join(adapter.executable)
    if program_missing(adapter.executable[0]):
        return {"check": name, "ok": False,
                "detail": f"{adapter.executable[0]} not found; {adapter.not_installed_fix()}"}  # fmt: skip
    proof = prove_engine_starts(adapter, env, timeout_s)
    if proof.ok:
        return {"check": name, "ok": True, "detail": f"{command}: {proof.detail}"}
    if proof.timed_out:  # slow is not broken (vLLM imports torch to answer; a missing package fails at once)
        why = ("not waited for: what fails below stops every launch first; doctor waits for it once that is fixed"
               if timeout_s else "not proven to start (a busy host?); run it to see")  # fmt: skip
        return {"check": name, "ok": False, "unproven": True, "detail": f"{proof.detail}: {why}"}
    return {"check": name, "ok": False, "detail": f"{command} cannot start: {proof.detail}; "
            f"{adapter.not_installed_fix()}"}  # fmt: skip


def _gpu_check(wanted: int) -> dict:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        ok = wanted == 0
        return {"check": "GPUs", "ok": ok, "detail": "no nvidia-smi: no NVIDIA GPU visible"
                + ("" if ok else f" (the space's hardware says {wanted}; fine for a simulated space)")}  # fmt: skip
    try:
        done = subprocess.run([smi, "--query-gpu=index,name,memory.total,memory.free", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return {"check": "GPUs", "ok": False, "detail": f"nvidia-smi failed: {exc}"}
    gpus = [[cell.strip() for cell in line.split(",")] for line in done.stdout.strip().splitlines() if line.strip()]
    detail = "; ".join(f"{i}: {name}, {int(free) / 1024:.0f} of {int(total) / 1024:.0f} GiB free"
                       for i, name, total, free in gpus)  # fmt: skip
    return {"check": "GPUs", "ok": len(gpus) >= wanted, "detail": f"{len(gpus)} GPU(s): {detail}"}


def _extra_check(module: str, extra: str) -> dict:
    ok = importlib.util.find_spec(module) is not None
    return {"check": f"extra {extra}", "ok": ok,
            "detail": "installed" if ok else f"not installed; fix: pip install 'autotune[{extra}]'"}  # fmt: skip


def _storage_check() -> dict:
    settings = Settings()
    if not settings.storage:
        return {"check": "storage", "ok": True, "detail": f"SQLite files under {settings.studies_dir}/ "
                f"({len(storage_urls(None))} studies); $AUTOTUNE_STORAGE unset"}  # fmt: skip
    try:
        studies = optuna.get_all_study_summaries(open_storage(settings.storage))
    except AutotuneError as exc:
        return {"check": "storage", "ok": False, "detail": str(exc)}
    return {"check": "storage", "ok": True, "detail": f"$AUTOTUNE_STORAGE reachable ({len(studies)} studies)"}


def _studies_dir_check() -> dict:
    directory = Settings().studies_dir
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory):
            pass
    except OSError as exc:
        return {"check": "studies directory", "ok": False, "detail": f"{directory}: not writable ({exc.strerror})"}
    return {"check": "studies directory", "ok": True, "detail": f"{directory.resolve()} writable"}
