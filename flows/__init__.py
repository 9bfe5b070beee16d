"""Prefect flows, the flow driver and the `augdag` CLI."""

from conf.offline import go_offline

go_offline()

from flows import pipelines  # noqa: E402, F401 — registers the built-in pipelines (flows/engine/registry.py), offline first
