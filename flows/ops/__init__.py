"""Running the product on a machine: the cache's Prefect server, schedules, stopping cleanly, crashed runs, the
reports over HTTP."""
