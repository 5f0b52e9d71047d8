"""Model Runner V2's names (the GPU default): its Gemma 4 drafter, graph and DP helpers."""

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.spec_decode.gemma4.speculator import Gemma4Speculator
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
from vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils import (
    SpeculatorBatchDescriptor,
)

__all__ = [
    "CUDAGraphMode",
    "DraftModelSpeculator",
    "Gemma4Speculator",
    "SpeculatorBatchDescriptor",
    "build_slot_mappings_by_layer",
    "dispatch_cg_and_sync_dp",
]
