"""Unattended preset sweeps: plan, resume, report and recommend."""
