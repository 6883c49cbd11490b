"""Harness hooks: an ordered list of guardrails that decide about each tool call (docs/harness.md "Hooks").

A hook is an object with any of three methods (subclass :class:`Hook` and override what you need), or a plain
function, which is its ``before_call``. Each method may be ``async``; a Harness may run several episodes at
once, so a hook keeps no per-episode state of its own (read it from the :class:`EpisodeView`).

* ``before_call(call, episode) -> Decision | None`` — before a call is executed: :meth:`Decision.allow`
  (``None`` too), :meth:`Decision.deny` with the observation the model sees instead of a result,
  :meth:`Decision.rewrite` of the tool name and/or arguments (validated like the model's own call; the next hook
  sees the rewritten call), or :meth:`Decision.stop`: the call is not run and the episode ends like a turn or
  call budget does (WeAgent Table 5): the no-tool synthesis turn, or without self-recovery status
  ``budget_exhausted``. The first deny or stop ends the chain.
* ``after_observation(call, observation, episode) -> str | None`` — after an executed call (its result or its
  tool error), with the tool's full text, *before* the kit's result policy (per-tool cap, persistence of long
  results, control-token neutralization), so a replacement is bounded and cleaned like any result: return a
  ``str`` to replace the text, ``None`` to keep it; images stay as the tool registered them. Not called for
  the harness's own observations (invalid, duplicate or denied calls).
* ``episode_end(record) -> None`` — once the record is complete (status, events, timings, ``trainable``); it
  inspects, it does not change the record. Not called when the caller cancels the episode.

Every decision other than allow is an event on the record (``hook_denied``, ``hook_rewrite``, ``hook_stop``,
``hook_observation``; detail ``hook`` names it), so transcripts show it. A hook that raises (or returns
something that is not a decision) ends the episode with status ``error`` and an ``episode_error`` naming the
hook and the method; from ``episode_end`` it turns the finished record into an error record the same way.

The kit's own pre-call recovery rules (WeAgent Table 5) run as built-in hooks, first in the order and fresh
for each episode (:func:`builtin_hooks`): :class:`ArgumentRepairHook` (argument repair, the loop guard on
invalid calls, the vanilla rollout's exactness) and :class:`DuplicateHook` (duplicate suppression). They
record the Table 5 events they always recorded (:attr:`Decision.events`). The turn and call budgets are
checked before a turn is generated, not per call, so they stay in the loop (``Harness._episode``);
:meth:`Decision.stop` ends an episode through the same path.
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from kit.harness.episode import Event
from kit.harness.errors import ToolError
from kit.harness.events import EventType
from kit.harness.recovery import DuplicateSuppressor, LoopGuard, repair_call, require_exact

if TYPE_CHECKING:
    from kit.harness.config import HarnessConfig
    from kit.harness.episode import EpisodeRecord
    from kit.harness.parsing import RawCall

Action = Literal["allow", "deny", "rewrite", "stop"]


def _frozen(arguments: Mapping[str, Any] | None) -> Mapping[str, Any]:
    # a deep copy behind a read-only view: a hook cannot change a call in place, only through a rewrite
    return MappingProxyType(copy.deepcopy(dict(arguments or {})))


@dataclass(frozen=True)
class Call:
    """One tool call as a hook sees it.

    ``name`` and ``arguments`` (read-only) are the canonical tool name and validated arguments (schema defaults
    filled) for every hook after the kit's argument repair; ``raw`` is the call as parsed from the model's turn
    (the built-in repair reads it), ``id`` its id."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""
    raw: RawCall | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", _frozen(self.arguments))

    @classmethod
    def from_raw(cls, raw: RawCall) -> Call:
        return cls(raw.name, raw.arguments or {}, raw.id, raw)

    def plain_arguments(self) -> dict[str, Any]:
        """A mutable deep copy of the arguments (what the tool executor receives)."""
        return copy.deepcopy(dict(self.arguments))

    @property
    def urls(self) -> list[str]:
        """The URLs the call would open (``urls`` or ``url`` argument, a string or a list); ``[]`` for none."""
        v = self.arguments.get("urls", self.arguments.get("url"))
        return [v] if isinstance(v, str) else [u for u in v if isinstance(u, str)] if isinstance(v, list) else []


@dataclass(frozen=True)
class Decision:
    """What a ``before_call`` hook decided about one call. Build it with :meth:`allow`, :meth:`deny`,
    :meth:`rewrite` or :meth:`stop`.

    Fields: ``observation`` (deny / stop: the text the model sees in place of a result), ``name`` /
    ``arguments`` (rewrite: the new tool name / arguments, None to keep), ``reason`` (stop: the sentence that
    opens the synthesis prompt; deny / rewrite: recorded in the event), ``events`` (``(EventType, detail)``
    pairs recorded instead of the standard hook event; the kit's own hooks record their Table 5 events this
    way), ``end`` (stop at once, without the synthesis turn, with this status: the vanilla rollout's
    ``invalid_action``).

    Raises:
        ValueError: a decision missing what its action needs (a deny without an observation, a rewrite that
            changes nothing, a stop without a reason) or carrying what it cannot use.
    """

    action: Action = "allow"
    observation: str = ""
    name: str | None = None
    arguments: Mapping[str, Any] | None = None
    reason: str = ""
    events: tuple[tuple[EventType, Mapping[str, Any]], ...] = ()
    end: Literal["invalid_action", "budget_exhausted"] | None = None

    def __post_init__(self) -> None:
        if self.arguments is not None:
            object.__setattr__(self, "arguments", _frozen(self.arguments))
        a = self.action
        if a not in ("allow", "deny", "rewrite", "stop"):
            raise ValueError(f"unknown action {a!r}: allow, deny, rewrite or stop")
        if a == "deny" and not self.observation:
            raise ValueError("a deny decision needs the observation the model sees")
        if a == "rewrite" and self.name is None and self.arguments is None:
            raise ValueError("a rewrite decision needs a new name or new arguments")
        if a == "stop" and not self.reason:
            raise ValueError("a stop decision needs a reason (it opens the synthesis prompt)")
        if a != "rewrite" and (self.name is not None or self.arguments is not None):
            raise ValueError(f"a {a} decision takes no name or arguments (only rewrite does)")
        if self.end is not None and a != "stop":
            raise ValueError("only a stop decision can end the episode")

    @classmethod
    def allow(cls) -> Decision:
        """Run the call (and let the next hook decide)."""
        return ALLOW

    @classmethod
    def deny(cls, observation: str, reason: str = "") -> Decision:
        """Do not run the call; the model sees ``observation`` as its result (an intervention)."""
        return cls("deny", observation=observation, reason=reason)

    @classmethod
    def rewrite(cls, name: str | None = None, arguments: Mapping[str, Any] | None = None,
                reason: str = "") -> Decision:
        """Run ``name`` with ``arguments`` instead (None keeps the call's own); validated like a model's call."""
        return cls("rewrite", name=name, arguments=arguments, reason=reason)

    @classmethod
    def stop(cls, reason: str, observation: str = "") -> Decision:
        """Do not run the call and end the regular turns: the model gets ``observation`` (default
        ``"Not executed: <reason>"``), then the no-tool synthesis turn opened by ``reason``."""
        return cls("stop", observation=observation or f"Not executed: {reason}", reason=reason)


ALLOW = Decision()


@dataclass(frozen=True)
class EpisodeView:
    """The episode as a hook sees it: the record so far (read it, do not change it), the current turn, the
    executed calls so far (``calls``; the current call is counted in ``after_observation``) and the config."""

    record: EpisodeRecord
    turn: int
    calls: int
    config: HarnessConfig

    @property
    def episode_id(self) -> str:
        return self.record.id

    def executed(self, tool: str | None = None) -> int:
        """Executed calls so far (of ``tool`` only, when given): tool results that are not interventions."""
        return sum(1 for m in self.record.messages
                   if m.role == "tool" and not m.intervention and (tool is None or m.name == tool))


class Hook:
    """Base class of a hook: override any of the three methods (each may be ``async``). ``name`` (default: the
    class name) is what events and errors call it."""

    name: str = ""

    def before_call(self, call: Call, episode: EpisodeView) -> Decision | None:
        return ALLOW

    def after_observation(self, call: Call, observation: str, episode: EpisodeView) -> str | None:
        return None

    def episode_end(self, record: EpisodeRecord) -> None:
        return None


class _FunctionHook(Hook):
    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self.name = getattr(fn, "__name__", "") or type(fn).__name__

    def before_call(self, call: Call, episode: EpisodeView) -> Any:
        return self.fn(call, episode)


_POINTS = ("before_call", "after_observation", "episode_end")


def as_hook(obj: Any) -> Any:
    """``obj`` as a hook: an object with any of the three methods as it is, a plain callable as its
    ``before_call``.

    Raises:
        TypeError: ``obj`` is neither."""
    if any(callable(getattr(obj, p, None)) for p in _POINTS):
        return obj
    if callable(obj):
        return _FunctionHook(obj)
    raise TypeError(f"a hook needs before_call, after_observation or episode_end (or is a function); got "
                    f"{type(obj).__name__}")


def hook_name(hook: Any) -> str:
    return getattr(hook, "name", "") or type(hook).__name__


class HookError(Exception):
    """A hook raised or returned something unusable; the episode ends with status ``error`` naming it."""

    def __init__(self, hook: Any, point: str, message: str):
        super().__init__(f"hook {hook_name(hook)!r} failed in {point}: {message}")
        self.hook, self.point = hook_name(hook), point


async def _invoke(hook: Any, point: str, *args: Any) -> Any:
    method = getattr(hook, point, None)
    if not callable(method):
        return None
    try:
        out = method(*args)
        return await out if inspect.isawaitable(out) else out
    except Exception as e:  # a guardrail's bug is the episode's error, named, never a crash of the batch
        raise HookError(hook, point, f"{type(e).__name__}: {e}") from e


# ---------------------------------------------------------------------------------------- kit's own hooks
class ArgumentRepairHook(Hook):
    """Table 5 "Argument repair" and "Repeated format errors" on calls, as a built-in hook (first in order).

    A parse error, an unrepairable call or (without self-recovery) an inexact one is denied with the structured
    error observation and an ``invalid_call`` event; the ``loop_guard_repeats``-th identical one in a row adds
    the loop-guard message and event (:class:`~kit.harness.recovery.LoopGuard`, shared with the loop's turns
    without an action). Without self-recovery the invalid call ends the episode (``invalid_action``). A valid
    call resets the guard and is rewritten to its canonical name and arguments (``argument_repair`` naming the
    repairs, when there were any)."""

    name = "argument_repair"

    def __init__(self, specs: dict[str, Any], guard: LoopGuard, self_recovery: bool,
                 harness_text: Callable[[str], str]):
        self.specs, self.guard, self.self_recovery, self.harness_text = specs, guard, self_recovery, harness_text

    def before_call(self, call: Call, episode: EpisodeView) -> Decision:
        raw = call.raw
        assert raw is not None  # the loop always hands the parsed call to the first hook
        try:
            if raw.error == "truncated":  # a cut call is never completed or run (docs/contracts.md)
                raise ToolError("truncated", raw.message + "; it was not executed. Write the complete call again "
                                "(shorter, if it hit the response length limit).")
            if raw.error:
                raise ToolError(raw.error, raw.message)
            fixed = repair_call(raw.name, raw.arguments or {}, self.specs)
            if not self.self_recovery:
                require_exact(raw.repairs + fixed.repairs)
        except ToolError as e:
            return self._invalid(raw, e)
        self.guard.valid()
        repairs = raw.repairs + fixed.repairs
        events = ((EventType.ARGUMENT_REPAIR, {"tool": fixed.name, "repairs": repairs}),) if repairs else ()
        return Decision("rewrite", name=fixed.name, arguments=fixed.arguments, events=events)

    def _invalid(self, raw: RawCall, e: ToolError) -> Decision:
        detail: dict[str, Any] = {"code": e.code, "message": e.message, "tool": raw.name}
        if not self.self_recovery:  # no structured observation, no loop guard: the call ends the rollout
            return Decision("stop", reason=f"invalid call ({e.code}): {e.message}", end="invalid_action",
                            events=((EventType.INVALID_CALL, detail),))
        guard = self.guard.invalid(raw.name, raw.raw if raw.arguments is None else json.dumps(raw.arguments, sort_keys=True))
        if e.code == "truncated":
            detail.update(truncated=True, raw=raw.raw[:200])
        events: tuple[tuple[EventType, Mapping[str, Any]], ...] = ((EventType.INVALID_CALL, detail),)
        body = e.observation_json()
        if not guard.allowed:
            events += ((guard.event, {"tool": raw.name}),)
            body = self.harness_text(guard.message) + "\n" + body
        return Decision("deny", observation=body, events=events)


class DuplicateHook(Hook):
    """Table 5 "Duplicate suppression" as a built-in hook: a call repeating the immediately preceding executed
    call is denied with :data:`~kit.harness.recovery.DUPLICATE_MESSAGE` (``duplicate_suppressed``); off without
    self-recovery. ``after_observation`` remembers each executed call (as executed, after any rewrite)."""

    name = "duplicate_suppression"

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.dups = DuplicateSuppressor()

    def before_call(self, call: Call, episode: EpisodeView) -> Decision:
        if not self.enabled:
            return ALLOW
        dup = self.dups.check(call.name, dict(call.arguments))
        if dup.allowed:
            return ALLOW
        return Decision("deny", observation=dup.message, events=((dup.event, {"tool": call.name}),))

    def after_observation(self, call: Call, observation: str, episode: EpisodeView) -> None:
        self.dups.executed(call.name, dict(call.arguments))


def builtin_hooks(specs: dict[str, Any], guard: LoopGuard, self_recovery: bool,
                  harness_text: Callable[[str], str]) -> list[Hook]:
    """The kit's own pre-call rules as hooks, fresh for one episode (they hold its guard state), in order."""
    return [ArgumentRepairHook(specs, guard, self_recovery, harness_text), DuplicateHook(self_recovery)]


# ---------------------------------------------------------------------------------------------- the chain
@dataclass(frozen=True)
class Verdict:
    """The chain's outcome for one call: the call to run (after rewrites), the deciding decision (allow when
    every hook allowed) and the name of the hook that made it (``""`` for allow)."""

    call: Call
    decision: Decision
    hook: str = ""


class HookChain:
    """The hooks of one episode: the kit's built-ins, then the harness's hooks, each point in that order.

    Built-in hooks are kit code: their decisions record exactly their ``events`` and an exception from them
    propagates as before. The harness's hooks record the standard hook event of each non-allow decision (or
    their own ``events``) and a failure of theirs is a :class:`HookError`."""

    def __init__(self, builtins: Sequence[Any], hooks: Sequence[Any], specs: dict[str, Any]):
        self.builtins = list(builtins)
        self.hooks = [as_hook(h) for h in hooks]
        self.specs = specs

    def _record(self, episode: EpisodeView, events: Sequence[tuple[EventType, Mapping[str, Any]]]) -> None:
        episode.record.events.extend(Event(type=t, turn=episode.turn, detail=dict(d)) for t, d in events)

    async def before_call(self, call: Call, episode: EpisodeView) -> Verdict:
        """Run every ``before_call`` in order until a deny or stop; apply rewrites as they come.

        Raises:
            HookError: a hook raised, returned something that is not a :class:`Decision`, or rewrote the call
                to one that is not valid."""
        for i, hook in enumerate(self.builtins + self.hooks):
            builtin = i < len(self.builtins)
            d = hook.before_call(call, episode) if builtin else await _invoke(hook, "before_call", call, episode)
            if d is None:
                d = ALLOW
            if not isinstance(d, Decision):
                raise HookError(hook, "before_call", f"returned {type(d).__name__}, not a Decision")
            if d.action == "allow":
                continue
            name, new = hook_name(hook), None
            if d.action == "rewrite":
                new = Call(d.name or call.name, call.arguments if d.arguments is None else d.arguments, call.id, call.raw)
                if not builtin:
                    new = self._validated(hook, new)
            if builtin or d.events:
                self._record(episode, d.events)
            else:
                self._record(episode, [self._standard_event(name, call, d, new)])
            if new is None:
                return Verdict(call, d, name)
            call = new
        return Verdict(call, ALLOW)

    def _validated(self, hook: Any, call: Call) -> Call:
        try:
            fixed = repair_call(call.name, call.plain_arguments(), self.specs)
        except ToolError as e:
            raise HookError(hook, "before_call", f"rewrote the call to an invalid one ({e.code}): {e.message}") from None
        return Call(fixed.name, fixed.arguments, call.id, call.raw)

    @staticmethod
    def _standard_event(hook: str, call: Call, d: Decision, new: Call | None) -> tuple[EventType, dict[str, Any]]:
        detail: dict[str, Any] = {"hook": hook, "tool": call.name}
        if new is not None:
            detail.update(new_tool=new.name, arguments=dict(new.arguments))
        if d.reason:
            detail["reason"] = d.reason
        kind = {"deny": EventType.HOOK_DENIED, "rewrite": EventType.HOOK_REWRITE, "stop": EventType.HOOK_STOP}
        return kind[d.action], detail

    async def after_observation(self, call: Call, observation: str, episode: EpisodeView) -> str:
        """Run every ``after_observation`` in order; each sees the text the previous one left.

        Raises:
            HookError: a hook raised or returned something that is neither a ``str`` nor None."""
        for i, hook in enumerate(self.builtins + self.hooks):
            if i < len(self.builtins):
                hook.after_observation(call, observation, episode)  # the built-ins only watch
                continue
            out = await _invoke(hook, "after_observation", call, observation, episode)
            if out is None or out == observation:
                continue
            if not isinstance(out, str):
                raise HookError(hook, "after_observation", f"returned {type(out).__name__}, not a str or None")
            self._record(episode, [(EventType.HOOK_OBSERVATION, {"hook": hook_name(hook), "tool": call.name,
                                                                 "chars": len(observation), "new_chars": len(out)})])
            observation = out
        return observation

    async def episode_end(self, record: EpisodeRecord, failed: Callable[[HookError], None]) -> None:
        """Run every ``episode_end`` in order; a hook that raises is passed to ``failed`` (which marks the record)
        and the later hooks still run, seeing that mark."""
        for hook in self.hooks:
            try:
                await _invoke(hook, "episode_end", record)
            except HookError as e:
                failed(e)


__all__ = ["ALLOW", "ArgumentRepairHook", "Call", "Decision", "DuplicateHook", "EpisodeView", "Hook", "HookChain",
           "HookError", "Verdict", "as_hook", "builtin_hooks"]
