"""Which NMT model a pipeline step uses: the configured one, or one fairseq trains on the step's data.

``nmt_model`` returns a ``ModelRef`` for every case, registered in the catalog's `models`:
- ``model`` set: a local directory (fingerprint = hash of its files) or a Hugging Face name;
- ``model`` unset: fairseq-train on an artifact (a model stage, trained once per fingerprint);
- ``inference: ctranslate2``: the model above converted once (another model stage), used for every
  score and translation.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from conf.at_rest import redact
from conf.errors import ConfError
from conf.schema import NMTConf
from flows.engine.driver import ModelRef, Run, run_model_stage
from storage.artifacts import ArtifactRef, fingerprint, hash_inputs
from storage.objects import models as model_store
from tasks.common.nmt import NMT_VERSION, fairseq_builder


def nmt_model(
    run: Run, conf: NMTConf, *, name: str, train_on: ArtifactRef | None = None, role: str = "part", reverse: bool = False
) -> ModelRef:
    """The model for one step; ``reverse`` trains target → source (back-translation)."""
    if conf.model is not None:
        ref = _configured(run, conf, name)
    else:
        if conf.backend != "fairseq":
            raise ConfError(
                f"{name}: backend {conf.backend!r} has no training here; set `model:` to a local path "
                "or Hugging Face name, or use backend: fairseq"
            )
        if train_on is None:
            raise ConfError(f"{name}: no `model:` configured and nothing to train it on")
        src, tgt = ("tgt", "src") if reverse else ("src", "tgt")
        ref = run_model_stage(
            run,
            name=name,
            key="fairseq",
            version=NMT_VERSION,
            kind="fairseq",
            filename="model",
            inputs=[train_on],
            params={"train": conf.train.model_dump(), "src": src, "tgt": tgt, "role": role},
            build=fairseq_builder(train_on.parts(role), conf, src=src, tgt=tgt, label=name),
        )
    if conf.inference == "ctranslate2" and conf.backend != "ctranslate2":
        ref = converted(run, conf, ref)
    return ref


def _configured(run: Run, conf: NMTConf, name: str) -> ModelRef:
    return configured_model(run, conf.model, name=name, kind=conf.backend, meta={"trusted": conf.trusted})


def configured_model(run: Run, model: str, *, name: str, kind: str, meta: dict | None = None) -> ModelRef:
    """A model named in the config, registered in `models`: a local path (fingerprint = hash of its files,
    memoised by size and time) or a Hugging Face name (fingerprint = the name). With artifacts on an object store,
    a local path is published there (``shipped``): the workers share no disk with this machine."""
    path = Path(model)
    local = path.exists()
    fp = hash_inputs([path], memo=run.root / "input-hashes") if local else fingerprint("hf-model", "1", {"name": model}, [])
    ref = ModelRef(name, fp, path.absolute() if local else path)
    if local and run.store:
        ref = dataclasses.replace(ref, uri=model_store.shipped(ref.path, run.store, "configured", fp))
    run.catalog.register_model(
        fp, name=name, kind=kind, path=redact(str(model)), run_id=run.run_id, meta={"configured": True, **(meta or {})}
    )
    return ref


def converted(run: Run, conf: NMTConf, source: ModelRef) -> ModelRef:
    """The CTranslate2 conversion of ``source`` (model `<name>_ct2`), which translates for it under `inference:
    ctranslate2`; evaluations name ``source``, the model users query by (flows/pipelines/train_nmt.py)."""

    def build(path: Path) -> None:
        if conf.backend == "fairseq":  # the trust check of a fairseq checkpoint applies to its conversion too
            from models.nmt.fairseq import FairseqModel

            FairseqModel.load(source.path, trusted=conf.trusted, device="cpu").to_ctranslate2(path)
        else:
            from models.nmt.ctranslate2 import convert_transformers

            convert_transformers(source.path, path, src_lang=conf.src_lang, tgt_lang=conf.tgt_lang)

    return run_model_stage(
        run,
        name=f"{source.name}_ct2",
        key="ctranslate2",
        version=NMT_VERSION,
        kind="ctranslate2",
        filename="model",
        inputs=[],
        params={"source": source.fingerprint, "backend": conf.backend},
        build=build,
    )
