/* The capture's hot path, compiled: what runs on every dispatch of a variant already seen in serving.
 *
 * The same objects as hotpath_py.py, which states each one's contract; this file keeps them free of
 * Python frames (a frame costs 0.3-1 us inside a dispatch, where its code and data are cold). Counters are
 * `Counter`s (itertools.count where the Python hot path runs), stepped under the GIL; ticks are `Ticks`, a count of
 * each thread's own (a pthread-specific array, freed when its thread ends).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <structmember.h>

#include "_tensor_fields.h"

#define FLUSH_EVERY 1023 /* a variant's counter asks for a (time-bounded) counts flush every 1024 dispatches */

static PyObject *str_missed, *str_maybe_flush, *str_shape, *str_dtype, *str_stride;

/* -- Counter: what the hot path steps, without making an int each time ------------------------------------ */

typedef struct {
    PyObject_HEAD
    long long value;
} Counter;

static PyTypeObject CounterType;

static PyObject *
counter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"start", NULL};
    long long start = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|L:Counter", names, &start))
        return NULL;
    Counter *self = (Counter *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->value = start;
    return (PyObject *)self;
}

static PyObject *
counter_next(Counter *self)
{
    return PyLong_FromLongLong(self->value++);
}

static PyObject *
counter_repr(Counter *self)
{
    return PyUnicode_FromFormat("Counter(%lld)", self->value);
}

static PyMemberDef counter_members[] = {
    {"value", T_LONGLONG, offsetof(Counter, value), READONLY, "how many times it was stepped (from its start)"},
    {NULL},
};

static PyTypeObject CounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mlacheck.capture._hotpath.Counter",
    .tp_doc = "Counter(start=0): hotpath_py.counter, compiled; `value` reads it without stepping it.",
    .tp_basicsize = sizeof(Counter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = counter_new,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)counter_next,
    .tp_repr = (reprfunc)counter_repr,
    .tp_members = counter_members,
};

/* -- Ticks: a count of each thread's own (a dispatch call is judged by what happened in its thread) ----------- */

typedef struct {
    PyObject_HEAD
    Py_ssize_t slot; /* this object's place in every thread's values; slots are never reused */
} Ticks;

typedef struct {
    Py_ssize_t size;
    long long values[];
} ThreadTicks;

static PyTypeObject TicksType;
static Py_ssize_t ticks_slots;          /* slots handed out (under the GIL) */
static pthread_key_t thread_ticks_key; /* a thread's ThreadTicks, freed by `free_thread_ticks` when it ends */

static void
free_thread_ticks(void *mine)
{
    PyMem_RawFree(mine);
}

/* The calling thread's value of a Ticks' slot (its array grown to hold it), or NULL with an error set. */
static long long *
thread_tick(Py_ssize_t slot)
{
    ThreadTicks *mine = pthread_getspecific(thread_ticks_key);
    if (mine != NULL && slot < mine->size)
        return &mine->values[slot];
    Py_ssize_t old = mine != NULL ? mine->size : 0, size = Py_MAX(Py_MAX(slot + 1, 2 * old), 8);
    ThreadTicks *grown = PyMem_RawRealloc(mine, sizeof(ThreadTicks) + (size_t)size * sizeof(long long));
    if (grown == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memset(&grown->values[old], 0, (size_t)(size - old) * sizeof(long long));
    grown->size = size;
    if (pthread_setspecific(thread_ticks_key, grown) != 0) {
        PyMem_RawFree(grown);
        pthread_setspecific(thread_ticks_key, NULL);
        PyErr_SetString(PyExc_RuntimeError, "mlacheck: cannot keep a thread's ticks");
        return NULL;
    }
    return &grown->values[slot];
}

static PyObject *
ticks_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":Ticks", names))
        return NULL;
    Ticks *self = (Ticks *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->slot = ticks_slots++;
    return (PyObject *)self;
}

static PyObject *
ticks_next(Ticks *self)
{
    long long *value = thread_tick(self->slot);
    return value == NULL ? NULL : PyLong_FromLongLong((*value)++);
}

static PyObject *
ticks_repr(Ticks *self)
{
    long long *value = thread_tick(self->slot);
    return value == NULL ? NULL : PyUnicode_FromFormat("Ticks(%lld in this thread)", *value);
}

static PyTypeObject TicksType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mlacheck.capture._hotpath.Ticks",
    .tp_doc = "Ticks(): hotpath_py.ticks, compiled: next() steps the calling thread's own count (from 0).",
    .tp_basicsize = sizeof(Ticks),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = ticks_new,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)ticks_next,
    .tp_repr = (reprfunc)ticks_repr,
};

/* Step a counter: its value before the step, or -1 with an exception set. */
static Py_ssize_t
step(PyObject *counter)
{
    if (Py_IS_TYPE(counter, &CounterType))
        return (Py_ssize_t)((Counter *)counter)->value++;
    if (Py_IS_TYPE(counter, &TicksType)) {
        long long *value = thread_tick(((Ticks *)counter)->slot);
        return value == NULL ? -1 : (Py_ssize_t)(*value)++;
    }
    PyObject *value = Py_TYPE(counter)->tp_iternext(counter);
    if (value == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "mlacheck: a capture counter ran out");
        return -1;
    }
    Py_ssize_t count = PyLong_AsSsize_t(value);
    Py_DECREF(value);
    return count;
}

static int
check_counter(PyObject *counter, const char *what)
{
    if (!PyIter_Check(counter)) {
        PyErr_Format(PyExc_TypeError, "%s must be a counter, not %.100s", what, Py_TYPE(counter)->tp_name);
        return -1;
    }
    return 0;
}

/* The frame the hot path was called from (what sys._getframe(1) is in the pure-Python wrapper), or None. */
static PyObject *
caller_frame(void)
{
    PyFrameObject *frame = PyEval_GetFrame();
    return frame != NULL ? (PyObject *)frame : Py_None;
}

/* Call a capture hook that must never raise into the program; a hook that does anyway is reported as
 * unraisable, and the program's own outcome stands. */
static void
call_hook(PyObject *hook, PyObject *const *args, size_t count)
{
    PyObject *outcome = PyObject_Vectorcall(hook, args, count, NULL);
    if (outcome == NULL)
        PyErr_WriteUnraisable(hook);
    Py_XDECREF(outcome);
}

/* A dispatch of a variant seen in serving: its counter steps (a counts flush is asked for every FLUSH_EVERY + 1
 * steps: `flush()`, or `flush.<method>()` where a method is named), then the ticks. 0, or -1 with an error set. */
static int
count_dispatch(PyObject *counter, PyObject *ticks, PyObject *flush, PyObject *method)
{
    Py_ssize_t count = step(counter);
    if (count < 0)
        return -1;
    if ((count & FLUSH_EVERY) == FLUSH_EVERY) {
        PyObject *flushed = method != NULL ? PyObject_CallMethodNoArgs(flush, method) : PyObject_CallNoArgs(flush);
        if (flushed == NULL)
            return -1;
        Py_DECREF(flushed);
    }
    return step(ticks) < 0 ? -1 : 0;
}

/* -- Forwarder: the dispatch wrapper -------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *original, *calls, *ticks, *raised, *unlooked; /* unlooked: None where a call may skip its lookup */
    PyObject *dict;
    vectorcallfunc vectorcall;
} Forwarder;

static void
report_raised(Forwarder *self, Py_ssize_t start)
{
    PyObject *started = PyLong_FromSsize_t(start);
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *error = PyErr_GetRaisedException();
    PyObject *args[] = {error, started, caller_frame()};
    if (started != NULL)
        call_hook(self->raised, args, 3);
    PyErr_SetRaisedException(error);
#else
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    PyErr_NormalizeException(&type, &error, &traceback);
    if (traceback != NULL)
        PyException_SetTraceback(error, traceback);
    PyObject *args[] = {error, started, caller_frame()};
    if (started != NULL)
        call_hook(self->raised, args, 3);
    PyErr_Restore(type, error, traceback);
#endif
    Py_XDECREF(started);
}

static PyObject *
forwarder_vectorcall(Forwarder *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t start = step(self->ticks);
    if (start < 0 || step(self->calls) < 0)
        return NULL;
    PyObject *result = PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    if (result == NULL) {
        report_raised(self, start);
    }
    else if (self->unlooked != Py_None) {
        Py_ssize_t end = step(self->ticks);
        if (end < 0) {
            Py_CLEAR(result);
        }
        else if (end == start + 1) {
            PyObject *frame[] = {caller_frame()};
            call_hook(self->unlooked, frame, 1);
        }
    }
    return result;
}

static PyObject *
forwarder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"original", "calls", "ticks", "raised", "unlooked", NULL};
    PyObject *original, *calls, *ticks, *raised, *unlooked = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO|O:Forwarder", names, &original, &calls, &ticks, &raised,
                                     &unlooked))
        return NULL;
    if (check_counter(calls, "calls") < 0 || check_counter(ticks, "ticks") < 0)
        return NULL;
    Forwarder *self = (Forwarder *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->original = Py_NewRef(original);
    self->calls = Py_NewRef(calls);
    self->ticks = Py_NewRef(ticks);
    self->raised = Py_NewRef(raised);
    self->unlooked = Py_NewRef(unlooked);
    self->vectorcall = (vectorcallfunc)forwarder_vectorcall;
    return (PyObject *)self;
}

static int
forwarder_traverse(Forwarder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->original);
    Py_VISIT(self->calls);
    Py_VISIT(self->ticks);
    Py_VISIT(self->raised);
    Py_VISIT(self->unlooked);
    Py_VISIT(self->dict);
    return 0;
}

static int
forwarder_clear(Forwarder *self)
{
    Py_CLEAR(self->original);
    Py_CLEAR(self->calls);
    Py_CLEAR(self->ticks);
    Py_CLEAR(self->raised);
    Py_CLEAR(self->unlooked);
    Py_CLEAR(self->dict);
    return 0;
}

static void
forwarder_dealloc(Forwarder *self)
{
    PyObject_GC_UnTrack(self);
    forwarder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Looked up on a class or an instance, it binds as a function does. */
static PyObject *
forwarder_get(PyObject *self, PyObject *instance, PyObject *owner)
{
    if (instance == NULL || instance == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, instance);
}

static PyObject *
forwarder_repr(Forwarder *self)
{
    return PyUnicode_FromFormat("<mlacheck dispatch wrapper of %R>", self->original);
}

/* Pickled and copied as a function is: by reference to its module and qualified name (update_wrapper's). */
static PyObject *
forwarder_reduce(PyObject *self, PyObject *unused)
{
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyMethodDef forwarder_methods[] = {
    {"__reduce__", forwarder_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyGetSetDef forwarder_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject ForwarderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mlacheck.capture._hotpath.Forwarder",
    .tp_doc = "Forwarder(original, calls, ticks, raised, unlooked=None): hotpath_py.forwarder, compiled.",
    .tp_basicsize = sizeof(Forwarder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = forwarder_new,
    .tp_traverse = (traverseproc)forwarder_traverse,
    .tp_clear = (inquiry)forwarder_clear,
    .tp_dealloc = (destructor)forwarder_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Forwarder, vectorcall),
    .tp_descr_get = forwarder_get,
    .tp_repr = (reprfunc)forwarder_repr,
    .tp_getset = forwarder_getset,
    .tp_methods = forwarder_methods,
    .tp_dictoffset = offsetof(Forwarder, dict),
};

/* -- What a stand-in shows: what it stands for ------------------------------------------------------------ */

/* What the program reads of a stand-in (a launcher, an observed call) is what it stands for: `__wrapped__` is it, its
 * name, module and documentation are its, and an attribute the stand-in lacks is looked up on it (a log line, a
 * capability check: observing never changes what the program computes). */
static PyObject *
stand_in_attribute(PyObject *self, PyObject *name, PyObject *target)
{
    if (PyUnicode_Check(name)) {
        if (PyUnicode_CompareWithASCIIString(name, "__wrapped__") == 0) {
            return Py_NewRef(target);
        }
        if (PyUnicode_CompareWithASCIIString(name, "__doc__") == 0 ||
            PyUnicode_CompareWithASCIIString(name, "__module__") == 0) {
            return PyObject_GetAttr(target, name);
        }
    }
    PyObject *found = PyObject_GenericGetAttr(self, name);
    if (found != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)) {
        return found;
    }
    PyErr_Clear();
    return PyObject_GetAttr(target, name);
}

/* -- Launcher: a functools family's launch of a variant seen in serving ----------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *counter, *kernel, *ticks, *flush;
    vectorcallfunc vectorcall;
} Launcher;

static PyObject *
launcher_vectorcall(Launcher *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (count_dispatch(self->counter, self->ticks, self->flush, NULL) < 0)
        return NULL;
    return PyObject_Vectorcall(self->kernel, args, nargsf, kwnames);
}

static PyObject *
launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"counter", "kernel", "ticks", "flush", NULL};
    PyObject *counter, *kernel, *ticks, *flush;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO:Launcher", names, &counter, &kernel, &ticks, &flush))
        return NULL;
    if (check_counter(counter, "counter") < 0 || check_counter(ticks, "ticks") < 0)
        return NULL;
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->counter = Py_NewRef(counter);
    self->kernel = Py_NewRef(kernel);
    self->ticks = Py_NewRef(ticks);
    self->flush = Py_NewRef(flush);
    self->vectorcall = (vectorcallfunc)launcher_vectorcall;
    return (PyObject *)self;
}

static int
launcher_traverse(Launcher *self, visitproc visit, void *arg)
{
    Py_VISIT(self->counter);
    Py_VISIT(self->kernel);
    Py_VISIT(self->ticks);
    Py_VISIT(self->flush);
    return 0;
}

static int
launcher_clear(Launcher *self)
{
    Py_CLEAR(self->counter);
    Py_CLEAR(self->kernel);
    Py_CLEAR(self->ticks);
    Py_CLEAR(self->flush);
    return 0;
}

static void
launcher_dealloc(Launcher *self)
{
    PyObject_GC_UnTrack(self);
    launcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
launcher_repr(Launcher *self)
{
    return PyUnicode_FromFormat("<mlacheck launcher of %R>", self->kernel);
}

static PyObject *
launcher_getattro(Launcher *self, PyObject *name)
{
    return stand_in_attribute((PyObject *)self, name, self->kernel);
}

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mlacheck.capture._hotpath.Launcher",
    .tp_doc = "Launcher(counter, kernel, ticks, flush): hotpath_py.launcher, compiled.",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = launcher_new,
    .tp_traverse = (traverseproc)launcher_traverse,
    .tp_clear = (inquiry)launcher_clear,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_repr = (reprfunc)launcher_repr,
    .tp_getattro = (getattrofunc)launcher_getattro,
};

/* -- FastTable: the capture's table of variants seen in serving ----------------------------------------- */

#define MEMO_SLOTS 4 /* the keys served last, compared field by field before the table is hashed */

typedef struct {
    PyObject_HEAD
    PyObject *table;                  /* dict: key -> (counter, value) */
    int next;                         /* the memo slot the next new key takes */
    PyObject *key[MEMO_SLOTS];        /* a key served lately (the lookup's own object) */
    PyObject *entry[MEMO_SLOTS];      /* its (counter, value) */
    unsigned long long changes;       /* how many times it changed: what a memo of its entries is valid for */
} FastTable;

static PyTypeObject FastTableType;

static void
forget_memo(FastTable *self)
{
    self->changes++;
    for (int slot = 0; slot < MEMO_SLOTS; slot++) {
        Py_CLEAR(self->key[slot]);
        Py_CLEAR(self->entry[slot]);
    }
}

/* The same key, as a dict would find it: the same object, or tuples of the same length whose fields are the
 * same objects (a dict treats an object as equal to itself, and equal tuples hash alike). */
static int
same_key(PyObject *known, PyObject *key)
{
    if (known == key)
        return 1;
    if (!PyTuple_CheckExact(known) || !PyTuple_CheckExact(key) || PyTuple_GET_SIZE(known) != PyTuple_GET_SIZE(key))
        return 0;
    for (Py_ssize_t field = PyTuple_GET_SIZE(key) - 1; field >= 0; field--) {
        if (PyTuple_GET_ITEM(known, field) != PyTuple_GET_ITEM(key, field))
            return 0;
    }
    return 1;
}

/* The table's (counter, value) for a key (a new reference), NULL where it has none or on an error. A key served
 * lately is found without hashing it; a key the table found is remembered (the dict's probe restarts where a
 * key's own __eq__ changed the table, so what it found is in the table now). */
static PyObject *
fasttable_entry(FastTable *self, PyObject *key)
{
    for (int slot = 0; slot < MEMO_SLOTS; slot++) {
        if (self->key[slot] != NULL && same_key(self->key[slot], key))
            return Py_NewRef(self->entry[slot]);
    }
    PyObject *entry = PyDict_GetItemWithError(self->table, key);
    if (entry == NULL)
        return NULL;
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) {
        PyErr_SetString(PyExc_TypeError, "mlacheck: a fast-table entry is not (counter, value)");
        return NULL;
    }
    int slot = self->next;
    PyObject *old_key = self->key[slot], *old_entry = self->entry[slot];
    self->next = (slot + 1) % MEMO_SLOTS;
    self->key[slot] = Py_NewRef(key);
    self->entry[slot] = Py_NewRef(entry);
    Py_XDECREF(old_key); /* last: what this may run finds the table and its memo as they are now */
    Py_XDECREF(old_entry);
    return Py_NewRef(entry);
}

static PyObject *
fasttable_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":FastTable", names))
        return NULL;
    FastTable *self = (FastTable *)type->tp_alloc(type, 0);
    if (self != NULL && (self->table = PyDict_New()) == NULL)
        Py_CLEAR(self);
    return (PyObject *)self;
}

static Py_ssize_t
fasttable_length(FastTable *self)
{
    return PyDict_GET_SIZE(self->table);
}

static PyObject *
fasttable_subscript(FastTable *self, PyObject *key)
{
    PyObject *entry = fasttable_entry(self, key);
    if (entry == NULL && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, key);
    return entry;
}

/* Every change forgets the memo once it is made (a key's __eq__, or a value's __del__, run during a change can
 * look a key up and have it remembered). */
static int
fasttable_assign(FastTable *self, PyObject *key, PyObject *entry)
{
    int done = entry == NULL ? PyDict_DelItem(self->table, key) : PyDict_SetItem(self->table, key, entry);
    forget_memo(self);
    return done;
}

static int
fasttable_contains(FastTable *self, PyObject *key)
{
    return PyDict_Contains(self->table, key);
}

static PyObject *
fasttable_get(FastTable *self, PyObject *const *args, Py_ssize_t count)
{
    if (count < 1 || count > 2) {
        PyErr_SetString(PyExc_TypeError, "FastTable.get takes a key and, optionally, a default");
        return NULL;
    }
    PyObject *entry = PyDict_GetItemWithError(self->table, args[0]);
    if (entry == NULL && PyErr_Occurred())
        return NULL;
    return Py_NewRef(entry != NULL ? entry : count == 2 ? args[1] : Py_None);
}

static PyObject *
fasttable_pop(FastTable *self, PyObject *const *args, Py_ssize_t count)
{
    if (count < 1 || count > 2) {
        PyErr_SetString(PyExc_TypeError, "FastTable.pop takes a key and, optionally, a default");
        return NULL;
    }
    PyObject *method = PyObject_GetAttrString(self->table, "pop");
    if (method == NULL)
        return NULL;
    PyObject *popped = PyObject_Vectorcall(method, args, count, NULL);
    Py_DECREF(method);
    forget_memo(self);
    return popped;
}

static PyObject *
fasttable_clear(FastTable *self, PyObject *unused)
{
    PyDict_Clear(self->table);
    forget_memo(self);
    Py_RETURN_NONE;
}

static PyObject *
fasttable_iter(FastTable *self)
{
    return PyObject_GetIter(self->table);
}

static PyObject *
fasttable_repr(FastTable *self)
{
    return PyUnicode_FromFormat("FastTable(%R)", self->table);
}

static int
fasttable_traverse(FastTable *self, visitproc visit, void *arg)
{
    Py_VISIT(self->table);
    for (int slot = 0; slot < MEMO_SLOTS; slot++) {
        Py_VISIT(self->key[slot]);
        Py_VISIT(self->entry[slot]);
    }
    return 0;
}

static int
fasttable_clear_references(FastTable *self)
{
    forget_memo(self);
    Py_CLEAR(self->table);
    return 0;
}

static void
fasttable_dealloc(FastTable *self)
{
    PyObject_GC_UnTrack(self);
    fasttable_clear_references(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef fasttable_methods[] = {
    {"get", (PyCFunction)(void (*)(void))fasttable_get, METH_FASTCALL, NULL},
    {"pop", (PyCFunction)(void (*)(void))fasttable_pop, METH_FASTCALL, NULL},
    {"clear", (PyCFunction)fasttable_clear, METH_NOARGS, NULL},
    {NULL},
};

static PyMappingMethods fasttable_mapping = {
    .mp_length = (lenfunc)fasttable_length,
    .mp_subscript = (binaryfunc)fasttable_subscript,
    .mp_ass_subscript = (objobjargproc)fasttable_assign,
};

static PySequenceMethods fasttable_sequence = {.sq_contains = (objobjproc)fasttable_contains};

static PyTypeObject FastTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mlacheck.capture._hotpath.FastTable",
    .tp_doc = "FastTable(): hotpath_py.FastTable, compiled, with a memo of the keys served last.",
    .tp_basicsize = sizeof(FastTable),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = fasttable_new,
    .tp_traverse = (traverseproc)fasttable_traverse,
    .tp_clear = (inquiry)fasttable_clear_references,
    .tp_dealloc = (destructor)fasttable_dealloc,
    .tp_as_mapping = &fasttable_mapping,
    .tp_as_sequence = &fasttable_sequence,
    .tp_iter = (getiterfunc)fasttable_iter,
    .tp_repr = (reprfunc)fasttable_repr,
    .tp_methods = fasttable_methods,
};

/* -- ObservedCall: a native operation's stand-in, keyed in Python at each call ------------------------------ */

#define PROBES 32 /* the arguments read on the stack (a call that keys more reads them into the heap) */
#define CALL_MEMO 64 /* the keys an observed call remembers by default, each in one of two slots its hash names */
#define READERS 4 /* the argument types whose `shape` and `dtype` getters an observed call keeps */

/* How a type's instances read `shape` and `dtype` where both are getset descriptors found on the type (torch's
 * tensors) and it looks attributes up as object does: the getter PyObject_GetAttr would find, called straight (a
 * getset is a data descriptor: an instance's dict never hides it). Valid while the type's version tag stands: any
 * change to the type or to a base resets it. */
typedef struct {
    PyTypeObject *type;
    unsigned int version;
    PyObject *shape, *dtype; /* the types' getset descriptors */
} Reader;

typedef struct {
    PyObject_HEAD
    PyObject *operation, *head, *state, *kinds, *fast, *ticks, *flush, *slow;
    Py_ssize_t fields;     /* how many arguments the key holds */
    Py_ssize_t *positions; /* where each is among the call's positional arguments */
    int turn;                            /* which of its two slots a key served takes where both are held */
    Py_ssize_t memo;                     /* how many keys served lately it remembers (its slots) */
    PyObject **key;                      /* in each slot, a key served lately */
    uint64_t **signature;                /* its signature where the call was signed: its length, then its words */
    PyObject **entry;                    /* its (counter, value) */
    unsigned long long *seen;            /* the fast table's changes when it was served */
    int next_reader;                     /* the reader slot the next type takes */
    Reader readers[READERS];             /* how the argument types seen lately read `shape` and `dtype` */
} ObservedCall;

/* One argument as the key holds it: `value` itself (borrowed), or where its type's kind is a marker and its shape is
 * not None, (kind, dtype, shape, layout) (new references; a tensor read below Python has its shape and layout in
 * `fields`, `native` set, and shape and layout NULL). */
typedef struct {
    PyObject *value, *kind, *shape, *dtype, *layout;
    int native;
    TensorFields fields;
} Probe;

static void
release_probes(Probe *probes, Py_ssize_t count)
{
    for (Py_ssize_t at = 0; at < count; at++) {
        Py_XDECREF(probes[at].kind);
        Py_XDECREF(probes[at].shape);
        Py_XDECREF(probes[at].dtype);
        Py_XDECREF(probes[at].layout);
    }
}

/* The getset descriptor a type's instances find for `name` (borrowed), NULL where it has another kind of attribute
 * (no error set). */
static PyObject *
getset_of(PyTypeObject *type, PyObject *name)
{
    PyObject *found = _PyType_Lookup(type, name);
    if (found == NULL || !Py_IS_TYPE(found, &PyGetSetDescr_Type) ||
        ((PyGetSetDescrObject *)found)->d_getset->get == NULL ||
        !PyType_IsSubtype(type, PyDescr_TYPE(found)))
        return NULL;
    return found;
}

/* The same reader, holding references of its own. */
static Reader
held(Reader reader)
{
    Py_XINCREF(reader.type);
    Py_XINCREF(reader.shape);
    Py_XINCREF(reader.dtype);
    return reader;
}

static void
release_reader(Reader reader)
{
    Py_XDECREF(reader.type);
    Py_XDECREF(reader.shape);
    Py_XDECREF(reader.dtype);
}

/* The reader of a type (a copy that holds its own references), its descriptors NULL where its instances are read by
 * PyObject_GetAttr. A type not among the readers is looked up and takes the next slot. */
static Reader
reader_of(ObservedCall *self, PyTypeObject *type)
{
    for (int slot = 0; slot < READERS; slot++) {
        Reader *known = &self->readers[slot];
        if (known->type == type && type_unchanged(type, known->version))
            return held(*known);
    }
    PyObject *shape = NULL, *dtype = NULL;
    if (type->tp_getattro == PyObject_GenericGetAttr) {
        shape = getset_of(type, str_shape);
        dtype = getset_of(type, str_dtype);
    }
    if (shape == NULL || dtype == NULL || !type_unchanged(type, type->tp_version_tag))
        return held((Reader){type, 0, NULL, NULL});
    Reader old = self->readers[self->next_reader], learned = held((Reader){type, type->tp_version_tag, shape, dtype});
    self->readers[self->next_reader] = held(learned);
    self->next_reader = (self->next_reader + 1) % READERS;
    release_reader(old); /* last: what this may run finds the readers as they are now */
    return learned;
}

/* `value.<name>` (a new reference): through the reader's descriptor while the value's type is the reader's and
 * unchanged (a getter may run code that changes either), else PyObject_GetAttr. */
static PyObject *
read_attribute(Reader *reader, PyObject *descriptor, PyObject *value, PyObject *name)
{
    if (descriptor == NULL || Py_TYPE(value) != reader->type || !type_unchanged(reader->type, reader->version))
        return PyObject_GetAttr(value, name);
    PyGetSetDef *getset = ((PyGetSetDescrObject *)descriptor)->d_getset;
    return getset->get(value, getset->closure);
}

/* A field that keys as itself, equal and hashed without running Python code. */
static int
scalar(PyObject *value)
{
    PyTypeObject *type = Py_TYPE(value);
    return value == Py_None || type == &PyLong_Type || type == &PyBool_Type || type == &PyFloat_Type ||
           type == &PyUnicode_Type;
}

/* A list keys as the tuple of its items (as the slow path's key holds it: a library may build a new list at each
 * call), where every item is a scalar; else the slow path keys it. The tuple is a snapshot taken at this call, held
 * by the probe (released with it). */
static int
read_list(PyObject *value, Probe *probe)
{
    PyObject *items = PyList_AsTuple(value);
    if (items == NULL)
        return -1;
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(items); at++) {
        if (!scalar(PyTuple_GET_ITEM(items, at))) {
            Py_DECREF(items);
            return 0;
        }
    }
    probe->shape = items;
    probe->value = items;
    return 1;
}

/* A tensor's layout as the key holds it (hotpath_py.layout): where its type has a `stride`, the dimension of stride 1
 * nearest its end (-1: the last), 0 where none is; None where its type has no `stride`. 1 where read (a new
 * reference in *layout), 0 where its strides are not a tuple of ints (the slow path's to read), -1 with an error. */
static int
read_layout(PyObject *value, PyObject **layout)
{
    if (_PyType_Lookup(Py_TYPE(value), str_stride) == NULL) {
        *layout = Py_NewRef(Py_None);
        return 1;
    }
    PyObject *call[] = {value};
    PyObject *strides = PyObject_VectorcallMethod(str_stride, call, 1, NULL);
    if (strides == NULL)
        return -1;
    PyObject *found = NULL; /* the dimension found (a new reference) */
    int read = PyTuple_CheckExact(strides);
    for (Py_ssize_t at = read ? PyTuple_GET_SIZE(strides) - 1 : -1; at >= 0; at--) {
        PyObject *item = PyTuple_GET_ITEM(strides, at);
        int overflow = 0;
        if (!PyLong_CheckExact(item)) {
            read = 0;
            break;
        }
        if (PyLong_AsLongAndOverflow(item, &overflow) == 1 && !overflow) {
            found = PyLong_FromSsize_t(at - PyTuple_GET_SIZE(strides));
            read = found != NULL ? 1 : -1;
            break;
        }
    }
    Py_DECREF(strides);
    if (read == 1 && found == NULL && (found = PyLong_FromLong(0)) == NULL)
        read = -1;
    if (read == 1)
        *layout = found;
    return read;
}

/* Read an argument for the key: a scalar is itself, a list of scalars its tuple; any other value goes by its type's
 * kind: None, itself; a marker, its shape, its dtype then its layout (itself where the shape is None). 1 where read,
 * 0 where its type has no kind or its layout is the slow path's to read, -1 with an error where reading it failed. */
static int
read_probe(ObservedCall *self, PyObject *value, Probe *probe, int *modes)
{
    *probe = (Probe){value, NULL, NULL, NULL, NULL, 0, {NULL, NULL, 0, 0}};
    PyTypeObject *type = Py_TYPE(value);
    if (scalar(value))
        return 1;
    if (type == &PyList_Type)
        return read_list(value, probe);
    PyObject *kind = PyDict_GetItemWithError(self->kinds, (PyObject *)type);
    if (kind == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (kind == Py_None)
        return 1;
    probe->kind = Py_NewRef(kind); /* held before the reads: they may run code that changes kinds */
    int native = tensor_fields_read(value, &probe->fields, modes);
    if (native != 0) {
        probe->native = native > 0;
        probe->dtype = Py_XNewRef(probe->fields.dtype);
        return native;
    }
    Reader reader = reader_of(self, type);
    int read = -1;
    probe->shape = read_attribute(&reader, reader.shape, value, str_shape);
    if (probe->shape == Py_None) {
        Py_CLEAR(probe->kind);
        Py_CLEAR(probe->shape);
        read = 1;
    }
    else if (probe->shape != NULL) {
        probe->dtype = read_attribute(&reader, reader.dtype, value, str_dtype);
        read = probe->dtype != NULL ? read_layout(value, &probe->layout) : -1;
    }
    release_reader(reader);
    return read;
}

/* The shape a tensor read below Python has, as a tuple (equal to its torch.Size, and hashed alike). */
static PyObject *
native_shape(TensorFields *fields)
{
    PyObject *shape = PyTuple_New(fields->rank);
    for (int64_t at = 0; shape != NULL && at < fields->rank; at++) {
        PyObject *size = PyLong_FromLongLong(fields->sizes[at]);
        if (size == NULL)
            Py_CLEAR(shape);
        else
            PyTuple_SET_ITEM(shape, at, size);
    }
    return shape;
}

/* The field a probe makes (a new reference). */
static PyObject *
probe_field(Probe *probe)
{
    if (probe->kind == NULL)
        return Py_NewRef(probe->value);
    if (!probe->native)
        return PyTuple_Pack(4, probe->kind, probe->dtype, probe->shape, probe->layout);
    PyObject *shape = native_shape(&probe->fields), *layout = shape ? PyLong_FromLong(probe->fields.layout) : NULL;
    PyObject *field = layout ? PyTuple_Pack(4, probe->kind, probe->dtype, shape, layout) : NULL;
    Py_XDECREF(shape);
    Py_XDECREF(layout);
    return field;
}

/* The same object, or exact ints of one value (int's own comparison, called straight: two ints need neither the
 * generic comparison's recursion guard nor its reflected operation). */
static int
same_int(PyObject *x, PyObject *y)
{
    if (x == y)
        return 1;
    if (!PyLong_CheckExact(x) || !PyLong_CheckExact(y))
        return 0;
    PyObject *equal = PyLong_Type.tp_richcompare(x, y, Py_EQ); /* True or False: two ints compare without error */
    int same = equal == Py_True;
    Py_XDECREF(equal);
    return same;
}

/* A tuple that keeps tuple's equality and hash (torch.Size does). */
static int
tuple_like(PyObject *value)
{
    PyTypeObject *type = Py_TYPE(value);
    return PyTuple_Check(value) && type->tp_richcompare == PyTuple_Type.tp_richcompare &&
           type->tp_hash == PyTuple_Type.tp_hash;
}

/* Whether a field's shape (`known`) holds exactly a tensor's sizes, read below Python. */
static int
same_sizes(PyObject *known, const TensorFields *fields)
{
    if (!tuple_like(known) || PyTuple_GET_SIZE(known) != fields->rank)
        return 0;
    for (int64_t at = 0; at < fields->rank; at++) {
        PyObject *size = PyTuple_GET_ITEM(known, at);
        int overflow;
        if (!PyLong_CheckExact(size) || PyLong_AsLongLongAndOverflow(size, &overflow) != fields->sizes[at] || overflow)
            return 0;
    }
    return 1;
}

/* Equal as a dict finds a key, decided without running any Python code: the same object, exact ints of one value,
 * or tuples (a subclass that keeps tuple's equality and hash: torch.Size) of such items. */
static int
same_field(PyObject *known, PyObject *now)
{
    if (same_int(known, now))
        return 1;
    if (!tuple_like(known) || !tuple_like(now) || PyTuple_GET_SIZE(known) != PyTuple_GET_SIZE(now))
        return 0;
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(now); at++) {
        PyObject *x = PyTuple_GET_ITEM(known, at), *y = PyTuple_GET_ITEM(now, at);
        if (!same_int(x, y))
            return 0;
    }
    return 1;
}

/* Whether a key's field is what a probe read: compared as same_field compares, without building either. */
static int
same_probe(PyObject *known, Probe *probe)
{
    if (probe->kind == NULL)
        return same_field(known, probe->value);
    if (!PyTuple_CheckExact(known) || PyTuple_GET_SIZE(known) != 4 || PyTuple_GET_ITEM(known, 0) != probe->kind ||
        PyTuple_GET_ITEM(known, 1) != probe->dtype)
        return 0;
    if (!probe->native)
        return same_field(PyTuple_GET_ITEM(known, 2), probe->shape) &&
               same_int(PyTuple_GET_ITEM(known, 3), probe->layout);
    PyObject *layout = PyTuple_GET_ITEM(known, 3);
    int overflow;
    return same_sizes(PyTuple_GET_ITEM(known, 2), &probe->fields) && PyLong_CheckExact(layout) &&
           PyLong_AsLongAndOverflow(layout, &overflow) == probe->fields.layout && !overflow;
}

#define SIGNATURE 192 /* the most words a signed call has (one with more is read into probes) */

typedef struct {
    Py_ssize_t length; /* words written */
    uint64_t words[SIGNATURE];
} Signature;

/* -- the memo's hash: fields that compare the same hash the same, however they were read ------------------------ */

static Py_uhash_t
mix(Py_uhash_t hash, Py_uhash_t part)
{
    return (hash ^ part) * 1000003u;
}

/* An exact int by its value, anything else by its identity (as same_int compares them). */
static Py_uhash_t
number_hash(PyObject *value)
{
    if (PyLong_CheckExact(value)) {
        int overflow;
        long number = PyLong_AsLongAndOverflow(value, &overflow);
        if (!overflow)
            return (Py_uhash_t)number;
    }
    return (Py_uhash_t)(uintptr_t)value;
}

/* A field as same_field compares it: a tuple by its items, else as number_hash. */
static Py_uhash_t
field_hash(PyObject *value)
{
    if (!tuple_like(value))
        return number_hash(value);
    Py_uhash_t hash = (Py_uhash_t)PyTuple_GET_SIZE(value);
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(value); at++)
        hash = mix(hash, number_hash(PyTuple_GET_ITEM(value, at)));
    return hash;
}

/* The memo's hash of a call's setting and probes. */
static Py_uhash_t
memo_hash(ObservedCall *self, PyObject *setting, Probe *probes)
{
    Py_uhash_t hash = (Py_uhash_t)(uintptr_t)setting;
    for (Py_ssize_t field = 0; field < self->fields; field++) {
        Probe *probe = &probes[field];
        if (probe->kind == NULL) {
            hash = mix(hash, field_hash(probe->value));
            continue;
        }
        hash = mix(hash, (Py_uhash_t)(uintptr_t)probe->dtype);
        if (!probe->native) {
            hash = mix(mix(hash, field_hash(probe->shape)), number_hash(probe->layout));
            continue;
        }
        Py_uhash_t shape = (Py_uhash_t)probe->fields.rank;
        for (int64_t at = 0; at < probe->fields.rank; at++)
            shape = mix(shape, (Py_uhash_t)(long)probe->fields.sizes[at]);
        hash = mix(mix(hash, shape), (Py_uhash_t)probe->fields.layout);
    }
    return hash ^ (hash >> 17);
}

/* The two memo slots a hash names (a key served lately is in one of them). */
static void
memo_slots(ObservedCall *self, Py_uhash_t hash, Py_ssize_t slots[2])
{
    Py_uhash_t count = (Py_uhash_t)self->memo;
    slots[0] = (Py_ssize_t)(hash % count);
    slots[1] = (Py_ssize_t)((hash / count + 1 + (Py_uhash_t)slots[0]) % count);
}

/* Whether a memo slot holds a key served since the fast table last changed. */
static int
memo_valid(ObservedCall *self, Py_ssize_t slot)
{
    return self->key[slot] != NULL && self->seen[slot] == ((FastTable *)self->fast)->changes;
}

/* The (counter, value) of a key served lately whose fields are the probes' (a new reference), or NULL: compared
 * field by field in the two slots their hash names, neither built nor hashed as a whole; forgotten once the fast
 * table changed. */
static PyObject *
memo_entry(ObservedCall *self, Py_uhash_t hash, PyObject *setting, Probe *probes)
{
    Py_ssize_t slots[2];
    memo_slots(self, hash, slots);
    for (int choice = 0; choice < 2; choice++) {
        Py_ssize_t slot = slots[choice];
        PyObject *key = self->key[slot];
        if (!memo_valid(self, slot) || PyTuple_GET_ITEM(key, 1) != setting)
            continue;
        Py_ssize_t field = 0;
        while (field < self->fields && same_probe(PyTuple_GET_ITEM(key, 2 + field), &probes[field]))
            field++;
        if (field == self->fields)
            return Py_NewRef(self->entry[slot]);
    }
    return NULL;
}

/* -- a call's signature: its key as one run of words, read straight from the arguments -------------------------
 *
 * Where every field a call keys is a scalar (an int by its value; None, a bool, a float or a str by its identity), a
 * list or tuple of those, or an exact torch tensor read below Python (_tensor_fields.c) whose kind is a marker, the
 * call is written as one run of tagged words: the setting, then each field (a tensor as its kind, dtype, rank, sizes
 * and layout), read from the arguments with no probe, no Python object made and one lookup of the kinds a call (for
 * the tensors' type), not one a field. Equal signatures mean equal keys: the tags and a tensor's rank make the run
 * parse one way only; an object written by its identity is held by the key remembered with the signature (its address
 * is not reused while remembered), and equal by identity is equal as a dict finds a key. Two calls of equal keys may
 * still differ in signature (equal strs that are two objects): then the key is built and looked up in the fast table,
 * as at a first call. The memo compares a signed call with the calls served lately as one run each. Any other call (a
 * list of other things, a tensor read through Python, a torch function mode active) is read into probes and compared
 * object by object, as before. A DeepGEMM hit: about 2 650 instructions in the observed call, was 4 300 (callgrind). */

enum { WORD_NUMBER = 1, WORD_OBJECT, WORD_ITEMS, WORD_TENSOR };

/* One scalar item: an exact int that fits a word by its value, None, a bool, a float or a str by its identity; 0
 * where it is none of these (no error: the call is not signed). */
static inline int
sign_scalar(uint64_t *words, Py_ssize_t *length, PyObject *value)
{
    PyTypeObject *type = Py_TYPE(value);
    if (type == &PyLong_Type) {
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (!overflow) {
            words[(*length)++] = WORD_NUMBER;
            words[(*length)++] = (uint64_t)number;
            return 1;
        }
    }
    else if (!(value == Py_None || type == &PyBool_Type || type == &PyFloat_Type || type == &PyUnicode_Type))
        return 0;
    words[(*length)++] = WORD_OBJECT;
    words[(*length)++] = (uint64_t)(uintptr_t)value;
    return 1;
}

/* A list or tuple whose items are all scalars: its length, then each item (its key field is the tuple of them). */
static int
sign_items(uint64_t *words, Py_ssize_t *length, PyObject *const *items, Py_ssize_t count)
{
    if (*length + 2 + 2 * count > SIGNATURE)
        return 0;
    words[(*length)++] = WORD_ITEMS;
    words[(*length)++] = (uint64_t)count;
    for (Py_ssize_t at = 0; at < count; at++)
        if (!sign_scalar(words, length, items[at]))
            return 0;
    return 1;
}

/* Sign a call (its setting, then each field the key holds): 1 where signed, 0 where a field is not signable (no
 * error: the probes read it), -1 with an error. No Python code runs here. */
static int
sign_call(ObservedCall *self, PyObject *setting, PyObject *const *args, Py_ssize_t count, Signature *signature)
{
    uint64_t *words = signature->words;
    Py_ssize_t length = 0;
    PyTypeObject *looked = NULL; /* the type whose kind this call looked up last, and that kind (borrowed) */
    PyObject *kind = NULL;
    int modes = -1; /* whether a torch function mode is active: asked once, where a tensor is read */
    words[length++] = (uint64_t)(uintptr_t)setting;
    for (Py_ssize_t field = 0; field < self->fields; field++) {
        Py_ssize_t at = self->positions[field];
        PyObject *value = at < count ? args[at] : Py_None;
        PyTypeObject *type = Py_TYPE(value);
        if (length + 2 > SIGNATURE)
            return 0;
        if (sign_scalar(words, &length, value))
            continue;
        if (type == &PyList_Type) {
            if (!sign_items(words, &length, ((PyListObject *)value)->ob_item, PyList_GET_SIZE(value)))
                return 0;
            continue;
        }
        if (type != looked) {
            kind = PyDict_GetItemWithError(self->kinds, (PyObject *)type);
            if (kind == NULL)
                return PyErr_Occurred() ? -1 : 0;
            looked = type;
        }
        if (kind == Py_None) { /* keyed as itself: a tuple of scalars by its items, anything else by its identity */
            if (type == &PyTuple_Type) {
                if (!sign_items(words, &length, ((PyTupleObject *)value)->ob_item, PyTuple_GET_SIZE(value)))
                    return 0;
                continue;
            }
            words[length++] = WORD_OBJECT;
            words[length++] = (uint64_t)(uintptr_t)value;
            continue;
        }
        TensorFields fields;
        int read = tensor_fields_read(value, &fields, &modes);
        if (read <= 0)
            return read;
        if (length + 5 + fields.rank > SIGNATURE)
            return 0;
        words[length++] = WORD_TENSOR;
        words[length++] = (uint64_t)(uintptr_t)kind;
        words[length++] = (uint64_t)(uintptr_t)fields.dtype;
        words[length++] = (uint64_t)fields.rank;
        for (int64_t dimension = 0; dimension < fields.rank; dimension++)
            words[length++] = (uint64_t)fields.sizes[dimension];
        words[length++] = (uint64_t)(int64_t)fields.layout;
    }
    signature->length = length;
    return 1;
}

/* A signature's hash, over four lanes (one chain of multiplies over every word is the compare's cost again). */
static Py_uhash_t
signature_hash(const Signature *signature)
{
    uint64_t lanes[4] = {(uint64_t)signature->length, 0x9E3779B97F4A7C15u, 0xC2B2AE3D27D4EB4Fu, 0x165667B19E3779F9u};
    Py_ssize_t at = 0;
    for (; at + 4 <= signature->length; at += 4)
        for (int lane = 0; lane < 4; lane++)
            lanes[lane] = (lanes[lane] ^ signature->words[at + lane]) * 0x100000001B3u;
    for (; at < signature->length; at++)
        lanes[0] = (lanes[0] ^ signature->words[at]) * 0x100000001B3u;
    uint64_t hash = lanes[0] ^ (lanes[1] * 3) ^ (lanes[2] * 5) ^ (lanes[3] * 7);
    return (Py_uhash_t)(hash ^ (hash >> 29) ^ (hash >> 47));
}

/* The (counter, value) of a key served lately by a call of this signature (a new reference), or NULL: the two slots
 * its hash names, their signatures compared as one run of words each; forgotten once the fast table changed. */
static PyObject *
signed_entry(ObservedCall *self, Py_uhash_t hash, const Signature *signature)
{
    Py_ssize_t slots[2];
    memo_slots(self, hash, slots);
    for (int choice = 0; choice < 2; choice++) {
        Py_ssize_t slot = slots[choice];
        const uint64_t *known = self->signature[slot];
        if (known != NULL && known[0] == (uint64_t)signature->length && memo_valid(self, slot) &&
            memcmp(known + 1, signature->words, (size_t)signature->length * sizeof(uint64_t)) == 0)
            return Py_NewRef(self->entry[slot]);
    }
    return NULL;
}

/* Remember a key served in one of its two slots: a free one, else each in turn; with the signature of the call that
 * served it where it was signed (then `hash` is the signature's), else with none (the object memo's hash). */
static void
remember(ObservedCall *self, Py_uhash_t hash, PyObject *key, PyObject *entry, const Signature *signature)
{
    Py_ssize_t slots[2];
    memo_slots(self, hash, slots);
    Py_ssize_t slot = !memo_valid(self, slots[0])   ? slots[0]
                      : !memo_valid(self, slots[1]) ? slots[1]
                                                    : slots[self->turn];
    self->turn ^= 1;
    uint64_t *known = self->signature[slot];
    Py_ssize_t length = signature != NULL ? signature->length : 0;
    if (length > 0 && (known == NULL || (Py_ssize_t)known[0] < length)) {
        uint64_t *grown = PyMem_Realloc(known, (size_t)(SIGNATURE + 1) * sizeof(uint64_t));
        if (grown == NULL)
            length = 0; /* remembered without its signature: a signed call finds it again in the fast table */
        else
            self->signature[slot] = known = grown;
    }
    if (known != NULL) {
        known[0] = (uint64_t)length;
        if (length > 0)
            memcpy(known + 1, signature->words, (size_t)length * sizeof(uint64_t));
    }
    PyObject *old_key = self->key[slot], *old_entry = self->entry[slot];
    self->key[slot] = Py_NewRef(key);
    self->entry[slot] = Py_NewRef(entry);
    self->seen[slot] = ((FastTable *)self->fast)->changes;
    Py_XDECREF(old_key); /* last: what this may run finds the memo as it is now */
    Py_XDECREF(old_entry);
}

/* The slow path: `slow(key, args, kwargs, frame)`, key None where the hot path could not build it. */
static PyObject *
observed_slow(ObservedCall *self, PyObject *key, PyObject *args, PyObject *kwargs)
{
    PyObject *keywords = kwargs != NULL ? Py_NewRef(kwargs) : PyDict_New();
    if (keywords == NULL)
        return NULL;
    PyObject *call[] = {key != NULL ? key : Py_None, args, keywords, caller_frame()};
    PyObject *result = PyObject_Vectorcall(self->slow, call, 4, NULL);
    Py_DECREF(keywords);
    return result;
}

/* A call's (counter, value) in the fast table (a new reference), NULL where it has none; its key, where one could
 * be built, in *made (a new reference). Errors, only an Exception: the slow path's to key the call. */
static PyObject *
observed_entry(ObservedCall *self, PyObject *const *args, Py_ssize_t count, Probe *probes, PyObject **made)
{
    if (PyList_GET_SIZE(self->state) < 1) {
        PyErr_SetString(PyExc_IndexError, "mlacheck: an observed call's state is empty");
        return NULL;
    }
    PyObject *setting = Py_NewRef(PyList_GET_ITEM(self->state, 0)), *entry = NULL, *key = NULL;
    Py_ssize_t read = 0;
    int modes = -1; /* whether a torch function mode is active: asked once, where a tensor is read */
    Py_uhash_t hash = 0;
    Signature signature;
    int signed_call = sign_call(self, setting, args, count, &signature);
    if (signed_call < 0)
        goto done;
    if (signed_call) {
        hash = signature_hash(&signature);
        if ((entry = signed_entry(self, hash, &signature)) != NULL)
            goto done;
    }
    for (; read < self->fields; read++) {
        Py_ssize_t at = self->positions[read];
        if (read_probe(self, at < count ? args[at] : Py_None, &probes[read], &modes) <= 0) {
            read++; /* what it holds is released with the rest */
            goto done;
        }
    }
    if (!signed_call) {
        hash = memo_hash(self, setting, probes);
        entry = memo_entry(self, hash, setting, probes);
        if (entry != NULL)
            goto done;
    }
    if ((key = PyTuple_New(2 + self->fields)) == NULL)
        goto done;
    PyTuple_SET_ITEM(key, 0, Py_NewRef(self->head));
    PyTuple_SET_ITEM(key, 1, Py_NewRef(setting));
    for (Py_ssize_t field = 0; field < self->fields; field++) {
        PyObject *value = probe_field(&probes[field]);
        if (value == NULL) {
            Py_CLEAR(key);
            goto done;
        }
        PyTuple_SET_ITEM(key, 2 + field, value);
    }
    entry = fasttable_entry((FastTable *)self->fast, key);
    if (entry != NULL)
        remember(self, hash, key, entry, signed_call ? &signature : NULL);
done:
    release_probes(probes, read);
    Py_DECREF(setting);
    *made = key;
    return entry;
}

/* A call: its tuple goes on to the operation as it came (an operation that takes a tuple, as torch's operators and
 * pybind11's functions do, gets the same object; a vectorcall would be packed again). */
static PyObject *
observed_call(ObservedCall *self, PyObject *args, PyObject *kwargs)
{
    PyObject *key = NULL;
    if (kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0) {
        Probe stack[PROBES], *probes = self->fields <= PROBES ? stack : PyMem_New(Probe, self->fields);
        if (probes == NULL)
            return PyErr_NoMemory();
        PyObject *entry = observed_entry(self, ((PyTupleObject *)args)->ob_item, PyTuple_GET_SIZE(args), probes, &key);
        if (probes != stack)
            PyMem_Free(probes);
        if (entry != NULL) {
            Py_XDECREF(key);
            int counted = count_dispatch(PyTuple_GET_ITEM(entry, 0), self->ticks, self->flush, NULL);
            Py_DECREF(entry);
            return counted < 0 ? NULL : PyObject_Call(self->operation, args, NULL);
        }
        if (PyErr_Occurred()) { /* an argument that cannot be read, a key that cannot be hashed: the slow path's */
            Py_CLEAR(key);
            if (!PyErr_ExceptionMatches(PyExc_Exception))
                return NULL;
            PyErr_Clear();
        }
    }
    PyObject *result = observed_slow(self, key, args, kwargs);
    Py_XDECREF(key);
    return result;
}

static void
forget_served(ObservedCall *self)
{
    for (Py_ssize_t slot = 0; self->key != NULL && slot < self->memo; slot++) {
        Py_CLEAR(self->key[slot]);
        Py_CLEAR(self->entry[slot]);
    }
    for (int slot = 0; slot < READERS; slot++) {
        Py_CLEAR(self->readers[slot].type);
        Py_CLEAR(self->readers[slot].shape);
        Py_CLEAR(self->readers[slot].dtype);
    }
}

static PyObject *
observed_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"operation", "head", "state", "positions", "kinds", "fast", "ticks", "flush", "slow",
                            "memo", NULL};
    PyObject *operation, *head, *state, *positions, *kinds, *fast, *ticks, *flush, *slow;
    Py_ssize_t memo = CALL_MEMO;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!OO!O!OOO|n:ObservedCall", names, &operation, &head,
                                     &PyList_Type, &state, &positions, &PyDict_Type, &kinds, &FastTableType, &fast,
                                     &ticks, &flush, &slow, &memo))
        return NULL;
    if (check_counter(ticks, "ticks") < 0)
        return NULL;
    PyObject *sequence = PySequence_Fast(positions, "positions must be a sequence of argument positions");
    if (sequence == NULL)
        return NULL;
    Py_ssize_t fields = PySequence_Fast_GET_SIZE(sequence);
    if (memo < 1) {
        Py_DECREF(sequence);
        PyErr_SetString(PyExc_ValueError, "an observed call remembers at least one key (memo >= 1)");
        return NULL;
    }
    ObservedCall *self = (ObservedCall *)type->tp_alloc(type, 0);
    if (self != NULL && ((self->positions = PyMem_Calloc(fields + 1, sizeof(Py_ssize_t))) == NULL ||
                         (self->key = PyMem_Calloc(memo, sizeof(PyObject *))) == NULL ||
                         (self->signature = PyMem_Calloc(memo, sizeof(uint64_t *))) == NULL ||
                         (self->entry = PyMem_Calloc(memo, sizeof(PyObject *))) == NULL ||
                         (self->seen = PyMem_Calloc(memo, sizeof(unsigned long long))) == NULL))
        PyErr_NoMemory();
    if (self != NULL)
        self->memo = memo;
    for (Py_ssize_t field = 0; !PyErr_Occurred() && field < fields; field++) {
        Py_ssize_t at = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(sequence, field), PyExc_OverflowError);
        if (at < 0 && !PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "argument positions cannot be negative");
        self->positions[field] = at;
    }
    Py_DECREF(sequence);
    if (PyErr_Occurred()) {
        Py_XDECREF(self);
        return NULL;
    }
    self->fields = fields;
    self->operation = Py_NewRef(operation);
    self->head = Py_NewRef(head);
    self->state = Py_NewRef(state);
    self->kinds = Py_NewRef(kinds);
    self->fast = Py_NewRef(fast);
    self->ticks = Py_NewRef(ticks);
    self->flush = Py_NewRef(flush);
    self->slow = Py_NewRef(slow);
    return (PyObject *)self;
}

static int
observed_traverse(ObservedCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->operation);
    Py_VISIT(self->head);
    Py_VISIT(self->state);
    Py_VISIT(self->kinds);
    Py_VISIT(self->fast);
    Py_VISIT(self->ticks);
    Py_VISIT(self->flush);
    Py_VISIT(self->slow);
    for (Py_ssize_t slot = 0; self->key != NULL && slot < self->memo; slot++) {
        Py_VISIT(self->key[slot]);
        Py_VISIT(self->entry[slot]);
    }
    for (int slot = 0; slot < READERS; slot++) {
        Py_VISIT(self->readers[slot].type);
        Py_VISIT(self->readers[slot].shape);
        Py_VISIT(self->readers[slot].dtype);
    }
    return 0;
}

static int
observed_clear(ObservedCall *self)
{
    Py_CLEAR(self->operation);
    Py_CLEAR(self->head);
    Py_CLEAR(self->state);
    Py_CLEAR(self->kinds);
    Py_CLEAR(self->fast);
    Py_CLEAR(self->ticks);
    Py_CLEAR(self->flush);
    Py_CLEAR(self->slow);
    forget_served(self);
    return 0;
}

static void
observed_dealloc(ObservedCall *self)
{
    PyObject_GC_UnTrack(self);
    observed_clear(self);
    PyMem_Free(self->positions);
    for (Py_ssize_t slot = 0; self->signature != NULL && slot < self->memo; slot++)
        PyMem_Free(self->signature[slot]);
    PyMem_Free(self->signature);
    PyMem_Free(self->key);
    PyMem_Free(self->entry);
    PyMem_Free(self->seen);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
observed_repr(ObservedCall *self)
{
    return PyUnicode_FromFormat("<mlacheck observed call of %R>", self->operation);
}

static PyObject *
observed_getattro(ObservedCall *self, PyObject *name)
{
    return stand_in_attribute((PyObject *)self, name, self->operation);
}

static PyTypeObject ObservedCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mlacheck.capture._hotpath.ObservedCall",
    .tp_doc = "ObservedCall(operation, head, state, positions, kinds, fast, ticks, flush, slow, memo=64): "
              "hotpath_py.observed_call, compiled, remembering `memo` keys served lately.",
    .tp_basicsize = sizeof(ObservedCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = observed_new,
    .tp_traverse = (traverseproc)observed_traverse,
    .tp_clear = (inquiry)observed_clear,
    .tp_dealloc = (destructor)observed_dealloc,
    .tp_call = (ternaryfunc)observed_call,
    .tp_repr = (reprfunc)observed_repr,
    .tp_getattro = (getattrofunc)observed_getattro,
};

/* -- GetitemDict, ContainsDict, GetDict: a dict family's lookup -------------------------------------------- */

typedef struct {
    PyDictObject dict;
    PyObject *capture, *fast, *ticks;
} HotDict;

/* The fast table's entry for a key (a new reference), NULL where it has none or on an error. */
static PyObject *
fast_entry(HotDict *self, PyObject *key)
{
    if (self->fast == NULL || !Py_IS_TYPE(self->fast, &FastTableType))
        return NULL;
    return fasttable_entry((FastTable *)self->fast, key);
}

/* The slow path: the Python class's `_missed(key, frame)`. */
static PyObject *
missed(HotDict *self, PyObject *key)
{
    return PyObject_CallMethodObjArgs((PyObject *)self, str_missed, key, caller_frame(), NULL);
}

static PyObject *
getitem_subscript(HotDict *self, PyObject *key)
{
    PyObject *entry = fast_entry(self, key);
    if (entry == NULL)
        return PyErr_Occurred() ? NULL : missed(self, key);
    PyObject *value = NULL;
    if (count_dispatch(PyTuple_GET_ITEM(entry, 0), self->ticks, self->capture, str_maybe_flush) == 0)
        value = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
    Py_DECREF(entry);
    return value;
}

static int
contains_lookup(HotDict *self, PyObject *key)
{
    PyObject *entry = fast_entry(self, key);
    if (entry != NULL) {
        int counted = count_dispatch(PyTuple_GET_ITEM(entry, 0), self->ticks, self->capture, str_maybe_flush);
        Py_DECREF(entry);
        return counted < 0 ? -1 : 1;
    }
    if (PyErr_Occurred())
        return -1;
    PyObject *found = missed(self, key);
    if (found == NULL)
        return -1;
    int truth = PyObject_IsTrue(found);
    Py_DECREF(found);
    return truth;
}

/* GetDict's `get(key, default=None)`: a lookup whose caller spells it `cache.get(key, None)` (Triton's
 * JITFunction.run). A key the fast table misses goes to `_missed(key, frame)`; None from it is a miss. */
static PyObject *
get_lookup(HotDict *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "get expected 1 or 2 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *key = args[0], *fallback = nargs > 1 ? args[1] : Py_None;
    PyObject *entry = fast_entry(self, key);
    if (entry == NULL) {
        if (PyErr_Occurred())
            return NULL;
        PyObject *found = missed(self, key);
        if (found != Py_None)
            return found;
        Py_DECREF(found);
        return Py_NewRef(fallback);
    }
    PyObject *value = NULL;
    if (count_dispatch(PyTuple_GET_ITEM(entry, 0), self->ticks, self->capture, str_maybe_flush) == 0)
        value = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
    Py_DECREF(entry);
    return value;
}

static int
hotdict_traverse(HotDict *self, visitproc visit, void *arg)
{
    Py_VISIT(self->capture);
    Py_VISIT(self->fast);
    Py_VISIT(self->ticks);
    return PyDict_Type.tp_traverse((PyObject *)self, visit, arg);
}

static int
hotdict_clear(HotDict *self)
{
    Py_CLEAR(self->capture);
    Py_CLEAR(self->fast);
    Py_CLEAR(self->ticks);
    return PyDict_Type.tp_clear((PyObject *)self);
}

static void
hotdict_dealloc(HotDict *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->capture);
    Py_CLEAR(self->fast);
    Py_CLEAR(self->ticks);
    PyDict_Type.tp_dealloc((PyObject *)self);
}

static PyMemberDef hotdict_members[] = {
    {"_capture", T_OBJECT_EX, offsetof(HotDict, capture), 0, "the family's capture"},
    {"_fast", T_OBJECT_EX, offsetof(HotDict, fast), 0, "the capture's table of variants seen in serving"},
    {"_ticks", T_OBJECT_EX, offsetof(HotDict, ticks), 0, "the capture's ticks"},
    {NULL},
};

static PyMappingMethods getitem_mapping = {.mp_subscript = (binaryfunc)getitem_subscript};
static PySequenceMethods contains_sequence = {.sq_contains = (objobjproc)contains_lookup};

#define HOTDICT_TYPE(type_name, doc)                                                                   \
    PyVarObject_HEAD_INIT(NULL, 0)                                                                      \
    .tp_name = "mlacheck.capture._hotpath." type_name, .tp_doc = doc, .tp_basicsize = sizeof(HotDict), \
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,                          \
    .tp_traverse = (traverseproc)hotdict_traverse, .tp_clear = (inquiry)hotdict_clear,                  \
    .tp_dealloc = (destructor)hotdict_dealloc, .tp_members = hotdict_members

static PyTypeObject GetitemDictType = {
    HOTDICT_TYPE("GetitemDict", "hotpath_py.GetitemDict, compiled."),
    .tp_as_mapping = &getitem_mapping,
};

static PyTypeObject ContainsDictType = {
    HOTDICT_TYPE("ContainsDict", "hotpath_py.ContainsDict, compiled."),
    .tp_as_sequence = &contains_sequence,
};

static PyMethodDef get_methods[] = {
    {"get", (PyCFunction)(void (*)(void))get_lookup, METH_FASTCALL, "the lookup: served from _fast, else _missed"},
    {NULL},
};

static PyTypeObject GetDictType = {
    HOTDICT_TYPE("GetDict", "hotpath_py.GetDict, compiled."),
    .tp_methods = get_methods,
};

/* -- the module --------------------------------------------------------------------------------------------- */

static int
add_type(PyObject *module, PyTypeObject *type, PyTypeObject *base)
{
    type->tp_base = base;
    if (PyType_Ready(type) < 0)
        return -1;
    Py_INCREF(type);
    if (PyModule_AddObject(module, strrchr(type->tp_name, '.') + 1, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

static PyMethodDef hotpath_functions[] = {
    {"read_tensors_natively", (PyCFunction)(void (*)(void))tensor_fields_enable, METH_FASTCALL,
     "read_tensors_natively(tensor_types, library, probes, mode_enabled): whether observed calls now read exact "
     "tensors' fields below Python (_tensor_fields.c; tensor_fields.py calls it)"},
    {NULL},
};

static struct PyModuleDef hotpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mlacheck.capture._hotpath",
    .m_doc = "The capture's hot path, compiled (hotpath_py.py is the same in Python).",
    .m_size = -1,
    .m_methods = hotpath_functions,
};

PyMODINIT_FUNC
PyInit__hotpath(void)
{
    str_missed = PyUnicode_InternFromString("_missed");
    str_maybe_flush = PyUnicode_InternFromString("maybe_flush");
    str_shape = PyUnicode_InternFromString("shape");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_stride = PyUnicode_InternFromString("stride");
    if (str_missed == NULL || str_maybe_flush == NULL || str_shape == NULL || str_dtype == NULL || str_stride == NULL)
        return NULL;
    if (pthread_key_create(&thread_ticks_key, free_thread_ticks) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "mlacheck: cannot make the threads' ticks key");
        return NULL;
    }
    PyObject *module = PyModule_Create(&hotpath_module);
    if (module == NULL)
        return NULL;
    if (add_type(module, &CounterType, NULL) < 0 || add_type(module, &TicksType, NULL) < 0 ||
        add_type(module, &ForwarderType, NULL) < 0 || add_type(module, &LauncherType, NULL) < 0 ||
        add_type(module, &FastTableType, NULL) < 0 || add_type(module, &ObservedCallType, NULL) < 0 ||
        add_type(module, &GetitemDictType, &PyDict_Type) < 0 || add_type(module, &ContainsDictType, &PyDict_Type) < 0 ||
        add_type(module, &GetDictType, &PyDict_Type) < 0 ||
        PyModule_AddIntConstant(module, "FLUSH_EVERY", FLUSH_EVERY) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
