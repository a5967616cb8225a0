"""Settings: every field documented (``schema``), read from a file, a secrets directory and the environment
(``load``). In: a YAML file and variables. Out: one frozen ``Settings``, or a ``ConfigError`` naming each bad
setting."""

from monitor.settings.load import load_settings
from monitor.settings.schema import (
    ENV_PREFIX,
    MAX_SECONDS,
    AlertSettings,
    AppInsightsCredentialSettings,
    AppInsightsSourceSettings,
    CanarySettings,
    ConversationSettings,
    JudgeSettings,
    LocalJudgeSettings,
    MediaSettings,
    MetricsSettings,
    NotifierSettings,
    OtlpFileSourceSettings,
    OtlpReceiverSourceSettings,
    PriceSettings,
    RedactionSettings,
    ReplicaSettings,
    RetentionSettings,
    ReviewSettings,
    RubricSettings,
    SamplingSettings,
    SecretFile,
    Settings,
    SilenceSettings,
    SourceSettings,
    StoreSettings,
    WritebackSettings,
    check_one_line,
    read_secret,
)

__all__ = [
    "ENV_PREFIX", "MAX_SECONDS", "AlertSettings", "AppInsightsCredentialSettings", "AppInsightsSourceSettings",
    "CanarySettings", "ConversationSettings", "JudgeSettings", "LocalJudgeSettings", "MediaSettings",
    "MetricsSettings", "NotifierSettings", "OtlpFileSourceSettings", "OtlpReceiverSourceSettings", "PriceSettings",
    "RedactionSettings", "ReplicaSettings", "RetentionSettings", "ReviewSettings", "RubricSettings",
    "SamplingSettings", "Settings", "SilenceSettings", "SourceSettings", "StoreSettings", "WritebackSettings",
    "SecretFile", "check_one_line", "load_settings", "read_secret",
]
