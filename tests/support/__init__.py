"""Test doubles and harnesses used only by the tests."""
