"""WeAgent-Harness (WeAgent §3): tools, evidence registry, recovery rules, budgets and the episode loop.

Entry points: :class:`kit.harness.loop.Harness` (one episode), :func:`kit.harness.runner.run_batch`
(resumable concurrent batches), :func:`kit.harness.transcript.write_transcript` (HTML transcripts).
"""
