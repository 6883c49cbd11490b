"""Replay of a preflight evaluation (notebook 07 after notebook 06 ``--preflight``): the run's policy is a tiny
random-weight checkpoint, its answer judge and summarizer are labelled tiny stand-ins, its unpinned benchmarks come
from a local stand-in Hub and its random policy makes no tool call (an empty cache snapshot). ``replay_run`` must
rebuild each from what the manifest records (checked against it), label what it rebuilt, reproduce the run, and
refuse with a clear :class:`ReplayError` what the manifest does not determine.

The run is made in process exactly as notebook 06 makes and records it (its cells, at one item per benchmark),
not through a notebook run."""

from __future__ import annotations

import json

import pytest

from kit.eval.replay import ReplayError, replay_run


@pytest.fixture
def hub_restored():
    """Notebook 06 routes its kernel's huggingface_hub to the stand-in Hub for good: undo it after the test."""
    import huggingface_hub
    import huggingface_hub.constants as hf_constants
    from huggingface_hub.utils._http import default_client_factory

    from kit.eval import hub_loaders

    cache, repos = hf_constants.HF_HUB_CACHE, set(hub_loaders.STANDIN_REPOS)
    yield
    huggingface_hub.set_client_factory(default_client_factory)
    hf_constants.HF_HUB_CACHE = cache
    hub_loaders.STANDIN_REPOS.clear()
    hub_loaders.STANDIN_REPOS.update(repos)


async def _preflight_evaluation(out, data_dir, profile="points_seeker"):
    """Notebook 06's cells under ``--profile <profile> --preflight`` (benchmarks cut to one local and one stand-in
    Hub release, the recipe's configurations): evaluate, then write the manifest as the notebook does."""
    from kit.data.synthesis_web import LOCAL_WEB_NOTE, web_labels
    from kit.eval.configs import make_configs
    from kit.eval.hub_standin import install_standin_hub
    from kit.eval.judge_factory import describe_judges, judge_labels, make_answer_judge, make_image_judge
    from kit.eval.judges import LLMJudge
    from kit.eval.runner import load_benchmarks, run_evaluation
    from kit.harness.summarize import make_summarizer, summarizer_labels
    from kit.manifest import write_manifest
    from kit.paths import zim_paths
    from kit.policy.factory import make_policy, run_labels
    from kit.profiles import get_profile
    from kit.web import open_local_web, open_tool_cache
    from kit.web.cache import CachedBackend

    P = get_profile(profile, preflight=True)
    R = P.recipe_obj()
    protocol, configs = R.get("eval.protocol"), list(R.get("eval.configs"))
    install_standin_hub(out / "standin_hub", n=1)
    benchmarks = ["local:fvqa", "hub:simplevqa"]
    web = open_local_web(zim_paths(data_dir))
    cache = open_tool_cache(out / "cache.sqlite", "readwrite")
    web_cached = CachedBackend(web, cache)
    loaded = await load_benchmarks(benchmarks, source="hub", limit=1, web=web_cached, data_dir=data_dir,
                                   protocol=protocol)
    assert all(lr.tasks for lr in loaded.values()), {k: lr.problems for k, lr in loaded.items()}
    eval_configs = make_configs(P, configs, real_model=False, protocol=protocol)
    policy, policy_info = make_policy(P.default_model, "", seed=0,
                                      max_new_tokens=eval_configs[configs[0]].harness.max_response_tokens)
    answer_judge = make_answer_judge(None, profile=P, cache_path=out.parent / "private" / "judge_cache.sqlite")
    target_judge = make_image_judge(None, profile=P, cache_path=out.parent / "private" / "image_judge_cache.sqlite")
    summarizer = make_summarizer("", "", P)
    web_label = web_labels(P, "zim")
    labels = run_labels(P, policy_info)
    labels += [x for x in judge_labels(answer_judge, target_judge) + summarizer_labels(summarizer) + web_label
               if x not in labels]
    outcome = await run_evaluation(loaded, eval_configs, policy=policy, backend=web_cached, out_dir=out, repeats=1,
                                   seed=0, temperature=0.6, judge=answer_judge, image_judge=target_judge,
                                   private_dir=out.parent / "private", labels=labels, concurrency=2,
                                   summarizer=summarizer, max_trials=R.get("eval.max_trials", None))
    assert outcome.items
    write_manifest(out, config={"notebook": "06_evaluation", "profile": profile, "recipe": R.label, "preflight": True,
                                "protocol": protocol, "web_backend": "zim",
                                "web": LOCAL_WEB_NOTE if web_label else web.name, "benchmarks": benchmarks,
                                "source": "hub", "n_per_benchmark": 1, "real_model": False,
                                "configs": {k: c.harness.model_dump() | {"text_only": c.text_only}
                                            for k, c in eval_configs.items()},
                                "repeats": 1, "temperature": 0.6,
                                "judge": "llm" if isinstance(answer_judge, LLMJudge) else "rule",
                                "judge_model": getattr(answer_judge, "model", None),
                                **describe_judges(answer_judge, target_judge), "summarizer": summarizer.name,
                                "benchmark_sources": {k: {kk: vv for kk, vv in lr.info.items() if kk != "files"}
                                                      for k, lr in loaded.items()},
                                "task_ids": {k: [t.id for t in lr.tasks] for k, lr in loaded.items()}},
                   seed=0, model=policy_info, extra={"labels": labels, "cache_stats": cache.stats},
                   stand_ins={"policy": str(policy_info.get("model")), "answer judge": answer_judge.name,
                              "image judge": target_judge.name, "summarizer": summarizer.name,
                              "OPD teacher": None, "expert": None})
    cache.close()
    return json.loads((out / "manifest.json").read_text())


def _edited(run, tmp_path, name, edit):
    """A copy of the run folder whose manifest ``edit(manifest)`` changed."""
    import shutil

    copy = tmp_path / name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("standin_hub"))
    m = json.loads((copy / "manifest.json").read_text())
    edit(m)
    (copy / "manifest.json").write_text(json.dumps(m))
    return copy


@pytest.mark.slow  # a tiny random-weight model generates for the run and for its replay (~1 min on 2 cores)
async def test_preflight_evaluation_replays_with_its_rebuilt_tiny_policy_and_stand_ins(tmp_path, data_dir, hub_restored):
    run = tmp_path / "06_evaluation"
    m = await _preflight_evaluation(run, data_dir)
    assert m["model"]["kind"] == "tiny" and m["model"]["checkpoint"]["sha256"]
    assert m["config"]["judge"] == "llm" and "tiny stand-in" in m["config"]["answer_judge"]
    import huggingface_hub.constants as hf_constants

    hf_cache = hf_constants.HF_HUB_CACHE
    rep = await replay_run(run, out_dir=tmp_path / "replay")  # no drift allowed: the preflight's sizes are rebuilt
    assert rep.identical, rep.summary()
    assert rep.items_compared == rep.episodes_compared == 4 and not rep.config_drift  # 2 benchmarks x 2 configurations
    # every rebuilt object is named in the report (and its summary: notebook 07's replay.md)
    assert set(rep.rebuilt) == {"policy", "answer judge", "summarizer", "benchmarks"}
    assert "tiny-qwen2_vl" in rep.rebuilt["policy"] and m["model"]["checkpoint"]["sha256"][:12] in rep.rebuilt["policy"]
    assert "simplevqa" in rep.rebuilt["benchmarks"] and "tiny stand-in" in rep.rebuilt["answer judge"]
    assert "rebuilt from the manifest: policy: tiny-qwen2_vl" in rep.summary()
    assert hf_constants.HF_HUB_CACHE == hf_cache  # the replay's stand-in Hub served only its own load

    # what the manifest does not determine exactly: a clear ReplayError, never a different policy or judge
    def other_checkpoint(m):
        m["model"]["checkpoint"]["sha256"] = "0" * 64

    def no_checkpoint(m):
        del m["model"]["checkpoint"]

    def served_judge(m):  # an LLM judge on an endpoint: its verdicts need that judge (or its verdict cache)
        m["config"].update(answer_judge="llm:kimi-k2.6@llm-judge-v1", answer_judge_model="kimi-k2.6",
                           judge_model="kimi-k2.6")

    def served_summarizer(m):
        m["config"]["summarizer"] = "llm:kimi-k2.6"

    def stand_in_outside_preflight(m):
        m["config"]["preflight"] = False

    for name, edit, match in (("ck", other_checkpoint, "checkpoint sha256"), ("nock", no_checkpoint, "no checkpoint hash"),
                              ("judge", served_judge, "pass judge="), ("summ", served_summarizer, "pass summarizer="),
                              ("pf", stand_in_outside_preflight, "recipe")):
        with pytest.raises(ReplayError, match=match):
            await replay_run(_edited(run, tmp_path, name, edit), out_dir=tmp_path / f"replay_{name}")
