"""Many servers: `specmon fleet` reads the user's Prometheus (SGLang's /metrics, DCGM exporter's GPU series) and
sglang-router's /workers; FleetTracker turns the answers into one row per server (UI-free)."""
