"""LogView: the bounded server-log pane, written in batches, with per-line highlighting and search.

Its speed comes from overriding ``Log``'s private rendering (``_update_size``, ``_render_line``,
``_render_line_strip``, ``_render_line_cache``), written for Textual 8.2.8 (pinned ``<9``); it lives here, not in
``specmon.tui.patches``, because widgets never import the app. No upstream issue: ``Log`` measures every line's
cells on a worker and caches rendered lines only while text is selected, by design."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from rich.highlighter import Highlighter
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.reactive import Reactive
from textual.strip import Strip
from textual.widgets import Log

KIND_STYLES: dict[str, Style] = {
    "phase": Style(color="cyan", bold=True),
    "error": Style(color="red", bold=True),
    "warning": Style(color="yellow"),
}
MATCH_STYLE = Style(reverse=True)
HIDDEN_KIND = "poll"
"""Lines of this kind (the app's own polling requests) show only after ``set_show_polls(True)``."""


class _KindHighlighter(Highlighter):
    """Styles the line being rendered by its kind (set by LogView just before rendering it)."""

    def __init__(self) -> None:
        self.style: Style | None = None
        self.match_span: tuple[int, int] | None = None

    def highlight(self, text: Text) -> None:
        if self.style is not None:
            text.stylize(self.style)
        if self.match_span is not None:
            text.stylize(MATCH_STYLE, *self.match_span)


class LogView(Log):
    """A ``Log`` that keeps each line's kind ("phase", "error", "warning") for highlighting, and can search.

    Written only through ``write_classified`` in batches (one call per UI flush). Follows the tail
    unless the user has scrolled up (``Log.write_lines`` semantics).
    """

    DEFAULT_CSS = """
    LogView {
        height: 1fr;
        min-height: 4;
        border-top: solid $primary 30%;
    }
    """

    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)
    """Growing the log needs no screen layout, only a scrollbar update (see ``watch_virtual_size``)."""

    def __init__(self, max_lines: int = 10_000, **kwargs) -> None:
        super().__init__(highlight=True, max_lines=max_lines, auto_scroll=True, **kwargs)
        self._kinds: list[str | None] = []
        self._kind_highlighter = _KindHighlighter()
        self.highlighter = self._kind_highlighter
        self.search_query: str = ""
        self.match_line: int | None = None
        self.lines_written = 0
        self.following = True
        """Keep the tail in view; false once the user scrolls up, true again at the end."""
        self.show_polls = False
        self._every_line: deque[tuple[str, str | None]] = deque(maxlen=max_lines)
        """Every line written, shown or not, so the polling lines can be shown later."""
        self._pass_style: Style | None = None

    def set_show_polls(self, show: bool) -> None:
        """Show (or hide) the lines of the app's own polling requests; the pane is rewritten."""
        self.show_polls = show
        every = list(self._every_line)
        self.clear()
        self.write_classified([text for text, _ in every], [kind for _, kind in every])

    def write_classified(self, lines: Sequence[str], kinds: Sequence[str | None]) -> None:
        """Append a batch of complete lines with their kinds (same length); polling lines only when shown."""
        self._every_line.extend(zip(lines, kinds, strict=False))
        if not self.show_polls:
            shown = [(text, kind) for text, kind in zip(lines, kinds, strict=False) if kind != HIDDEN_KIND]
            lines, kinds = [text for text, _ in shown], [kind for _, kind in shown]
        if not lines:
            return
        self.lines_written += len(lines)
        self._kinds.extend(kinds)
        before = len(self._lines)
        self.write_lines(lines, scroll_end=False)
        removed = before + len(lines) - len(self._lines)
        if removed > 0:
            del self._kinds[:removed]
            if self.match_line is not None:
                self.match_line = self.match_line - removed if self.match_line >= removed else None
        if len(self._kinds) != len(self._lines):  # a line held an embedded newline: keep them aligned
            self._kinds = (self._kinds + [None] * len(self._lines))[: len(self._lines)]
        if self.following and not self.is_vertical_scrollbar_grabbed:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    # Log's is a thread worker (`@work`: it returns a Worker, which Log does not use); this one measures here.
    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]
        """The widest of the new lines. ASCII lines without tabs are as wide as they are long, measured here at
        once; Log's own way (every line's cells, on a worker thread per write) is for the others. Following
        10,000 lines a second, that was 3 % of a core."""
        if not lines:
            return
        text = "".join(lines)
        if text.isascii() and "\t" not in text:
            self._update_maximum_width(updates, len(max(lines, key=len)))
        else:
            super()._update_size(updates, lines)

    def watch_virtual_size(self, size: Size) -> None:
        scrollbars = (self.show_vertical_scrollbar, self.show_horizontal_scrollbar)
        self._scroll_update(size)
        if (self.show_vertical_scrollbar, self.show_horizontal_scrollbar) != scrollbars:
            self.refresh(layout=True)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.following = self.is_vertical_scroll_end

    def on_resize(self) -> None:
        if self.following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def follow_tail(self) -> None:
        """Jump to the end (and back to the lines' start) and keep following new lines."""
        self.match_line = None
        self._render_line_cache.clear()
        self.following = True
        self.scroll_to(x=0, animate=False, immediate=True)
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    def clear(self):
        self._kinds = []
        self._every_line.clear()
        self.match_line = None
        return super().clear()

    def kind_at(self, y: int) -> str | None:
        """The highlight kind of line ``y``."""
        return self._kinds[y] if 0 <= y < len(self._kinds) else None

    def render_lines(self, crop):
        # Log reads ``rich_style`` (a walk up the DOM) once a line: half of a repaint of new lines. Once a pass here.
        self._pass_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._pass_style = None

    def _render_line(self, y: int, scroll_x: int, width: int) -> Strip:
        rich_style = self._pass_style or self.rich_style
        if y >= len(self._lines):
            return Strip.blank(width, rich_style)
        text = self._plain_text(y)
        if text is not None:  # cut and padded as text: one strip, not four
            shown = text[scroll_x : scroll_x + width]
            segments = [Segment(shown, rich_style)] if shown else []
            if len(shown) < width:  # the padding apart, as Strip.crop_extend gives it
                segments.append(Segment(" " * (width - len(shown)), rich_style))
            return Strip(segments, width).apply_offsets(scroll_x, y)
        line = self._render_line_strip(y, rich_style)
        return line.crop_extend(scroll_x, scroll_x + width, rich_style).apply_offsets(scroll_x, y)

    def _plain_text(self, y: int) -> str | None:
        """Line ``y`` as it shows when nothing styles it (no kind, not the search's match, no selection) and each of
        its characters is one cell (printable ASCII); else None."""
        if (y < len(self._kinds) and self._kinds[y] is not None) or y == self.match_line or self.text_selection:
            return None
        text = self._process_line(self._lines[y])
        return text if text.isascii() and text.isprintable() else None

    def _render_line_strip(self, y: int, rich_style: Style):
        # Log caches rendered lines only while text is selected; cache them always (invalidation is Log's:
        # new lines, pruning, clear, style changes) so a write repaints only what changed.
        selecting = self.text_selection is not None
        if not selecting:
            cached = self._render_line_cache.get(y)
            if cached is not None:
                return cached
        strip = self._render_uncached(y, rich_style)
        if not selecting:
            self._render_line_cache[y] = strip
        return strip

    def _render_uncached(self, y: int, rich_style: Style):
        kind = self._kinds[y] if y < len(self._kinds) else None
        highlighter = self._kind_highlighter
        highlighter.style = KIND_STYLES.get(kind) if kind else None
        highlighter.match_span = None
        if y == self.match_line and self.search_query:
            start = self._lines[y].lower().find(self.search_query.lower())
            if start >= 0:
                highlighter.match_span = (start, start + len(self.search_query))
        return super()._render_line_strip(y, rich_style)

    def _match_x(self, column: int, length: int, width: int) -> float:
        """The horizontal scroll that shows a match at ``column`` (long lines are cut at the pane's width): kept
        when the match is in view, else with the match a quarter of the way in."""
        x = self.scroll_x
        if width <= 0 or (x <= column and column + length <= x + width):
            return x
        return max(0, column - width // 4) if column + length > width else 0

    def search(self, query: str, forward: bool = True, start: int | None = None) -> int | None:
        """Select the next (or previous) line containing ``query`` (case-insensitive); scroll to it.

        Returns the matching line index, or None (the selection is kept) when nothing matches.
        """
        self.search_query = query
        if not query or not self._lines:
            return None
        needle = query.lower()
        count = len(self._lines)
        if start is None:
            if self.match_line is not None:
                start = self.match_line + (1 if forward else -1)
            else:
                start = 0 if forward else count - 1
        step = 1 if forward else -1
        for offset in range(count):
            y = (start + step * offset) % count
            column = self._lines[y].lower().find(needle)
            if column >= 0:
                self._render_line_cache.clear()
                self.match_line = y
                region = self.scrollable_content_region
                self.scroll_to(x=self._match_x(column, len(needle), region.width),
                               y=max(0, y - region.height // 2), animate=False)
                self.refresh()
                return y
        return None
