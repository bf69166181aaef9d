"""The Textual app: SpecmonApp, its screens, messages, stylesheet and the monitor/demo command handlers.

The only part of specmon (with specmon.widgets) that imports Textual.
"""
