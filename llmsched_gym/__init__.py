"""llmsched_gym: a vLLM-exact discrete-event simulator and Gymnasium gym for LLM-serving scheduling.

The engine (``llmsched_gym.core``) reproduces vLLM 0.32.0's V1 scheduler step for step; policies
(``llmsched_gym.policies``) decide, the engine accounts (budgets, KV blocks, time), and cost
models (``llmsched_gym.cost``) turn each batch into seconds.
"""

__version__ = "0.1.0"

from llmsched_gym import _native  # noqa: E402

_native.install_guard()  # compiled modules only while they match their sources (see _native)

from llmsched_gym import _gym_hook  # noqa: E402

_gym_hook.install()  # registers llmsched/<Task>-<Scenario>-v0 with Gymnasium (when imported)
