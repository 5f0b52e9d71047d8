# Source on the GPU host (after the base bundle's own environment, if it has one) in every shell that
# runs vLLM with FA4 from /tmp/site.
# - nvidia-cutlass-dsl ships its `cutlass` package under nvidia_cutlass_dsl/dsl_packages and puts it on
#   sys.path with a .pth file, which Python reads only in site directories, not in PYTHONPATH entries.
#   Without this path, `import cutlass` fails; vLLM still selects FA4 (its check only looks for
#   vllm_flash_attn/cute/interface.py) and the first attention call fails.
# - JIT caches go under /tmp, so nothing needs a writable HOME.
_fa4_site=${SITE:-/tmp/site}
case ":${PYTHONPATH:-}:" in
  *":$_fa4_site:"*) ;;
  *) PYTHONPATH=$_fa4_site${PYTHONPATH:+:$PYTHONPATH} ;;
esac
case ":$PYTHONPATH:" in
  *":$_fa4_site/nvidia_cutlass_dsl/dsl_packages:"*) ;;
  *) PYTHONPATH=$PYTHONPATH:$_fa4_site/nvidia_cutlass_dsl/dsl_packages ;;
esac
export PYTHONPATH
export CUTE_DSL_CACHE_DIR=${CUTE_DSL_CACHE_DIR:-/tmp/cute-dsl-cache}                  # cutlass-dsl file cache
export FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=${FLASH_ATTENTION_CUTE_DSL_CACHE_DIR:-/tmp/fa4-cute-cache}  # if enabled
export TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-/tmp/tvm-ffi-cache}
# getpass.getuser() (cache paths) needs USER/LOGNAME when the uid has no passwd entry.
export USER=${USER:-$(id -un 2>/dev/null || echo gpu)}
export LOGNAME=${LOGNAME:-$USER}
if [ -z "${HOME:-}" ] || ! [ -w "${HOME:-/nonexistent}" ]; then
  export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/.cache} VLLM_CACHE_ROOT=${VLLM_CACHE_ROOT:-/tmp/vllm-cache} \
    TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/.triton}
fi
unset _fa4_site
