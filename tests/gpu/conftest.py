import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (run through the device tool, README: Development)", allow_module_level=True)
