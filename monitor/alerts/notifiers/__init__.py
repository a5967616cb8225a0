"""Notifiers: Alertmanager API v2, Slack, Microsoft Teams, signed JSON webhook, and an in-memory one for tests."""
