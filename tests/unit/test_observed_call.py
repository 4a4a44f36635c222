"""The observed call (hotpath `observed_call`, a jit_dir family's operation), compiled and pure Python: a call is a
hit only where its key, built from the arguments as they are at the call, is in the fast table; a call whose key
differs (a tensor resized in place, another dtype, another setting, another value anywhere the key holds) goes to the
slow path with that key. Both hot paths keep the same contract (hotpath_py.py's docstring)."""

import gc
import threading
import weakref

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlacheck.capture.hotpath import count_of
from tests.unit.hotpaths import COMPILED, OBSERVED_HOTPATHS, PYTHON, Field, reading

MARK = object()  # what a key field of a tensor starts with


@pytest.fixture(params=OBSERVED_HOTPATHS, ids=lambda hot: hot.__name__)
def hot(request):
    with reading(request.param) as hot:
        yield hot


def reference_key(head, setting, positions, args):
    """The key as the contract states it, computed apart from either implementation."""
    fields = [head, setting]
    for index in positions:
        value = args[index] if index < len(args) else None
        if isinstance(value, torch.Tensor):
            value = (MARK, value.dtype, tuple(value.shape), stride_one_dimension(value))
        fields.append(tuple(value) if isinstance(value, list) else value)
    return tuple(fields)


def stride_one_dimension(tensor):
    """Where a tensor's dimension of stride 1 nearest its end is, counted from the end (-1: the last), or 0."""
    strides = tensor.stride()
    found = [at for at in range(tensor.dim()) if strides[at] == 1]
    return found[-1] - tensor.dim() if found else 0


class Observed:
    """An observed operation over a recording native operation, its fast table and counters."""

    def __init__(self, hot, head="gemm", positions=(0, 1, 2, 3), kinds=None, fast=None, state=None):
        self.hot, self.head, self.positions = hot, head, positions
        self.state = state if state is not None else [("num_sms", None)]
        self.kinds = kinds if kinds is not None else {torch.Tensor: MARK, tuple: None}
        self.fast = fast if fast is not None else hot.FastTable()
        self.ticks, self.flushes, self.calls, self.slow_calls = self.counter(), [], [], []
        make = hot.observed_call if hot is PYTHON else hot.ObservedCall
        memo = {} if getattr(hot, "memo", None) is None else {"memo": hot.memo}  # the compiled one's memo slots
        self.call = make(
            self.operation,
            head,
            self.state,
            positions,
            self.kinds,
            self.fast,
            self.ticks,
            lambda: self.flushes.append(1),
            self.slow,
            **memo,
        )

    def counter(self, start=0):
        return self.hot.counter(start) if self.hot is PYTHON else self.hot.Counter(start)

    def operation(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return len(self.calls)

    def slow(self, key, args, kwargs, frame):
        self.slow_calls.append((key, args, kwargs, frame.f_code.co_name))
        return self.operation(*args, **kwargs)

    def serve(self, key):
        """Make `key` a variant seen in serving: its counter."""
        counter = self.counter()
        self.fast[key] = (counter, None)
        return counter


def library_call(observed, *args, **kwargs):
    """The library's own Python code calling its native operation."""
    return observed.call(*args, **kwargs)


def tensors():
    return torch.empty(64, 16, dtype=torch.float8_e4m3fn), torch.ones(64, 1), torch.empty(32, 16, dtype=torch.bfloat16)


def test_a_served_variant_is_counted_and_called_and_the_first_call_of_one_goes_to_the_slow_path(hot):
    observed = Observed(hot)
    a, sfa, b = tensors()
    assert library_call(observed, a, sfa, b, (1, 128), "extra") == 1
    key = reference_key("gemm", ("num_sms", None), (0, 1, 2, 3), (a, sfa, b, (1, 128)))
    assert observed.slow_calls == [(key, (a, sfa, b, (1, 128), "extra"), {}, "library_call")]
    counter = observed.serve(key)
    for number in range(2, 2050):
        assert library_call(observed, a, sfa, b, (1, 128), "extra") == number
    assert count_of(counter) == count_of(observed.ticks) == 2048 and len(observed.flushes) == 2
    assert observed.calls[-1] == ((a, sfa, b, (1, 128), "extra"), {}) and len(observed.slow_calls) == 1


def test_a_tensor_resized_in_place_is_another_key_not_a_hit(hot):
    """The false pass a per-object memo would make: the same tensor object, resized after it was served."""
    observed = Observed(hot)
    a, sfa, b = tensors()
    observed.serve(reference_key("gemm", ("num_sms", None), (0, 1, 2, 3), (a, sfa, b, None)))
    library_call(observed, a, sfa, b)
    assert observed.slow_calls == []
    a.resize_(300, 16)
    library_call(observed, a, sfa, b)
    [(key, *_)] = observed.slow_calls
    assert key[2] == (MARK, torch.float8_e4m3fn, torch.Size([300, 16]), -1)


@pytest.mark.parametrize("relayout", ["transpose_", "as_strided_"])
def test_a_tensor_whose_layout_changed_in_place_is_another_key_not_a_hit(hot, relayout):
    """DeepGEMM compiles a kernel per operand major (deepseek-ai/DeepGEMM csrc/utils/layout.hpp:29-32 at 057ca59,
    get_major_type_ab: K-major where the last dimension has stride 1, else MN-major): the same square tensor object
    served K-major, then made MN-major in place (same dtype, same shape), must be another key, however the compiled one
    remembers the call it served."""
    observed = Observed(hot)
    a, sfa, b = torch.empty(64, 64, dtype=torch.float8_e4m3fn), torch.ones(64, 1), torch.empty(32, 64)
    counter = observed.serve(reference_key("gemm", ("num_sms", None), (0, 1, 2, 3), (a, sfa, b, None)))
    for _ in range(3):
        library_call(observed, a, sfa, b)
    assert count_of(counter) == 3 and observed.slow_calls == []
    if relayout == "transpose_":
        a.transpose_(0, 1)
    else:
        a.as_strided_((64, 64), (1, 64))
    assert a.shape == (64, 64) and a.stride() == (1, 64)
    library_call(observed, a, sfa, b)
    [(key, *_)] = observed.slow_calls
    assert key[2] == (MARK, torch.float8_e4m3fn, torch.Size([64, 64]), -2) and count_of(counter) == 3


def test_equal_texts_of_two_objects_and_lists_made_anew_are_still_hits(hot):
    """A call keyed by a text the library builds at each call (equal, another object) or a list of scalars made anew
    is the variant served: counted, never the slow path's."""
    observed = Observed(hot, positions=(0, 1, 2, 3, 4))
    a, sfa, b = tensors()
    counter = observed.serve(reference_key("gemm", ("num_sms", None), (0, 1, 2, 3, 4), (a, sfa, b, "nk", [1, 128])))
    for _ in range(20):
        library_call(observed, a, sfa, b, "".join(["n", "k"]), [1, 100 + 28])
    assert count_of(counter) == 20 and observed.slow_calls == []


@pytest.mark.parametrize(
    "served, called",
    [
        (1, 1 + 2**32),  # equal in their low bits
        (255, 511),
        (-1, 2**64 - 1),  # the same 64 bits, read as signed and as unsigned
        (2**63 - 1, 2**63),  # a word's largest, and one past it (kept as an object)
        ((1, 2), (1, 2 + 2**40)),
        ((1, 2), (1, 2, 0)),
        ((1,), 1),
        (None, 0),
        ([1, 128], [1, 128 + 2**40]),  # a list, signed by its items
        ([1, 128], (1, 128, 0)),
        (1.0, 2.0),
        ("nk", "mn"),
    ],
)
def test_a_call_that_differs_from_the_last_served_only_in_a_number_s_high_bits_or_its_form_is_another_variant(
    hot, served, called
):
    """The compiled memo compares a call with the keys served lately as runs of numbers: a field that differs only
    where a shortened or retyped copy would not see it (an int's high bits, a tuple's length or form) is a miss."""
    observed = Observed(hot)
    a, sfa, b = tensors()
    observed.serve(reference_key("gemm", ("num_sms", None), (0, 1, 2, 3), (a, sfa, b, served)))
    library_call(observed, a, sfa, b, served)  # served: a hit, remembered
    library_call(observed, a, sfa, b, called)
    [(key, *_)] = observed.slow_calls
    assert key == reference_key("gemm", ("num_sms", None), (0, 1, 2, 3), (a, sfa, b, called))


@pytest.mark.parametrize(
    "change",
    [
        "dtype",
        "data replaced",
        "shape of another argument",
        "a scalar argument",
        "a tuple argument",
        "an argument left out",
        "setting",
    ],
)
def test_a_call_whose_key_differs_in_any_field_is_never_served_as_a_hit(hot, change):
    observed = Observed(hot)
    a, sfa, b = tensors()
    served = (a, sfa, b, (1, 128))
    observed.serve(reference_key("gemm", ("num_sms", None), (0, 1, 2, 3), served))
    library_call(observed, *served)  # served: a hit
    args = list(served)
    if change == "dtype":
        args[0] = a.view(torch.int8)
    elif change == "data replaced":  # the same object, its shape and dtype changed without moving its _version
        version = a._version
        a.data = torch.empty(300, 16, dtype=torch.bfloat16)
        assert a._version == version and args[0] is a
    elif change == "shape of another argument":
        args[2] = b[:16]
    elif change == "a scalar argument":
        args[1] = 7
    elif change == "a tuple argument":
        args[3] = (1, 64)
    elif change == "an argument left out":
        args = args[:3]
    else:
        observed.state[0] = ("num_sms", 66)
    library_call(observed, *args)
    [(key, called, _, _)] = observed.slow_calls
    assert key == reference_key("gemm", observed.state[0], (0, 1, 2, 3), tuple(args)) and called == tuple(args)


def test_two_operations_sharing_a_fast_table_never_serve_each_other(hot):
    first = Observed(hot, head="fp8_gemm_nt")
    second = Observed(hot, head="fp8_gemm_nn", fast=first.fast, state=first.state)
    a, sfa, b = tensors()
    first.serve(reference_key("fp8_gemm_nt", ("num_sms", None), (0, 1, 2, 3), (a, sfa, b)))
    library_call(first, a, sfa, b)
    library_call(second, a, sfa, b)
    assert first.slow_calls == [] and [key[0] for key, *_ in second.slow_calls] == ["fp8_gemm_nn"]


@pytest.mark.parametrize("change", ["pop", "clear", "set", "delete"])
def test_a_key_the_fast_table_forgot_is_not_served_however_lately_it_was(hot, change):
    observed = Observed(hot)
    a, sfa, b = tensors()
    key = reference_key("gemm", ("num_sms", None), (0, 1, 2, 3), (a, sfa, b))
    counter = observed.serve(key)
    library_call(observed, a, sfa, b)
    if change == "pop":
        observed.fast.pop(key)
    elif change == "clear":
        observed.fast.clear()
    elif change == "set":
        observed.fast[key] = (observed.counter(), None)
    else:
        del observed.fast[key]
    library_call(observed, a, sfa, b)
    assert count_of(counter) == 1
    assert len(observed.slow_calls) == (0 if change == "set" else 1)


class Shaped:
    """A tensor-like argument whose shape is a new tuple of the same dimension objects at each read."""

    def __init__(self, dtype, *dims):
        self.dtype, self.dims = dtype, dims

    @property
    def shape(self):
        return tuple(self.dims)


def test_a_key_served_lately_is_matched_without_building_or_hashing_it_and_each_counts_to_its_own_variant(hot):
    """The compiled one compares a call's fields with the keys it served last (a tensor's shape item by item);
    more variants than it remembers take turns; each call counts to its own variant either way."""
    observed = Observed(hot, positions=(0, 1), kinds={Shaped: MARK})
    dims = [Field(f"m{number}") for number in range(6)]
    fp8, n = Field("fp8"), Field("n")
    counters = [observed.serve(("gemm", ("num_sms", None), (MARK, fp8, (dim, n), None), 7)) for dim in dims]
    Field.hashed = 0
    for _ in range(100):
        library_call(observed, Shaped(fp8, dims[0], n), 7)
    assert Field.hashed == (300 if hot is PYTHON else 3)  # a lookup hashes the dtype and the shape's two dims
    for _ in range(10):
        for dim in dims:
            library_call(observed, Shaped(fp8, dim, n), 7)
    assert [count_of(counter) for counter in counters] == [110, 10, 10, 10, 10, 10] and observed.slow_calls == []
    library_call(observed, Shaped(Field("fp8"), Field("m1"), Field("n")), 7)  # equal, other objects: by hashing
    library_call(observed, Shaped(fp8, dims[1], n), 8)
    assert count_of(counters[1]) == 11 and [key[-1] for key, *_ in observed.slow_calls] == [8]


def test_calls_the_hot_path_cannot_key_go_to_the_slow_path_without_a_key(hot):
    class Shaped:  # a type whose kind is not known yet
        shape, dtype = (4,), "fp8"

    class Unreadable:
        @property
        def shape(self):
            raise RuntimeError("no shape here")

    observed = Observed(hot, kinds={torch.Tensor: MARK, Unreadable: MARK})
    a, sfa, b = tensors()
    observed.serve(reference_key("gemm", ("num_sms", None), (0, 1, 2, 3), (a, sfa, b)))
    library_call(observed, a, sfa, b=b)  # keywords
    library_call(observed, a, Shaped(), b)
    library_call(observed, a, Unreadable(), b)
    mixed = [1, torch.ones(1)]
    library_call(observed, a, sfa, b, mixed)  # a list of more than scalars: the compiled one leaves it to the slow path
    library_call(observed, a, sfa, b, {"unhashable": 1})  # not in kinds either
    library_call(observed, a, sfa, b, [1, 128])  # a list of scalars: keyed here, by its items (not served: slow)
    assert [(key, kwargs) for key, _, kwargs, _ in observed.slow_calls][:3] == [
        (None, {"b": b}),
        (None, {}),
        (None, {}),
    ]
    assert [key for key, *_ in observed.slow_calls][4:] == [
        None,
        reference_key("gemm", ("num_sms", None), (0, 1, 2, 3), (a, sfa, b, [1, 128])),
    ]
    mixed_key = observed.slow_calls[3][0]  # the Python one keys it as the slow path does: the tuple of its items
    assert mixed_key is None or (mixed_key[-1][0] == 1 and mixed_key[-1][1] is mixed[1])
    assert {caller for *_, caller in observed.slow_calls} == {"library_call"}


def test_an_unhashable_field_of_a_known_kind_goes_to_the_slow_path_without_a_key(hot):
    observed = Observed(hot, kinds={torch.Tensor: MARK, tuple: None})
    a, sfa, b = tensors()
    library_call(observed, a, sfa, b, ([1], 128))
    assert [key for key, *_ in observed.slow_calls] == [None]


def test_an_interrupt_while_reading_an_argument_is_not_swallowed(hot):
    class Interrupting:
        @property
        def shape(self):
            raise KeyboardInterrupt

    observed = Observed(hot, kinds={Interrupting: MARK})
    with pytest.raises(KeyboardInterrupt):
        library_call(observed, Interrupting())
    assert observed.calls == [] and observed.slow_calls == []


def test_a_shape_of_none_keys_the_value_itself(hot):
    class Unshaped:
        shape, dtype = None, "fp8"

    value = Unshaped()
    observed = Observed(hot, positions=(0,), kinds={Unshaped: MARK})
    observed.serve(("gemm", ("num_sms", None), value))
    library_call(observed, value)
    assert observed.slow_calls == [] and len(observed.calls) == 1


def test_an_operation_that_raises_on_a_hit_is_counted_and_its_error_propagates(hot):
    observed = Observed(hot, positions=(0,))

    def failing(*args):
        raise RuntimeError("cudaErrorLaunchFailure")

    observed.operation = failing
    observed.call = (PYTHON.observed_call if hot is PYTHON else hot.ObservedCall)(
        failing, "gemm", observed.state, (0,), observed.kinds, observed.fast, observed.ticks, lambda: None, None
    )
    counter = observed.serve(("gemm", ("num_sms", None), 5))
    with pytest.raises(RuntimeError, match="LaunchFailure"):
        library_call(observed, 5)
    assert count_of(counter) == 1


def test_the_compiled_one_refuses_what_it_cannot_use():
    if COMPILED is None:
        pytest.skip("no compiled hot path in this build")
    table, ticks = COMPILED.FastTable(), COMPILED.Counter()
    good = dict(operation=print, head="x", state=[None], positions=(0,), kinds={}, fast=table, ticks=ticks)
    good.update(flush=print, slow=print)
    COMPILED.ObservedCall(**good)
    for name, bad in [("state", (None,)), ("kinds", []), ("fast", {}), ("positions", (-1,)), ("ticks", 5), ("memo", 0)]:
        with pytest.raises((TypeError, ValueError)):
            COMPILED.ObservedCall(**{**good, name: bad})


def test_counts_are_exact_under_threads(hot):
    observed = Observed(hot)
    a, sfa, b = tensors()
    counter = observed.serve(reference_key("gemm", ("num_sms", None), (0, 1, 2, 3), (a, sfa, b)))

    def work():
        for _ in range(5_000):
            observed.call(a, sfa, b)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert count_of(counter) == 20_000 and observed.slow_calls == []


def test_a_cycle_through_an_observed_call_is_collected(hot):
    class Holder:
        pass

    holder = Holder()
    holder.observed = Observed(hot)
    holder.observed.holder = holder
    gone = weakref.ref(holder)
    del holder
    gc.collect()
    assert gone() is None


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 300),
    st.integers(-(2**70), 2**70),  # equal ones in two calls are two objects; some too large for a word
    st.floats(allow_nan=False),  # 1.0 keys as 1 does (equal, hashed alike)
    st.sampled_from(["", "mn", "nk"]),
    st.tuples(st.integers(1, 4), st.integers(1, 4)),
    st.tuples(st.sampled_from([torch.float8_e4m3fn, torch.bfloat16, torch.float32]), st.integers(0, 2)),
    st.integers(0, 2).map(lambda index: ("tensor", index)),
)
"""An argument: a scalar (ints made anew at each call among them), a text, a tuple, one of a few tensors reused across calls (("tensor", index)), or a view of
one in another dtype ((dtype, index))."""


def argument(pool, value):
    if isinstance(value, tuple) and value[0] == "tensor":
        return pool[value[1]]
    if isinstance(value, tuple) and isinstance(value[0], torch.dtype):
        return pool[value[1]].view(value[0])
    return value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    calls=st.lists(
        st.tuples(
            st.lists(VALUES, min_size=0, max_size=5),
            st.sampled_from(["call", "resize", "setting", "forget", "serve"]),
            st.integers(1, 4),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_a_hit_is_exactly_a_call_whose_key_as_it_is_now_was_served(hot, calls):
    """Any calls, tensors resized between them, settings changed, the table forgotten: a call is counted on the
    hot path exactly where its key (as the contract builds it now) is in the table; the slow path gets that key."""
    observed = Observed(hot, positions=(0, 2, 3, 4))
    pool = [torch.empty(2, 2) for _ in range(3)]
    served: dict[tuple, object] = {}
    for values, action, size in calls:
        args = tuple(argument(pool, value) for value in values)
        if action == "resize":
            pool[size % 3].resize_(size, 2)
        elif action == "setting":
            observed.state[0] = ("num_sms", size)
        elif action == "forget":
            observed.fast.clear()
            served.clear()
        key = reference_key("gemm", observed.state[0], (0, 2, 3, 4), args)
        if action == "serve":
            served[key] = observed.serve(key)
        hits = {k: count_of(counter) for k, counter in served.items()}
        slow_before = len(observed.slow_calls)
        library_call(observed, *args)
        if key in served:
            assert count_of(served[key]) == hits[key] + 1 and len(observed.slow_calls) == slow_before
        else:
            assert observed.slow_calls[-1][0] == key and all(count_of(c) == hits[k] for k, c in served.items())


def test_an_observed_call_keeps_no_argument_alive(hot):
    """The key holds a tensor's dtype and shape, never the tensor (an activation must be freed when the program
    drops it)."""
    observed = Observed(hot)
    a, sfa, b = tensors()
    observed.serve(reference_key("gemm", ("num_sms", None), (0, 1, 2, 3), (a, sfa, b)))
    library_call(observed, a, sfa, b)  # a hit
    library_call(observed, a, b, sfa)  # a miss
    gone = weakref.ref(a)
    observed.slow_calls.clear()
    observed.calls.clear()
    del a
    gc.collect()
    assert gone() is None


def gemm(a, b, out, num_sms=None):
    """A library's operation, as the program reads it."""
    return out


gemm.kernel_kind = "fp8"  # an attribute of the library's own


def test_an_observed_call_shows_the_operations_name_documentation_signature_and_attributes(hot):
    """A program that reads its operation's name, documentation, signature or an attribute of the library's (for a
    log line, a capability check) reads the same through the stand-in: observing never changes what it computes."""
    import inspect

    observed = Observed(hot)
    make = hot.observed_call if hot is PYTHON else hot.ObservedCall
    call = make(
        gemm, "gemm", observed.state, (0, 1), observed.kinds, observed.fast, observed.ticks, list, observed.slow
    )
    assert (call.__name__, call.__qualname__, call.__module__, call.__doc__) == (
        gemm.__name__,
        gemm.__qualname__,
        gemm.__module__,
        gemm.__doc__,
    )
    assert call.__wrapped__ is gemm and call.kernel_kind == "fp8"
    assert inspect.signature(call) == inspect.signature(gemm)
    with pytest.raises(AttributeError):
        getattr(call, "no_such_attribute")  # noqa: B009 - the attribute read itself is the test
    native = make(len, "len", observed.state, (0,), observed.kinds, observed.fast, observed.ticks, list, observed.slow)
    assert (native.__name__, native.__doc__, native.__wrapped__) == ("len", len.__doc__, len)


def test_an_operation_without_a_signature_netted_shows_the_operations_name_and_attributes():
    """A jit_dir family's operation whose parameters cannot be read is netted by a plain function: the same."""
    from mlacheck.capture.caches.jit_net import JitNet

    net = JitNet(None, "library.cache", set, [None], lambda before, after: [])
    netted = net.wrap("gemm", gemm, None)
    assert (netted.__name__, netted.__doc__, netted.__wrapped__, netted.kernel_kind) == (
        "gemm",
        gemm.__doc__,
        gemm,
        "fp8",
    )


def test_a_launcher_shows_the_kernel_it_launches(hot):
    """What a functools family's front gives the program in place of its kernel reads as the kernel does."""
    observed = Observed(hot)
    make = hot.launcher if hot is PYTHON else hot.Launcher
    launch = make(observed.counter(), gemm, observed.ticks, list)
    assert (launch.__name__, launch.__doc__, launch.__wrapped__, launch.kernel_kind) == (
        "gemm",
        gemm.__doc__,
        gemm,
        "fp8",
    )
    assert launch(1, 2, "out") == "out"
