"""Entry point of the verl recipe: registers FA-GSPO and the ``kit_harness`` agent loop in the driver,
then runs verl's PPO trainer with the given Hydra config (``scripts/launch_verl.sh``).

Workers import :mod:`kit.rl.verl.algos` through ``actor_rollout_ref.model.external_lib`` and the agent
loop through ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (both set in
``configs/verl/fa_gspo.yaml``).
"""

from __future__ import annotations

import kit.rl.verl.agent_loop
import kit.rl.verl.algos  # noqa: F401  (registers fa_gspo)

if __name__ == "__main__":
    from verl.trainer.main_ppo import main

    main()
