"""The ``SpeculatorConfig`` of ``frozen_kv_mtp`` on vLLM 0.34 (hook 1).

vLLM resolves it by qualified name (``frontend.CONFIG_CLASS``, registered by
``register()``) in every process that reads a frozen_kv_mtp speculative config, so, as
vLLM asks of config modules, it imports no speculator: the model runner imports
``speculator_class`` when it builds the drafter. It is Gemma 4 MTP's config, whose setup
(the assistant's draft config, k, the checkpoint check) and behaviour it inherits, with
our speculator, our options and no prefill context parallelism.
"""

from __future__ import annotations

from typing import ClassVar

from vllm.v1.worker.gpu.spec_decode.gemma4.config import Gemma4MTPSpeculatorConfig


class FrozenKVMTPSpeculatorConfig(Gemma4MTPSpeculatorConfig):
    """Gemma 4 MTP, drafted by ``FrozenKVMTPSpeculator`` (replaces patch 3's dispatch)."""

    speculator_class: ClassVar[str | None] = (
        "vllm_frozen_kv_mtp.adapters.vllm_0_34.speculator.FrozenKVMTPSpeculator"
    )
    #: the front end's validated options (``options.FrozenKVOptions``) ride here
    supported_options: ClassVar[frozenset[str]] = Gemma4MTPSpeculatorConfig.supported_options | {
        "speculator_options"
    }
    #: M4: the frozen round reads its seed rows without vLLM's PCP manager (the front end
    #: refuses PCP first, with the fix; this keeps vLLM from offering it)
    supports_pcp: ClassVar[bool] = False
