"""Built-in specmon presets: TOML files shipped inside the installed package."""

from pathlib import Path

BUILTIN_DIR = Path(__file__).parent
