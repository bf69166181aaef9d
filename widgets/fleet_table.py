"""FleetView: the fleet's header line and one table row per server (sorted by alert, then name); columns drop
right to left as the screen narrows. Renders the FleetSnapshot it is given; does no I/O."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.events import Click
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from specmon.fleet.model import FleetRow, FleetSnapshot
from specmon.fleet.text import TableColumn, columns_for, error_line, has_paying, header_line

STATE_STYLES = {"down": "bold white on red", "stalled": "bold white on red", "restarted": "bold yellow",
                "serving": "green", "idle": "dim"}
SEVERITY_STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan"}
CELL_TEXT_STYLE = "not dim"
"""Added to a cell's text style (a no-op), so the text stays a segment apart from the padding around it, on the
cursor's row too: an SVG renderer that drops leading spaces inside one <text> (librsvg) still draws it where it
is."""


def cell_text(text: str, width: int, right: bool, style: str = "") -> Text:
    """`text` in a cell `width` wide, padded by spaces of its own (before it when `right`)."""
    text_style = style if "dim" in style.split() else f"{style} {CELL_TEXT_STYLE}".strip()
    pad = " " * max(0, width - len(text))
    return Text.assemble(pad, (text, text_style)) if right else Text.assemble((text, text_style), pad)


Piece = tuple[str, Style | None]
"""A run of a line's text and its style (None: unstyled, the padding and the gaps between cells)."""
_PARSED: dict[str, Style] = {}
_UNSTYLED = Style()


def cell_pieces(text: str, width: int, right: bool, style: str = "") -> tuple[Piece, ...]:
    """`text` in a cell `width` wide, padded by spaces of its own, as `cell_text` lays it out, for `row_segments`
    (a table row is drawn from pieces: a rich Text rendered per row cost most of a refresh's CPU)."""
    text_style = style if "dim" in style.split() else f"{style} {CELL_TEXT_STYLE}".strip()
    parsed = _PARSED.get(text_style)
    if parsed is None:
        parsed = _PARSED[text_style] = Style.parse(text_style)
    pad: Piece = (" " * max(0, width - len(text)), None)
    return (pad, (text, parsed)) if right else ((text, parsed), pad)


def row_segments(cells: tuple[tuple[Piece, ...], ...]) -> list[Segment]:
    """One table line as `row_text(...)` renders it: a space, then the cells two spaces apart, each run of
    unstyled text one segment."""
    segments: list[Segment] = []
    blank = " "
    for i, cell in enumerate(cells):
        if i:
            blank += "  "
        for text, style in cell:
            if style is None:
                blank += text
            elif text:
                if blank:
                    segments.append(Segment(blank, _UNSTYLED))
                    blank = ""
                segments.append(Segment(text, style))
    if blank:
        segments.append(Segment(blank, _UNSTYLED))
    return segments


def row_text(cells: tuple[Text, ...]) -> Text:
    """One table line: a space, then the cells two spaces apart (as `columns_for(width, gap=2)` lays them out)."""
    line = Text(" ")
    for i, cell in enumerate(cells):
        if i:
            line.append("  ")
        line.append_text(cell)
    return line


class FleetRows(ScrollView, can_focus=True):
    """The servers' rows under a fixed header, one line each, with a cursor (up/down, page keys, a click).

    Only the rows on screen are made into cells and lines, each once per change of the row (or of the columns,
    width or look): a refresh that changes nothing repaints nothing, one that changes a figure redraws that row
    only (a DataTable re-rendered every cell of the table for any change, ~40 ms per refresh; making every row's
    cells each refresh cost ~30 ms at 1,000 servers, most of them off screen)."""

    BINDINGS = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor_to(0)", "First", show=False),
        Binding("end", "cursor_to(-1)", "Last", show=False),
    ]
    COMPONENT_CLASSES = {"fleet-rows--cursor", "fleet-rows--even", "fleet-rows--odd"}
    DEFAULT_CSS = """
    FleetRows { height: 1fr; background: $surface; }
    FleetRows > .fleet-rows--even { background: $surface; }
    FleetRows > .fleet-rows--odd { background: $surface-lighten-1; }
    FleetRows > .fleet-rows--cursor { background: $block-cursor-background; color: $block-cursor-foreground;
                                      text-style: bold; }
    FleetRows:blur > .fleet-rows--cursor { background: $block-cursor-blurred-background; text-style: none; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.keys: tuple[str, ...] = ()
        self.rows: tuple[FleetRow, ...] = ()
        self.columns: tuple[TableColumn, ...] = ()
        self.cursor = 0
        self._strips: dict[tuple, Strip] = {}

    @property
    def row_count(self) -> int:
        return len(self.keys)

    @property
    def selected(self) -> str | None:
        return self.keys[self.cursor] if self.keys else None

    def set_rows(self, rows: tuple[FleetRow, ...], columns: tuple[TableColumn, ...], selected: str | None) -> None:
        """The rows to show in these columns, the cursor kept on `selected` where it still is; nothing repainted
        when they are the rows and columns shown."""
        if rows == self.rows and columns == self.columns:
            return
        self.rows, self.columns = rows, columns
        self.keys = tuple(row.server for row in rows)
        self.cursor = self.keys.index(selected) if selected in self.keys else min(self.cursor, max(0, len(rows) - 1))
        self.virtual_size = Size(self.size.width, len(rows))
        self.refresh()

    def render_line(self, y: int) -> Strip:
        index = y + int(self.scroll_y)
        width = self.size.width
        if index >= len(self.rows):
            return Strip.blank(width, self.rich_style)
        selected = index == self.cursor
        look = "fleet-rows--cursor" if selected else ("fleet-rows--odd" if index % 2 else "fleet-rows--even")
        style = self.get_component_rich_style(look)
        key = (self.rows[index], self.columns, look, width, style)
        strip = self._strips.get(key)
        if strip is None:
            segments = row_segments(tuple(row_cell(column, self.rows[index]) for column in self.columns))
            if selected:  # the cursor's colour over the cells' own (a red alert on the cursor's blue is unreadable)
                segments = list(Segment.apply_style(segments, post_style=Style(color=style.color, bold=style.bold)))
            strip = Strip(segments).crop(0, width).extend_cell_length(width).apply_style(style)
            if len(self._strips) > 4 * max(64, self.size.height):  # strips of rows long changed or scrolled by
                self._strips.clear()
            self._strips[key] = strip
        return strip

    def _move(self, row: int) -> None:
        if not self.keys:
            return
        self.cursor = max(0, min(len(self.keys) - 1, row))
        self.scroll_to_region(Region(0, self.cursor, 1, 1), animate=False)
        self.refresh()

    def action_cursor(self, step: int) -> None:
        self._move(self.cursor + step)

    def action_page(self, direction: int) -> None:
        self._move(self.cursor + direction * max(1, self.size.height - 1))

    def action_cursor_to(self, row: int) -> None:
        self._move(row if row >= 0 else len(self.keys) - 1)

    def on_click(self, event: Click) -> None:
        self._move(event.y + int(self.scroll_y))


class FleetView(Vertical):
    """`show(snapshot)`: the header, then the table; a stale snapshot (Prometheus failing) is dimmed."""

    DEFAULT_CSS = """
    FleetView { height: 1fr; }
    FleetView > #fleet-header { height: 1; padding: 0 1; background: $boost; }
    FleetView > #fleet-error { height: 1; padding: 0 1; }
    FleetView > #fleet-notes { height: auto; max-height: 4; padding: 0 1; color: $text-muted; }
    FleetView > #fleet-columns { height: 1; text-style: bold; background: $panel; }
    FleetView > FleetRows { height: 1fr; }
    FleetView.-stale > FleetRows { opacity: 50%; }
    FleetView.-stale > #fleet-header { background: $error 30%; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.snapshot: FleetSnapshot | None = None
        self._columns: tuple[TableColumn, ...] = ()
        self._shown: tuple[str, str, str] | None = None

    def compose(self) -> ComposeResult:
        yield Static("waiting for Prometheus…", id="fleet-header")
        yield Static("", id="fleet-error")
        yield Static("", id="fleet-notes")
        yield Static("", id="fleet-columns")
        yield FleetRows(id="fleet-table")

    @property
    def table(self) -> FleetRows:
        return self.query_one(FleetRows)

    def selected_server(self) -> str | None:
        return self.table.selected

    def show(self, snapshot: FleetSnapshot) -> None:
        self.snapshot = snapshot
        self.set_class(snapshot.stale or (snapshot.error is not None and not snapshot.rows), "-stale")
        header = header_line(snapshot, with_error=False)
        error = error_line(snapshot) if snapshot.error else ""
        notes = "\n".join(snapshot.notes[:3])
        if self._shown != (header, error, notes):  # a repaint only for what changed
            self._shown = (header, error, notes)
            self.query_one("#fleet-header", Static).update(Text(header))
            error_static = self.query_one("#fleet-error", Static)
            error_static.update(Text(error, style="bold red", no_wrap=True, overflow="ellipsis"))
            error_static.display = bool(error)
            self.query_one("#fleet-notes", Static).update(Text(notes))
            self.query_one("#fleet-notes", Static).display = bool(notes)
        self._fill(snapshot)

    def on_resize(self) -> None:
        if self.snapshot is not None:
            self._fill(self.snapshot)

    def _fill(self, snapshot: FleetSnapshot) -> None:
        width = max(20, (self.size.width or 80) - 2)
        columns = columns_for(width, gap=2, paying=has_paying(snapshot))
        if columns != self._columns:
            self._columns = columns
            header = row_text(tuple(cell_text(c.header, c.width, c.right) for c in columns))
            self.query_one("#fleet-columns", Static).update(header)
        self.table.set_rows(snapshot.rows, tuple(columns), self.table.selected)


def row_cell(column: TableColumn, row: FleetRow) -> tuple[Piece, ...]:
    """One cell of a row, cut to the column's width, in the style of what it shows."""
    text = column.cell(row)
    if len(text) > column.width:
        text = text[: column.width - 1] + "…"
    style = ""
    if column.key == "state":
        style = STATE_STYLES.get(row.state, "")
    elif column.key in ("alert", "message") and row.alerts:
        style = SEVERITY_STYLES.get(row.alerts[0].severity, "")
    elif column.key == "history":
        style = "cyan"
    elif column.key == "accept" and row.accept_source == "gauge":
        style = "italic"
    return cell_pieces(text, column.width, column.right, style)
