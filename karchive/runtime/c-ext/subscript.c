/* kernel[grid]: Kernel.__getitem__ in C, and the launcher it returns.
 * Part of karchive's compiled launcher: compiled inside ../_fastlaunch.c, after fastlaunch.h. */

#include "fastlaunch.h"

/* ------------------------------------------------------------------------------------------------ */
/* kernel[grid]: Kernel.__getitem__ in C, and the launcher it returns                                 */

/* kernel[grid](...): the kernel's launch callable (Kernel._run) with the grid bound. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *run;  /* a Dispatcher, or the Python path's function */
    PyObject *grid;
} GridLaunch;

static PyObject *
gridlaunch_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    GridLaunch *g = (GridLaunch *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (Py_IS_TYPE(g->run, &DispatcherType))
        return dispatch((Dispatcher *)g->run, g->grid, args, nargs, kwnames);
    /* the Python path: run(grid, *args, **kwargs), as functools.partial would call it */
    Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *small[16];
    PyObject **stack = total + 1 <= 16 ? small : PyMem_Malloc(sizeof(PyObject *) * (size_t)(total + 1));
    if (stack == NULL)
        return PyErr_NoMemory();
    stack[0] = g->grid;
    memcpy(stack + 1, args, sizeof(PyObject *) * (size_t)total);
    PyObject *r = PyObject_Vectorcall(g->run, stack, (size_t)(nargs + 1), kwnames);
    if (stack != small)
        PyMem_Free(stack);
    return r;
}

static int
gridlaunch_traverse(GridLaunch *g, visitproc visit, void *arg)
{
    Py_VISIT(g->run);
    Py_VISIT(g->grid);
    return 0;
}

static int
gridlaunch_clear(GridLaunch *g)
{
    Py_CLEAR(g->run);
    Py_CLEAR(g->grid);
    return 0;
}

static void
gridlaunch_dealloc(GridLaunch *g)
{
    PyObject_GC_UnTrack(g);
    gridlaunch_clear(g);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *
gridlaunch_repr(GridLaunch *g)
{
    return PyUnicode_FromFormat("<karchive launcher grid=%R>", g->grid);
}

static PyTypeObject GridLaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "karchive.runtime._fastlaunch.GridLaunch",
    .tp_doc = "kernel[grid]: call it with the kernel's arguments.",
    .tp_basicsize = sizeof(GridLaunch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(GridLaunch, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)gridlaunch_dealloc,
    .tp_traverse = (traverseproc)gridlaunch_traverse,
    .tp_clear = (inquiry)gridlaunch_clear,
    .tp_repr = (reprfunc)gridlaunch_repr,
};

static PyObject *str_run = NULL; /* "_run" */

/* Kernel.__getitem__ = _fastlaunch.subscript: an object of this type in the class. Its type says
 * Py_TPFLAGS_METHOD_DESCRIPTOR, so CPython calls it as subscript(kernel, grid) without making a bound
 * method first (as for functions defined in the class); like a function, it binds on attribute access. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
} Subscript;

static PyObject *
subscript_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "__getitem__ takes exactly one grid");
        return NULL;
    }
    PyObject *run = PyObject_GetAttr(args[0], str_run); /* Kernel._run: its launch path, made on first use */
    if (run == NULL)
        return NULL;
    GridLaunch *g = PyObject_GC_New(GridLaunch, &GridLaunchType);
    if (g == NULL) {
        Py_DECREF(run);
        return NULL;
    }
    g->vectorcall = gridlaunch_vectorcall;
    g->run = run;
    g->grid = Py_NewRef(args[1]);
    PyObject_GC_Track(g);
    return (PyObject *)g;
}

static PyObject *
subscript_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyTypeObject SubscriptType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "karchive.runtime._fastlaunch.Subscript",
    .tp_doc = "kernel[grid] -> a launcher for that grid (Kernel.__getitem__ on the compiled path).",
    .tp_basicsize = sizeof(Subscript),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Subscript, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = subscript_get,
};
