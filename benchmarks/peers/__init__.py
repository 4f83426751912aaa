"""Real peers measured beside ctxpolicy: LangChain 1.x middleware driven over traces.

* :mod:`benchmarks.peers.summary` — the deterministic summary both sides use;
* :mod:`benchmarks.peers.langchain` — ``SummarizationMiddleware`` (and
  ``ContextEditingMiddleware``) run call by call as ``create_agent`` runs them;
* :mod:`benchmarks.peers.runs` — every contestant through ``ctxpolicy.sim``'s replay
  loop with one exact counter, plus compactions and prefix changes per 100 calls.
"""
