"""The app's key bindings and the command-palette text of each action (one table, so footer and palette agree)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from textual.app import SystemCommand
from textual.binding import Binding

if TYPE_CHECKING:
    from specmon.tui.config import AppConfig
    from specmon.tui.oncall import OncallWiring

PANES = Binding.Group("Pane", compact=True)
SEARCH = Binding.Group("Search", compact=True)
LOG = Binding.Group("Log", compact=True)

BINDINGS = [
    Binding("1", "show_pane('server')", "Server", id="pane-server", group=PANES),
    Binding("2", "show_pane('gpus')", "GPUs", id="pane-gpus", group=PANES),
    Binding("3", "show_pane('bench')", "Bench", id="pane-bench", group=PANES),
    Binding("4", "show_pane('live')", "Live", id="pane-live", group=PANES),
    Binding("5", "show_pane('traffic')", "Traffic", id="pane-traffic", group=PANES),
    Binding("slash", "search", "Search", id="search", group=SEARCH),
    Binding("n", "search_next", "Next match", id="search-next", group=SEARCH),
    Binding("N", "search_previous", "Previous match", id="search-previous", group=SEARCH),
    Binding("f", "follow_tail", "Follow", id="follow-tail", group=LOG),
    Binding("h", "toggle_polls", "Polls", id="toggle-polls", group=LOG),
    Binding("p", "pick_preset", "Preset", id="pick-preset"),
    Binding("b", "run_bench", "Bench", id="run-bench"),
    Binding("t", "toggle_theme", "Theme", id="toggle-theme"),
    Binding("f8", "screenshot", "Shot", id="screenshot", key_display="F8"),
    Binding("q", "quit", "Quit", id="quit"),
]

ACTION_HELP = {
    "show_pane('server')": ("Show the Server pane", "The startup log, timeline and server state"),
    "show_pane('gpus')": ("Show the GPUs pane", "Per-GPU memory, utilisation and processes"),
    "show_pane('bench')": ("Show the Benchmark pane", "Decode tok/s and acceptance length per preset"),
    "show_pane('live')": ("Show the Live view", "Live serving: throughput, load, acceptance, latency, alerts"),
    "show_pane('traffic')": ("Show the Traffic tab", "Production τ from SGLang's request records: distribution, "
                             "classes, outliers (again: class by prompt length, output length, --by KEY or category)"),
    "search": ("Search the log", "Find text in the server log (n / N: next / previous)"),
    "search_next": ("Next match", "Jump to the next match of the log search (n)"),
    "search_previous": ("Previous match", "Jump to the previous match of the log search (N)"),
    "follow_tail": ("Follow the log tail", "Jump to the end of the log and keep following it"),
    "toggle_polls": (
        "Show/hide polling requests",
        "specmon's own /health, /model_info and /server_info requests in the log (hidden by default)",
    ),
    "pick_preset": ("Switch preset…", "Restart the server with another preset"),
    "run_bench": ("Run the benchmark", "Benchmark the running server with its preset's settings"),
    "toggle_theme": ("Toggle light/dark theme", "Switch between the light and dark themes"),
    "screenshot": ("Save an SVG screenshot", "Write the screen to an SVG file in the current directory"),
}
"""Action → (palette title, help text)."""

REPLACED_SYSTEM_COMMANDS = frozenset({"Theme", "Screenshot"})
"""Textual's palette commands the app replaces with its own (t, F8: a private 0600 file), so none shows twice."""


class PaletteHost(Protocol):
    """What the palette's commands use of the app: which actions are on, running one, the on-call wiring (leftover
    GPU processes, the sweep) and switching presets."""

    config: AppConfig
    oncall: OncallWiring

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None: ...

    def run_action(self, action: str) -> Any: ...

    def switch_preset(self, name: str, confirmed: bool = False) -> None: ...


def system_commands(app: PaletteHost, inherited: Iterable[SystemCommand]) -> Iterator[SystemCommand]:
    """Textual's commands without those the app has its own of (its theme toggle, its private screenshot), then
    the app's: each action once in the palette; read-only, no screenshot (it writes a file)."""
    for command in inherited:
        if command.title not in REPLACED_SYSTEM_COMMANDS and not (
                app.config.read_only and command.title == "Screenshot"):
            yield command
    yield from palette_commands(app)


def palette_commands(app: PaletteHost) -> Iterator[SystemCommand]:
    """A palette command per key binding (from the same table as the footer), and one per preset to switch to."""
    can_switch = app.check_action("pick_preset", ())
    for binding in BINDINGS:
        action = binding.action
        if action not in ACTION_HELP or app.check_action(action, ()) is False:
            continue
        title, help_text = ACTION_HELP[action]
        yield SystemCommand(title, help_text, lambda a=action: app.run_action(a))
    if app.config.read_only:  # watch only: nothing that stops, starts or kills
        return
    for proc in app.oncall.leftovers():
        yield SystemCommand(
            f"Kill leftover GPU process {proc.pid}",
            f"An orphaned SGLang worker holding {(proc.used_mib or 0) / 1024:.1f} GiB on GPU {proc.gpu_index}",
            lambda p=proc: app.oncall.ask_kill(p),
        )
    if app.oncall.sweeps.running:
        yield SystemCommand(
            "Cancel the sweep",
            "Stop after the step under way (a benchmark measuring is cancelled); `specmon sweep --resume` goes on",
            app.oncall.sweeps.cancel,
        )
    elif app.oncall.sweeps.can_start():
        yield SystemCommand(
            "Sweep presets…",
            "Benchmark every preset of this server's model in turn (`specmon sweep`) and recommend one",
            app.oncall.sweeps.ask,
        )
    if can_switch:
        for name, preset in app.config.presets.items():
            running = "It runs now: restarting it asks first. " if app.oncall.runs_now(name) else ""
            yield SystemCommand(
                f"Switch preset: {name}",
                running + (preset.description or "Restart the server with this preset"),
                lambda n=name: app.switch_preset(n),
            )
