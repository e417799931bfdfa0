/* gpulab's broadcast entry in C: the fast path of a repeated call, without Python in front of MPI.
 *
 * The plan it runs, what it reads and what it hands to the Python entry are described once, in the
 * docstring of gpulab/bcast/runtime/fastpath.py. Messages are the buffer's bytes (MPI_BYTE), as gpulab's
 * executor sends them. It calls MPI through pointers handed over by ``configure``, taken from the MPI
 * library mpi4py loaded: it is built without linking any MPI library, and mpi.h gives it only the types.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <mpi.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <mpi4py/mpi4py.h>

static PyObject *fallback;    /* the Python bcast */
static PyObject *configure_hook; /* called once, at the first call: it calls configure() */
static int configured_once;
static PyObject *plans;       /* entry._plans: (id(comm), algorithm, root, nbytes) -> (run, comm, plan) */
static PyObject *auto_native; /* entry._auto_native: nbytes -> the communicators "auto" sent with MPI_Bcast */
static PyObject *world;       /* MPI.COMM_WORLD, for comm=None */
static PyObject *mpi_exception; /* MPI.Exception */
static int checking = 1;      /* cross-rank argument checking on (or not configured yet): Python decides */
static MPI_Datatype byte;     /* MPI_BYTE, MPI_COMM_NULL and MPI_ERR_TRUNCATE as mpi4py's MPI has them */
static MPI_Comm comm_null;
static int err_truncate;
static int (*Bcast)(void *, int, MPI_Datatype, int, MPI_Comm);
static int (*Send)(const void *, int, MPI_Datatype, int, int, MPI_Comm);
static int (*Recv)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Status *);
static int (*Get_count)(const MPI_Status *, MPI_Datatype, int *);
static int (*Comm_size)(MPI_Comm, int *);
static int (*Comm_test_inter)(MPI_Comm, int *);
static int (*Error_class)(int, int *);
static PyObject *s_root, *s_comm, *s_algorithm, *s_mpi, *s_auto, *zero;

/* A remembered schedule: its communicator and steps. */
typedef struct {
    PyObject *comm;       /* the private duplicate, kept alive while the plan is */
    PyObject *size_error; /* size_error(step, count or None) -> the exception to raise */
    Py_ssize_t nbytes, nsteps;
    int steps[][3];       /* is_send, peer, tag (of the message sent or received) */
} Plan;

static void plan_free(PyObject *capsule) {
    Plan *plan = PyCapsule_GetPointer(capsule, "gpulab.plan");
    Py_XDECREF(plan->comm);
    Py_XDECREF(plan->size_error);
    PyMem_Free(plan);
}

/* make_plan(comm, steps, nbytes, size_error): steps is a tuple of (is_send, peer, tag), from executor.c_plan. */
static PyObject *make_plan(PyObject *self, PyObject *args) {
    PyObject *comm, *steps, *size_error;
    Py_ssize_t nbytes;
    if (!PyArg_ParseTuple(args, "OO!nO", &comm, &PyTuple_Type, &steps, &nbytes, &size_error))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(steps);
    Plan *plan = PyMem_Malloc(sizeof(Plan) + n * sizeof(int[3]));
    if (plan == NULL)
        return PyErr_NoMemory();
    plan->nbytes = nbytes;
    plan->nsteps = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(steps, i), "iii", &plan->steps[i][0], &plan->steps[i][1],
                              &plan->steps[i][2])) {
            PyMem_Free(plan);
            return NULL;
        }
    }
    plan->comm = Py_NewRef(comm);
    plan->size_error = Py_NewRef(size_error);
    return PyCapsule_New(plan, "gpulab.plan", plan_free);
}

static PyObject *mpi_error(int err) {
    PyObject *exc = PyObject_CallFunction(mpi_exception, "i", err);
    if (exc != NULL) {
        PyErr_SetObject(mpi_exception, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static PyObject *size_error(Plan *plan, Py_ssize_t step, int count, int truncated) {
    PyObject *exc = truncated ? PyObject_CallFunction(plan->size_error, "nO", step, Py_None)
                              : PyObject_CallFunction(plan->size_error, "ni", step, count);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* Run a plan on a checked buffer; NULL with an exception set if a message failed. */
static PyObject *run_plan(Plan *plan, PyArrayObject *a) {
    MPI_Comm *comm = PyMPIComm_Get(plan->comm);
    if (comm == NULL)
        return NULL;
    void *data = PyArray_DATA(a);
    int n = (int)plan->nbytes, err = MPI_SUCCESS, count = n;
    Py_ssize_t i;
    MPI_Status status;
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < plan->nsteps; i++) {
        int *step = plan->steps[i];
        if (step[0]) {
            err = Send(data, n, byte, step[1], step[2], *comm);
        } else {
            err = Recv(data, n, byte, step[1], step[2], *comm, &status);
            if (err == MPI_SUCCESS)
                Get_count(&status, byte, &count);
        }
        if (err != MPI_SUCCESS || count != n)
            break;
    }
    Py_END_ALLOW_THREADS
    if (err != MPI_SUCCESS) {
        int class = -1;
        Error_class(err, &class);
        return class == err_truncate ? size_error(plan, i, 0, 1) : mpi_error(err);
    }
    if (count != n)
        return size_error(plan, i, count, 0);
    return Py_NewRef((PyObject *)a);
}

/* 1: broadcast done; 0: not a case for this path (nothing sent); -1: MPI raised */
static int native(PyArrayObject *a, PyObject *root, PyObject *comm) {
    MPI_Comm *handle = PyMPIComm_Get(comm == Py_None ? world : comm);
    if (handle == NULL) {
        PyErr_Clear();
        return 0;
    }
    int overflow, size, inter, err;
    long r = PyLong_AsLongAndOverflow(root, &overflow);
    if (overflow || r < 0 || *handle == comm_null || PyArray_NBYTES(a) > INT_MAX
        || Comm_test_inter(*handle, &inter) != MPI_SUCCESS || inter
        || Comm_size(*handle, &size) != MPI_SUCCESS || r >= size)
        return 0;
    Py_BEGIN_ALLOW_THREADS
    err = Bcast(PyArray_DATA(a), (int)PyArray_NBYTES(a), byte, (int)r, *handle);
    Py_END_ALLOW_THREADS
    if (err != MPI_SUCCESS) {
        mpi_error(err);
        return -1;
    }
    return 1;
}

static int in_tuple(PyObject *item, PyObject *tuple) {
    if (tuple == NULL || !PyTuple_Check(tuple))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++)
        if (PyTuple_GET_ITEM(tuple, i) == item)
            return 1;
    return 0;
}

static int is(PyObject *s, PyObject *name) {
    return s == name || (PyUnicode_Check(s) && PyUnicode_Compare(s, name) == 0);
}

/* bcast(buf, root=0, comm=None, algorithm="auto", **options) */
static PyObject *bcast(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *v[4] = {NULL, zero, Py_None, s_auto};
    if (!configured_once) {
        configured_once = 1;
        PyObject *done = PyObject_CallNoArgs(configure_hook);
        if (done == NULL)
            return NULL;
        Py_DECREF(done);
    }
    if (checking || nargs < 1 || nargs > 4)
        goto slow;
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int at = is(name, s_root) ? 1 : is(name, s_comm) ? 2 : is(name, s_algorithm) ? 3 : 0;
        if (at == 0 || at < nargs)
            goto slow; /* an option, or a duplicate: Python says what is wrong */
        v[at] = args[nargs + k];
    }
    if (!Py_IS_TYPE(v[0], &PyArray_Type))
        goto slow;
    PyArrayObject *a = (PyArrayObject *)v[0];
    if (!PyArray_ISCARRAY(a) || PyDataType_REFCHK(PyArray_DESCR(a)) || !PyLong_CheckExact(v[1]))
        goto slow; /* read-only, strided, unaligned, object pointers, a root Python must check */
    PyObject *nbytes = PyLong_FromSsize_t(PyArray_NBYTES(a));
    if (nbytes == NULL)
        return NULL;
    if (is(v[3], s_mpi) || (is(v[3], s_auto) && in_tuple(v[2], PyDict_GetItem(auto_native, nbytes)))) {
        Py_DECREF(nbytes);
        int done = native(a, v[1], v[2]);
        if (done < 0)
            return NULL;
        if (done)
            return Py_NewRef(v[0]);
        goto slow;
    }
    PyObject *id = PyLong_FromVoidPtr(v[2]);
    PyObject *key = id ? PyTuple_Pack(4, id, v[3], v[1], nbytes) : NULL;
    Py_XDECREF(id);
    Py_DECREF(nbytes);
    if (key == NULL)
        return NULL;
    PyObject *plan = PyDict_GetItemWithError(plans, key); /* borrowed */
    Py_DECREF(key);
    if (plan == NULL) {
        if (PyErr_Occurred())
            PyErr_Clear(); /* an unhashable argument: the checks say what is wrong */
        goto slow;
    }
    if (PyTuple_Check(plan) && PyTuple_GET_SIZE(plan) == 3 && PyCapsule_IsValid(PyTuple_GET_ITEM(plan, 2), "gpulab.plan")) {
        PyObject *capsule = Py_NewRef(PyTuple_GET_ITEM(plan, 2)); /* kept while the GIL is released */
        PyObject *done = run_plan(PyCapsule_GetPointer(capsule, "gpulab.plan"), a);
        Py_DECREF(capsule);
        return done;
    }
slow:
    return PyObject_Vectorcall(fallback, args, nargsf, kwnames);
}

static void *address(PyObject *functions, const char *name) {
    PyObject *value = PyDict_GetItemString(functions, name);
    void *pointer = value ? PyLong_AsVoidPtr(value) : NULL;
    if (pointer == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "no address for %s", name);
    return pointer;
}

/* configure(plans, auto_native, world, mpi_exception, functions, constants): once mpi4py.MPI is up.
 * functions: name -> address in the MPI library mpi4py loaded; constants: handles and sizes there. */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *p, *n, *w, *e, *f;
    Py_ssize_t byte_handle, null_handle, sizes[3];
    if (!PyArg_ParseTuple(args, "O!O!OOO!(nni(nnn))", &PyDict_Type, &p, &PyDict_Type, &n, &w, &e, &PyDict_Type, &f,
                          &byte_handle, &null_handle, &err_truncate, &sizes[0], &sizes[1], &sizes[2]))
        return NULL;
    if (sizes[0] != (Py_ssize_t)sizeof(MPI_Comm) || sizes[1] != (Py_ssize_t)sizeof(MPI_Datatype)
        || sizes[2] != (Py_ssize_t)sizeof(MPI_Status))
        return PyErr_Format(PyExc_ValueError, "built with another MPI's mpi.h: sizes of MPI_Comm, MPI_Datatype, "
                            "MPI_Status %zd %zd %zd here, %zd %zd %zd in mpi4py's", sizeof(MPI_Comm),
                            sizeof(MPI_Datatype), sizeof(MPI_Status), sizes[0], sizes[1], sizes[2]);
    if (!(Bcast = address(f, "MPI_Bcast")) || !(Send = address(f, "MPI_Send")) || !(Recv = address(f, "MPI_Recv"))
        || !(Get_count = address(f, "MPI_Get_count")) || !(Comm_size = address(f, "MPI_Comm_size"))
        || !(Comm_test_inter = address(f, "MPI_Comm_test_inter")) || !(Error_class = address(f, "MPI_Error_class")))
        return NULL;
    if (import_mpi4py() < 0)
        return NULL;
    byte = (MPI_Datatype)(intptr_t)byte_handle;
    comm_null = (MPI_Comm)(intptr_t)null_handle;
    Py_XSETREF(plans, Py_NewRef(p));
    Py_XSETREF(auto_native, Py_NewRef(n));
    Py_XSETREF(world, Py_NewRef(w));
    Py_XSETREF(mpi_exception, Py_NewRef(e));
    Py_RETURN_NONE;
}

static PyObject *set_checking(PyObject *self, PyObject *on) {
    int value = PyObject_IsTrue(on);
    if (value < 0)
        return NULL;
    checking = value || plans == NULL;
    Py_RETURN_NONE;
}

static PyObject *set_fallback(PyObject *self, PyObject *args) {
    PyObject *f, *hook;
    if (!PyArg_ParseTuple(args, "OO", &f, &hook))
        return NULL;
    Py_XSETREF(fallback, Py_NewRef(f));
    Py_XSETREF(configure_hook, Py_NewRef(hook));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bcast", (PyCFunction)(void (*)(void))bcast, METH_FASTCALL | METH_KEYWORDS,
     "bcast($module, buf, root=0, comm=None, algorithm='auto', **options)\n--\n\n"
     "Broadcast ``buf`` in place from ``root`` (``comm`` defaults to COMM_WORLD); return ``buf``.\n\n"
     "``algorithm=\"auto\"`` picks one with ``select()``; options given here then override the chosen\n"
     "algorithm's defaults. A repeated call (same communicator, root, size, no options) runs its\n"
     "remembered plan at once: this C entry takes it (gpulab/bcast/runtime/fastpath.py), and hands\n"
     "every other call to the Python entry, gpulab.bcast.entry.bcast_in_python."},
    {"make_plan", make_plan, METH_VARARGS, "make_plan(comm, steps, nbytes, size_error): a remembered schedule"},
    {"configure", configure, METH_VARARGS, "configure(plans, auto_native, world, mpi_exception, functions, constants)"},
    {"set_checking", set_checking, METH_O, "set_checking(on): argument checking across ranks (C path off)"},
    {"set_fallback", set_fallback, METH_VARARGS, "set_fallback(bcast, configure_hook): the Python entry"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpath", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastpath(void) {
    import_array(); /* no MPI here: a notebook kernel imports gpulab.bcast without initialising MPI */
    s_root = PyUnicode_InternFromString("root");
    s_comm = PyUnicode_InternFromString("comm");
    s_algorithm = PyUnicode_InternFromString("algorithm");
    s_mpi = PyUnicode_InternFromString("mpi");
    s_auto = PyUnicode_InternFromString("auto");
    zero = PyLong_FromLong(0);
    if (!s_root || !s_comm || !s_algorithm || !s_mpi || !s_auto || !zero)
        return NULL;
    return PyModule_Create(&module);
}
