"""GPU readings from NVML and the demo source (UI-free)."""
