"""Which command-line words carry a secret, and command lines shown with their secrets hidden.

One rule for both uses: a preset may not put a secret on a command line (every user sees it in `ps`), and a
command line specmon shows (a port's holder, a GPU's processes) never shows another process's secret. A flag
carries a secret when its name says so (`--api-key`, `--hf-token`, `--ssl-keyfile-password`, `--db-secret`),
and also when it is an abbreviation argparse would take for one of SGLang's secret flags: `--api-ke` and `--ad`
are `--api-key` and `--admin-api-key` to SGLang's parser.

Text from outside that specmon prints or stores (an error answer of Prometheus, of a proxy or of a server) goes
through `redacted_text`: every secret specmon read (`remember_secret`: an API key, a bearer token, a basic-auth
password, in the forms they travel in) and every echo of an `Authorization`, `Proxy-Authorization` or `Cookie`
header or of a URL's `user:password@` is hidden.
"""

from __future__ import annotations

import base64
import re
import threading
import urllib.parse
from collections.abc import Iterable

SGLANG_SECRET_FLAGS = ("api-key", "admin-api-key", "ssl-keyfile-password")
"""SGLang's flags that take a secret (0.4.6 to 0.5.23)."""
PREFIXES_OF_SECRETS = frozenset({"ssl-keyfile"})
"""SGLang flags of their own that are also the start of a secret flag's name (argparse takes an exact match)."""
HIDDEN = "***"

_SECRET_NAME = re.compile(r"(?:^|-)(?:api-?key|password|passwd|secret|credentials?)$"
                          r"|(?:^|-)(?:hf|auth|access|api|bearer|github|secret)-token$|^token$")
_SECRET_ENV = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def flag_name(word: str) -> str | None:
    """`--API_Key=x` -> "api-key": the flag's name, lower case, dash form; None when `word` is no flag."""
    text = word.strip()
    if not text.startswith("-"):
        return None
    name = text.lstrip("-").split("=", 1)[0].lower().replace("_", "-")
    return name or None


def is_secret_name(name: str) -> bool:
    """Whether a flag name (no dashes: "api-key", "api-ke", "hf-token") passes a secret."""
    name = name.lower().replace("_", "-").lstrip("-")
    if _SECRET_NAME.search(name):
        return True
    return len(name) >= 2 and name not in PREFIXES_OF_SECRETS and any(
        secret.startswith(name) for secret in SGLANG_SECRET_FLAGS)


def is_secret_flag(word: str) -> bool:
    """Whether a command-line word is a flag that passes a secret (`--api-key`, `--API-KEY=x`, `--api-ke`)."""
    name = flag_name(word)
    return name is not None and is_secret_name(name)


def is_secret_env_name(name: str) -> bool:
    """Whether an environment variable's name looks like it holds a secret (`HF_TOKEN`, `OPENAI_API_KEY`)."""
    return _SECRET_ENV.search(name) is not None


def is_secret_assignment(word: str) -> bool:
    """Whether a word sets an environment variable with a secret-looking name (`HF_TOKEN=...`)."""
    return _ENV_ASSIGNMENT.match(word) is not None and is_secret_env_name(word.split("=", 1)[0])


def redacted(argv: Iterable[str]) -> list[str]:
    """`argv` with every secret hidden: the value after a secret flag (or after its `=`), and the value of an
    environment assignment with a secret-looking name (`HF_TOKEN=...`)."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append(HIDDEN)
            hide_next = False
        elif is_secret_flag(word):
            if "=" in word:
                out.append(word.split("=", 1)[0] + "=" + HIDDEN)
            else:
                out.append(word)
                hide_next = True
        elif is_secret_assignment(word):
            out.append(word.split("=", 1)[0] + "=" + HIDDEN)
        else:
            out.append(word)
    return out


def redacted_command(argv: Iterable[str]) -> str:
    """`redacted(argv)` joined with spaces, as a command line is shown."""
    return " ".join(redacted(argv))


# ----- secrets echoed in text from outside

MIN_SECRET_CHARS = 3
"""A remembered secret shorter than this is not searched for in text (a 1-character password would hide every
letter it is made of); its headers and URLs are hidden all the same."""

_known: set[str] = set()
_known_lock = threading.Lock()

_QUOTED_VALUE = r"""(?:"(?:[^"\\]|\\.)*"?|'[^']*'?)"""
# A header echoed as `Authorization: Bearer x`, `"authorization": "Basic x"`, `'Cookie': ['a=b']` or
# `cookie=a=b`: the name, its separator, then the value (quoted, or to the end of the line).
_HEADER_ECHO = re.compile(
    r"""(?P<name>\b(?:proxy-)?authorization|\b(?:set-)?cookie)(?P<sep>["']?\s*[:=]\s*\[?\s*)"""
    rf"""(?P<value>{_QUOTED_VALUE}|[^\r\n]*)""", re.IGNORECASE)
# A credential as an Authorization header carries it (`Bearer x`, `Basic x`), wherever it is echoed.
_SCHEME_CREDENTIALS = re.compile(r"""\b(?P<scheme>Bearer|Basic)(?P<space>\s+)[A-Za-z0-9._~+/=-]{6,}""")
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/\s@?#]*@", re.IGNORECASE)


def remember_secret(secret: str | None, *, user: str | None = None) -> None:
    """Remember a secret specmon read (an API key, a bearer token, a password), so that `redacted_text` hides
    it wherever it shows up: as it is, percent-encoded, and (with `user`) as the base64 of `user:secret` that
    basic auth sends."""
    if not secret:
        return
    forms = {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    if user is not None:
        pair = f"{user}:{secret}".encode()
        forms.add(base64.b64encode(pair).decode("ascii"))
        forms.add(urllib.parse.quote(f"{user}:{secret}", safe=""))
    with _known_lock:
        _known.update(form for form in forms if len(form) >= MIN_SECRET_CHARS)


def _hidden_header(match: re.Match[str]) -> str:
    value = match.group("value")
    quote = value[:1] if value[:1] in ("'", '"') else ""
    closed = quote if quote and len(value) > 1 and value.endswith(quote) else ""
    return f"{match.group('name')}{match.group('sep')}{quote}{HIDDEN}{closed}"


def redacted_text(text: object) -> str:
    """`text` (an error answer, a message built from one) with every remembered secret and every echo of an
    Authorization or Cookie header, of a `Bearer`/`Basic` credential or of a URL's `user:password@` hidden."""
    out = str(text)
    with _known_lock:
        known = sorted(_known, key=len, reverse=True)  # the longer form first: a secret inside its base64 pair
    for secret in known:
        if secret in out:
            out = out.replace(secret, HIDDEN)
    out = _HEADER_ECHO.sub(_hidden_header, out)
    out = _SCHEME_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{m.group('space')}{HIDDEN}", out)
    return _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{HIDDEN}@", out)
