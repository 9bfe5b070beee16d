# The augdag image for docker-compose.yml's `worker` and `deploy`: the project installed the way
# `make install` does (same pins, torch's CPU build), into the system Python rather than a venv.
# docker-compose.yml mounts the project over /app, so the editable install runs the mounted code.
# Never built on the project's machines (no Docker engine there); `docker compose config` checks
# only that docker-compose.yml refers to it.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    UV_SYSTEM_PYTHON=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_NO_CACHE=1

# C/C++ toolchain: fairseq-fixed and kenlm build from source (STACK.md)
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*

RUN pip install --no-cache-dir uv==0.13.9

WORKDIR /app
COPY . /app

# torch: the CPU build (UV_TORCH_BACKEND=cpu takes torch from PyTorch's CPU index, everything else
# from PyPI); TORCH_BACKEND=cu128 (or another CUDA tag) for a GPU host. The pins and exclusions are
# the Makefile's: constraints.txt, build-constraints.txt (torch for fairseq's build),
# excludes.txt (torchaudio, a CUDA build that breaks `import transformers`).
ARG TORCH_BACKEND=cpu
RUN UV_TORCH_BACKEND=${TORCH_BACKEND} uv pip install -e . -c constraints.txt \
      -b build-constraints.txt --excludes excludes.txt \
 && augdag --help >/dev/null \
 && python -c "import torch; print('torch', torch.__version__)"

# lmplz and build_binary for n-gram LM training (models/lm.py finds them on PATH); the script
# apt-installs the Boost and CMake packages it needs.
RUN scripts/build_kenlm.sh /usr/local/bin && rm -rf /var/lib/apt/lists/*

CMD ["prefect", "worker", "start", "--pool", "augdag", "--type", "process"]
