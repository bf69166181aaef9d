"""SGLang HTTP client, metrics and checks (UI-free)."""
