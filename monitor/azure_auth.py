"""One line for a DefaultAzureCredential that found no credential, instead of azure-identity's 15-line report
(58 with its logging): which credentials were tried, and what to set."""

from __future__ import annotations

import re

_TRIED = re.compile(r"^\s*(\w+Credential):", re.MULTILINE)

WHAT_TO_SET = ("set AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_FEDERATED_TOKEN_FILE (workload identity) or "
               "AZURE_CLIENT_SECRET, give the host a managed identity, or run `az login`")


def credential_failure(message: str, alternative: str) -> str:
    """``message`` of azure-identity's error, shortened; ``alternative`` names our settings that avoid it."""
    tried = list(dict.fromkeys(_TRIED.findall(message)))
    if "DefaultAzureCredential" not in message or not tried:
        return " ".join(message.split())  # another credential's error: already short, keep it, on one line
    return f"DefaultAzureCredential found no credential (tried {', '.join(tried)}): {WHAT_TO_SET}; {alternative}"
