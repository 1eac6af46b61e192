"""Exports of a configuration: the shell command, JSON, and a ``docker run`` line for the engine's official image.

A printed command is pasteable: it serves on ``--port`` (default 8000), never on the port a trial was given at run
time, and it says which files it reads that must exist on the node (``ServerConfig.files_needed``). A study measured
on CPU (``hardware: {gpus: 0}``) gets no ``docker run``: the official images are GPU builds started with
``--gpus all``, which fails on a host without NVIDIA's container runtime, and would not measure what the study did.
"""

from __future__ import annotations

import shlex

import optuna

from autotune.config import Hardware, ServerConfig
from autotune.engines import get_engine
from autotune.evidence.reproduce import DEFAULT_PORT, launch_on_port
from autotune.records import StudyRecord
from autotune.space.redact import MASK, is_secret_name

WORKDIR = "/workspace/autotune"  # the current directory, mounted: chat templates and option files resolve there


def public_config(config: ServerConfig) -> dict:
    """``config`` fit to store: secret environment variables dropped, values of secret flags in extra_args masked."""
    extra = list(config.extra_args)
    for i, arg in enumerate(extra[:-1]):
        if arg.startswith("--") and is_secret_name(arg):
            extra[i + 1] = MASK
    env = {k: v for k, v in config.env.items() if not is_secret_name(k)}
    return config.model_copy(update={"env": env, "extra_args": tuple(extra)}).model_dump(mode="json")


def shell_script(launch: dict) -> str:
    """A stored (redacted) launch as a POSIX shell script: files by here-document, then the quoted command."""
    lines = [f"# set {name} in your environment first (kept out of the study)" for name in launch.get("secret_env", [])]
    for file, content in launch.get("files", {}).items():
        lines.append(f"cat > {shlex.quote(file)} <<'AUTOTUNE_EOF'\n{content.rstrip()}\nAUTOTUNE_EOF")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in launch.get("env", {}).items())
    lines.append((env + " " if env else "") + shlex.join(launch["argv"]))
    return "\n".join(lines)


def printed_launch(launch: dict, port: int = DEFAULT_PORT) -> str:
    """A stored launch as the shell script a user pastes: serving on ``port``, not on the trial's own port."""
    return shell_script(launch_on_port(launch, port))


def file_notes(config: ServerConfig) -> list[str]:
    """One comment line per file the launch reads (a chat template): it must exist where the command runs."""
    return [f"# this file must exist on the node: {path} ({knob})" for knob, path in config.files_needed().items()]


def ran_on_cpu(study: optuna.Study) -> bool:
    """Whether the study measured on a CPU host (its space's ``hardware: {gpus: 0}``, recorded when it was made); a
    study that recorded no hardware (made by an older autotune) is taken as a GPU one, as it was printed then."""
    identity = StudyRecord.of(study).identity
    if identity is None or "gpus" not in identity.hardware:
        return False
    return Hardware.model_validate(identity.hardware).gpus == 0


def container_text(config: ServerConfig, secret_env: list[str], port: int = DEFAULT_PORT, *,
                   on_cpu: bool = False) -> str:  # fmt: skip
    """``docker_run``, or one comment line saying why there is none (the engine has no official image, or the
    configuration ran on CPU)."""
    return docker_run(config, secret_env, port, on_cpu=on_cpu) or no_image_line(config)


def no_image_line(config: ServerConfig) -> str:
    """What is printed where ``docker_run`` gave None: why there is no line (the engine has no official image, or
    it has one, a GPU build, and the configuration ran on CPU), and what to run instead."""
    engine = get_engine(config.engine)
    if engine.image is None:
        return f"# {config.engine} has no official container image: run the launch command above on the node"
    image = engine.image.reference(engine.version(config))
    return (f"# no docker run line: this configuration ran on CPU (gpus: 0) and {config.engine}'s official image "
            f"({image}) is a GPU build; run the launch command above on the node")  # fmt: skip


def docker_run(config: ServerConfig, secret_env: list[str], port: int = DEFAULT_PORT, *,
               on_cpu: bool = False) -> str | None:  # fmt: skip
    """``docker run`` of ``config`` in its engine's official image, serving on ``port`` of the host; None when the
    engine has no official image (its adapter's ``image``), or the configuration ran on CPU (``on_cpu``) and the
    image is a GPU build.

    Secrets are passed through by name (``-e HF_TOKEN`` takes the host's value); the current directory is mounted as
    the working directory, so relative paths (chat templates, TRT-LLM's options file) resolve.
    """
    engine = get_engine(config.engine)
    if engine.image is None or not engine.image.serves(on_cpu):
        return None
    spec = engine.launch_spec(config, port=port, host="0.0.0.0")  # noqa: S104 (inside the container)
    argv = engine.image.arguments(spec.argv)
    image = engine.image.reference(engine.version(config))
    options = [*engine.image.docker_options, "--ipc=host", "-p", f"{port}:{port}", "-w", WORKDIR]
    for name, value in spec.env.items():
        options += ["-e", f"{name}={value}"]
    for name in secret_env:
        options += ["-e", name]
    lines = [f"cat > {shlex.quote(f)} <<'AUTOTUNE_EOF'\n{c.rstrip()}\nAUTOTUNE_EOF" for f, c in spec.files.items()]
    mounts = f'-v "$HOME/.cache/huggingface:/root/.cache/huggingface" -v "$PWD:{WORKDIR}"'
    lines.append(f"docker run {shlex.join(options)} {mounts} {shlex.quote(image)} {shlex.join(argv)}")
    return "\n".join(lines)
