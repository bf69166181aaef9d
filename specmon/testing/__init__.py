"""Stand-ins for tests and benchmarks, shipped so that they run against an installed specmon: a fake NVML and a
loopback SGLang streaming server. No command imports them (the import layers keep it so)."""
