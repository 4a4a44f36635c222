"""Mode and target arch from the device, with only the device's answers faked (no CUDA here)."""

import pytest
import torch

from mlacheck.errors import MlacheckError
from mlacheck.scenario.check import run_check
from mlacheck.scenario.environment import detect_environment
from mlacheck.scenario.setup import CheckOptions

TOKENSPEED_ARCHES = ["sm_100a", "sm_103a", "sm_107a"]


@pytest.fixture
def device(monkeypatch):
    monkeypatch.delenv("CUTE_DSL_ARCH", raising=False)

    def fake(capability):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "a test device")

    yield fake
    monkeypatch.delenv("CUTE_DSL_ARCH", raising=False)


@pytest.mark.parametrize(
    "capability, arch, mode, target",
    [
        ((9, 0), "auto", "trace", "sm_100a"),
        ((10, 0), "auto", "execute", "sm_100a"),
        ((10, 3), "auto", "execute", "sm_103a"),
        ((10, 7), "auto", "execute", "sm_107a"),
        ((10, 3), "sm_100a", "trace", "sm_100a"),  # an sm_100a binary does not run on sm_103
    ],
)
def test_mode_and_target_follow_the_device(device, capability, arch, mode, target):
    import os

    device(capability)
    environment = detect_environment(arch, TOKENSPEED_ARCHES, ["CUTE_DSL_ARCH"])
    assert (environment.mode, environment.target_arch) == (mode, target)
    assert os.environ["CUTE_DSL_ARCH"] == target
    assert environment.enable_pdl


def test_no_device_is_dry_mode_on_sm_100a(monkeypatch):
    monkeypatch.delenv("CUTE_DSL_ARCH", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    environment = detect_environment("auto", TOKENSPEED_ARCHES, ["CUTE_DSL_ARCH"])
    assert (environment.mode, environment.target_arch, environment.device) == ("dry", "sm_100a", None)


def test_compile_skip_is_refused_in_execute_mode(device):
    device((10, 0))
    with pytest.raises(MlacheckError, match="refused in execute mode"):
        run_check(CheckOptions(compile="skip"))


def test_a_process_that_names_no_target_arch_takes_its_devices(monkeypatch, tmp_path):
    """Program mode: where no variable a family reads names the target (CUTE_DSL_ARCH unset), a process that uses a
    CUDA device compiles for that device's arch; one that has not touched CUDA names none (and CUDA stays untouched)."""
    from mlacheck.program.agent import Agent

    monkeypatch.delenv("CUTE_DSL_ARCH", raising=False)
    agent = Agent(str(tmp_path), {"families": [], "arch_env": ["CUTE_DSL_ARCH"]})
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: pytest.fail("CUDA was initialised"))
    assert agent._target_arch() is None
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert agent._target_arch() == "sm_90a"
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_100a")
    assert agent._target_arch() == "sm_100a"
    agent.sink.close()
