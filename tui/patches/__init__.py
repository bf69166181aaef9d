"""The workarounds for Textual's behaviour, one module each, each naming the Textual version it was written for
and the upstream issue: the only place in specmon.tui that imports Textual's private modules (``textual._*``).
pyproject.toml pins ``textual<9`` because of them; tests/app/test_textual_patches.py checks that they stay here."""
