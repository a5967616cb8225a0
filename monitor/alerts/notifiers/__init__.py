"""Notifiers: Alertmanager API v2, Slack, Microsoft Teams, a signed JSON webhook, and ``MemoryNotifier``, their
in-memory twin. ``Notifier`` is the contract; ``build_notifier`` makes the one a ``notifiers[]`` entry names."""

from __future__ import annotations

from datetime import timedelta

from monitor.alerts.notifiers.alertmanager import AlertmanagerNotifier
from monitor.alerts.notifiers.base import DeliveryError, Notifier
from monitor.alerts.notifiers.memory import MemoryNotifier
from monitor.alerts.notifiers.slack import SlackNotifier
from monitor.alerts.notifiers.teams import TeamsNotifier
from monitor.alerts.notifiers.webhook import WebhookNotifier
from monitor.errors import ConfigError
from monitor.settings import NotifierSettings, read_secret

__all__ = ["AlertmanagerNotifier", "DeliveryError", "MemoryNotifier", "Notifier", "SlackNotifier", "TeamsNotifier",
           "WebhookNotifier", "build_notifier"]


def build_notifier(settings: NotifierSettings, firing_ttl: timedelta) -> Notifier:
    field_name = f"alerts.notifiers.{settings.name}"
    url = read_secret(settings.url, settings.url_file, f"{field_name}.url_file")
    if not url:
        raise ConfigError("settings", f"{field_name}.url", "empty URL")
    if not url.startswith(("http://", "https://")):
        # The URL itself is a secret: the message does not repeat it.
        raise ConfigError("settings", f"{field_name}.url", "must be an http(s) URL")
    if settings.kind == "alertmanager":
        return AlertmanagerNotifier(settings.name, url, settings.timeout_seconds, firing_ttl, settings.events)
    if settings.kind == "slack":
        return SlackNotifier(settings.name, url, settings.timeout_seconds, settings.events)
    if settings.kind == "teams":
        return TeamsNotifier(settings.name, url, settings.timeout_seconds, settings.events)
    secret = read_secret(settings.secret, settings.secret_file, f"{field_name}.secret_file")
    return WebhookNotifier(settings.name, url, secret, settings.timeout_seconds, settings.events)
