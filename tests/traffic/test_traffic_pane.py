"""The Traffic tab's model (issue 35): what it says with no records known, none read yet, and records read."""

from __future__ import annotations

from specmon.traffic.records import RequestRecord
from specmon.traffic.summary import TrafficSummary
from specmon.view.traffic_pane import MAX_OUTLIERS_SHOWN, traffic_pane


def test_no_records_known_says_how_to_get_them():
    model = traffic_pane(None, window_s=300, paths=[], problems={}, skipped={})
    assert model.state == "off" and "--export-metrics-to-file-dir" in model.headline and "--traffic" in model.headline


def test_none_read_yet_names_the_window_and_the_problems():
    result = TrafficSummary(buckets=True).result()
    model = traffic_pane(result, window_s=300, paths=["/var/log/sglang"], problems={"/var/log/sglang": "waiting"},
                         skipped={"not JSON (truncated or another format)": 3, "spec_verify_ct is 0": 1})
    assert model.state == "waiting" and "last 5 min" in model.headline and "/var/log/sglang" in model.headline
    assert model.notes == ("/var/log/sglang: waiting", "skipped 4 records (3: not JSON (truncated or another format))")


def test_records_read_give_the_axes_in_order_and_the_outliers_counted():
    records = [RequestRecord(f"r{i}", 100 * i, 200, 100 if i % 2 else 199, None, (), {"team": f"t{i % 3}"})
               for i in range(1, 40)]
    result = TrafficSummary(by="team", buckets=True).feed(records).result()
    model = traffic_pane(result, window_s=120, paths=["x"], problems={}, skipped={}, by="team")
    assert model.state == "reading" and "39 req" in model.headline and "last 2 min" in model.headline
    assert [title for title, _ in model.axes] == ["prompt tokens", "output tokens", "team"]
    assert sum(model.distribution) == result["tokens"]
    assert len(model.outliers) == MAX_OUTLIERS_SHOWN + 1 and model.outliers[-1].startswith("… and 16 more")


def test_your_categories_are_one_more_axis_and_records_without_text_are_said(tmp_path):
    from specmon.traffic.categories import NO_TEXT, read
    from specmon.traffic.window import TrafficWindow

    rules = tmp_path / "categories.toml"
    rules.write_text("[[category]]\nname = 'code'\nmatch = '```'\n")
    cats = read(str(rules))
    records = [RequestRecord(f"r{i}", 100, 200, 100 if i % 2 else 50, 1000.0 + i, (),
                             {"text": "```x```" if i % 2 else "prose"} if i % 3 else None) for i in range(30)]
    window = TrafficWindow(300, categorise=cats.of_record)
    window.add(records, now=1040.0)
    result = window.summary(1040.0).result(bootstrap=False)
    model = traffic_pane(result, window_s=300, paths=["x"], problems={}, skipped={})
    assert [title for title, _ in model.axes] == ["prompt tokens", "output tokens", "prompt category"]
    rows = {row.value: row for row in dict(model.axes)["prompt category"]}
    assert set(rows) == {"code", "other", NO_TEXT} and rows[NO_TEXT].requests == "10"
    assert rows["code"].tau.startswith("2.00") and rows["other"].tau.startswith("4.00")
    assert any(note.startswith("10 records hold no prompt text") for note in model.notes)
