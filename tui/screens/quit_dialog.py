"""QuitDialog: on quitting, leave the server running (the default) or stop it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

LEAVE, STOP = "leave", "stop"


class QuitDialog(ModalScreen[str | None]):
    """Asks what happens to the server when specmon quits; dismisses with "leave", "stop", or None (Esc)."""

    DEFAULT_CSS = """
    QuitDialog { align: center middle; }
    QuitDialog #quit { width: 70; max-width: 95%; height: auto; border: thick $warning; background: $surface;
                       padding: 0 1; }
    QuitDialog Label { width: 100%; }
    QuitDialog OptionList { height: auto; }
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    RECHECK_S = 1.0
    """How often, while the dialog is open, the server is checked for having exited meanwhile."""

    def __init__(self, server: str, why_not_stop: str | None = None,
                 still_alive: Callable[[], bool] | None = None) -> None:
        super().__init__()
        self._server = server
        self._why_not_stop = why_not_stop
        self._still_alive = still_alive

    def compose(self) -> ComposeResult:
        stop = Option(
            f"Stop it ({self._why_not_stop})"
            if self._why_not_stop
            else "Stop it (SIGTERM, then wait until its GPUs and port are free)",
            id=STOP,
            disabled=bool(self._why_not_stop),
        )
        with Vertical(id="quit"):
            yield Label(f"Quit specmon. The server {self._server} may be serving traffic.")
            yield OptionList(Option("Leave it running (re-attach with `specmon monitor`)", id=LEAVE), stop)

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        if self._still_alive is not None:
            self._recheck = self.set_interval(self.RECHECK_S, self._check_alive)

    def _check_alive(self) -> None:
        """A server that exited while the dialog was open serves no traffic: said, and nothing offered to stop."""
        assert self._still_alive is not None
        if self._still_alive():
            return
        self._recheck.stop()
        self.query_one(Label).update(f"Quit specmon. The server {self._server} has exited.")
        options = self.query_one(OptionList)
        options.replace_option_prompt(LEAVE, "Quit (the server has exited)")
        options.disable_option(STOP)
        options.highlighted = 0

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


def ask_before_quit(app: Any, server: Any) -> bool:
    """Push the dialog when `server` (a `specmon ps` server the app is attached to) is alive now (its pid and
    start time, checked at this moment); False when there is nothing to ask (the app just quits: a server that
    exited serves no traffic). Stopping runs on a thread; the app exits once it is done."""
    from specmon.oncall.stopper import server_process

    if server is None or not server.alive or server_process(server) is None:
        return False

    def stop_then_exit() -> None:
        """Stop it, then end the app with what the stop did printed (as `specmon stop` prints it), exit code 1
        when it is not all stopped."""
        from specmon.oncall.stopper import stop_server

        summary, code = f"specmon: {server.id} not stopped", 1
        try:
            app.sources.stop()
            result = stop_server(server)
            summary, code = result.text(server), (app.return_code or 0) if result.ok else 1
        except Exception as exc:  # StopRefused, or what stopping met: said, never a thread's traceback
            summary = f"specmon: {server.id} not stopped: {exc}"
        finally:
            app.call_from_thread(app.exit, None, code, summary)

    def chosen(answer: str | None) -> None:
        if answer == STOP:
            app.notify(f"Stopping {server.id}…", title="Quit")
            threading.Thread(target=stop_then_exit, name="specmon-stop", daemon=True).start()
        elif answer is not None:
            app.exit(app.return_code)

    app.push_screen(
        QuitDialog(f"{server.id} ({server.preset or server.url})", server.why_not_signalable(),
                   still_alive=lambda: server_process(server) is not None),
        chosen,
    )
    return True
