"""The closed set of episode event types (docs/rules.md; WeAgent Table 5 and Table 6, §4.5).

An :class:`~kit.harness.episode.Event` is one harness intervention, budget decision, grammar departure or
normalization finding on an episode record. Its ``type`` is validated against :class:`EventType`, so a
misspelt type fails where it is written, not silently where it is read (``kit.rl`` reads them for
eligibility, rewards and the Figure 7 statistics). On disk a type is its string value, so records stay
plain JSON. Which rule emits which event, under which config field: :data:`kit.harness.rules.RULES`.
"""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    """Every event type the kit writes (``Event.type`` holds the string value)."""

    # Episode budgets and ends (Table 5 "Episode")
    WALL_CLOCK = "wall_clock"  # the wall-clock budget ended the episode (excluded from training)
    CONTEXT_LIMIT = "context_limit"  # the context budget ended the episode (excluded from training)
    EPISODE_ERROR = "episode_error"  # a component failed; the record keeps the reason
    SYNTHESIS_REQUESTED = "synthesis_requested"  # max-turn finalization / early final synthesis asked for
    SYNTHESIS_INCOMPLETE = "synthesis_incomplete"  # the synthesis turn had no complete <response>
    TOOL_CALL_IN_SYNTHESIS = "tool_call_in_synthesis"  # a call written in the no-tool turn (not executed)
    # Vanilla rollout (HarnessConfig.self_recovery=False, WeAgent Table 3): episode ends without recovery
    BUDGET_EXHAUSTED = "budget_exhausted"  # turn / call budget reached: ends without a synthesis turn
    INVALID_ACTION = "invalid_action"  # an invalid call or a turn without an action ended the episode
    # Recovery (Table 5 "Recovery")
    ARGUMENT_REPAIR = "argument_repair"  # an unambiguous repair was applied before execution
    INVALID_CALL = "invalid_call"  # a call that cannot be run (structured error observation)
    DUPLICATE_SUPPRESSED = "duplicate_suppressed"  # same call as the preceding executed one: not run
    LOOP_GUARD = "loop_guard"  # repeated identical invalid calls (or turns without an action)
    NO_ACTION = "no_action"  # a turn with neither a tool call nor a response
    OVERLONG_REGENERATED = "overlong_regenerated"  # an overlong response was discarded and regenerated
    OVERLONG_KEPT = "overlong_kept"  # the replacement was overlong too and was kept (not trainable)
    TOOL_ERROR = "tool_error"  # the executor failed or timed out (structured error observation)
    # Hooks given to the harness (kit.harness.hooks; detail "hook" names the hook)
    HOOK_DENIED = "hook_denied"  # a hook refused the call: not run, the hook's observation instead
    HOOK_REWRITE = "hook_rewrite"  # a hook changed the call's tool or arguments before it ran
    HOOK_STOP = "hook_stop"  # a hook ended the regular turns (then the synthesis turn, like a budget)
    HOOK_OBSERVATION = "hook_observation"  # a hook replaced an executed call's observation text
    # Persistence (Table 5 "Persistence")
    RESULT_PERSISTED = "result_persisted"  # a long result saved to a file, with an in-context preview
    PERSIST_FAILED = "persist_failed"  # the result could not be saved (error observation)
    RESULT_CAPPED = "result_capped"  # a tool's own result cap (ToolSpec.max_result_chars) cut the text
    IMAGES_NOT_SHOWN = "images_not_shown"  # registered images past a tool's re-feed limit were not shown
    # Turn grammar (Table 6; kit.harness.parsing.DEPARTURES)
    EXTRA_ACTIONS_IGNORED = "extra_actions_ignored"
    MULTIPLE_RESPONSES = "multiple_responses"
    RESPONSE_UNCLOSED = "response_unclosed"
    TOOL_CALL_AFTER_RESPONSE = "tool_call_after_response"
    TEXT_OUTSIDE_GRAMMAR = "text_outside_grammar"
    THINK_MISSING = "think_missing"
    THINK_UNCLOSED = "think_unclosed"
    MULTIPLE_THINK = "multiple_think"
    THINK_OPENED_BY_TEMPLATE = "think_opened_by_template"  # a note, not a departure (thinking templates)
    UNKNOWN_CITATION = "unknown_citation"  # <IMG: ...> naming no registered image
    # a cited image whose page title, URL and caption all name another entity than the answer (a flag on data
    # the kit builds: kit.data.sample.judge_episode; the record stays as it is)
    CITATION_MISMATCH = "citation_mismatch"
    # Evidence and data hygiene
    CONTROL_TOKENS_NEUTRALIZED = "control_tokens_neutralized"  # chat-control strings in task text or an observation
    EVIDENCE_MODIFIED = "evidence_modified"  # a registered image changed on disk: not shown again
    IMAGE_REJECTED = "image_rejected"  # an image failed the decoder's checks: not registered
    IMAGES_NOT_REGISTERED = "images_not_registered"  # execute_code saved more images than its per-call limit
    SANDBOX_CLOSE_ERROR = "sandbox_close_error"
    TOOL_NOTE = "tool_note"  # a tool's own finding (an added tool: ctx.event(EventType.TOOL_NOTE, name=..., ...))
    # V-Fold (POINTS-Seeker §3.3)
    VFOLD_KEPT_AS_TEXT = "vfold_kept_as_text"  # an observation V-Fold could not render stayed text
    VFOLD_FOLDED_LOSSY = "vfold_folded_lossy"  # folded although characters were lost (paper mode)
    # Normalization of open-source trajectories (WeAgent §4.5; kit.data.normalize)
    OBSERVATION_WITHOUT_CALL = "observation_without_call"
    OBSERVATION_MISSING = "observation_missing"
    OBSERVATION_RECONSTRUCTED = "observation_reconstructed"
    OBSERVATION_HASH_MISMATCH = "observation_hash_mismatch"
    OBSERVATION_IMAGES_MISSING = "observation_images_missing"
    INPUT_IMAGE_MISSING = "input_image_missing"
    INPUT_IMAGE_MISMATCH = "input_image_mismatch"
    ROUNDS_AFTER_ANSWER = "rounds_after_answer"
    TOOL_HARD_FAILURE = "tool_hard_failure"
    FINAL_ANSWER_MISMATCH = "final_answer_mismatch"


class RunEventType(StrEnum):
    """Every line type of an RL run log (``run_log.jsonl``, :class:`kit.rl.staging.RunLog`): Long-MDR
    stages, rescues and the trainer's steps, checkpoints and resumes."""

    RUN_START = "run_start"
    STAGE_START = "stage_start"
    TRANSITION = "transition"  # a stage ended (fixed length or reward plateau)
    RESCUE = "rescue"  # entropy-triggered rescue fired
    STEP = "step"  # one training step's metrics
    SKIP = "skip"  # a step skipped with a reason (no training group, no advantage signal, NaN)
    CHECKPOINT = "checkpoint"
    RESUME = "resume"
    ROLLBACK = "rollback"
    ROLLBACK_FAILED = "rollback_failed"


__all__ = ["EventType", "RunEventType"]
