"""The answer judge and the Target Match judge of a run, chosen by its profile (WeAgent §7.1, §5.2).

WeAgent scores every benchmark with an LLM (§7.1: "Results are scored by Kimi K2.6") and decides
Target Match with a VLM judge (§5.2: "the selected image and held-out target are presented to a VLM
judge"). So under the paper profile the defaults are ``judge="llm"`` and ``image_judge="vlm"``;
under smoke they are the offline :class:`~kit.eval.judges.RuleJudge` and
:class:`~kit.eval.judges.PerceptualImageJudge`. A paper run without a judge endpoint stops with
:class:`JudgeConfigError` naming the parameter, unless the rule / perceptual judge is chosen
explicitly; that choice is then labelled ``(fallback)`` on every verdict and run label
(:func:`judge_labels`).

Notebook 06 and scripts call :func:`make_answer_judge` / :func:`make_image_judge`; manifests record
:func:`describe_judges`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from kit.eval.judges import (
    IMAGE_JUDGE_PROMPT,
    JUDGE_PROMPT,
    LLMJudge,
    PerceptualImageJudge,
    RuleJudge,
    VerdictCache,
    VLMImageJudge,
)
from kit.recipes import paper_default as _P  # the paper's judges: kit/recipes/*.yaml, section eval

# ---- paper values (WeAgent-MMSearch; recipe: kit/recipes/weagent_mmsearch.yaml) -------------------
#: §7.1 "Results are scored by Kimi K2.6"; [17] Moonshot AI, Kimi K2.6 model card
#: (https://huggingface.co/moonshotai/Kimi-K2.6). The served name is configurable (``judge_model``).
DEFAULT_JUDGE_MODEL = str(_P("eval.judge_model"))
#: kit choice: §5.2 names "a VLM judge" but no model; Kimi K2.6 is the paper's multimodal judge and expert.
DEFAULT_IMAGE_JUDGE_MODEL = str(_P("eval.image_judge_model"))
#: how each Table 1 benchmark is scored under the paper profile: all by the LLM judge (§7.1, one
#: sentence for the seven public benchmarks and VisTarget-Bench). MMSearch's own token-F1 scorer
#: (``rule_mode="f1"`` on its tasks) is used only by the rule fallback.
PAPER_SCORING = {b: "llm" for b in ("mmbrowsecomp", "mmsearch", "mmsearch_plus", "vistarget", "simplevqa",
                                    "vdr_bench", "livevqa", "fvqa")}
# ---------------------------------------------------------------------------------------------------

ANSWER_JUDGES = ("rule", "llm")
IMAGE_JUDGES = ("phash", "vlm")


class JudgeConfigError(ValueError):
    """A judge the run needs cannot be built from its parameters (one line naming the parameter)."""


def _profile_judges(profile) -> tuple[str, str]:
    """(answer judge, image judge) of the profile's recipe (``eval.judge``, ``eval.image_judge``)."""
    from kit.profiles import get_profile

    p = get_profile(profile)
    return str(p.value("eval.judge")), str(p.value("eval.image_judge"))


def _stand_in(profile, role: str):
    """A preflight's tiny stand-in policy for ``role`` (None outside a preflight)."""
    from kit.profiles import get_profile, stand_in_policy

    return stand_in_policy(role, max_new_tokens=16) if get_profile(profile).preflight else None


def _is_smoke(profile) -> bool:
    from kit.profiles import get_profile

    return get_profile(profile).smoke


def resolve_judge_kinds(profile="smoke", judge: str | None = None, image_judge: str | None = None) -> tuple[str, str]:
    """``(answer judge, image judge)``: each given value, else the profile's (smoke ``rule``/``phash``,
    paper ``llm``/``vlm``).

    Raises:
        ValueError: an unknown profile or judge name (the message lists the known ones).
    """
    d_ans, d_img = _profile_judges(profile)
    ans, img = judge or d_ans, image_judge or d_img
    if ans not in ANSWER_JUDGES:
        raise ValueError(f"judge={ans!r}: must be one of {ANSWER_JUDGES}")
    if img not in IMAGE_JUDGES:
        raise ValueError(f"image_judge={img!r}: must be one of {IMAGE_JUDGES}")
    return ans, img


def _judge_policy(profile, role: str, policy, endpoint: str, model: str, api_key: str | None,
                  missing: str) -> tuple[Any, str]:
    """``(policy, served model)`` of an LLM / VLM judge: ``policy`` as given, else a preflight's stand-in, else
    an :class:`~kit.policy.openai_client.OpenAIChatPolicy` on ``endpoint``. ``model`` empty: the recipe's
    ``eval.<role>_model`` (``role``: ``"judge"`` | ``"image_judge"``).

    Raises:
        JudgeConfigError: no policy, no stand-in and no endpoint (``missing`` is the message).
    """
    endpoint = (endpoint or "").strip()
    if policy is None and not endpoint:
        policy = _stand_in(profile, {"judge": "answer judge", "image_judge": "image judge"}[role])
    if policy is None and not endpoint:
        raise JudgeConfigError(missing)
    default = DEFAULT_JUDGE_MODEL if role == "judge" else DEFAULT_IMAGE_JUDGE_MODEL
    model = model or _profile_model(profile, f"eval.{role}_model", default)
    if getattr(policy, "stand_in_for", None):  # a preflight's tiny stand-in: its name says so, not the paper's model
        from kit.profiles import stand_in_name

        model = stand_in_name(model)
    if policy is None:
        from kit.policy.openai_client import OpenAIChatPolicy
        from kit.policy.scripted import CharTokenCounter

        policy = OpenAIChatPolicy(endpoint, model, api_key=api_key, token_counter=CharTokenCounter(), max_retries=2)
    return policy, model


def make_answer_judge(judge: str | None = None, *, profile="smoke", endpoint: str = "", model: str = "",
                      api_key: str | None = None, cache_path: str | Path | None = None, policy=None,
                      rule_mode: str = "contains", rule_on_endpoint_error: bool = False) -> RuleJudge | LLMJudge:
    """The run's answer judge (:math:`A_i` of WeAgent eq. (2)).

    Args:
        judge: ``"rule"`` | ``"llm"`` | None (the profile's: smoke rule, paper llm).
        profile: ``"smoke"`` | ``"paper"`` | a :class:`kit.profiles.Profile`.
        endpoint, model, api_key: the LLM judge's OpenAI-compatible endpoint and served name
            (``model`` default :data:`DEFAULT_JUDGE_MODEL`).
        cache_path: sqlite verdict cache (None: in memory).
        policy: an in-process :class:`kit.types.Policy` used instead of ``endpoint`` (tests, local models).
        rule_mode: the rule judge's default mode (a task's ``metadata["rule_mode"]`` overrides it).
        rule_on_endpoint_error: the LLM judge scores an item with the rule judge (labelled) when its
            endpoint fails, instead of a judge error.

    Returns:
        :class:`RuleJudge` (``fallback=True`` when the profile's judge is the LLM) or :class:`LLMJudge`.

    Raises:
        JudgeConfigError: ``llm`` without ``endpoint`` or ``policy`` (the message names ``judge_endpoint``).
        ValueError: unknown profile or judge.
    """
    kind, _ = resolve_judge_kinds(profile, judge, None)
    if kind == "rule":
        return RuleJudge(rule_mode, fallback=_profile_judges(profile)[0] != "rule")
    pol, model = _judge_policy(
        profile, "judge", policy, endpoint, model, api_key,
        f"the {get_name(profile)} profile scores answers with the LLM judge (WeAgent §7.1: \"Results are scored by "
        f"Kimi K2.6\"): set judge_endpoint (served model: judge_model, default {DEFAULT_JUDGE_MODEL!r}), or choose "
        "judge='rule' for the rule judge, labelled '(fallback)' on every result")
    return LLMJudge(pol, model, VerdictCache(cache_path), fallback=RuleJudge(rule_mode) if rule_on_endpoint_error else None)


def make_image_judge(image_judge: str | None = None, *, profile="smoke", endpoint: str = "", model: str = "",
                     api_key: str | None = None, cache_path: str | Path | None = None,
                     policy=None) -> PerceptualImageJudge | VLMImageJudge:
    """The run's Target Match judge :math:`J(\\hat C_i, C_i)` (WeAgent §5.2).

    Args:
        image_judge: ``"phash"`` | ``"vlm"`` | None (the profile's: smoke phash, paper vlm).
        endpoint, model, api_key: the VLM's OpenAI-compatible endpoint and served name (``model``
            default :data:`DEFAULT_IMAGE_JUDGE_MODEL`).
        cache_path, policy: as in :func:`make_answer_judge`.

    Raises:
        JudgeConfigError: ``vlm`` without ``endpoint`` or ``policy`` (names ``image_judge_endpoint``).
        ValueError: unknown profile or judge.
    """
    _, kind = resolve_judge_kinds(profile, None, image_judge)
    if kind == "phash":
        return PerceptualImageJudge(fallback=_profile_judges(profile)[1] != "phash")
    pol, model = _judge_policy(
        profile, "image_judge", policy, endpoint, model, api_key,
        f"the {get_name(profile)} profile decides Target Match with a VLM judge (WeAgent §5.2): set "
        f"image_judge_endpoint (served model: image_judge_model, default {DEFAULT_IMAGE_JUDGE_MODEL!r}), or choose "
        "image_judge='phash' for the perceptual-hash judge, labelled '(fallback)' on every result")
    return VLMImageJudge(pol, model, VerdictCache(cache_path))


def _profile_model(profile, key: str, default: str) -> str:
    from kit.profiles import get_profile

    return str(get_profile(profile).value(key, default))


def get_name(profile) -> str:
    """The profile's name (``"paper"`` for a :class:`~kit.profiles.Profile` called so)."""
    from kit.profiles import get_profile

    return get_profile(profile).name


def judge_labels(answer_judge, image_judge) -> list[str]:
    """Run labels for judges that stand in for the profile's: ``"judge: rule (fallback)"``,
    ``"image_judge: phash (fallback)"`` (stored on every episode and prediction line)."""
    out = []
    if getattr(answer_judge, "fallback", None) is True and isinstance(answer_judge, RuleJudge):
        out.append("judge: rule (fallback)")
    if getattr(image_judge, "fallback", False) is True:
        out.append("image_judge: phash (fallback)")
    return out


def describe_judges(answer_judge, image_judge) -> dict[str, Any]:
    """Manifest fields of both judges: name, model, prompt version and prompt sha256 (None for the
    prompt-free rule / perceptual judges) and whether each is a labelled fallback."""

    def one(j, prompt: str) -> dict[str, Any]:
        llm = isinstance(j, LLMJudge | VLMImageJudge)
        return {"": j.name, "_model": getattr(j, "model", None) if llm else None,
                "_prompt_version": getattr(j, "prompt_version", None),
                "_prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest() if llm else None,
                "_fallback": bool(getattr(j, "fallback", False)) if not llm else False}

    return ({f"answer_judge{k}": v for k, v in one(answer_judge, JUDGE_PROMPT).items()}
            | {f"image_judge{k}": v for k, v in one(image_judge, IMAGE_JUDGE_PROMPT).items()})
