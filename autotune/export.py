"""Exports of a configuration: the shell command, JSON, and a ``docker run`` line for the engine's official image."""

from __future__ import annotations

import shlex

from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.redact import MASK, is_secret_name

# The engines' official images; vLLM's entrypoint is `vllm serve`, the others take the whole command.
IMAGES = {
    "vllm": "vllm/vllm-openai:v{version}",
    "sglang": "lmsysorg/sglang:v{version}",
    "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:{version}",
}
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


def docker_run(config: ServerConfig, secret_env: list[str], port: int = 8000) -> str:
    """``docker run`` of ``config`` in its engine's official image, serving on ``port`` of the host.

    Secrets are passed through by name (``-e HF_TOKEN`` takes the host's value); the current directory is mounted as
    the working directory, so relative paths (chat templates, TRT-LLM's options file) resolve.
    """
    engine = get_engine(config.engine)
    spec = engine.launch_spec(config, port=port, host="0.0.0.0")  # noqa: S104 (inside the container)
    argv = list(spec.argv)
    if config.engine == "vllm":
        argv = argv[argv.index("serve") + 1 :]
    image = IMAGES[config.engine].format(version=engine.version(config))
    options = ["--gpus", "all", "--ipc=host", "-p", f"{port}:{port}", "-w", WORKDIR]
    for name, value in spec.env.items():
        options += ["-e", f"{name}={value}"]
    for name in secret_env:
        options += ["-e", name]
    lines = [f"cat > {shlex.quote(f)} <<'AUTOTUNE_EOF'\n{c.rstrip()}\nAUTOTUNE_EOF" for f, c in spec.files.items()]
    mounts = f'-v "$HOME/.cache/huggingface:/root/.cache/huggingface" -v "$PWD:{WORKDIR}"'
    lines.append(f"docker run {shlex.join(options)} {mounts} {shlex.quote(image)} {shlex.join(argv)}")
    return "\n".join(lines)
