"""A named schedule's own step count (WeAgent's one Table 5 stage) versus Long-MDR's rl_run.total_steps."""

from kit.recipes import load_recipe
from kit.rl.staging import schedule_total_steps
from kit.rl.verl.recipe_config import verl_stages


def test_weagent_schedule_runs_its_own_steps_not_long_mdr_total():
    r, lm = load_recipe("weagent_mmsearch"), load_recipe("long_mdr")
    own = r.get("schedules.weagent")[0]["steps"]
    assert own != lm.get("rl_run.total_steps") == 1050  # Long-MDR's total (with 50 OPD steps) is not WeAgent's
    assert "kit" in r.entries["schedules.weagent"].model_dump() and r.entries["schedules.weagent"].kit
    assert schedule_total_steps(r, "weagent") == schedule_total_steps(r) == own  # WeAgent's recipe runs its one stage
    assert schedule_total_steps(lm) == schedule_total_steps(lm, "long_mdr") == 1050
    (run,) = verl_stages(r, stages="weagent")
    assert run.end - run.start == own


def test_preflight_total_is_a_size_even_for_a_named_schedule():
    pre = load_recipe("weagent_mmsearch", ("preflight",))
    assert schedule_total_steps(pre, "weagent") == pre.get("rl_run.total_steps") == 2
