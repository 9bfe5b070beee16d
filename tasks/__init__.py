"""The stages: pure functions over Arrow tables plus thin Prefect task wrappers."""

from conf.offline import go_offline

go_offline()
