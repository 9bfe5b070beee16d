"""augdag's tests: a regular package, so that `tests` is this directory even where another distribution installs a
top-level `tests` package into site-packages (opustools does, through the `bench` extra's opusfilter)."""

import os

# The flows tests run in-process report to the session harness's Prefect server (tests/conftest.py); their logs stay
# in each run's log file (`augdag logs`), not posted to that server as well: on the EPiDA flow tests, 73 -> 60 s and
# the server's CPU 20.6 -> 17.7 s. Set before Prefect is imported (its settings are read then); the `augdag`
# subprocesses the tests start get Prefect's default back (conftest.subprocess_env), as a user's runs have it.
os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
