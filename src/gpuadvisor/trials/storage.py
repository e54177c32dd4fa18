"""Open the study storage (SQLite by default, PostgreSQL for several workers) without leaking passwords."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit, urlunsplit

from ..errors import UserError
from ..paths import user_data_dir

HEARTBEAT_S = 10
GRACE_S = 60


def default_db_path() -> Path:
    """The embedded study database: <user data dir>/studies.db."""
    return user_data_dir() / "studies.db"


def mask_url(url: str) -> str:
    """The URL with its password replaced by ***, safe for logs, errors and files."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//([^:/@]*):[^@]*@", r"//\1:***@", url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def scrub(text: str, url: str) -> str:
    """Remove the URL's password from any text (e.g. a driver's error message)."""
    try:
        pw = urlsplit(url).password
    except ValueError:
        pw = None
    text = text.replace(url, mask_url(url))
    return text.replace(pw, "***") if pw else text


def _pg_driver() -> str:
    """psycopg (3) if installed, else psycopg2 (SQLAlchemy 2.1 defaults to psycopg)."""
    import importlib.util

    return "psycopg" if importlib.util.find_spec("psycopg") else "psycopg2"


def _require_driver(driver: str, storage: str) -> None:
    """Fail early, naming what to install, when the PostgreSQL driver module is missing."""
    import importlib.util

    if importlib.util.find_spec(driver) is None:
        other = "" if driver in ("psycopg", "psycopg2") else f", or pip install {driver}"
        raise UserError(f"study storage {mask_url(storage)} needs the PostgreSQL driver '{driver}', which is not "
                        f"installed; run: pip install 'gpuadvisor[postgres]'{other}")


def storage_url(storage: Optional[str]) -> str:
    """The SQLAlchemy URL for `storage` (None: the default SQLite file; a path: SQLite at that path)."""
    if storage is None:
        path = default_db_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"
    if "://" not in storage:
        return f"sqlite:///{Path(storage).expanduser().resolve()}"
    scheme, rest = storage.split("://", 1)
    if scheme in ("postgres", "postgresql"):
        driver = _pg_driver()
        _require_driver(driver, storage)
        return f"postgresql+{driver}://{rest}"
    if scheme.startswith("postgresql+"):
        _require_driver(scheme.split("+", 1)[1], storage)
        return storage
    if scheme == "sqlite":
        return storage
    raise UserError(f"unsupported study storage '{mask_url(storage)}'; use a SQLite path or postgresql://user:pass@host/db")


def quiet_optuna() -> None:
    """Silence Optuna's experimental-feature warnings (heartbeats with ask/tell are what we want)."""
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def open_storage(storage: Optional[str], *, heartbeat_s: int = HEARTBEAT_S, grace_s: int = GRACE_S):
    """An Optuna RDBStorage with heartbeats; stale trials are retried at most once.

    Returns (storage, masked_url). Errors are one line and never contain the password.
    """
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    url = storage_url(storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    quiet_optuna()
    try:
        engine_kwargs = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {"pool_pre_ping": True}
        st = RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_s, grace_period=grace_s,
                        heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1))
    except Exception as exc:  # driver errors: connection refused, auth failed, missing driver
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot open study storage {mask_url(url)}: {scrub(first, url)}") from None
    return st, mask_url(url)
