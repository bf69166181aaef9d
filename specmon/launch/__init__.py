"""Launching SGLang: presets (TOML schema, extends, argv) and the server supervisor."""
