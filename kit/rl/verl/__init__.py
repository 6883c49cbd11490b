"""verl recipe (verl 0.9.1): FA-GSPO on many GPUs / nodes with the kit's harness driving the rollouts.

Import only inside the verl environment (``scripts/setup_verl.sh`` → ``.venv-verl``): verl pins
transformers < 5.11 and is never imported by the kit's CPU path.

* :mod:`kit.rl.verl.algos` registers the ``fa_gspo`` advantage estimator (Eq. 4/6 with the Eq. 7
  weights folded in) and the ``fa_gspo`` policy loss (sequence-level clipped ratio, Eq. 7);
* :mod:`kit.rl.verl.agent_loop` registers the ``kit_harness`` agent loop: each sample is one harness
  episode whose policy calls verl's rollout servers; the output carries the re-tokenized trajectory
  (``response_mask`` 0 on tool observations and harness interventions, and on every token of an
  excluded trajectory), the images through ``multi_modal_data``, and the Eq. 5 reward.

Configuration: ``configs/verl/fa_gspo.yaml`` with a paper recipe's values from :mod:`kit.rl.verl.recipe_config`
(``python -m kit.cli recipe NAME --verl``); launch: ``RECIPE=NAME scripts/launch_verl.sh``.
"""
