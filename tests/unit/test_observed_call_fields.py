"""The observed call's key, field by field (issue 28 item 5: a hit made cheaper must never be a hit for another
variant): a DeepGEMM-shaped call (sgl-deep-gemm 0.2.5's `fp8_fp4_gemm_nt` operation: five tensors and six other key
fields) whose key differs from the served one in any one field of any argument is never served as a hit, on either
hot path; a tensor changed in place (the same object, another shape or dtype) included, and one whose shape and dtype
are the same but whose dimension of stride 1 is another (DeepGEMM picks its kernel by it: K- or MN-major). And an
argument read as Python reads it: a subclass's own `shape`, a class changed after its first hit, a
`__getattribute__`, a `__torch_function__` or a torch function mode that answers for `shape` or `dtype`."""

import gc
import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode

from mlacheck.capture.hotpath import count_of
from tests.unit.hotpaths import OBSERVED_HOTPATHS, reading
from tests.unit.test_observed_call import MARK, Observed, library_call, reference_key

POSITIONS = tuple(range(11))  # a_data, a_sf, b_data, b_sf, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable..
TENSORS = range(5)
OTHER_DTYPE = {torch.float8_e4m3fn: torch.int8, torch.float32: torch.int32, torch.bfloat16: torch.float16}


@pytest.fixture(params=OBSERVED_HOTPATHS, ids=lambda hot: hot.__name__)
def hot(request):
    with reading(request.param) as hot:
        yield hot


def served_call():
    return [
        torch.empty(64, 128, dtype=torch.float8_e4m3fn),
        torch.ones(64, 1),
        torch.empty(96, 128, dtype=torch.float8_e4m3fn),
        torch.ones(3, 1),
        torch.empty(64, 96, dtype=torch.bfloat16),
        None,
        (1, 128, 128),
        None,
        None,
        "nk",
        False,
    ]


def grown(shape, dim):
    return [size + (at == dim) for at, size in enumerate(shape)]


def change_tensor(args, at, change):
    """Change one field of the tensor at `at`: on a new tensor, or on the same object in place."""
    tensor = args[at]
    shape, dtype = list(tensor.shape), tensor.dtype
    if change == "dtype":
        args[at] = tensor.view(OTHER_DTYPE[dtype])
    elif change.startswith("dim "):
        args[at] = torch.empty(grown(shape, int(change[4:])), dtype=dtype)
    elif change == "rank":
        args[at] = tensor.unsqueeze(0)
    elif change == "none":
        args[at] = None
    elif change == "layout":  # the same shape and dtype, the other dimension of stride 1 (DeepGEMM's MN-major)
        args[at] = torch.empty(shape[::-1], dtype=dtype).t()
    elif change == "no stride 1":
        args[at] = torch.empty(shape[0], 2 * shape[1], dtype=dtype)[:, ::2]
    elif change == "as_strided_ layout":
        tensor.as_strided_(shape, (1, shape[0]))
    elif change == "data replaced layout":
        tensor.data = torch.empty(shape[::-1], dtype=dtype).t()
    elif change == "resize_":
        tensor.resize_(grown(shape, 0))
    elif change == "t_":
        tensor.t_()
    elif change == "unsqueeze_":
        tensor.unsqueeze_(0)
    elif change == "as_strided_":
        tensor.as_strided_([shape[0] - 1, shape[1]], tensor.stride())
    elif change == "set_":
        tensor.set_(torch.empty(grown(shape, 1), dtype=dtype))
    elif change == "data replaced":
        tensor.data = torch.empty(shape, dtype=OTHER_DTYPE[dtype])
    else:
        torch.utils.swap_tensors(tensor, torch.empty(grown(shape, 1), dtype=dtype))
    assert (
        change in ("dtype", "rank", "none", "layout", "no stride 1") or change.startswith("dim ") or args[at] is tensor
    )
    kept = args[at] is not None and list(args[at].shape) == shape and args[at].dtype == dtype
    assert kept == (change in LAYOUT_CHANGES)


TENSOR_CHANGES = ["dtype", "dim 0", "dim 1", "rank", "none", "resize_", "t_", "unsqueeze_", "as_strided_", "set_"]
LAYOUT_CHANGES = ["layout", "no stride 1", "as_strided_ layout", "data replaced layout"]  # shape and dtype kept
TENSOR_CHANGES += ["data replaced", "swap_tensors", *LAYOUT_CHANGES]
OTHER_CHANGES = [
    (5, torch.empty(64, 96, dtype=torch.bfloat16)),
    (6, (1, 128, 64)),
    (6, (1, 128)),
    (7, (1, 128)),
    (8, 0),
    (9, "mn"),
    (9, ""),
    (10, True),
]


def served(hot, args, **options):
    observed = Observed(hot, positions=POSITIONS, **options)
    counter = observed.serve(reference_key("gemm", ("num_sms", None), POSITIONS, tuple(args)))
    for _ in range(3):  # hits: the compiled one remembers the key and each argument's type
        library_call(observed, *args)
    assert count_of(counter) == 3 and observed.slow_calls == []
    return observed, counter


def assert_a_new_variant(observed, counter, args):
    library_call(observed, *args)
    [(key, called, _, _)] = observed.slow_calls
    assert count_of(counter) == 3 and called == tuple(args)
    assert key == reference_key("gemm", ("num_sms", None), POSITIONS, tuple(args))


@pytest.mark.parametrize("change", TENSOR_CHANGES)
@pytest.mark.parametrize("at", TENSORS)
def test_any_one_field_of_any_tensor_changed_is_another_variant(hot, at, change):
    args = served_call()
    observed, counter = served(hot, args)
    change_tensor(args, at, change)
    assert_a_new_variant(observed, counter, args)


@pytest.mark.parametrize(("at", "value"), OTHER_CHANGES)
def test_any_other_field_changed_is_another_variant(hot, at, value):
    args = served_call()
    observed, counter = served(hot, args)
    args[at] = value
    assert_a_new_variant(observed, counter, args)


def subclass_call(cls):
    args = served_call()
    args[0] = args[0].as_subclass(cls)
    return args


def test_a_subclass_that_reports_its_own_shape_is_keyed_by_it(hot):
    class Reported(torch.Tensor):
        @property
        def shape(self):
            return torch.Size([7, 7])

    args = subclass_call(Reported)
    observed, counter = served(hot, args, kinds={torch.Tensor: MARK, tuple: None, Reported: MARK})
    args[0] = torch.empty(5, 5, dtype=torch.float8_e4m3fn).as_subclass(Reported)  # reports [7, 7]: the same key
    library_call(observed, *args)
    assert count_of(counter) == 4 and observed.slow_calls == []


@pytest.mark.parametrize("name", ["shape", "dtype"])
def test_a_class_changed_after_its_hits_is_read_as_it_is_now(hot, name):
    class Tensor(torch.Tensor):
        pass

    args = subclass_call(Tensor)
    observed, counter = served(hot, args, kinds={torch.Tensor: MARK, tuple: None, Tensor: MARK})
    setattr(Tensor, name, property(lambda self: torch.Size([1]) if name == "shape" else torch.int8))
    assert_a_new_variant(observed, counter, args)
    delattr(Tensor, name)
    library_call(observed, *args)
    assert count_of(counter) == 4 and len(observed.slow_calls) == 1


def test_a_class_that_answers_for_dtype_in_getattribute_is_keyed_by_its_answer(hot):
    class Answering(torch.Tensor):
        answer = torch.float8_e4m3fn

        def __getattribute__(self, name):
            return type(self).answer if name == "dtype" else super().__getattribute__(name)

    args = subclass_call(Answering)
    observed, counter = served(hot, args, kinds={torch.Tensor: MARK, tuple: None, Answering: MARK})
    Answering.answer = torch.int8
    assert_a_new_variant(observed, counter, args)


class Shrunk(torch.Tensor):
    """A tensor subclass whose `__torch_function__` reports every shape as [1]."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func == torch.Tensor.shape.__get__:
            return torch.Size([1])
        return super().__torch_function__(func, types, args, kwargs or {})


class Shrinking(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func == torch.Tensor.shape.__get__:
            return torch.Size([1])
        return func(*args, **(kwargs or {}))


def test_a_torch_function_subclass_is_keyed_by_what_it_reports(hot):
    args = subclass_call(Shrunk)
    observed = Observed(hot, positions=POSITIONS, kinds={torch.Tensor: MARK, tuple: None, Shrunk: MARK})
    library_call(observed, *args)
    [(key, *_)] = observed.slow_calls
    assert key[2] == (MARK, torch.float8_e4m3fn, torch.Size([1]), -1)


def test_a_torch_function_mode_is_honoured_after_hits_without_it(hot):
    args = served_call()
    observed, counter = served(hot, args)
    with Shrinking():
        library_call(observed, *args)
    [(key, *_)] = observed.slow_calls
    assert count_of(counter) == 3 and key[2] == (MARK, torch.float8_e4m3fn, torch.Size([1]), -1)


def test_a_class_its_own_shape_read_changes_is_read_as_it_is_after_that_read(hot):
    """Reading `shape` may run code (`__torch_function__`) that changes the class: `dtype` is then read anew."""
    shifting = []

    class Shifting(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func == torch.Tensor.shape.__get__ and shifting:
                cls.dtype = property(lambda self: torch.int8)
            return super().__torch_function__(func, types, args, kwargs or {})

    args = subclass_call(Shifting)
    observed, counter = served(hot, args, kinds={torch.Tensor: MARK, tuple: None, Shifting: MARK})
    shifting.append(True)
    library_call(observed, *args)
    [(key, *_)] = observed.slow_calls
    assert count_of(counter) == 3 and key[2] == (MARK, torch.int8, torch.Size([64, 128]), -1)


def test_reading_arguments_of_many_types_leaks_no_reference(hot):
    """More argument types than the compiled one keeps readers for, and one it reads by attribute lookup, called
    many times: each type and torch's descriptors hold as many references after as before."""

    class Looked(torch.Tensor):  # read by attribute lookup: its `shape` is not a getset
        shape = property(lambda self: torch.Size([3]))

    classes = [type(f"Tensor{number}", (torch.Tensor,), {}) for number in range(5)] + [Looked]
    values = [torch.empty(2, 3).as_subclass(cls) for cls in classes]
    observed = Observed(hot, positions=(0,), kinds={cls: MARK for cls in classes})
    for value in values:
        observed.serve(reference_key("gemm", ("num_sms", None), (0,), (value,)))
    watched = [*classes, vars(torch._C.TensorBase)["shape"], vars(torch._C.TensorBase)["dtype"]]
    for value in values:  # every type seen once: the readers the compiled one keeps are filled
        library_call(observed, value)
    gc.collect()  # what earlier tests left for the collector holds references too
    gc.disable()
    try:
        before = [sys.getrefcount(thing) for thing in watched]
        for _ in range(200):
            for value in values:
                library_call(observed, value)
        after = [sys.getrefcount(thing) for thing in watched]
    finally:
        gc.enable()
    assert after == before and observed.slow_calls == []


def test_a_new_list_of_scalars_at_each_call_is_served_on_the_hot_path(hot):
    """A library that builds its recipe list anew at each call (vLLM 0.34.0's vendored DeepGEMM, `_as_int_list`) is
    keyed by the list's items, not sent to the slow path at every call."""
    args = served_call()
    args[6] = [1, 128, 128]
    observed, counter = served(hot, args)
    for number in range(4, 40):
        library_call(observed, *[list(arg) if isinstance(arg, list) else arg for arg in args])
        assert count_of(counter) == number and observed.slow_calls == []


@pytest.mark.parametrize(
    "change",
    [lambda items: items.__setitem__(2, 64), lambda items: items.append(1), lambda items: items.pop(), list.clear,
     lambda items: items.__setitem__(0, 1.0), lambda items: items.__setitem__(0, "1")],
    ids=["item", "append", "pop", "clear", "int to float", "int to str"],
)  # fmt: skip
def test_a_list_changed_in_place_is_another_variant(hot, change):
    args = served_call()
    args[6] = [1, 128, 128]
    observed, counter = served(hot, args)
    change(args[6])  # the same list object, other items
    if args[6] == [1.0, 128, 128]:  # equal as a key, as the slow path's dict finds it: the same variant
        library_call(observed, *args)
        assert count_of(counter) == 4
        return
    assert_a_new_variant(observed, counter, args)


def test_a_list_holding_anything_but_scalars_is_never_a_hit(hot):
    args = served_call()
    args[6] = [1, 128, 128]
    observed, counter = served(hot, args)
    args[6] = [1, torch.ones(1), 128]
    library_call(observed, *args)
    [(key, called, _, _)] = observed.slow_calls
    assert count_of(counter) == 3 and called == tuple(args)
    assert key is None or key[2 + 6] == tuple(args[6])  # the compiled one leaves it to the slow path
