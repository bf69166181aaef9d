"""The Live sampler parses /metrics again only when the families specmon reads changed: an idle server's answer
differs every scrape (its HTTP counters count the scrapes), its figures do not."""

from __future__ import annotations

import re

from specmon.serving import prom
from specmon.serving.prom import ScrapeParser, parse_scrape
from tests.support.hostile_http import SGLANG_METRICS

TEXT = SGLANG_METRICS.decode()
HTTP_COUNTER = "sglang:http_requests_total{endpoint=\"/metrics\",method=\"GET\"} {n}.0\n"


def _with_polls(n: int, text: str = TEXT) -> str:
    return text + "# TYPE sglang:http_requests_total counter\n" + HTTP_COUNTER.replace("{n}", str(n))


def test_an_answer_changed_only_where_specmon_does_not_read_is_not_parsed_again(monkeypatch):
    parser = ScrapeParser()
    parses = []
    real = prom._parse_wanted
    monkeypatch.setattr(prom, "_parse_wanted", lambda text, at: parses.append(at) or real(text, at))
    scrapes = [parser.parse(_with_polls(n), float(n)) for n in range(1, 6)]
    assert parses == [1.0]
    for n, scrape in enumerate(scrapes, 1):
        assert scrape == parse_scrape(_with_polls(n), float(n))  # taken_at included
        assert scrape.taken_at == n


def test_a_figure_that_moved_is_parsed_and_an_unreadable_answer_still_says_why():
    parser = ScrapeParser()
    first = parser.parse(TEXT, 1.0)
    name, value = re.search(r"^(sglang:generation_tokens_total\{[^}]*\}) (\S+)$", TEXT, re.M).groups()
    moved = TEXT.replace(f"{name} {value}", f"{name} {float(value) + 1000}", 1)
    second = parser.parse(moved, 2.0)
    counter = "sglang:generation_tokens_total"
    assert second.counters[counter] == first.counters[counter] + 1000
    assert second == parse_scrape(moved, 2.0)
    broken = parser.parse("<html>not metrics</html>\n", 3.0)
    assert broken.error is not None and "no Prometheus sample" in broken.error
    assert parser.parse(moved, 4.0).counters == second.counters
