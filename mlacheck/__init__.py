"""mlacheck: checks that a serving engine's kernel warm-up covers what its runtime dispatches.

PYTEST_DONT_REWRITE: in a process of a run, mlacheck is imported at interpreter start, before pytest could rewrite
it; it holds no test assertions, so pytest need not try (nor warn that it cannot)."""

__version__ = "0.13.2"


def serving_started() -> None:
    """Mark that serving starts now in this process: every compile before this is warm-up, whatever the stack, and
    every compile after it is a serving-path compile, whatever the stack (a warm-up function run after it included).

    Does nothing unless the process is observed (`mlacheck run -- ...`, `pytest --mlacheck`); imports nothing.
    """
    import sys

    agent_module = sys.modules.get("mlacheck.program.agent")
    agent = agent_module.current() if agent_module is not None else None
    if agent is not None:
        agent.serving_started("mlacheck.serving_started()")
