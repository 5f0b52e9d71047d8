"""The engine-core scheduler behind ``num_speculative_tokens="auto"``.

vLLM's scheduler already takes a per-step k: it reads
``self.dynamic_sd_lookup[batch_size]`` (the dense form of
``num_speculative_tokens_per_batch_size``) every step and sends the result to the
workers as ``SchedulerOutput.num_spec_tokens_to_schedule``. These subclasses swap
that table for a lookup that asks :class:`GoodputPolicy`, and feed the policy from
two narrow hooks of the parent: ``make_spec_decoding_stats`` (called once per
verified request with its draft and accepted counts) and ``update_from_output``
(once per step: its spacing is the step time). Nothing else of vLLM's scheduling
changes, and drafts, verification and metrics stay vLLM's.

``scheduler_cls`` is a supported vLLM extension point; the front end sets it to
:class:`GoodputScheduler` when ``"auto"`` is asked for, and its ``__new__`` picks
the async or the sync parent the way vLLM itself would.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

from vllm_frozen_kv_mtp.adapters import active
from vllm_frozen_kv_mtp.draft_length.policy import GoodputPolicy
from vllm_frozen_kv_mtp.draft_length.settings import PolicySettings

logger = logging.getLogger("vllm.frozen_kv_mtp")

#: seconds between the engine-log lines that report the k chosen
LOG_INTERVAL_S = 10.0


class _PolicyLookup:
    """Stands where vLLM keeps its dense batch-size -> k table."""

    def __init__(self, policy: GoodputPolicy) -> None:
        self.policy = policy

    def __getitem__(self, batch_size: int) -> int:
        return self.policy.choose(batch_size)


class _GoodputK:
    """Mixin over vLLM's ``Scheduler`` / ``AsyncScheduler``: k chosen per step."""

    num_spec_tokens: int
    dynamic_sd_lookup: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reset_k_policy()
        self._last_step_end: float | None = None
        self._last_log = time.monotonic()
        #: when the engine last resumed after running dry
        self._busy_since = self._last_log
        #: this step's verify results, (drafts, accepted) -> requests: folded into the
        #: policy once per step rather than once per request
        self._verified: Counter[tuple[int, int]] = Counter()
        # vLLM warns about any custom scheduler that async scheduling may be off; say
        # which parent this one took.
        parent = (
            "vLLM's AsyncScheduler: async scheduling stays on"
            if isinstance(self, active.scheduler.AsyncScheduler)
            else "vLLM's Scheduler: this engine schedules synchronously"
        )
        logger.info(
            "frozen_kv_mtp: draft length policy 'auto': k in 0..%d chosen each step to "
            "maximise expected committed tokens per second, from acceptance per "
            "position and step times measured in this engine per batch-size bucket and "
            "context bucket (tokens per request, buckets ending at 1536, 3072, 6144, ...) "
            "(%s, over %s)",
            self.num_spec_tokens,
            type(self).__name__,
            parent,
        )

    def reset_k_policy(self, policy: GoodputPolicy | None = None) -> None:
        """Use ``policy``, or one that knows nothing yet: what a freshly started engine
        has (benchmarks measure "auto" from here, as a server meeting its traffic would,
        and hand a row's policy back between its runs)."""
        if policy is None:
            policy = GoodputPolicy(PolicySettings(k_max=self.num_spec_tokens))
        self.k_policy = policy
        self.dynamic_sd_lookup = _PolicyLookup(self.k_policy)
        #: policy steps the latest log line covered
        self._logged_steps = policy.steps

    # ---- what the policy learns from ------------------------------------------

    def make_spec_decoding_stats(
        self,
        spec_decoding_stats: Any,
        num_draft_tokens: int,
        num_accepted_tokens: int,
        num_invalid_spec_tokens: dict[str, int] | None,
        request_id: str,
    ) -> Any:
        drafts = num_draft_tokens - (num_invalid_spec_tokens or {}).get(request_id, 0)
        if drafts > 0:
            self._verified[drafts, num_accepted_tokens] += 1
        return super().make_spec_decoding_stats(  # type: ignore[misc]
            spec_decoding_stats,
            num_draft_tokens,
            num_accepted_tokens,
            num_invalid_spec_tokens,
            request_id,
        )

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        now = time.monotonic()
        back_to_back = self._last_step_end is not None  # else the first step after a wait
        self._time_step(scheduler_output, now)
        result = super().update_from_output(  # type: ignore[misc]
            scheduler_output, model_runner_output
        )
        self._fold_verified()
        # Time only back-to-back steps: an engine with nothing to run waits, and the
        # steps after the wait do not compare with those before it.
        busy = bool(self.get_num_unfinished_requests())  # type: ignore[attr-defined]
        self._last_step_end = now if busy else None
        if not busy:
            self.k_policy.observe_idle()
        if not back_to_back:
            self._busy_since = now
        self._maybe_log_k_choice(now, busy)
        return result

    def _maybe_log_k_choice(self, now: float, busy: bool) -> None:
        """One line per interval of back-to-back steps, and one when the engine runs dry
        after a stretch that long, or for the first time; short bursts within an
        interval of the last line share the next one. A server's engine core is killed
        at shutdown before it can log, so the idle line is what a short run leaves."""
        if self.k_policy.steps == self._logged_steps:
            return
        interval_start = max(self._last_log, self._busy_since)
        if busy:
            log = now - interval_start >= LOG_INTERVAL_S
        else:
            log = (
                not self._logged_steps
                or now - self._last_log >= LOG_INTERVAL_S
                or now - self._busy_since >= LOG_INTERVAL_S
            )
        if log:
            self._last_log = now
            self.log_k_choice()

    def _fold_verified(self) -> None:
        for (drafts, accepted), count in self._verified.items():
            self.k_policy.observe_verify(drafts, accepted, count)
        self._verified.clear()

    def _time_step(self, so: Any, now: float) -> None:
        last, self._last_step_end = self._last_step_end, None
        batch = len(so.num_scheduled_tokens)
        if batch == 0:
            return
        # The KV each request reads: the next decision's context bucket (the next step's
        # context is this one's plus a token or a few). One pass over a list of ints.
        tokens = sum(so.scheduled_cached_reqs.num_computed_tokens)
        for new in so.scheduled_new_reqs:
            tokens += new.num_computed_tokens
        context = self.k_policy.context = tokens // batch
        if last is None:
            return
        k = so.num_spec_tokens_to_schedule
        verified = {len(v) for v in so.scheduled_spec_decode_tokens.values()}
        # A clean sample: every request verifies k drafts (or none at k = 0) and
        # drafts k again, with no prefill in the step.
        if verified - {k} or so.total_num_scheduled_tokens != batch * (1 + k):
            return
        self.k_policy.observe_step(batch, k, now - last, context)

    def log_k_choice(self) -> None:
        s = self.k_policy.summary()
        self._logged_steps = self.k_policy.steps
        logger.info(
            "frozen_kv_mtp auto k: steps=%d k_counts=%s current_k=%d switches=%d "
            "acceptance_per_position=%s context_bucket=%d "
            "step_ms_by_batch_context_and_k=%s relative_step_cost_by_batch_context_and_k=%s "
            "timing_noise=%.3f",
            s["steps"],
            s["k_counts"],
            s["current_k"],
            s["switches"],
            s["acceptance_per_position"],
            s["context_bucket"],
            s["step_ms"],
            s["relative_cost"],
            s["timing_noise"],
        )

    def shutdown(self) -> None:
        self.log_k_choice()
        super().shutdown()  # type: ignore[misc]


class GoodputSyncScheduler(_GoodputK, active.scheduler.Scheduler):
    """vLLM's ``Scheduler`` with k chosen by :class:`GoodputPolicy`."""


class GoodputAsyncScheduler(_GoodputK, active.scheduler.AsyncScheduler):
    """vLLM's ``AsyncScheduler`` with k chosen by :class:`GoodputPolicy`."""


class GoodputScheduler:
    """What ``scheduler_cls`` names: builds the async or the sync variant, as vLLM's
    ``SchedulerConfig.get_scheduler_cls`` would have for this engine."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        vllm_config = kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]
        async_ = bool(vllm_config.scheduler_config.async_scheduling)
        impl = GoodputAsyncScheduler if async_ else GoodputSyncScheduler
        return impl(*args, **kwargs)
