"""API settings: from arguments, or from the environment as ``ELRWATCH_<NAME>`` (pydantic-settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from elrwatch.store.urls import DEFAULT_URL


class Settings(BaseSettings):
    """Everything the API needs; secrets are never printed (SecretStr, masked store URL)."""

    model_config = SettingsConfigDict(env_prefix="ELRWATCH_", extra="ignore")

    store: str = Field(DEFAULT_URL, description="Status store URL (SQLite file or PostgreSQL).")
    store_password_file: Path | None = Field(None, description="File whose first line is the DB password.")
    api_token: SecretStr | None = Field(None, description="Bearer token required on every endpoint but /healthz.")
    api_token_file: Path | None = Field(None, description="File whose first line is the bearer token.")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    ready_max_age_seconds: float = Field(
        900.0, ge=0, description="/readyz fails when the store was last written longer ago (0 = no limit)."
    )
    ready_max_store_behind_batches: int = Field(
        10,
        ge=0,
        description="/readyz fails when the store was this many micro-batches behind the job's gauges at its last "
        "write (the job writes the store behind its batches; 0 = no limit).",
    )
    heavy_query_slots: int = Field(
        2,
        ge=1,
        description="Queries whose cost grows with the store (the what-if) that may run at once; past it: 503 with "
        "Retry-After.",
    )
    heavy_query_timeout_seconds: float = Field(
        30.0, gt=0, description="A heavy query still running after this long ends with a 503 problem."
    )
    summary_cache_seconds: float = Field(1.0, ge=0, description="How long /v1/summary may be served from cache.")
    page_refresh_seconds: int = Field(5, ge=1, le=3600, description="Status page refresh interval.")

    def token(self) -> str | None:
        """The configured bearer token (file wins over the variable), or None when auth is off."""
        if self.api_token_file is not None:
            lines = self.api_token_file.read_text(encoding="utf-8").splitlines()
            token = lines[0].strip() if lines else ""
            if not token:
                raise ValueError(f"API token file {self.api_token_file} is empty")
            return token
        if self.api_token is not None and self.api_token.get_secret_value():
            return self.api_token.get_secret_value()
        return None
