"""Settings: where the controller's services are, and its secrets. Not policy.

Built once at the entry point from CLI flags, then ``AUTOSCALER_*`` environment variables, then
defaults, and passed down: no import-time globals. Secrets come from the environment or from a
file named in the environment, are never logged, and print as ``***``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

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
    # where prometheus_url came from: "--prometheus", "AUTOSCALER_PROMETHEUS_URL" or "default" (also
    # for Settings built in code: with --signals direct, only a named Prometheus is read for a warm start)
    prometheus_url_from: str = "default"

    def __repr__(self) -> str:  # never print a secret
        key = "***" if self.gateway_api_key else None
        return (
            f"Settings(prometheus_url={self.prometheus_url!r}, gateway_url={self.gateway_url!r}, "
            f"database_url={redact_url(self.database_url)!r}, listen={self.listen!r}, gateway_api_key={key!r})"
        )


# Query parameters that carry a credential (libpq's and the common drivers' names): shown as ***.
_SECRET_PARAMS = re.compile(
    r"([?&;](?:password|passwd|pwd|pass|sslpassword|sslkey|secret|token|access_token|api_key|apikey|auth)=)[^&;]*",
    re.IGNORECASE,
)


# libpq's key=value connection strings ("host=db password=hunter2", "password = 'a b'"): the value
# is a single-quoted string (backslash escapes; an unclosed quote runs to the end) or a word.
_SECRET_KEYWORDS = re.compile(
    r"((?:^|[\s?&;])(?:password|passwd|pwd|pass|sslpassword|sslkey|secret|token|access_token|api_key|apikey|auth)"
    r"\s*=\s*)('(?:\\.|[^'\\])*'?|\S*)",
    re.IGNORECASE,
)
# user:password@ in something that is not a URL ("postgresql:/u:pw@host", a typo): hidden as well.
_USERINFO = re.compile(r"([^\s:/@]*):[^\s]*@")


def redact_url(url: str) -> str:
    """The URL with every credential shown as ``***``: the password in
    ``postgresql://user:pw@host/db`` and credential query parameters (``?password=``); in a libpq
    key=value string (``host=db password=hunter2``, ``password='a b'``), the password's value.

    Never partly printed: the user part ends at the *last* ``@`` (a password with an unescaped
    ``@`` or ``#`` is hidden whole), and credential parameters go first, so an ``@`` in their
    value cannot be taken for the host's."""
    if "://" not in url:
        redacted = _SECRET_KEYWORDS.sub(r"\1***", url)
        return _USERINFO.sub(r"\1:***@", redacted) if "@" in redacted else redacted
    scheme, rest = url.split("://", 1)
    rest = _SECRET_PARAMS.sub(r"\1***", rest)
    if "@" in rest:
        creds, host = rest.rsplit("@", 1)
        user, colon, _ = creds.partition(":")
        return f"{scheme}://{user}:***@{host}" if colon else f"{scheme}://{creds}@{host}"
    return f"{scheme}://{rest}"


def check_http_url(source: str, url: str, example: str = "http://127.0.0.1:9090") -> str:
    """An http(s) base URL, parsed once up front; BadInput in one line naming ``source`` (the flag or
    variable) otherwise. Returns it without a trailing slash (the gateway probes ``//health`` for one)."""
    why = _http_url_problem(url)
    if why:
        raise BadInput(f"{source}: {redact_url(url)!r} is not an http(s) URL: {why} (e.g. {example})")
    return url.rstrip("/")


def _http_url_problem(url: str) -> str | None:
    if any(c.isspace() for c in url):
        return "it contains white space"
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError for a port that is not a number from 0 to 65535
    except ValueError as exc:
        if "IPv6" in str(exc):
            return "an unclosed '[' around an IPv6 address"
        return "the port is not a number from 1 to 65535"
    if parts.scheme not in ("http", "https"):
        return "it needs http:// or https://"
    if not parts.hostname:
        return "no host"
    if port == 0:
        return "port 0"
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL (give the key in the environment instead)"
    if parts.query or parts.fragment:
        return "a base URL has no '?' or '#' part"
    return None


# SQLAlchemy's own URL grammar (sqlalchemy.engine.url._parse_url), so that the URL is checked the
# way it will be read, without importing SQLAlchemy (commands without a database start fast).
_DB_URL = re.compile(
    r"""^(?P<name>[\w+.-]+)://
    (?:(?P<username>[^:/]*)(?::(?P<password>[^@]*))?@)?
    (?:(?:\[(?P<ipv6host>[^/?]+)\]|(?P<ipv4host>[^/:?]+))?(?::(?P<port>[^/?]*))?)?
    (?:/(?P<database>[^?]*))?
    (?:\?(?P<query>.*))?$""",
    re.X | re.S,
)
DB_EXAMPLE = "sqlite:///autoscaler.db or postgresql://user@host:5432/ledger"


def check_database_url(source: str, url: str) -> str:
    """A ledger URL, parsed once up front: BadInput in one line naming ``source`` for what SQLAlchemy
    would misread or fail on with a traceback (a port that is not a number, ``sqlite://x.db``, a
    password with an unescaped ``@``). The password is never printed, not even a part of it."""
    why = _database_url_problem(url)
    if why:
        raise BadInput(f"{source}: {redact_url(url)!r} is not a database URL: {why} (e.g. {DB_EXAMPLE})")
    return url


def _database_url_problem(url: str) -> str | None:
    found = _DB_URL.match(url)
    if not found or not re.match(r"^[A-Za-z]", url):
        return "it needs DIALECT:// first"
    parts = found.groupdict()
    dialect = parts["name"].split("+", 1)[0].lower()
    host = parts["ipv6host"] or parts["ipv4host"] or ""
    credentials = (parts["username"] or "") + ":" + (parts["password"] or "")
    if "@" in host or "#" in host or any(c in credentials for c in "@/?#"):
        # "postgresql://u:P@SS#X@host/db": SQLAlchemy takes "P" as the password and "SS#X@host" as the
        # host, and the driver's error would print the rest of the password; "...?password=a@b.example"
        # makes "b.example" the host. Either way the URL does not say what its writer meant.
        return ("more than one '@', or a '#' in the host: percent-encode '@', '#', '/', '?' and ':' in a "
                "password or a query value (%40, %23, %2F, %3F, %3A)")
    port = parts["port"]
    if port is not None and port != "" and not (port.isdigit() and 0 < int(port) <= 65535):
        return f"the port {port!r} is not a number from 1 to 65535"
    if dialect == "sqlite":
        if host or parts["username"] is not None:
            return (f"a SQLite URL has no host ({host or parts['username']!r}): a file is sqlite:///relative.db "
                    "or sqlite:////absolute/path.db (three or four slashes)")
    return None


def is_memory_database(url: str) -> bool:
    """``sqlite://``, ``sqlite:///:memory:`` and SQLite URI memory forms: gone when the process ends."""
    found = _DB_URL.match(url)
    if not found or not found["name"].lower().startswith("sqlite"):
        return False
    db = found["database"] or ""
    query = found["query"] or ""
    return db in ("", ":memory:") or "mode=memory" in db + "?" + query or db.startswith("file::memory:")


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


def status_token(env: Mapping[str, str] | None = None) -> str | None:
    """The bearer token of /status: ``AUTOSCALER_STATUS_TOKEN``, or the file ``AUTOSCALER_STATUS_TOKEN_FILE`` names."""
    return _secret(os.environ if env is None else env, "AUTOSCALER_STATUS_TOKEN") or None


SERVICES = frozenset({"prometheus", "gateway", "database"})


def load_settings(
    *,
    prometheus: str | None = None,
    gateway: str | None = None,
    db: str | None = None,
    listen: str | None = None,
    env: Mapping[str, str] | None = None,
    uses: Collection[str] = SERVICES,
) -> Settings:
    """Flags win over ``AUTOSCALER_*`` variables, which win over defaults. Each URL of a service in
    ``uses`` is parsed here, once, before anything is contacted (BadInput naming the flag or variable)."""
    env = os.environ if env is None else env
    database_url, db_from = _database_url(db, env)
    prometheus_url, prometheus_from = _pick(prometheus, "--prometheus", env, "AUTOSCALER_PROMETHEUS_URL",
                                            DEFAULT_PROMETHEUS_URL)
    gateway_url, gateway_from = _pick(gateway, "--gateway", env, "AUTOSCALER_GATEWAY_URL", DEFAULT_GATEWAY_URL)
    if "database" in uses:
        check_database_url(db_from, database_url)
    if "prometheus" in uses:
        prometheus_url = check_http_url(prometheus_from, prometheus_url, DEFAULT_PROMETHEUS_URL)
    if "gateway" in uses:
        gateway_url = check_http_url(gateway_from, gateway_url, DEFAULT_GATEWAY_URL)
    return Settings(
        prometheus_url=prometheus_url.rstrip("/"),
        gateway_url=gateway_url.rstrip("/"),
        database_url=database_url,
        database_url_from=db_from,
        prometheus_url_from=prometheus_from,
        listen=listen or env.get("AUTOSCALER_LISTEN") or DEFAULT_LISTEN,
        gateway_api_key=_secret(env, "AUTOSCALER_GATEWAY_API_KEY"),
    )


def _pick(flag_value: str | None, flag: str, env: Mapping[str, str], name: str, default: str) -> tuple[str, str]:
    """The value and where it came from (for the error message)."""
    if flag_value:
        return flag_value, flag
    if env.get(name):
        return env[name], name
    return default, "default"


def _database_url(db: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """--db, else AUTOSCALER_DATABASE_URL, else the file named by AUTOSCALER_DATABASE_URL_FILE (so that
    a password is not in the environment ``ps e`` shows), else the default."""
    if db:
        return db, "--db"
    if env.get("AUTOSCALER_DATABASE_URL"):
        return env["AUTOSCALER_DATABASE_URL"], "AUTOSCALER_DATABASE_URL"
    from_file = _secret(env, "AUTOSCALER_DATABASE_URL")
    if from_file is not None:
        if not from_file:
            raise BadInput(f"AUTOSCALER_DATABASE_URL_FILE: {env['AUTOSCALER_DATABASE_URL_FILE']} is empty")
        return from_file, "AUTOSCALER_DATABASE_URL_FILE"
    return DEFAULT_DB_URL, "default"
