"""PresetPicker: a modal list of presets, each with its last benchmark result; Enter restarts the server with
the highlighted one. It opens on a preset other than the running one (choosing that one asks first)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option


class PresetPicker(ModalScreen[str | None]):
    """Pick a preset to switch to; dismisses with its name, or None on Escape."""

    DEFAULT_CSS = """
    PresetPicker {
        align: center middle;
    }

    PresetPicker #picker {
        width: 94%;
        max-width: 100;
        height: auto;
        max-height: 80%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }

    PresetPicker #picker-title {
        width: 100%;
    }

    PresetPicker #preset-list {
        height: auto;
        max-height: 20;
    }
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, presets: dict, current: str | None, last: dict[str, str] | None = None) -> None:
        super().__init__()
        self._presets = presets
        self._current = current
        self._last = last or {}
        """Each preset's last benchmark result, in one line."""

    def compose(self) -> ComposeResult:
        options = []
        for name, preset in self._presets.items():
            label = Text(name, style="bold")
            if name == self._current:
                label.append("  (running)", style="dim")
            description = getattr(preset, "description", "")
            if description:
                label.append(f"\n  {description}", style="dim")
            label.append(f"\n  last: {self._last[name]}" if name in self._last else "\n  last: no result yet",
                         style="italic")
            options.append(Option(label, id=name))
        with Vertical(id="picker"):
            yield Static("Switch preset: the server restarts. Enter: switch · Esc: cancel", id="picker-title")
            yield OptionList(*options, id="preset-list")

    def on_mount(self) -> None:
        option_list = self.query_one(OptionList)
        others = [index for index, name in enumerate(self._presets) if name != self._current]
        option_list.highlighted = others[0] if others else 0  # never on the running one: Enter would restart it
        option_list.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
