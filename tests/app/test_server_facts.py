"""The startup facts rows, from real logs, and their compact form at 80x24."""

from __future__ import annotations

import pytest
from rich.text import Text

from specmon.logs.tracker import StartupTracker
from specmon.widgets.server_facts import compact_startup_rows, flow, startup_rows
from tests.support.app_harness import capturing_app, fixture_bytes, ready_app, screen_text, wait_for


def _rows(log: str, until: str | None = None) -> dict[str, str]:
    """The rows for a real log, cut before its second ``until``."""
    tracker = StartupTracker()
    for line in fixture_bytes(log, until, occurrence=2).decode(errors="replace").splitlines():
        tracker.feed_line(line)
    return dict(startup_rows(tracker.state))


@pytest.mark.parametrize(
    ("log", "until", "after"),
    [
        ("h200-0.5.16-standalone-ready.log", None, "KV cache and graphs"),  # last step: max_total_num_tokens
        ("h200-0.5.16-standalone-ready.log", "Load weight begin", "weights"),  # the draft's load: after the target's
        ("02-qwen3-14b-tp2-a4500-cutoff-during-capture.log", None, "KV cache"),
    ],
)
def test_free_gpu_memory_says_what_it_comes_after(log, until, after):
    rows = _rows(log, until)
    assert "avail mem" not in rows
    assert rows["free GPU mem"].endswith(f" GB after {after}"), rows


def test_the_compact_rows_keep_the_memory_summary_short():
    tracker = StartupTracker()
    for line in fixture_bytes("h200-0.5.16-standalone-ready.log", "SIGTERM received").decode().splitlines():
        tracker.feed_line(line)
    rows = dict(compact_startup_rows(tracker.state))
    assert rows["weights"] == "0.07 GB + 0.05 GB"
    assert rows["KV"] == "151,561 + 151,561 tok · 2.32 GB"
    assert rows["max tokens"] == "151,561"
    assert rows["free"] == "95.37 GB after KV+graphs"
    assert all(len(label) + len(value) < 40 for label, value in rows.items())


def test_flow_packs_chunks_into_the_first_line_with_room_and_cuts_an_overlong_one():
    lines = flow([Text("a" * 30), Text("b" * 30), Text("c" * 10), Text("d" * 90)], 76, "  ")
    assert [line.plain for line in lines] == ["a" * 30 + "  " + "b" * 30 + "  " + "c" * 10, "d" * 75 + "…"]


def test_flow_breaks_an_overlong_note_at_its_separators_so_its_figures_show():
    note = Text("before → after: decode tok/s 100.0 → 90.0 (-10.0%) · acceptance 3.00 → 2.00 (-33.3%) · a → b")
    lines = flow([Text("short note"), note, Text("x" * 100)], 76, " · ")
    assert [line.plain for line in lines] == [
        "short note", "before → after: decode tok/s 100.0 → 90.0 (-10.0%)",
        "acceptance 3.00 → 2.00 (-33.3%) · a → b", "x" * 75 + "…"]


async def test_at_80x24_a_switch_s_before_after_shows_its_figures():
    """The Server pane at 80 columns flows its notes several to a line: a switch's before → after, wider than
    the pane, goes on two lines, its figures whole (it was cut before them)."""
    from specmon.oncall.progress import SwitchProgress
    from specmon.oncall.switch import SwitchReport

    app = ready_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "ready" in screen_text(app))
        report = SwitchReport(from_="eagle3-10", to="eagle3-16", state="ready",
                              sanity={"decode_tok_s": 1234.5, "accept_length": 3.41},
                              before={"preset": "eagle3-10", "run_id": "20261203-140000-ab12cd",
                                      "decode_tok_s": 1111.1, "accept_length": 3.02},
                              change_pct={"decode_tok_s": 11.1, "accept_length": 12.9})
        app.oncall.switch = SwitchProgress("eagle3-16")
        app.oncall.switch.finish(report)
        app.render_state()
        for figures in ("decode tok/s 1111.1 → 1234.5 (+11.1%)", "acceptance 3.02 → 3.41 (+12.9%)"):
            assert await wait_for(pilot, lambda f=figures: f in screen_text(app)), screen_text(app)


@pytest.mark.parametrize("make_app", [ready_app, capturing_app])
async def test_at_80x24_the_memory_summary_shows_whole_with_the_live_rows(make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "free " in screen_text(app) and "KV " in screen_text(app), timeout=10)
        await pilot.pause()
        text = screen_text(app)
        for fact in ("weights 0.07 GB + 0.05 GB", "KV 151,561 + 151,561 tok · 2.32 GB", "after KV+graphs"):
            assert fact in text, text
        if make_app is ready_app:
            for fact in ("max tokens 151,561", "health ready (2 ms)", "spec EAGLE3 steps 3 topk 1 draft 4",
                         "num steps: 15 asked, 3 effective", "ready after 1m47s"):
                assert fact in text, text
