"""What a step of an engine with one token budget for prompts and decodes holds (tokens, requests).

Engines that mix prompt (prefill) tokens and running decodes in one step
(``ServingBehaviour.mixed_batches``) schedule the running decodes first and give the prompts
what is left of the step's token budget C (vLLM ``--max-num-batched-tokens``, TensorRT-LLM
``max_num_tokens``, SGLang ``--chunked-prefill-size``). How much a decode takes of it is the
stack's ``ServingBehaviour.decode_budget_share``:

* ``with_drafts`` (vLLM V1, TensorRT-LLM): each running decode takes its last token and its k
  speculative drafts, 1 + k tokens, and decodes beyond the budget wait for a later step, so a
  step never holds more than C tokens (vllm-project/vllm vllm/v1/core/sched/scheduler.py@00024d31
  ``Scheduler.schedule``: running requests take ``num_tokens_with_spec - num_computed_tokens``
  out of ``token_budget`` until it is 0, waiting requests ``min(prompt, token_budget)`` after
  them; NVIDIA/TensorRT-LLM cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp@0a949d31:
  a generation request takes beam width + draft tokens and the loop breaks at the first that
  does not fit, a chunked context gets ``maxNumTokens - batchNumTokens``, an unchunked one is
  scheduled only when its whole prompt fits what is left).
* ``one_per_request`` (SGLang ``--enable-mixed-chunk``): the prompt chunk is C less one token
  per running request, and all running decodes run whatever the budget
  (sgl-project/sglang python/sglang/srt/managers/schedule_policy.py@ad0119fd ``PrefillAdder``:
  ``rem_chunk_tokens -= mixed_with_decode_tokens``, which the scheduler sets to ``running_bs``).

So a step of R running decodes with k drafts on a C-token budget under ``with_drafts`` carries
C - R (1 + k) prompt tokens, and the prompts need more steps as R grows.

All functions are pure and numpy-friendly (rows of layouts); units are tokens and requests.
"""
from __future__ import annotations

import numpy as np


def _f(x):
    return np.asarray(x, dtype=float)


def budget_tokens_per_decode(behaviour, speculative_tokens: int) -> float:
    """Tokens of the step budget one running decode takes: 1 + k under ``with_drafts``, 1 under
    ``one_per_request`` (see the module docstring)."""
    if behaviour.decode_budget_share == "with_drafts":
        return 1.0 + float(speculative_tokens)
    return 1.0


def decodes_per_step(behaviour, step_budget, speculative_tokens: int):
    """The most running decodes one step holds (requests): floor(C / (1 + k)) under
    ``with_drafts`` (the rest wait for a later step), unbounded (inf) otherwise."""
    if behaviour.decode_budget_share != "with_drafts":
        return np.full(np.shape(_f(step_budget)), np.inf)
    return np.maximum(np.floor(_f(step_budget) / (1.0 + float(speculative_tokens))), 1.0)


def prompt_step(behaviour, step_budget, riders, tokens_per_decode, waiting_tokens, isl, chunked: bool):
    """(prompt tokens, decodes riding) of a step that serves ``riders`` running decodes first and
    gives the prompts waiting (``waiting_tokens`` in all, prompts of ``isl`` tokens) what is left
    of ``step_budget``:

    * chunked prompts: min(waiting, C - riders x tokens_per_decode) prompt tokens;
    * whole prompts: as many whole prompts as fit what is left (at most the waiting ones).

    A step that carries prompt tokens carries at least one (a chunked engine) or one whole prompt
    (an unchunked one). Under ``with_drafts`` the decodes beyond what leaves that room wait for a
    later step (so riders shrink, never the budget); under ``one_per_request`` they all ride and
    the prompt gets at least that minimum."""
    budget, riders, per = _f(step_budget), _f(riders), float(tokens_per_decode)
    waiting, isl = _f(waiting_tokens), _f(isl)
    need = np.ones_like(isl) if chunked else isl
    if behaviour.decode_budget_share == "with_drafts" and per > 0.0:
        riders = np.minimum(riders, np.maximum(np.floor((budget - need) / per), 0.0))
    room = np.maximum(budget - riders * per, need)
    if chunked:
        prompt = np.minimum(room, waiting)
    else:
        # np.clip's bounds, without its overhead
        prompt = np.minimum(np.maximum(np.floor(room / isl), 1.0), np.maximum(np.floor(waiting / isl), 1.0)) * isl
    return prompt, riders
