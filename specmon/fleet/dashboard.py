"""The Grafana dashboard that reads the fleet's recording rules: per server (never merged into one curve), with the
speculative panels SGLang's own dashboard lacks (acceptance per server, tok/s per preset, draft tokens).

`specmon fleet dashboard` prints it for the user's labels and window; dashboards/specmon-fleet.json is the one for
the defaults (a test keeps it equal to this)."""

from __future__ import annotations

import json
from typing import Any

from specmon.fleet.promql import FleetQueries
from specmon.textfile import BENCH_ACCEPT_LENGTH, BENCH_DECODE_TOKENS_PER_SECOND

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _panel(title: str, targets: list[tuple[str, str]], x: int, y: int, unit: str = "short", w: int = 12,
           h: int = 8, kind: str = "timeseries", description: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull"]}},
        "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
                    for i, (expr, legend) in enumerate(targets)],
    }


def dashboard(queries: FleetQueries | None = None) -> dict[str, Any]:
    """The dashboard as a Grafana JSON model."""
    q = queries or FleetQueries()
    s = q.server_label
    rec = {column.key: column.record for column in q.columns()}
    running = f"{s}:sglang_num_running_reqs:sum"
    pick = f'{{{s}=~"$server"}}'
    each = f"{{{{{s}}}}}"
    up = q.up()
    with_preset = q.up('preset!=""')
    per_preset = (f"avg by (preset) ({rec['decode_tok_s']}{pick} * on ({s}) group_left (preset) "
                  f"group by ({s}, preset) ({with_preset}))")
    host = q.host_label or "instance"
    panels = [
        _panel("Decode tok/s per server", [(rec["decode_tok_s"] + pick, each)], 0, 0, "tok/s"),
        _panel("Acceptance length per server (Δgeneration_tokens / Δspec_verify_calls)",
               [(rec["accept_length"] + pick, each),
                (f"{rec['accept_gauge']}{pick} unless on ({s}) {rec['accept_length']}", each + " (gauge)")],
               12, 0, description="Before SGLang 0.5.16 only the spec_accept_length gauge exists (it keeps its last "
               "value when idle): those servers show as '(gauge)'."),
        _panel("Decode tok/s per server, mean by preset", [(per_preset, "{{preset}}")], 0, 8, "tok/s",
               description="Each server's live decode tok/s, averaged over the servers of a preset (a sum would "
               "grow with the number of replicas, not with the preset's speed). The preset is the targets' `preset` "
               "label, as `specmon ps --prometheus-sd` writes it."),
        _panel("Draft tokens per server", [(rec["draft_tokens"] + pick, each),
                                           (rec["num_steps"] + pick, each + " steps")], 12, 8),
        _panel("Running and queued requests per server", [(running + pick, each + " running"),
                                                          (rec["queued"] + pick, each + " queued")], 0, 16),
        _panel("KV cache used per server", [(rec["kv_used_ratio"] + pick, each)], 12, 16, "percentunit"),
        _panel("TTFT p99 per server", [(rec["ttft_p99_s"] + pick, each),
                                       (rec["ttft_p99_below_s"] + pick, each + " < (first bucket's bound)"),
                                       (rec["ttft_p99_above_s"] + pick, each + " > (highest bucket bound)")],
               0, 24, "s", description="A p99 that falls in the histogram's first bucket is only known to be "
               "below that bucket's bound (SGLang's first TTFT bucket is 0-100 ms), one in the +Inf bucket only "
               "above the highest finite bound: those show as that bound, in a series of their own."),
        _panel("Restarts per server (15 min)", [(rec["restarts"] + pick, each)], 12, 24),
        _panel("GPU memory used per host (DCGM)", [(rec["gpu_memory_used_ratio"], f"{{{{{host}}}}}")], 0, 32,
               "percentunit"),
        _panel("Lowest GPU utilization per host (DCGM)", [(rec["gpu_util_min"], f"{{{{{host}}}}}")], 12, 32,
               "percent"),
        _panel("specmon's last benchmark per server and preset (textfile collector)",
               [(BENCH_DECODE_TOKENS_PER_SECOND, "{{server}} {{preset}} tok/s"),
                (BENCH_ACCEPT_LENGTH, "{{server}} {{preset}} acceptance")], 0, 40, w=24, kind="table"),
        _panel("Firing specmon alerts", [('ALERTS{alertname=~"Specmon.*", alertstate="firing"}',
                                          "{{alertname}} " + each)], 0, 48, w=24, kind="table"),
    ]
    return {
        "title": "specmon fleet: speculative serving per server",
        "uid": "specmon-fleet",
        "tags": ["sglang", "specmon", "speculative-decoding"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"type": "datasource", "name": "datasource", "label": "Prometheus", "query": "prometheus"},
            {"type": "query", "name": "server", "label": "server", "datasource": DATASOURCE,
             "query": {"query": f"label_values({up}, {s})", "refId": "server"},
             "definition": f"label_values({up}, {s})", "multi": True, "includeAll": True, "allValue": ".*",
             "refresh": 2, "current": {"text": "All", "value": "$__all"}},
        ]},
        "panels": panels,
    }


def dashboard_json(queries: FleetQueries | None = None) -> str:
    return json.dumps(dashboard(queries), indent=2, ensure_ascii=False) + "\n"


def panel_queries(model: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expression) for every query of a dashboard model."""
    return [(panel["title"], target["expr"]) for panel in model.get("panels", []) for target in panel["targets"]]
