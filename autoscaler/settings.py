"""Settings: where the controller's services are, and its secrets. Not policy.

Built once at the entry point from CLI flags, then ``AUTOSCALER_*`` environment variables, then
defaults, and passed down: no import-time globals. Secrets come from the environment or from a
file named in the environment, are never logged, and print as ``***``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from autoscaler.errors import BadInput

DEFAULT_DB_URL = "sqlite:///autoscaler.db"
DEFAULT_PROMETHEUS_URL = "http://127.0.0.1:9090"
DEFAULT_GATEWAY_URL = "http://127.0.0.1:30000"
DEFAULT_LISTEN = "127.0.0.1:9108"


@dataclass(frozen=True)
class Settings:
    prometheus_url: str = DEFAULT_PROMETHEUS_URL
    gateway_url: str = DEFAULT_GATEWAY_URL
    database_url: str = DEFAULT_DB_URL
    listen: str = DEFAULT_LISTEN
    gateway_api_key: str | None = None  # secret
    # where database_url came from, for error messages: "--db", "AUTOSCALER_DATABASE_URL" or "default"
    database_url_from: str = "--db"

    def __repr__(self) -> str:  # never print a secret
        key = "***" if self.gateway_api_key else None
        return (
            f"Settings(prometheus_url={self.prometheus_url!r}, gateway_url={self.gateway_url!r}, "
            f"database_url={redact_url(self.database_url)!r}, listen={self.listen!r}, gateway_api_key={key!r})"
        )


def redact_url(url: str) -> str:
    """Hide the password in a URL like postgresql://user:pw@host/db."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        if ":" in creds:
            return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
    return url


def _secret(env: Mapping[str, str], name: str) -> str | None:
    if env.get(name):
        return env[name]
    file_name = env.get(name + "_FILE")
    if file_name:
        try:
            return Path(file_name).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise BadInput(f"{name}_FILE: cannot read {file_name}: {exc.strerror}") from exc
    return None


# What SQLAlchemy's make_url accepts: a scheme (dialect[+driver]) and "://" (checked here without
# importing SQLAlchemy, so that commands without a database start fast).
_DB_URL = re.compile(r"^[A-Za-z][A-Za-z0-9_+.-]*://")


def load_settings(
    *,
    prometheus: str | None = None,
    gateway: str | None = None,
    db: str | None = None,
    listen: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Flags win over ``AUTOSCALER_*`` variables, which win over defaults."""
    env = os.environ if env is None else env
    if db:
        db_from = "--db"
    elif env.get("AUTOSCALER_DATABASE_URL"):
        db_from = "AUTOSCALER_DATABASE_URL"
    else:
        db_from = "default"
    database_url = db or env.get("AUTOSCALER_DATABASE_URL") or DEFAULT_DB_URL
    if not _DB_URL.match(database_url):
        raise BadInput(f"{db_from}: {redact_url(database_url)!r} is not a database URL (e.g. sqlite:///autoscaler.db)")
    return Settings(
        prometheus_url=(prometheus or env.get("AUTOSCALER_PROMETHEUS_URL") or DEFAULT_PROMETHEUS_URL).rstrip("/"),
        gateway_url=(gateway or env.get("AUTOSCALER_GATEWAY_URL") or DEFAULT_GATEWAY_URL).rstrip("/"),
        database_url=database_url,
        database_url_from=db_from,
        listen=listen or env.get("AUTOSCALER_LISTEN") or DEFAULT_LISTEN,
        gateway_api_key=_secret(env, "AUTOSCALER_GATEWAY_API_KEY"),
    )
