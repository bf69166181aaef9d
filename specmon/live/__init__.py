"""Live serving: what a running SGLang server is doing now, from its /metrics or its log (UI-free core).

prom.py parses /metrics (ranks merged), quantiles.py turns histogram bucket deltas into percentiles,
loglines.py reads `Decode batch` / `Prefill batch` lines, window.py keeps one run's scrapes for 1/5/15-minute
windows, tracker.py (LiveTracker) joins them into a LiveSnapshot with restarts, series and alerts, attach.py
finds the last startup of a big log from its end, sampler.py scrapes on its own thread, once.py and cli.py are
`specmon monitor --once`.
"""
