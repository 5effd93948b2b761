"""What every verb shares: exit codes, output in table or JSON, the config and the store as the flags select.

Each module in this package holds the verbs of one area; ``sentinel/cli/main.py`` only parses and dispatches.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from sentinel import config as config_mod

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_EXPECTATION = 0, 1, 2, 3
DEFAULT_CONFIG = "/etc/sentinel/sentinel.toml"  # read when present and neither --config nor $SENTINEL_CONFIG is


def out(args: argparse.Namespace, data: Any, table: str) -> None:
    if args.output == "json":
        print(json.dumps(data, indent=2, default=str))
    else:
        print(table)


def load_config(args: argparse.Namespace) -> config_mod.Config:
    path = args.config or os.environ.get("SENTINEL_CONFIG") or (DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG)
                                                                  else None)
    environ = dict(os.environ)
    if args.db:
        environ["SENTINEL__STORE__URL"] = json.dumps(db_url(args.db))
    return config_mod.load(path, environ)


def db_url(value: str) -> str:
    return value if "://" in value else f"sqlite:///{value}"


def open_repo(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    # the store modules only, not sentinel.daemon: reading commands should not import the whole pipeline
    from sentinel.store.engine import make_engine, require_current
    from sentinel.store.repository import Repository

    engine = make_engine(load_config(args).store.url, must_exist=True)
    require_current(engine)
    return Repository(engine)


# ----- verbs ----------------------------------------------------------------------------------------------------
