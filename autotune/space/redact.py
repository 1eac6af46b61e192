"""Keep secrets out of everything a study writes or prints: trial attributes, artifacts, exports, messages.

A secret is the value of an environment variable whose name looks like one (``HF_TOKEN``, ``OPENAI_API_KEY``,
``DB_PASSWORD``...), the value after a secret-looking flag (``--api-key X``), or a password in a storage URL.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from autotune.engines.base import LaunchSpec

# Whole words of a name: HF_TOKEN and --api-key are secrets; TOKENIZERS_PARALLELISM and --max-num-batched-tokens not.
_SECRET_WORDS = frozenset(
    {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "CREDENTIALS", "AUTH"}
)
MASK = "***"


def is_secret_name(name: str) -> bool:
    return any(word in _SECRET_WORDS for word in re.split(r"[-_.]+", name.strip("-").upper()))


def secret_values(spec: LaunchSpec) -> list[str]:
    """The secret strings a launch carries (to scrub them from logs)."""
    values = [v for k, v in spec.env.items() if is_secret_name(k) and v]
    values += [spec.argv[i + 1] for i, a in enumerate(spec.argv[:-1]) if a.startswith("--") and is_secret_name(a)]
    return [v for v in values if len(v) >= 4]


def redact_spec(spec: LaunchSpec) -> dict:
    """The launch as a dict for storage and export: secret env vars dropped (named in ``secret_env``), secret flag
    values masked."""
    argv = list(spec.argv)
    for i, arg in enumerate(argv[:-1]):
        if arg.startswith("--") and is_secret_name(arg):
            argv[i + 1] = MASK
    env = {k: v for k, v in spec.env.items() if not is_secret_name(k)}
    secret_env = sorted(k for k in spec.env if is_secret_name(k))
    return {"argv": argv, "env": env, "files": dict(spec.files), "secret_env": secret_env}


def mask_url(url: str) -> str:
    """A storage URL fit to print: as given, its password replaced."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # not a URL, or a malformed host or port: still no password printed
        return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)
    return url if parsed.password is None else parsed.render_as_string(hide_password=True)


def scrub_file(path: Path, secrets: list[str]) -> None:
    """Replace every secret in a text file (an engine may print its arguments or environment)."""
    if not secrets or not path.exists():
        return
    text = path.read_bytes()
    for secret in secrets:
        text = text.replace(secret.encode(), MASK.encode())
    path.write_bytes(text)
