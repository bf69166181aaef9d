"""SVG screenshots (F8, and headless --screenshot/--screenshot-at), written as private files: 0600, never through
a symlink (specmon.private_files). A refused or failed write is a notification, never a traceback."""

from __future__ import annotations

import os
import re
from datetime import datetime

from textual.app import App

from specmon.private_files import write_private_text


def dated_name(prefix: str, suffix: str) -> str:
    """`prefix` and this moment as a file name (Textual's own way: ISO time, no character a path treats apart)."""
    return re.sub(r'[ <>:"/\\|?*.]', "_", f"{prefix} {datetime.now().isoformat()}") + suffix


def save_svg(app: App, path: str | None = None) -> str | None:
    """Write the screen to `path` (default: a dated file in the current directory); its path, or None on error."""
    if path is None:
        path = dated_name(app.title, ".svg")
    path = os.path.abspath(os.path.expanduser(path))
    try:
        write_private_text(path, app.export_screenshot())
    except OSError as err:
        app.notify(f"Not saved: {path}: {err.strerror or err}", title="Screenshot", severity="error")
        return None
    return path
