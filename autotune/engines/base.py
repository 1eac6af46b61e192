"""What every engine adapter provides: render a launch, check static rules, classify a failed start."""

from __future__ import annotations

import json
import logging
import re
import shlex
import signal
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from packaging.version import Version
from tokenizers import Tokenizer

from autotune.config import KNOBS, Hardware, ServerConfig
from autotune.engines.defaults import InitDefaults, ServingDefaults
from autotune.engines.hub import TokenizerSource, resolve_tokenizer
from autotune.engines.image import ContainerImage
from autotune.engines.layout import Layout
from autotune.engines.models import ModelInfo, resolve_model
from autotune.engines.readiness import Readiness, lists_model
from autotune.errors import EngineDefinitionError, FailureKind, UnsupportedConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchSpec:
    """An engine launch: argv (never a shell string), extra environment, and files to write beside it.

    ``files`` maps a file name, relative to the directory the server starts in, to its content.
    """

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"argv": list(self.argv), "env": dict(self.env), "files": dict(self.files)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_shell(self) -> str:
        """A POSIX shell script that writes the files and runs the command; every value is quoted."""
        lines = []
        for name, content in self.files.items():
            lines.append(f"cat > {shlex.quote(name)} <<'AUTOTUNE_EOF'\n{content.rstrip()}\nAUTOTUNE_EOF")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        lines.append(f"{env} {shlex.join(self.argv)}" if env else shlex.join(self.argv))
        return "\n".join(lines)


@dataclass(frozen=True)
class RuleContext:
    """What a static rule looks at."""

    config: ServerConfig
    hardware: Hardware
    model: ModelInfo | None
    version: Version
    gpus: int  # the GPUs the engine's layout of the configuration occupies (Engine.gpus_used)


@dataclass(frozen=True)
class Rule:
    """A named static rule; ``test`` returns the reason a configuration breaks it, or None."""

    name: str
    description: str
    test: Callable[[RuleContext], str | None]


class ArgvBuilder:
    """Collects flags; knobs that are None are skipped, so only what was set is rendered."""

    def __init__(self, prefix: Sequence[str]) -> None:
        self.argv: list[str] = list(prefix)
        self.env: dict[str, str] = {}

    def option(self, flag: str, value: object) -> None:
        if value is not None:
            self.argv += [flag, _text(value)]

    def switch(self, flag: str, on: bool | None) -> None:
        if on:
            self.argv.append(flag)

    def setenv(self, name: str, value: object) -> None:
        if value is not None:
            self.env[name] = _text(value)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def log_patterns(*pairs: tuple[FailureKind, str]) -> tuple[tuple[FailureKind, re.Pattern[str]], ...]:
    """An adapter's ``failure_patterns``: (kind, regular expression) pairs, the first whose pattern a log matches
    wins."""
    return tuple((kind, re.compile(pattern)) for kind, pattern in pairs)


# Real messages from the engines. Order matters: the first kind that matches wins, and the most
# specific causes come first (an OOM traceback also contains generic "Error" lines).
API_KEY_FLAG = "--api-key"  # how vLLM and SGLang take the key their clients must send
COMMON_FAILURE_PATTERNS = log_patterns(
    (FailureKind.PORT_IN_USE, r"Address already in use|\[Errno 98\]"),
    (FailureKind.BAD_FLAG, r"unrecognized arguments|invalid choice|error: argument|Extra inputs are not permitted"),
    (FailureKind.OOM, r"CUDA out of memory|OutOfMemoryError|out of memory|Not enough memory"),
    (FailureKind.NCCL, r"NCCL error|ncclInternalError|ncclSystemError|NCCL WARN"),
    # e.g. vLLM on CPU: "NotImplementedError: Unsupported speculative method: 'mtp'"
    (FailureKind.UNSUPPORTED, r"NotImplementedError|not supported on this platform"),
)


# exit codes of a program that could not be run: 127 not found, 126 found but not executable (exec format error)
_NOT_EXECUTABLE = (126, 127)
# "No module named 'x.y'" (an import), or "python: No module named x.y" (python -m of a missing module)
_MISSING_MODULE = re.compile(r"No module named '?([\w.]+)")
# `python -c _MODULE_PROBE X`: exit 0 and "X VERSION" when the interpreter finds module X, else exit 1 and why not
# (a missing parent package raises ModuleNotFoundError). find_spec imports X's parent packages, so their version
# attribute is at hand; a top-level module's comes from its distribution.
_MODULE_PROBE = """import importlib.metadata as metadata, importlib.util as util, sys
name = sys.argv[1]
top = name.partition(".")[0]
if util.find_spec(name) is None:
    sys.exit(f"ModuleNotFoundError: No module named {name!r}")
version = getattr(sys.modules.get(top), "__version__", None)
try:
    version = version or metadata.version(top)
except metadata.PackageNotFoundError:
    version = "unknown"
print(name, version)
"""


# The request fields beyond the OpenAI API that vllm bench sends (ignore_eos for fixed-length runs) and vLLM-style
# servers accept; the benchmark client sends a field only where the engine lists it (``request_extensions``).
VLLM_REQUEST_EXTENSIONS = frozenset({"ignore_eos", "repetition_penalty"})
# Knobs every adapter takes the same way, so none declares them: which adapter, which flags' spelling, what to serve,
# and the verbatim additions.
COMMON_KNOBS = frozenset({"engine", "engine_version", "model", "extra_args", "env"})


_REQUIRED = ("default_version", "default_executable")  # what every concrete adapter sets (``Engine.__init_subclass__``)


class Engine(ABC):
    """An engine adapter: one file that owns everything about its engine. Subclasses set the class attributes
    (``accepts`` declares the canonical knobs it renders; every other knob is refused) and implement ``render``;
    ``layout`` is overridden where the engine places a configuration otherwise than tp × pp × dp GPUs.

    Args:
        executable: how to invoke the engine's CLI on this machine (e.g. ``["vllm"]`` or
            ``["/opt/venv/bin/python", "vllm_cli.py"]``); None uses the engine's usual command.
    """

    name: ClassVar[str]
    label: ClassVar[str] = ""  # how messages name the engine (``vLLM``); default: its name
    # the canonical knobs (ServerConfig's fields beyond COMMON_KNOBS) this adapter renders; the rest are refused
    accepts: ClassVar[frozenset[str]] = frozenset()
    # why the engine has no such knob and what to use instead, for some knobs it refuses (by default: "has no X knob")
    refusal_notes: ClassVar[dict[str, str]] = {}
    # knob -> why this engine refuses it: every knob it does not accept (derived from ``accepts``)
    unsupported_knobs: ClassVar[dict[str, str]] = {}
    default_executable: ClassVar[tuple[str, ...]]
    default_version: ClassVar[str]
    readiness_path: ClassVar[str] = "/health"
    # request fields beyond the OpenAI API that the server accepts (a strict server refuses a request with others)
    request_extensions: ClassVar[frozenset[str]] = VLLM_REQUEST_EXTENSIONS
    chat_length_field: ClassVar[str] = "max_completion_tokens"  # the chat request field the server reads as length
    # the environment variable the engine reads its API key from, besides its --api-key flag (vLLM's VLLM_API_KEY)
    api_key_env: ClassVar[str | None] = None
    rules: ClassVar[tuple[Rule, ...]] = ()
    failure_patterns: ClassVar[tuple[tuple[FailureKind, re.Pattern[str]], ...]] = ()
    # the engine's official container image (`study best --docker`); None: it has none, the command runs on the node
    image: ClassVar[ContainerImage | None] = None
    # the engine's Python package: a launch that cannot import it cannot start for any configuration
    package: ClassVar[str] = ""
    pip_requirement: ClassVar[str] = ""  # what `pip install` takes to install the engine (default: ``package``)
    # what `autotune init` writes for the engine; None: init refuses it, saying ``init_refusal``
    init_defaults: ClassVar[InitDefaults | None] = None
    init_refusal: ClassVar[str] = ""
    # the engine's own defaults and quirks, as the simulator imitates them (None: a generic continuous batcher)
    serving_defaults: ClassVar[ServingDefaults | None] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Derive what the adapter refuses from what it declares it accepts: an adapter that declares nothing
        refuses every canonical knob (it renders only the model, extra_args and env)."""
        super().__init_subclass__(**kwargs)
        if "unsupported_knobs" not in cls.__dict__:
            unknown = cls.accepts - set(KNOBS)
            if unknown:
                raise EngineDefinitionError(
                    f"{cls.__module__}.{cls.__qualname__}.accepts names no knob of ServerConfig: "
                    f"{sorted(unknown)}; fix: use the names `autotune knobs` lists"
                )
            label = cls.label or getattr(cls, "name", cls.__name__)  # a base for adapters names no engine
            cls.unsupported_knobs = {knob: cls.refusal_notes.get(knob, f"{label} has no {knob} knob")
                                     for knob in KNOBS if knob not in cls.accepts | COMMON_KNOBS}  # fmt: skip
        # a concrete adapter (one that names its engine) must say what it runs and which version's flags it renders:
        # missing, it would fail as a bare AttributeError at the study's first launch
        missing = [attr for attr in _REQUIRED if not hasattr(cls, attr)] if "name" in cls.__dict__ else []
        if missing:
            raise EngineDefinitionError(
                f"{cls.__module__}.{cls.__qualname__} sets no {', '.join(missing)}; fix: set them as class "
                'attributes, e.g. default_version = "1.0.0" (the version whose flags it renders) and '
                'default_executable = ("my-engine",) (the command that starts it)'
            )

    def __init__(self, executable: Sequence[str] | None = None) -> None:
        self.executable = tuple(executable) if executable else self.default_executable

    def version(self, config: ServerConfig) -> Version:
        """The engine version whose flags are rendered: the config's, else the adapter's default."""
        return Version(config.engine_version or self.default_version)

    def launch_spec(self, config: ServerConfig, port: int | None = None, host: str = "127.0.0.1") -> LaunchSpec:
        """Render ``config`` as this engine's launch; pure: same input, same output.

        Args:
            config: the configuration; its engine must be this one.
            port: the port to serve on; None leaves host and port to the engine's defaults.
            host: the address to bind when ``port`` is given.

        Raises:
            UnsupportedConfig: a knob is set that this engine has no way to express.
        """
        if config.engine != self.name:
            raise UnsupportedConfig("engine", f"a {config.engine} configuration given to the {self.name} adapter")
        self._refuse_unsupported_knobs(config)
        spec = self.render(config, self.version(config), port, host)
        argv = spec.argv + tuple(config.extra_args)
        return LaunchSpec(argv, {**spec.env, **config.env}, spec.files)

    @abstractmethod
    def render(self, config: ServerConfig, version: Version, port: int | None, host: str) -> LaunchSpec:
        """The engine-specific part of ``launch_spec`` (without extra_args and env, which are added after)."""

    @property
    def module(self) -> str | None:
        """``X`` when the executable is ``PYTHON -m X``: the module that interpreter must find to start the engine."""
        return self.executable[2] if len(self.executable) >= 3 and self.executable[1] == "-m" else None

    def version_argv(self) -> list[str]:
        """The command that proves the engine can start here (it exits 0) and prints its version (its last word),
        for `autotune doctor`: ``--version``; for ``PYTHON -m X``, that interpreter finds X (and X's package's
        version), without starting a server."""
        if self.module is not None:
            return [self.executable[0], "-c", _MODULE_PROBE, self.module]
        return [*self.executable, "--version"]

    def not_installed_fix(self) -> str:
        """How to make the engine's command start: install the engine where the command runs, or point to another."""
        requirement = self.pip_requirement or self.package or self.name
        install = (shlex.join([self.executable[0], "-m", "pip", "install", requirement]) if self.module is not None
                   else f"pip install {shlex.quote(requirement)} where `{shlex.join(self.version_argv())}` runs")  # fmt: skip
        return f"fix: {install}, or set engines.{self.name}.executable (or --executable) to a command that starts it"

    def failed_while_alive(self, log: str) -> str | None:
        """The part of a still-running launch's log that says it failed for good (stop waiting for it to be ready),
        or None. Serving engines exit when they fail to start, so by default only an exit says so."""
        return None

    def api_key(self, spec: LaunchSpec, environ: Mapping[str, str]) -> str | None:
        """The API key a launch requires of its clients (sent as a bearer token), or None: the value of its
        ``--api-key`` flag, else of the engine's own variable in the launch's environment (``environ`` + its env)."""
        argv = list(spec.argv)
        if API_KEY_FLAG in argv[:-1]:
            return argv[argv.index(API_KEY_FLAG) + 1]
        return ({**environ, **spec.env}.get(self.api_key_env) or None) if self.api_key_env else None

    def readiness(self, config: ServerConfig) -> Readiness:
        """How a launch of ``config`` confirms it serves the expected model: ``/v1/models`` lists it."""
        return lists_model(self.readiness_path, config.api_model_name)

    def check(self, config: ServerConfig, hardware: Hardware) -> None:
        """Apply every static rule; raise on the first one broken.

        Raises:
            UnsupportedConfig: names the rule and the reason.
        """
        self._refuse_unsupported_knobs(config)
        model = resolve_model(config.model)
        if model is None:
            log.info("no model-specific rules for %s: unknown model", config.model)
        context = RuleContext(config, hardware, model, self.version(config), self.gpus_used(config))
        for rule in self.rules:
            reason = rule.test(context)
            if reason:
                raise UnsupportedConfig(rule.name, reason)

    def classify_failure(self, returncode: int | None, log_tail: str) -> FailureKind:
        """Map a failed start (exit code and the end of its log) to a FailureKind.

        The engine not installed comes first: no configuration can start then (``not_installed``). Then the log
        decides when it names a cause. Otherwise a SIGKILL (-9, or 137 through a shell) means the kernel's OOM killer:
        autotune stops servers with SIGTERM first, and reports its own kills as timeout or hang.
        """
        if self.not_installed(returncode, log_tail):
            return FailureKind.NOT_INSTALLED
        for kind, pattern in self.failure_patterns + COMMON_FAILURE_PATTERNS:
            if pattern.search(log_tail):
                return kind
        if returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
            return FailureKind.OOM
        return FailureKind.CRASH

    def not_installed(self, returncode: int | None, log_tail: str) -> bool:
        """Whether a failed start says the engine itself is missing here: its program was not found or cannot be
        executed (exit 127 or 126, as a shell says "command not found" or "exec format error"; autotune's launch says
        the same when it cannot execute the program), or its own package cannot be imported (``No module named
        'sglang'``, ``python: No module named sglang.launch_server``). A module of another package (an attention
        kernel, a quantisation library) is a property of the configuration that needs it, not this."""
        if returncode in _NOT_EXECUTABLE:
            return True
        own = {name for name in (self.package, (self.module or "").partition(".")[0]) if name}
        return any(missing.partition(".")[0] in own for missing in _MISSING_MODULE.findall(log_tail))

    def command_spec(self, config: ServerConfig, port: int | None = None, host: str = "127.0.0.1") -> LaunchSpec:
        """The command a user runs for ``config`` (the launch itself, except where a simulator stands in)."""
        return self.launch_spec(config, port, host)

    def tokenizer_source(self, config: ServerConfig, override: str | None = None,
                         download: bool = True) -> TokenizerSource:  # fmt: skip
        """Where the model's tokenizer is, found as the engine finds it (``autotune.engines.hub``): ``override``
        (``workload.tokenizer``), the model's directory, or the Hugging Face cache of the engine's environment.

        Raises:
            UsageError: it is nowhere to be found, with the fix.
        """
        return resolve_tokenizer(config.model, config.env, override, download)

    def tokenizer(self, config: ServerConfig, override: str | None = None, download: bool = True) -> Tokenizer:
        """The tokenizer the benchmark counts prompt lengths with: the model's own (``tokenizer_source``)."""
        return self.tokenizer_source(config, override, download).load()

    def layout(self, config: ServerConfig) -> Layout:
        """How a launch of ``config`` places the model on GPUs: the one answer the static rules, the simulator,
        `autotune init` and a node's GPU slots ask for. By default dp copies of a tp × pp group, each scheduling its
        own batch (engines with DP attention inside the tensor-parallel group override this)."""
        group, dp = (config.tp or 1) * (config.pp or 1), config.dp or 1
        return Layout(group * dp, dp, group, (config.ep or 1) > 1, independent_replicas=dp > 1)

    def gpus_used(self, config: ServerConfig) -> int:
        """GPUs a launch occupies (its ``layout``'s)."""
        return self.layout(config).gpus

    def _refuse_unsupported_knobs(self, config: ServerConfig) -> None:
        for knob, reason in self.unsupported_knobs.items():
            if getattr(config, knob) not in (None, False):
                raise UnsupportedConfig("knob-not-supported", f"{knob}={getattr(config, knob)!r}: {reason}")
