"""Prefect flows, the flow driver and the `augdag` CLI."""

from conf.offline import go_offline

go_offline()
