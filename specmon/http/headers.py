"""The one place a request's header values from outside are checked, and its secret header is built."""

from __future__ import annotations

import base64

from specmon.inputs import InputError


class HeaderRefused(InputError):
    """A header value from a file or the environment (an API key, a bearer token) that cannot go in a request:
    the message names where it came from, never the value (a secret)."""


def header_value(value: str, source: str) -> str:
    """`value` as it may go in an HTTP header: printable ASCII only. A non-ASCII character, a control character
    or a newline (which would begin another header) is refused: HeaderRefused."""
    for position, char in enumerate(value, 1):
        if not " " <= char <= "~":
            kind = ("a control character (a line break)" if char in "\r\n" else "a non-ASCII character"
                    if ord(char) > 127 else "a control character")
            raise HeaderRefused(f"{source} holds {kind} (character {position} of {len(value)}); an HTTP header takes "
                                "printable ASCII only, so it is not sent")
    return value


def auth_headers(token: str | None, source: str = "the API key") -> dict[str, str]:
    """The one place a request's secret header is built: `Authorization: Bearer TOKEN` (none without a token),
    the token checked by `header_value`."""
    return {"Authorization": f"Bearer {header_value(token, source)}"} if token else {}


def basic_auth_headers(user: str, password: str) -> dict[str, str]:
    """`Authorization: Basic ...` for `user` and `password` (UTF-8, as RFC 7617 allows)."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}
