"""vLLM's engine-core schedulers, which the goodput scheduler extends (draft_length/)."""

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

__all__ = ["AsyncScheduler", "Scheduler"]
