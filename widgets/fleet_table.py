"""FleetView: the fleet's header line and one table row per server (sorted by alert, then name); columns drop
right to left as the screen narrows. Renders the FleetSnapshot it is given; does no I/O."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from specmon.fleet.model import FleetRow, FleetSnapshot
from specmon.fleet.text import TableColumn, columns_for, error_line, header_line

STATE_STYLES = {"down": "bold white on red", "stalled": "bold white on red", "restarted": "bold yellow",
                "serving": "green", "idle": "dim"}
SEVERITY_STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan"}
CELL_TEXT_STYLE = "not dim"
"""Added to a cell's text style (a no-op), so the text stays a segment apart from the padding around it, on the
cursor's row too: an SVG renderer that drops leading spaces inside one <text> (librsvg) still draws it where it
is."""


def cell_text(text: str, width: int, right: bool, style: str = "") -> Text:
    """`text` in a cell `width` wide, right-aligned by padding of its own when `right`."""
    text_style = style if "dim" in style.split() else f"{style} {CELL_TEXT_STYLE}".strip()
    if right:
        return Text.assemble(" " * max(0, width - len(text)), (text, text_style))
    return Text(text, style=text_style)


class FleetView(Vertical):
    """`show(snapshot)`: the header, then the table; a stale snapshot (Prometheus failing) is dimmed."""

    DEFAULT_CSS = """
    FleetView { height: 1fr; }
    FleetView > #fleet-header { height: 1; padding: 0 1; background: $boost; }
    FleetView > #fleet-error { height: 1; padding: 0 1; }
    FleetView > #fleet-notes { height: auto; max-height: 4; padding: 0 1; color: $text-muted; }
    FleetView > DataTable { height: 1fr; }
    FleetView.-stale > DataTable { opacity: 50%; }
    FleetView.-stale > #fleet-header { background: $error 30%; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.snapshot: FleetSnapshot | None = None
        self._columns: tuple[TableColumn, ...] = ()
        self._order: tuple[str, ...] = ()
        self._cells: dict[str, tuple[Text, ...]] = {}
        self._shown: tuple[str, str, str] | None = None

    def compose(self) -> ComposeResult:
        yield Static("waiting for Prometheus…", id="fleet-header")
        yield Static("", id="fleet-error")
        yield Static("", id="fleet-notes")
        table: DataTable = DataTable(id="fleet-table", cursor_type="row", zebra_stripes=True)
        yield table

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    def selected_server(self) -> str | None:
        table = self.table
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return key.value if key is not None else None

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
        table = self.table
        width = max(20, (self.size.width or 80) - 2)
        columns = columns_for(width, gap=2)  # the table pads each cell by one on either side
        selected = self.selected_server()
        order = tuple(row.server for row in snapshot.rows)
        cells = {row.server: tuple(self._cell(column, row) for column in columns) for row in snapshot.rows}
        if columns == self._columns and order == self._order:  # the same rows: changed cells updated in place
            for server, row_cells in cells.items():
                before = self._cells.get(server, ())
                for i, (column, cell) in enumerate(zip(columns, row_cells, strict=True)):
                    if i >= len(before) or before[i] != cell:
                        table.update_cell(server, column.key, cell)
            self._cells = cells
            return
        if columns != self._columns:
            table.clear(columns=True)
            for column in columns:
                table.add_column(cell_text(column.header, column.width, column.right), key=column.key,
                                 width=column.width)
            self._columns = columns
        else:
            table.clear()
        self._order = order
        self._cells = cells
        for server, row_cells in cells.items():
            table.add_row(*row_cells, key=server)
        if selected is not None:
            index = next((i for i, row in enumerate(snapshot.rows) if row.server == selected), None)
            if index is not None:
                table.move_cursor(row=index, animate=False)

    @staticmethod
    def _cell(column: TableColumn, row: FleetRow) -> Text:
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
        return cell_text(text, column.width, column.right, style)
