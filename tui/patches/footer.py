"""KeysFooter: Textual's footer, shown also while the app has no focus.

Written for Textual 8.2.8 (pinned ``<9``). Textual's ``Footer`` waits for the app to have focus before it shows
the bindings (the "app focus" of textual-web, Textualize/textual#3767; footer bindings that disappear with focus:
Textualize/textual#5153), so a browser tab that is only watched (the ``--web`` view) showed an empty footer.
Reaches into ``Footer._bindings_ready``. Drop it when the footer shows its keys without focus."""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer


class KeysFooter(Footer):
    """Textual's footer, recomposed whenever the bindings change, also while the app has no focus: Textual's
    waits for focus, so a browser tab that is only watched (the --web view) showed an empty footer."""

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self.recompose)
