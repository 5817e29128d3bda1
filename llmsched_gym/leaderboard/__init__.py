"""The benchmark: suites of tasks with train and held-out test workloads, scores, submissions.

``llmsched-gym leaderboard`` is its command line (``llmsched_gym.leaderboard.cli``):

* ``list``: the suite's tasks, scenarios and splits;
* ``evaluate POLICY``: run a policy on a task's (or a suite subset's) held-out test workloads,
  serially or on Ray, and score it against ``vllm-v1`` on the same workloads;
* ``validate SUBMISSION``: re-run a committed submission and check its results reproduce exactly;
* ``show``: render the committed leaderboards;
* ``reproduce PAPER``: regenerate a paper reproduction's paper-vs-ours table from its declared
  experiments (paper values are data, ``leaderboards/<paper>/experiments.yaml``).

The harness owns the environments and engines; a submission supplies only a policy (CompilerGym's
leaderboard model), acting through ``SchedulingPolicy``, a cluster ``Router`` or a Gymnasium
agent wrapped by ``AgentPolicy`` / ``AgentRouter``.
"""
