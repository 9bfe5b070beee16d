"""What a flow run's parameters hold on the Prefect server: the configuration at rest, never a secret.

Prefect stores every flow run's parameters (``Flow.serialize_parameters``) in its database, shows them in its UI and
serves them through its API. A pipeline flow's ``conf`` is the resolved ``AugdagConf``: stored as ``dump_conf`` writes
it (a value read from the environment in its ``${VAR}`` form, conf/at_rest.py), and every other parameter with the
environment's values redacted. A flow that receives that form (a deployment's run, a retry) resolves it again from
its own environment (``conf.loader.load_recorded``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conf.at_rest import redact
from conf.loader import dump_conf
from conf.schema import AugdagConf

if TYPE_CHECKING:
    from prefect import Flow


def parameters_at_rest(flow: Flow) -> Flow:
    """``flow``, whose runs record their parameters at rest (``with_options`` makes a new ``Flow``: call it again)."""
    plain = flow.serialize_parameters

    def serialize_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
        stored = {k: dump_conf(v) if isinstance(v, AugdagConf) else v for k, v in parameters.items()}
        return redact(plain(stored))

    flow.serialize_parameters = serialize_parameters  # type: ignore[method-assign]
    return flow
