"""The webhook's settings, a part of `Settings` (settings.py) kept in a module of its own."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings


class WebhookSettings(BaseSettings):
    """Where new anomalies are POSTed, and how hard to try (`live/webhooks.py`)."""

    webhook_url: str | None = Field(
        default=None,
        validation_alias="PLATFORM_WEBHOOK_URL",
        description="http(s) URL that receives a JSON POST per new anomaly (either source).",
    )
    webhook_secret: str | None = Field(
        default=None,
        validation_alias="PLATFORM_WEBHOOK_SECRET",
        description="When set, each webhook POST carries X-Platform-Signature: "
        "sha256=<HMAC-SHA256 of the body with this secret>.",
    )
    webhook_attempts: int = Field(
        default=4,
        ge=1,
        le=20,
        validation_alias="PLATFORM_WEBHOOK_ATTEMPTS",
        description="Tries per webhook POST before it is dropped (logged).",
    )
    webhook_timeout: float = Field(
        default=5.0,
        gt=0,
        validation_alias="PLATFORM_WEBHOOK_TIMEOUT",
        description="Seconds allowed for one webhook POST.",
    )
    webhook_backoff: float = Field(
        default=1.0,
        ge=0,
        validation_alias="PLATFORM_WEBHOOK_BACKOFF",
        description="Seconds before the first webhook retry; doubled for each next one.",
    )

    @field_validator("webhook_url")
    @classmethod
    def _http_only(cls, url: str | None) -> str | None:
        if url is None or not url.strip():
            return None
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("webhook_url must be an http:// or https:// URL")
        return url.strip()
