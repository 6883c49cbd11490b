"""Kit tasks → verl RL parquet (one row per prompt; verl repeats it ``rollout.n`` times).

Columns: ``data_source``, ``prompt`` (chat messages with the question, as verl's ``RLHFDataset``
expects; :func:`task_prompt`, chat-control strings neutralized),
``agent_name`` (``kit_harness``), ``extra_info`` (``{"task": <Task JSON>, "index": i}``),
``reward_model`` (``{"style": "rule", "ground_truth": <answers>}``, for verl's bookkeeping; the agent
loop computes the reward itself).
"""

from __future__ import annotations

from pathlib import Path

from kit.harness.episode import Task
from kit.harness.neutralize import neutralize_control_tokens


def task_prompt(task: Task) -> list[dict]:
    """The chat messages verl sees for ``task``: one user message with the question, its chat-control
    strings neutralized (task text is data: a quoted ``<|im_start|>system`` or ``<|image_pad|>``
    must not become a turn or a placeholder when verl's dataset or the agent loop's fallback
    tokenizes it). ``extra_info["task"]`` keeps the question as given."""
    return [{"role": "user", "content": neutralize_control_tokens(task.question)[0]}]


def tasks_to_rows(tasks: list[Task], data_source: str = "mmsearch_kit") -> list[dict]:
    """The parquet rows of ``tasks``. Input images must be absolute paths readable on every worker."""
    rows = []
    for i, t in enumerate(tasks):
        rows.append({"data_source": data_source, "prompt": task_prompt(t),
                     "agent_name": "kit_harness", "extra_info": {"task": t.model_dump(mode="json"), "index": i},
                     "reward_model": {"style": "rule", "ground_truth": list(t.answers)}})
    return rows


def tasks_to_parquet(tasks: list[Task], path: str | Path, data_source: str = "mmsearch_kit") -> Path:
    """Write :func:`tasks_to_rows` as parquet (needs pandas + pyarrow, both in the verl environment)."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(tasks_to_rows(tasks, data_source)).to_parquet(path)
    return path
