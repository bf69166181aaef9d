"""Textual widgets for specmon: they render state delivered to them and do no I/O."""
