"""Plumbing shared by the saga's services: settings per service, migrations, topic names."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import SettingsConfigDict

from migrations.runner import Migrations
from service_template import ServiceSettings

HERE = Path(__file__).resolve().parent
SERVICES = ("orders", "payments", "shipping")


def migrations_of(service: str) -> Migrations:
    """The service's own Alembic chain (its business tables), next to the framework's."""
    return Migrations(HERE / "migrations" / service, f"{service}_alembic_version")


def settings_of(service: str) -> ServiceSettings:
    """Settings from ``<SERVICE>_DATABASE_URL`` etc. (e.g. ORDERS_DATABASE_URL)."""

    class Settings(ServiceSettings):
        model_config = SettingsConfigDict(env_prefix=f"{service.upper()}_", extra="ignore")

    return Settings(name=service, consumers=[service])  # type: ignore[call-arg]
