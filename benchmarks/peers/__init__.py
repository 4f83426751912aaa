"""Real peers measured beside ctxpolicy, each library driven for real over recorded traces.

* What is sent: :mod:`.catalog` lists the peers, each a replay strategy of
  ``ctxpolicy.sim.replay`` (:mod:`.langchain`, :mod:`.deepagents`, :mod:`.langmem`;
  :mod:`.openhands` drives OpenHands in a Python 3.12 process, :mod:`.openhands_worker`);
  :mod:`.runs` replays every contestant through the loop ``ctxpolicy simulate`` uses,
  with one exact counter; :mod:`.table` sums, judges and tabulates the runs.
* What one model call costs: :mod:`.replay` (ctxpolicy's path), :mod:`.others` (the
  peers' middleware), :mod:`.parts` (ctxpolicy's parts and their floors), :mod:`.timing`
  (interleaved repeats and the section), :mod:`.worker` (another tree's ctxpolicy).

Every peer gets the compared policy's budget at the window, decides with its library's
default token counter and summarizes with the same deterministic model as ctxpolicy
(:mod:`.summary`).
"""
