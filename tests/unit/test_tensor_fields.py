"""Tensors' key fields read below Python (capture/tensor_fields.py, _tensor_fields.c; issue 28 item 5): on only where
what it reads was verified to be what Python reads, never following a pointer it did not verify, and then a hit is
exactly a call whose key, as Python reads it, was served: any dtype, shape and strides (a transpose, a slice, a
broadcast, a Parameter), a tensor changed in place, more keys than the memo holds, torch.Tensor itself changed."""

import ctypes.util
import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlacheck.capture import hotpath, tensor_fields
from mlacheck.capture.hotpath import count_of
from tests.unit.hotpaths import COMPILED, NATIVE, NATIVE_ONE_SLOT, compiled_only, reading
from tests.unit.test_observed_call import MARK, Observed, library_call, reference_key

pytestmark = pytest.mark.skipif(COMPILED is None, reason="the compiled hot path was not built here")
LIBRARY = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
POSITIONS = (0, 1, 2, 3)
KINDS = {torch.Tensor: MARK, torch.nn.Parameter: MARK, tuple: None}  # as jit_keys.raw notes each type it keys


@pytest.fixture(params=[NATIVE, NATIVE_ONE_SLOT], ids=lambda hot: hot.__name__ if hot else "none")
def native(request):
    with reading(request.param) as hot:
        yield hot


def test_on_with_this_torch_off_without_the_compiled_hot_path(monkeypatch):
    compiled_only()
    assert tensor_fields._enable() is True
    monkeypatch.setattr(hotpath, "read_tensors_natively", None)
    assert tensor_fields._enable() is False


def test_asked_before_torch_is_imported_it_answers_no_and_asks_again_later(monkeypatch):
    compiled_only()
    monkeypatch.setattr(tensor_fields, "_answer", [])
    with monkeypatch.context() as before_torch:
        before_torch.delitem(sys.modules, "torch")
        assert tensor_fields.read_natively() is False and tensor_fields._answer == []
    assert tensor_fields.read_natively() is True and tensor_fields._answer == [True]


class Impostor:
    """Claims a TensorImpl (`_cdata`) and fields it does not hold where a torch tensor holds them."""

    _cdata = id(object())
    shape = torch.Size([2, 3])
    dtype = torch.float32

    def stride(self):
        return (3, 1)


@pytest.mark.parametrize(
    "types, probes, library",
    [
        ((Impostor, Impostor), [Impostor()], LIBRARY),  # the pointer compared, never followed: refused
        ((torch.Tensor, torch.nn.Parameter), [torch.empty(2).as_subclass(type("Sub", (torch.Tensor,), {}))], LIBRARY),
        ((torch.Tensor, torch.nn.Parameter), [], LIBRARY),  # nothing verified
        ((torch.Tensor, torch.nn.Parameter), [torch.empty(2)], ctypes.util.find_library("c") or "libc.so.6"),
        ((torch.Tensor, torch.nn.Parameter), [torch.empty(2)], "/nonexistent/libtorch_cpu.so"),
    ],
    ids=["impostor type", "a subclass probe", "no probe", "a library without torch's shim", "a library not loaded"],
)
def test_refused_where_anything_is_unverified_and_then_python_reads(types, probes, library):
    try:
        assert COMPILED.read_tensors_natively(types, library, probes, torch._C._is_torch_function_mode_enabled) is False
        observed = Observed(COMPILED, positions=POSITIONS)
        a = torch.empty(4, 8)
        counter = observed.serve(reference_key("gemm", ("num_sms", None), POSITIONS, (a, None, None, None)))
        library_call(observed, a)
        a.resize_(5, 8)
        library_call(observed, a)
        assert count_of(counter) == 1 and observed.slow_calls[-1][0][2][2] == torch.Size([5, 8])
    finally:
        tensor_fields._enable()


DTYPES = [torch.float8_e4m3fn, torch.bfloat16, torch.float32, torch.int32, torch.uint8, torch.bool, torch.int64]


@st.composite
def views(draw):
    """A tensor of any rank, dtype and layout a program may pass: a transpose, a step slice, a broadcast, a scalar."""
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=4))
    tensor = torch.empty(shape, dtype=draw(st.sampled_from(DTYPES)))
    if tensor.dim() >= 2 and draw(st.booleans()):
        tensor = tensor.transpose(0, tensor.dim() - 1)
    if tensor.dim() >= 1 and draw(st.booleans()):
        tensor = tensor[:: draw(st.integers(1, 3))]
    if draw(st.booleans()):
        tensor = tensor.unsqueeze(0).expand(draw(st.integers(1, 3)), *tensor.shape)
    if draw(st.booleans()):
        tensor = torch.nn.Parameter(tensor.detach().clone(), requires_grad=False)
    return tensor


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(served=st.lists(views(), min_size=1, max_size=3), called=st.lists(views(), min_size=1, max_size=3))
def test_a_hit_is_exactly_a_call_whose_fields_as_python_reads_them_were_served(native, served, called):
    observed = Observed(native, positions=POSITIONS, kinds=KINDS)
    key = reference_key("gemm", ("num_sms", None), POSITIONS, tuple(served))
    counter = observed.serve(key)
    library_call(observed, *served)
    assert count_of(counter) == 1 and observed.slow_calls == []
    library_call(observed, *called)
    now = reference_key("gemm", ("num_sms", None), POSITIONS, tuple(called))
    if now == key:
        assert count_of(counter) == 2 and observed.slow_calls == []
    else:
        assert count_of(counter) == 1 and observed.slow_calls[-1][0] == now


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.resize_(9, 4),
        lambda t: t.transpose_(0, 1),
        lambda t: t.as_strided_((4, 8), (1, 4)),
        lambda t: t.set_(torch.empty(3, 3).untyped_storage()),
        lambda t: t.unsqueeze_(0),
    ],
    ids=["resize_", "transpose_", "as_strided_", "set_", "unsqueeze_"],
)
def test_a_tensor_changed_in_place_after_its_hits_is_read_as_it_is_now(native, change):
    observed = Observed(native, positions=POSITIONS, kinds=KINDS)
    a = torch.empty(4, 8)
    counter = observed.serve(reference_key("gemm", ("num_sms", None), POSITIONS, (a, None, None, None)))
    library_call(observed, a)
    change(a)
    library_call(observed, a)
    assert count_of(counter) == 1
    assert observed.slow_calls[-1][0] == reference_key("gemm", ("num_sms", None), POSITIONS, (a, None, None, None))


def test_more_keys_than_the_memo_holds_each_count_to_their_own_variant(native):
    """500 variants served, called in turns (more than the memo's 64 slots: they evict each other): every call counts
    to its own variant, and a call that differs in one size from a served one goes to the slow path."""
    observed = Observed(native, positions=POSITIONS, kinds=KINDS)
    calls = [
        (torch.empty(m, 16, dtype=torch.bfloat16), torch.empty(16, n), None, m % 3)
        for m in range(1, 51)
        for n in (1, 2, 3, 5, 8, 13, 21, 34, 55, 89)
    ]
    counters = [observed.serve(reference_key("gemm", ("num_sms", None), POSITIONS, args)) for args in calls]
    for _ in range(3):
        for args in calls:
            library_call(observed, *args)
    assert [count_of(counter) for counter in counters] == [3] * len(calls) and observed.slow_calls == []
    library_call(observed, torch.empty(51, 16, dtype=torch.bfloat16), torch.empty(16, 1), None, 0)
    assert len(observed.slow_calls) == 1 and sum(count_of(counter) for counter in counters) == 3 * len(calls)


@pytest.mark.parametrize(
    "name, answer",
    [
        ("shape", property(lambda self: torch.Size([1]))),
        ("dtype", property(lambda self: torch.int8)),
        ("stride", lambda self, *dim: (8, 4)),  # no dimension of stride 1
    ],
)
def test_torch_tensor_changed_to_answer_for_a_field_is_read_by_python(native, name, answer):
    """A program (or a library) that changes what torch.Tensor answers for `shape`, `dtype` or `stride()`: keys are
    what Python reads, so such a class is read by Python while the change stands, and natively again after."""
    observed = Observed(native, positions=POSITIONS, kinds=KINDS)
    a = torch.empty(4, 8)
    counter = observed.serve(reference_key("gemm", ("num_sms", None), POSITIONS, (a, None, None, None)))
    assert name not in vars(torch.Tensor)  # torch's own answer is TensorBase's: deleting this one restores it
    setattr(torch.Tensor, name, answer)
    try:
        library_call(observed, a)
        expected = reference_key("gemm", ("num_sms", None), POSITIONS, (a, None, None, None))
    finally:
        delattr(torch.Tensor, name)
    assert count_of(counter) == 0 and [key for key, *_ in observed.slow_calls] == [expected]
    library_call(observed, a)
    assert count_of(counter) == 1 and len(observed.slow_calls) == 1


def test_a_method_added_to_torch_tensor_keeps_the_native_reading(native):
    """Libraries add methods to torch.Tensor at import: that changes the class, not its fields' answers; hits go on."""
    observed = Observed(native, positions=POSITIONS, kinds=KINDS)
    a = torch.empty(4, 8)
    counter = observed.serve(reference_key("gemm", ("num_sms", None), POSITIONS, (a, None, None, None)))
    torch.Tensor.mlacheck_test_method = lambda self: None
    try:
        for _ in range(3):
            library_call(observed, a)
    finally:
        del torch.Tensor.mlacheck_test_method
    assert count_of(counter) == 3 and observed.slow_calls == []


def test_a_sparse_tensor_is_read_by_python_and_nothing_is_printed(native, capfd):
    """torch's C shim refuses a sparse tensor's strides (an older torch logs the refusal): it is never asked for them;
    Python reads the tensor, as it did before tensors were read below it."""
    observed = Observed(native, positions=POSITIONS, kinds=KINDS)
    sparse = torch.eye(3).to_sparse()
    library_call(observed, sparse)
    assert [key for key, *_ in observed.slow_calls] == [reference_key("gemm", ("num_sms", None), POSITIONS, (sparse,))]
    assert capfd.readouterr() == ("", "")
