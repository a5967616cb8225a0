"""Regression alerts: detector (statistics over stored results), lifecycle, notifiers, metrics and CLI."""
