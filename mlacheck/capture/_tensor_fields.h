/* A torch tensor's key fields read below Python (_tensor_fields.c; mlacheck/capture/tensor_fields.py turns it on). */
#ifndef MLACHECK_TENSOR_FIELDS_H
#define MLACHECK_TENSOR_FIELDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* What the key holds of a tensor, as Python would read it: its dtype (borrowed), its sizes (torch's own array, valid
 * while the tensor is unchanged), its rank and which dimension has stride 1 (hotpath_py.layout). */
typedef struct {
    PyObject *dtype;
    const int64_t *sizes;
    int64_t rank;
    long layout;
} TensorFields;

/* Whether a type's attributes are as they were when its version tag was `version`. */
static inline int
type_unchanged(PyTypeObject *type, unsigned int version)
{
#if PY_VERSION_HEX < 0x030C0000
    if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;
#endif
    return version != 0 && type->tp_version_tag == version;
}

/* Read `value`'s fields into *fields where it is a tensor whose fields Python would read as torch holds them (an
 * exact torch.Tensor or Parameter of a class whose `shape`, `dtype` and `stride` are torch's own, no torch function
 * mode active: *modes caches that answer for one call, -1 until asked); 1 where read, 0 where Python must read it,
 * -1 with an error. */
int tensor_fields_read(PyObject *value, TensorFields *fields, int *modes);

/* `read_tensors_natively(tensor_types, library, probes, mode_enabled)`: the module function that turns it on. */
PyObject *tensor_fields_enable(PyObject *module, PyObject *const *args, Py_ssize_t count);

#endif
