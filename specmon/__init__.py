"""specmon: a terminal monitor for live speculative serving. This package is its UI-free core.

The Textual app is `specmon.tui` and its widgets `specmon.widgets`; nothing else imports Textual. Installed,
pyproject's package-dir puts the repository's tui/, widgets/ and presets/ folders inside this package. Run from a
checkout (pytest, `python -m specmon` in the repository), this folder comes first on the path and the installed
package is never reached, so the same three folders are found here, beside it, by `_CheckoutParts`.
"""

import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
_PARTS = {"specmon.tui": "tui", "specmon.widgets": "widgets", "specmon.presets": "presets"}


class _CheckoutParts(MetaPathFinder):
    """Finds specmon.tui, specmon.widgets and specmon.presets in the checkout's top-level folders."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        folder = _PARTS.get(fullname)
        if folder is None:
            return None
        init = _CHECKOUT / folder / "__init__.py"
        if not init.is_file():
            return None
        return spec_from_file_location(fullname, init, submodule_search_locations=[str(init.parent)])


if (_CHECKOUT / "pyproject.toml").is_file() and not any(isinstance(f, _CheckoutParts) for f in sys.meta_path):
    sys.meta_path.append(_CheckoutParts())
