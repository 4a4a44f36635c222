/* How an observed process ends, written where no Python runs any more (mlacheck/program/ending.py says why).

   `arm(fd, size, stamp, path)` maps the note beside the process's trace (its last SLOT bytes, a line of their own,
   hold how the process ended) and, once a process image: registers an on_exit handler (the status exit() was given:
   sys.exit, raise SystemExit, an exception nothing caught, the end of the program), and a handler for each signal
   whose action is still the default one and kills (SIGSEGV, SIGABRT, SIGBUS, ..., SIGUSR1, SIGALRM, the real-time
   ones: never SIGKILL, nor the stops the agent chains in Python), which writes the signal and hands it on: the
   previous action is put back and the signal raised again, so the process dies as it would have (core dump kept).
   The main thread gets an alternate stack where it has none, so a stack overflow is written too. A note shorter than
   its size (the disk took no more) is not mapped. `exited(code)` writes an os._exit's status.
   A status of 0 writes nothing and takes the note away (`path`) where it says nothing else (no loss counted: its first
   line "0 ...", and no end of an earlier process of the same pid in its last line). A fork
   disarms the child (a C-level fork's child writes nothing into its parent's note) until it is armed with its own.
   Everything a handler does is async-signal-safe: stores into the mapping, sigaction, raise, unlink. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLOT 64   /* the note's last bytes: "exit N STAMP" or "signal N STAMP", spaces, a newline */
#define STAMP 40  /* the image's start, as Python wrote it */
#define PATH 4096

static char *note = NULL; /* the mapping, NULL where this process is not armed */
static size_t note_size = 0;
static char stamp[STAMP + 1];
static char note_path[PATH + 1];
static int registered = 0;
static struct sigaction previous[NSIG];

static const int KILLING[] = {SIGSEGV, SIGBUS,  SIGFPE,  SIGILL,  SIGABRT,   SIGQUIT, SIGSYS, SIGTRAP,
                              SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU, SIGVTALRM, SIGPROF, SIGIO,
#ifdef SIGPWR
                              SIGPWR,
#endif
#ifdef SIGSTKFLT
                              SIGSTKFLT,
#endif
}; /* and SIGRTMIN..SIGRTMAX (what their default does: they kill) */

static void
put(const char *kind, int number)
{
    char line[SLOT];
    size_t at = 0;
    if (note == NULL)
        return;
    for (const char *c = kind; *c && at < SLOT - 1; c++)
        line[at++] = *c;
    char digits[12];
    int count = 0;
    unsigned int value = (unsigned int)number;
    do {
        digits[count++] = (char)('0' + value % 10);
        value /= 10;
    } while (value && count < 11);
    line[at++] = ' ';
    while (count && at < SLOT - 1)
        line[at++] = digits[--count];
    line[at++] = ' ';
    for (const char *c = stamp; *c && at < SLOT - 1; c++)
        line[at++] = *c;
    while (at < SLOT - 1)
        line[at++] = ' ';
    line[SLOT - 1] = '\n';
    char *slot = note + note_size - SLOT;
    for (size_t i = 0; i < SLOT; i++)
        slot[i] = line[i];
}

static int
says_nothing(void)
{
    const char *slot = note + note_size - SLOT;
    for (size_t i = 0; i < SLOT - 1; i++)
        if (slot[i] != ' ')
            return 0;
    return note[0] == '0' && note[1] == ' ';
}

static void
finish(int status)
{
    if (note == NULL)
        return;
    if (status & 0xff)
        put("exit", status & 0xff);
    else if (note_path[0] && says_nothing())
        unlink(note_path);
}

static void
at_exit(int status, void *unused)
{
    (void)unused;
    finish(status);
}

static void
on_signal(int signum, siginfo_t *info, void *context)
{
    (void)info;
    (void)context;
    put("signal", signum);
    sigaction(signum, &previous[signum], NULL);
    raise(signum); /* delivered once this handler returns (a fault's instruction faults again): the old action */
}

static void
disarm(void)
{
    note = NULL; /* (the mapping stays: it is the parent's; arming the child maps its own) */
}

static void
watch(int signum)
{
    struct sigaction action;
    if (signum <= 0 || signum >= NSIG || sigaction(signum, NULL, &previous[signum]) != 0 ||
        previous[signum].sa_handler != SIG_DFL || (previous[signum].sa_flags & SA_SIGINFO))
        return; /* the program's (or Python's: SIGPIPE, SIGXFSZ ignored) */
    memset(&action, 0, sizeof(action));
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(signum, &action, NULL);
}

static void
give_a_stack(void)
{
    /* An alternate stack for this thread (the main one) where it has none, as faulthandler gives one: a handler can
       run after a stack overflow. */
    stack_t old, stack;
    if (sigaltstack(NULL, &old) != 0 || !(old.ss_flags & SS_DISABLE))
        return;
    stack.ss_size = SIGSTKSZ * 2 > 65536 ? SIGSTKSZ * 2 : 65536;
    stack.ss_sp = malloc(stack.ss_size);
    stack.ss_flags = 0;
    if (stack.ss_sp != NULL && sigaltstack(&stack, NULL) != 0)
        free(stack.ss_sp);
}

static PyObject *
arm(PyObject *module, PyObject *args)
{
    int fd;
    Py_ssize_t size;
    const char *given_stamp, *given_path;
    if (!PyArg_ParseTuple(args, "inss", &fd, &size, &given_stamp, &given_path))
        return NULL;
    if (size < SLOT || strlen(given_stamp) > STAMP || strlen(given_path) > PATH) {
        PyErr_SetString(PyExc_ValueError, "a note too small, or a stamp or path too long");
        return NULL;
    }
    struct stat info;
    if (fstat(fd, &info) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (info.st_size < size) { /* (a read or write past its end would end the process: SIGBUS) */
        PyErr_SetString(PyExc_ValueError, "the note is shorter than its size: the disk took no more");
        return NULL;
    }
    void *mapped = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED)
        return PyErr_SetFromErrno(PyExc_OSError);
    note = NULL;
    strcpy(stamp, given_stamp);
    strcpy(note_path, given_path);
    note_size = (size_t)size;
    note = mapped;
    if (!registered) {
        registered = 1;
        on_exit(at_exit, NULL);
        pthread_atfork(NULL, NULL, disarm);
        give_a_stack();
        for (size_t i = 0; i < sizeof(KILLING) / sizeof(KILLING[0]); i++)
            watch(KILLING[i]);
        for (int signum = SIGRTMIN; signum <= SIGRTMAX; signum++)
            watch(signum);
    }
    Py_RETURN_NONE;
}

static PyObject *
exited(PyObject *module, PyObject *arg)
{
    int code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    finish(code);
    Py_RETURN_NONE;
}

static PyMethodDef ending_functions[] = {
    {"arm", arm, METH_VARARGS, "arm(fd, size, stamp, path): watch how this process ends, into the note mapped"},
    {"exited", exited, METH_O, "exited(code): the status os._exit is about to end the process with"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef ending_module = {
    PyModuleDef_HEAD_INIT, "mlacheck.program._ending", "How an observed process ends (ending.py).", -1,
    ending_functions,
};

PyMODINIT_FUNC
PyInit__ending(void)
{
    return PyModule_Create(&ending_module);
}
