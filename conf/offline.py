"""Switch off every network attempt the stack makes by default (each one below names what it stops).

Called before Prefect, DuckDB or Hugging Face libraries are imported by `flows` and `tasks`, so an
air-gapped run neither hangs nor logs connection errors. Values already set by the user win.
"""

from __future__ import annotations

import os

OFFLINE_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # Prefect server telemetry
    "DO_NOT_TRACK": "1",  # Prefect client telemetry (and other tools honouring it)
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "HF_HUB_OFFLINE": "1",  # no hub look-ups: models load by local path or from the local HF cache
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # not network either: transformers' "Loading weights" / "Writing model shards" bars on every model
    # load and save would fill a nightly's output (they follow huggingface_hub's switch)
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    # not a network switch, but the same kind of default: on a loaded 2-core machine the temporary
    # Prefect server can take longer than Prefect's 20 s to answer
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}


def go_offline() -> None:
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
