"""CaptureProgress: a CUDA-graph capture's progress bar with its current batch size, avail mem and ETA."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Mount
from textual.widgets import Label, ProgressBar

from specmon.units import format_seconds

GRAPH_LABELS = {
    "target": "target decode graphs",
    "draft": "draft decode graphs",
    "draft_extend": "draft-extend graphs",
    "prefill": "prefill graphs",
}


def describe_capture(capture) -> str:
    """One line: ``target decode graphs 5/8 · bs 16 · avail 12.3 GB · ETA 3.0s``."""
    name = capture.label or GRAPH_LABELS.get(capture.graph, capture.graph)
    total = capture.total if capture.total else "?"
    parts = [f"{name} {capture.done}/{total}"]
    if capture.status == "done":
        parts.append("done" + (f" in {format_seconds(capture.elapsed_s)}" if capture.elapsed_s else ""))
    elif capture.status == "failed":
        parts.append("FAILED")
    if capture.current_bs is not None and capture.status == "running":
        parts.append(f"bs {capture.current_bs}")
    if capture.avail_gb is not None:
        parts.append(f"avail {capture.avail_gb:.2f} GB")
    if capture.eta_s is not None and capture.status == "running":
        parts.append(f"ETA {format_seconds(capture.eta_s)}")
    return " · ".join(parts)


class CaptureBar(ProgressBar):
    """Textual's ProgressBar without its once-a-second timer, which only refreshes an ETA this bar does not show
    (the label carries SGLang's own): it woke the app every second, hidden or not."""

    # Textual calls the on_mount of each class of the MRO; this one needs the event to stop ProgressBar's, which
    # takes none: the signatures cannot agree.
    def on_mount(self, event: Mount) -> None:  # type: ignore[override]
        event.prevent_default()  # ProgressBar.on_mount: update(), then update() again every second
        self.update()


class CaptureProgress(Vertical):
    """The latest capture's progress, driven by tqdm frames (never by log lines)."""

    DEFAULT_CSS = """
    CaptureProgress {
        height: auto;
        display: none;
    }

    CaptureProgress #capture-bar, CaptureProgress #capture-bar Bar {
        width: 1fr;
    }
    """

    def compose(self) -> ComposeResult:
        yield Label("", id="capture-label")
        yield CaptureBar(total=1, show_eta=False, id="capture-bar")  # an unknown total animates at 15 Hz

    _shown: tuple | None = ("unset",)

    def show(self, capture) -> None:
        """Show a ``specmon.logs.model.Capture`` (or hide when None); a no-op when nothing visible changed."""
        label = describe_capture(capture) if capture is not None else ""
        key = (label, capture.total if capture else None, capture.done if capture else None)
        if key == self._shown:
            return
        self._shown = key
        self.display = capture is not None
        if capture is None:
            self.query_one("#capture-bar", ProgressBar).update(total=1, progress=0)  # hidden: no animation
            return
        self.query_one("#capture-label", Label).update(label)
        bar = self.query_one("#capture-bar", ProgressBar)
        if capture.total:
            bar.update(total=capture.total, progress=capture.done)
        else:
            bar.update(total=None)
