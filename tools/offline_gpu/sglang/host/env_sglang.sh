# Source on the GPU host in every shell that runs SGLang, after setup_sglang.sh. Not in the shells
# that run vLLM: /tmp/sglsite holds SGLang's transformers (5.12.1), which must not shadow the
# image's 5.17 there. The vLLM bundle (/tmp/site) is taken off PYTHONPATH here: with vLLM
# importable, SGLang patches vLLM's parallel state and imports vLLM ops, as a stock SGLang
# install (which has no vLLM) never does.
_sgl_site=${SGLSITE:-/tmp/sglsite}
_sgl_pp=$_sgl_site
IFS=: read -r -a _sgl_entries <<< "${PYTHONPATH:-}"
for _e in ${_sgl_entries[@]+"${_sgl_entries[@]}"}; do
  case "$_e" in "" | "$_sgl_site" | "${SITE:-/tmp/site}") ;; *) _sgl_pp=$_sgl_pp:$_e ;; esac
done
export PYTHONPATH=$_sgl_pp
unset _sgl_site _sgl_pp _sgl_entries _e
# SGLang's JIT CUDA kernels: setup_sglang.sh puts the prebuilt sm_90a ones here; a kernel not
# among them is compiled into the same folder (needs nvcc; setup's check says if there is one).
export TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-/tmp/sgl-jit}
# FlashInfer comes without its JIT sources (76 MB) and without kernels: with this, SGLang's
# optional FlashInfer paths (all-reduce fusion at TP > 1, FlashInfer norms, attention backends)
# stay off; the Gemma 4 path needs none of them. Sampling runs on PyTorch (the driver sets it).
export SGLANG_IS_FLASHINFER_AVAILABLE=false
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false
export USER=${USER:-$(id -un 2>/dev/null || echo gpu)}
export LOGNAME=${LOGNAME:-$USER}
if [ -z "${HOME:-}" ] || ! [ -w "${HOME:-/nonexistent}" ]; then
  export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/.cache} SGLANG_CACHE_DIR=${SGLANG_CACHE_DIR:-/tmp/sglang-cache} \
    TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/.triton}
fi
