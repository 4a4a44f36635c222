/* A torch tensor's key fields (dtype, sizes, the dimension of stride 1) read below Python, for the observed call's hit.
 *
 * Reading them through Python (`shape`, `dtype`, `stride()`) costs about 0.24 us a tensor: a torch.Size and a tuple
 * made, stride()'s argument parser. Here they are read from the tensor torch holds, through the C functions libtorch
 * exports for AOTInductor (aoti_torch_get_layout, _dtype, _dim, _sizes, _strides: a C ABI kept stable across torch
 * versions; only a strided tensor's are read: an older torch logs the error of a sparse one's strides), given the
 * `at::Tensor` a Python tensor holds right after its object header (THPVariable's `cdata`).
 * That place is not part of any stable ABI, so it is verified before anything is read through it: for every probe
 * tensor, the pointer found there must be the TensorImpl that torch itself names (`Tensor._cdata`), compared as a
 * number and never followed before it matched; then the fields read through it must be the ones Python reads. Any
 * mismatch, a missing function, or a torch this was not checked against leaves it off, and Python reads the fields
 * as before. Only exact torch.Tensor and Parameter instances are read here (a subclass may answer for its fields),
 * only while those classes still find torch's own `shape`, `dtype` and `stride`, and not while a torch function mode
 * is active (a mode may answer for them too). */
#include "_tensor_fields.h"

#ifndef _WIN32
#include <dlfcn.h>
#endif

typedef int32_t (*NumberFn)(void *tensor, int64_t *number);
typedef int32_t (*ArrayFn)(void *tensor, int64_t **values);
typedef int32_t (*CodeFn)(void *tensor, int32_t *code);

#define TYPES 2  /* torch.Tensor and torch.nn.Parameter */
#define NAMES 3  /* shape, dtype, stride */
#define CODES 64 /* torch's dtype codes (c10::ScalarType) a dtype is learned for */
#define STRIDED 0 /* c10::Layout::Strided */

static struct {
    int on;
    PyTypeObject *types[TYPES];
    unsigned int versions[TYPES]; /* each type's version tag when its lookups were last found to be torch's own */
    PyObject *names[NAMES];
    PyObject *found[TYPES][NAMES]; /* what each name found on each type when it was verified */
    PyObject *mode_enabled;        /* torch._C._is_torch_function_mode_enabled */
    NumberFn rank;
    ArrayFn sizes, strides;
    CodeFn layout, dtype;
    PyObject *dtypes[CODES]; /* the dtype object of each code, learned from the probes */
} native;

/* The at::Tensor a Python tensor holds (THPVariable's cdata, where enabling verified it is). */
static void *
tensor_of(PyObject *value)
{
    return (char *)value + sizeof(PyObject);
}

/* Whether a type is one whose instances are read here: one of the verified types, its lookups still torch's own. */
static int
native_type(PyTypeObject *type)
{
    for (int at = 0; at < TYPES; at++) {
        if (native.types[at] != type)
            continue;
        if (type_unchanged(type, native.versions[at]))
            return 1;
        if (type->tp_getattro != PyObject_GenericGetAttr)
            return 0;
        for (int name = 0; name < NAMES; name++)
            if (_PyType_Lookup(type, native.names[name]) != native.found[at][name])
                return 0;
        native.versions[at] = type->tp_version_tag; /* a class changed elsewhere (a method added) is read here again */
        return 1;
    }
    return 0;
}

/* The fields of a tensor read through the verified place; 0 where torch answers with an error or a dtype unknown. */
static int
read_fields(PyObject *value, TensorFields *fields, int64_t **strides)
{
    void *tensor = tensor_of(value);
    int32_t layout, code;
    if (native.layout(tensor, &layout) != 0 || layout != STRIDED || native.dtype(tensor, &code) != 0 || code < 0 ||
        code >= CODES || native.dtypes[code] == NULL || native.rank(tensor, &fields->rank) != 0 ||
        native.sizes(tensor, (int64_t **)&fields->sizes) != 0 || native.strides(tensor, strides) != 0)
        return 0;
    fields->dtype = native.dtypes[code];
    fields->layout = 0;
    for (int64_t at = fields->rank - 1; at >= 0; at--) {
        if ((*strides)[at] == 1) {
            fields->layout = (long)(at - fields->rank);
            break;
        }
    }
    return 1;
}

int
tensor_fields_read(PyObject *value, TensorFields *fields, int *modes)
{
    if (!native.on || !native_type(Py_TYPE(value)))
        return 0;
    if (*modes < 0) {
        PyObject *enabled = PyObject_CallNoArgs(native.mode_enabled);
        if (enabled == NULL)
            return -1;
        *modes = PyObject_IsTrue(enabled);
        Py_DECREF(enabled);
        if (*modes < 0)
            return -1;
    }
    int64_t *strides;
    return *modes ? 0 : read_fields(value, fields, &strides);
}

/* -- turning it on ------------------------------------------------------------------------------------------- */

/* Whether the tuple `known` (Python's reading) holds exactly the `count` numbers `values`. */
static int
same_numbers(PyObject *known, const int64_t *values, int64_t count)
{
    if (!PyTuple_Check(known) || PyTuple_GET_SIZE(known) != count)
        return 0;
    for (int64_t at = 0; at < count; at++) {
        long long number = PyLong_AsLongLong(PyTuple_GET_ITEM(known, at));
        if (number == -1 && PyErr_Occurred())
            return -1;
        if (number != values[at])
            return 0;
    }
    return 1;
}

/* 1 where a probe tensor holds at the verified place the TensorImpl torch names for it and its fields read there are
 * Python's (its dtype learned for its code), 0 where not, -1 with an error. */
static int
verify(PyObject *probe)
{
    PyObject *named = PyObject_GetAttrString(probe, "_cdata");
    if (named == NULL)
        return -1;
    void *impl = PyLong_AsVoidPtr(named);
    Py_DECREF(named);
    if (impl == NULL && PyErr_Occurred())
        return -1;
    if (impl == NULL || *(void **)tensor_of(probe) != impl) /* compared, never followed, before it matched */
        return 0;
    int32_t code;
    if (native.dtype(tensor_of(probe), &code) != 0 || code < 0 || code >= CODES)
        return 0;
    PyObject *dtype = PyObject_GetAttrString(probe, "dtype");
    if (dtype == NULL)
        return -1;
    if (native.dtypes[code] == NULL)
        native.dtypes[code] = Py_NewRef(dtype);
    int same = native.dtypes[code] == dtype;
    Py_DECREF(dtype);
    TensorFields fields;
    int64_t *strides;
    if (!same || !read_fields(probe, &fields, &strides))
        return 0;
    PyObject *shape = PyObject_GetAttrString(probe, "shape");
    PyObject *stride = shape != NULL ? PyObject_CallMethod(probe, "stride", NULL) : NULL;
    int verified = stride == NULL ? -1 : same_numbers(shape, fields.sizes, fields.rank);
    if (verified == 1)
        verified = same_numbers(stride, strides, fields.rank);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    return verified;
}

/* Whether libtorch's C shim was found in the library at `path`, already loaded (nothing is loaded here). */
static int
find_shim(const char *path)
{
#ifdef _WIN32
    (void)path;
    return 0;
#else
    void *library = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (library == NULL)
        return 0;
    native.rank = (NumberFn)dlsym(library, "aoti_torch_get_dim");
    native.sizes = (ArrayFn)dlsym(library, "aoti_torch_get_sizes");
    native.strides = (ArrayFn)dlsym(library, "aoti_torch_get_strides");
    native.dtype = (CodeFn)dlsym(library, "aoti_torch_get_dtype");
    native.layout = (CodeFn)dlsym(library, "aoti_torch_get_layout");
    dlclose(library); /* torch keeps it loaded */
    return native.rank != NULL && native.sizes != NULL && native.strides != NULL && native.dtype != NULL &&
           native.layout != NULL;
#endif
}

static void
turn_off(void)
{
    native.on = 0;
    for (int at = 0; at < TYPES; at++) {
        Py_CLEAR(native.types[at]);
        for (int name = 0; name < NAMES; name++)
            Py_CLEAR(native.found[at][name]);
    }
    for (int code = 0; code < CODES; code++)
        Py_CLEAR(native.dtypes[code]);
    Py_CLEAR(native.mode_enabled);
}

PyObject *
tensor_fields_enable(PyObject *module, PyObject *const *args, Py_ssize_t count)
{
    if (count != 4 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != TYPES || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "read_tensors_natively(tensor_types, library, probes, mode_enabled)");
        return NULL;
    }
    turn_off();
    static const char *names[NAMES] = {"shape", "dtype", "stride"};
    for (int name = 0; name < NAMES; name++)
        if (native.names[name] == NULL && (native.names[name] = PyUnicode_InternFromString(names[name])) == NULL)
            return NULL;
    const char *path = PyUnicode_AsUTF8(args[1]);
    if (path == NULL)
        return NULL;
    if (!find_shim(path))
        Py_RETURN_FALSE;
    for (int at = 0; at < TYPES; at++) {
        PyObject *type = PyTuple_GET_ITEM(args[0], at);
        if (!PyType_Check(type) || ((PyTypeObject *)type)->tp_getattro != PyObject_GenericGetAttr)
            Py_RETURN_FALSE;
        native.types[at] = (PyTypeObject *)Py_NewRef(type);
        for (int name = 0; name < NAMES; name++) {
            PyObject *found = _PyType_Lookup((PyTypeObject *)type, native.names[name]);
            if (found == NULL)
                Py_RETURN_FALSE;
            native.found[at][name] = Py_NewRef(found);
        }
        native.versions[at] = ((PyTypeObject *)type)->tp_version_tag;
    }
    PyObject *probes = PySequence_Fast(args[2], "probes must be a sequence of tensors");
    if (probes == NULL)
        return NULL;
    int verified = PySequence_Fast_GET_SIZE(probes) > 0;
    for (Py_ssize_t at = 0; verified == 1 && at < PySequence_Fast_GET_SIZE(probes); at++) {
        PyObject *probe = PySequence_Fast_GET_ITEM(probes, at);
        verified = native_type(Py_TYPE(probe)) ? verify(probe) : 0;
    }
    Py_DECREF(probes);
    if (verified != 1) {
        turn_off();
        if (verified < 0)
            return NULL;
        Py_RETURN_FALSE;
    }
    native.mode_enabled = Py_NewRef(args[3]);
    native.on = 1;
    Py_RETURN_TRUE;
}
