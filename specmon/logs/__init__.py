"""Startup-log following and tracking (UI-free)."""
