"""FleetApp: `specmon fleet`'s screen. A FleetPoller thread reads Prometheus every interval and posts each
snapshot; the FleetView shows it. Enter opens the single-server screen of the selected server (suspending this
one): as `monitor --url` when the server answers from here, else fed from Prometheus (`fleet --server NAME`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Footer

from specmon.fleet.model import FleetSnapshot
from specmon.text import printable
from specmon.tui import shots
from specmon.tui.patches.driver import QuietTerminal
from specmon.widgets.fleet_table import FleetView

if TYPE_CHECKING:
    from specmon.fleet.poller import FleetPoller

BINDINGS = [
    Binding("enter", "drill_down", "Open", id="drill-down"),
    Binding("r", "refresh", "Refresh", id="refresh"),
    Binding("t", "toggle_theme", "Theme", id="toggle-theme"),
    Binding("f8", "screenshot", "Shot", id="screenshot", key_display="F8"),
    Binding("q", "quit", "Quit", id="quit"),
]
ACTION_HELP = {
    "drill_down": ("Open the selected server", "Its single-server screen: Live view, GPUs (Enter)"),
    "refresh": ("Refresh now", "Ask Prometheus again without waiting for the interval"),
    "toggle_theme": ("Toggle light/dark theme", "Switch between the light and dark themes"),
    "screenshot": ("Save an SVG screenshot", "Write the screen to an SVG file in the current directory"),
    "quit": ("Quit", "Quit specmon fleet"),
}


@dataclass
class FleetRefreshed(Message):
    """The poller read the fleet (or failed to: the snapshot then carries the error and the last rows)."""

    snapshot: FleetSnapshot


class FleetApp(QuietTerminal, App):
    """The fleet's one screen: header, table, footer."""

    TITLE = "specmon fleet"
    BINDINGS = [*BINDINGS]  # a list of Textual's BindingType, as App declares it

    def __init__(self, options, argv: list[str], read_only: bool = False, poll: bool = True,
                 exit_after_s: float | None = None, screenshot_path: str | None = None) -> None:
        super().__init__()
        self.options = options
        self.argv = argv
        """The `specmon fleet ...` command line this app runs (a drill-down adds `--server NAME`)."""
        self.read_only_drill = read_only
        """Read-only (`--read-only`, as `--web` runs it): drill-downs read-only, and no screenshot (a file)."""
        self.poll = poll
        self.exit_after_s = exit_after_s
        self.screenshot_path = screenshot_path
        self.poller: FleetPoller | None = None
        self.snapshots = 0

    def compose(self) -> ComposeResult:
        yield FleetView(id="fleet")
        yield Footer()

    def on_mount(self) -> None:
        if self.poll:
            from specmon.fleet.poller import FleetPoller
            from specmon.fleet.records import own_presets, own_records
            from specmon.sweep.curves import StoredCurves

            self.poller = FleetPoller(self.options, lambda snap: self.post_message(FleetRefreshed(snap)),
                                      own_records(), own_presets(), StoredCurves())
            self.poller.start()
        if self.exit_after_s is not None:
            self.set_timer(self.exit_after_s, self._exit_headless)

    def on_unmount(self) -> None:
        if self.poller is not None:
            self.poller.stop()

    def on_fleet_refreshed(self, message: FleetRefreshed) -> None:
        if self.is_running:  # not once its shutdown began: the view may be gone while the poller still posts
            self.show(message.snapshot)

    def show(self, snapshot: FleetSnapshot) -> None:
        self.snapshots += 1
        self.query_one(FleetView).show(snapshot)
        self.sub_title = snapshot.prometheus

    def _exit_headless(self) -> None:
        if self.screenshot_path:
            shots.save_svg(self, self.screenshot_path)
        self.exit(0)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Read-only (as `--web` runs it): no screenshot, which writes a file (F8 hidden from the footer)."""
        return not (self.read_only_drill and action == "screenshot")

    def get_system_commands(self, screen) -> Iterator[SystemCommand]:
        for binding in BINDINGS:
            if self.check_action(binding.action, ()) is False:
                continue
            title, help_text = ACTION_HELP[binding.action]
            yield SystemCommand(title, help_text, lambda a=binding.action: self.run_action(a))

    def drill_argv(self, server: str) -> list[str]:
        """The command that opens `server`'s single-server screen (read-only when this app is)."""
        argv = [sys.executable, "-m", "specmon", *self.argv, "--server", server]
        return [*argv, "--read-only"] if self.read_only_drill and "--read-only" not in argv else argv

    def action_drill_down(self) -> None:
        server = self.query_one(FleetView).selected_server()
        if server is None:
            self.notify("No server selected", severity="warning")
            return
        self.run_worker(self.drill_down(server), group="drill-down", exclusive=True, exit_on_error=False)

    async def drill_down(self, server: str) -> None:
        """Run the server's single-server screen with this one suspended; a signal to this app ends both."""
        argv = self.drill_argv(server)
        try:
            # said at once: the server's screen takes a few seconds to read Prometheus and start
            returncode = await self.run_suspended(argv, announce=f"specmon fleet: opening {printable(server)}…")
        except Exception as exc:  # SuspendNotSupported (headless, the browser), or no such program: say how instead
            self.notify(f"Cannot open it here ({type(exc).__name__}): run specmon {' '.join(argv[3:])}",
                        title=server, severity="warning", timeout=10, markup=False)
            return
        if returncode != 0:  # what it said went to the terminal behind this screen
            self.notify(f"Its screen ended with exit code {returncode}: run specmon {' '.join(argv[3:])} "
                        "to read why", title=server, severity="error", timeout=10, markup=False)
        if self.poller is not None:
            self.poller.refresh_now()

    def action_refresh(self) -> None:
        if self.poller is not None:
            self.poller.refresh_now()

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    # Replaces Textual's own (which takes a file name and a folder) so that every screenshot goes through
    # shots.save_svg: the signatures differ on purpose.
    def action_screenshot(self) -> None:  # type: ignore[override]
        path = shots.save_svg(self)
        if path:
            self.notify(path, title="Screenshot saved")
