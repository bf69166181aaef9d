"""SGLang's metric tables: the AST reader on small source layouts shaped like SGLang's, the shipped per-version
tables against the real 0.5.16 captures, which versions have which families, and the script that writes them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specmon.sglang.flags import DATA_DIR
from specmon.sglang.metrics import load_shipped_metrics, read_metrics, shipped_metric_versions
from specmon.sglang.source import SGLangSourceError

FIXTURES = Path(__file__).parents[1] / "fixtures"
SHIPPED = ["0.4.6.post5", "0.5.9", "0.5.16", "0.5.23"]

COLLECTOR = '''
from prometheus_client import Counter, Gauge, Histogram
from sglang.srt.utils.gauge_histogram import GaugeHistogram

BOUNDS = [1, 2, 5]

def exponential_buckets(start, width, length):
    return [start * width**i for i in range(length)]

class SchedulerMetricsCollector:
    def __init__(self, labels):
        self.running = Gauge(
            name="sglang:num_running_reqs",
            documentation="The number of " "running requests.",
            labelnames=labels.keys(),
            multiprocess_mode="mostrecent",
        )
        self.tokens = Counter(
            name="sglang:realtime_tokens",
            documentation="Tokens.",
            labelnames=list(labels.keys()) + ["mode"],
        )
        self.stage = Histogram(
            name="sglang:stage_seconds",
            documentation="Stage latency.",
            labelnames=[*labels.keys(), "stage"],
            buckets=exponential_buckets(start=0.5, width=2, length=3),
        )
        self.keys = GaugeHistogram(
            name="sglang:routing_key_count",
            documentation="Keys.",
            labelnames=list(labels.keys()),
            bucket_bounds=BOUNDS,
        )

class TokenizerMetricsCollector:
    def __init__(self, labels, bucket_ttft=None):
        if bucket_ttft is None:
            bucket_ttft = [0.1, 1, 10]
        self.ttft = Histogram(
            name="sglang:time_to_first_token_seconds",
            documentation="TTFT.",
            labelnames=labels.keys(),
            buckets=bucket_ttft,
        )
        self.dynamic = Counter(name=f"sglang:{labels}_total", documentation="skipped: not a constant name")
'''
MIDDLEWARE = '''
def add_prometheus_track_response_middleware(app, extra_labels=None):
    from prometheus_client import Counter
    extra_label_names = list((extra_labels or {}).keys())
    http_request_counter = Counter(
        name="sglang:http_requests_total",
        documentation="Total number of HTTP requests by endpoint and method",
        labelnames=extra_label_names + ["endpoint", "method"],
    )
'''


def package(root: Path, version: str = "9.9.9") -> Path:
    files = {"sglang/version.py": f'__version__ = "{version}"\n',
             "sglang/srt/observability/metrics_collector.py": COLLECTOR,
             "sglang/srt/utils/common.py": MIDDLEWARE}
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "sglang"


def test_reader_reads_names_types_help_labels_and_buckets(tmp_path):
    data = read_metrics(package(tmp_path))
    assert data["version"] == "9.9.9"
    families = {f["name"]: f for f in data["families"]}
    assert set(families) == {"sglang:num_running_reqs", "sglang:realtime_tokens_total", "sglang:stage_seconds",
                             "sglang:routing_key_count", "sglang:time_to_first_token_seconds",
                             "sglang:http_requests_total"}
    running = families["sglang:num_running_reqs"]
    assert running["type"] == "gauge" and running["help"] == "The number of running requests."
    assert running["role"] == "scheduler" and running["collector_labels"] and running["extra_labels"] == []
    assert running["multiprocess_mode"] == "mostrecent"
    assert running["defined_at"].startswith("srt/observability/metrics_collector.py:")
    assert families["sglang:realtime_tokens_total"]["extra_labels"] == ["mode"]
    assert families["sglang:stage_seconds"]["buckets"] == [0.5, 1.0, 2.0]
    assert families["sglang:stage_seconds"]["extra_labels"] == ["stage"]
    keys = families["sglang:routing_key_count"]
    assert keys["type"] == "gauge" and keys["extra_labels"] == ["gt", "le"] and keys["buckets"] == [1, 2, 5]
    ttft = families["sglang:time_to_first_token_seconds"]
    assert ttft["role"] == "tokenizer" and ttft["buckets"] == [0.1, 1.0, 10.0]
    http = families["sglang:http_requests_total"]
    assert http["role"] == "http" and http["extra_labels"] == ["endpoint", "method"]


def test_reader_fails_with_sglang_source_error(tmp_path):
    with pytest.raises(SGLangSourceError, match="not an sglang package"):
        read_metrics(tmp_path)
    (tmp_path / "sglang" / "srt").mkdir(parents=True)
    with pytest.raises(SGLangSourceError, match="no Prometheus metric definitions"):
        read_metrics(tmp_path / "sglang")
    broken = tmp_path / "sglang" / "srt" / "observability" / "metrics_collector.py"
    broken.parent.mkdir()
    broken.write_text("def (:\n")
    with pytest.raises(SGLangSourceError, match="cannot read"):
        read_metrics(tmp_path / "sglang")


def test_every_version_is_shipped_and_round_trips():
    assert shipped_metric_versions() == SHIPPED
    for version in SHIPPED:
        text = (DATA_DIR / f"metrics-{version}.json").read_text()
        data = json.loads(text)
        assert text == json.dumps(data, indent=1, ensure_ascii=False) + "\n"
        table = load_shipped_metrics(version)
        assert table.version == version and not table.note
        assert sorted(table.families) == [f["name"] for f in data["families"]]


def test_which_versions_have_the_speculative_families():
    have = {v: set(load_shipped_metrics(v).families) for v in SHIPPED}
    for name in ("sglang:spec_num_draft_tokens", "sglang:spec_num_steps", "sglang:spec_verify_calls_total"):
        assert [v for v in SHIPPED if name in have[v]] == ["0.5.16", "0.5.23"], name
    assert all("sglang:spec_accept_length" in have[v] for v in SHIPPED)
    assert [v for v in SHIPPED if "sglang:realtime_tokens_total" in have[v]] == ["0.5.9", "0.5.16", "0.5.23"]


def test_the_0516_table_agrees_with_the_real_0516_captures():
    table = load_shipped_metrics("0.5.16")
    for capture in (FIXTURES / "api").glob("h200-0.5.16-metrics-*.txt"):
        for family in text_string_to_metric_families(capture.read_text()):
            name = family.name + ("_total" if family.type == "counter" else "")
            spec = table.get(name)
            assert spec.type == family.type and spec.help == family.documentation, name
            labels = set().union(*(s.labels for s in family.samples))
            assert set(spec.extra_labels) <= labels, name


def test_a_newer_version_falls_back_to_the_nearest_older_table():
    table = load_shipped_metrics("0.5.20")
    assert table.version == "0.5.16" and "0.5.16" in table.note
    with pytest.raises(SGLangSourceError, match="no shipped metric table"):
        load_shipped_metrics("0.3.0")
    with pytest.raises(KeyError, match="defines no metric"):
        table.get("sglang:nonsense")


def test_script_writes_exactly_what_the_reader_reads(tmp_path):
    source = package(tmp_path / "src")
    done = subprocess.run([sys.executable, "-m", "scripts.sglang_metrics", str(source), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert "6 metric families" in done.stdout
    written = (tmp_path / "out" / "metrics-9.9.9.json").read_text()
    assert written == json.dumps(read_metrics(source), indent=1, ensure_ascii=False) + "\n"
    bad = subprocess.run([sys.executable, "-m", "scripts.sglang_metrics", str(tmp_path), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2])
    assert bad.returncode == 1 and "not an sglang package directory" in bad.stderr
