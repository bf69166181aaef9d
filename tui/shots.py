"""SVG screenshots (F8, and headless --screenshot/--screenshot-at), written as private files: 0600, never through
a symlink (specmon.private_files). A refused or failed write is a notification, never a traceback."""

from __future__ import annotations

import os

from textual._files import generate_datetime_filename
from textual.app import App

from specmon.private_files import write_private_text


def save_svg(app: App, path: str | None = None) -> str | None:
    """Write the screen to `path` (default: a dated file in the current directory); its path, or None on error."""
    if path is None:
        path = generate_datetime_filename(app.title, ".svg")
    path = os.path.abspath(os.path.expanduser(path))
    try:
        write_private_text(path, app.export_screenshot())
    except OSError as err:
        app.notify(f"Not saved: {path}: {err.strerror or err}", title="Screenshot", severity="error")
        return None
    return path
