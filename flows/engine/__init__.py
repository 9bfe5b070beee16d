"""The run engine: the flow driver (the one catalog writer), what it records, the registry of pipelines, how a
flow runs (Prefect, or replayed without it), the nightly, retries and run logs."""
