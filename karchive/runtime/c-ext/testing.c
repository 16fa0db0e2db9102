/* A launch function that forwards to Python (tests without a GPU), one that does nothing, and a raw launch loop (benchmarks).
 * Part of karchive's compiled launcher: compiled inside ../_fastlaunch.c, after fastlaunch.h. */

#include "fastlaunch.h"

/* ------------------------------------------------------------------------------------------------ */
/* A launch function that forwards to Python (tests without a GPU) and a raw launch loop (benchmark)  */

static PyObject *forward_target = NULL; /* callable(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra) */

/* Has the driver's launch signature; calls forward_target with every argument as an int (params is the
 * address of the void* array, readable during the call) and returns its result (an int, or a tuple
 * whose first item is one, as the bindings return). Tests put its address where the driver's would be,
 * so the packing above runs for real and a driver stand-in records exactly what the driver would get. */
static int
forward_launch(void *function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
               unsigned int bz, unsigned int shared, void *stream, void **params, void **extra)
{
    PyGILState_STATE gil = PyGILState_Ensure(); /* launches are made with the GIL released */
    int result = 999;                           /* CUDA_ERROR_UNKNOWN when the target fails */
    if (forward_target != NULL) {
        PyObject *r = PyObject_CallFunction(forward_target, "KIIIIIIIKKK", (unsigned long long)(uintptr_t)function,
                                            gx, gy, gz, bx, by, bz, shared, (unsigned long long)(uintptr_t)stream,
                                            (unsigned long long)(uintptr_t)params,
                                            (unsigned long long)(uintptr_t)extra);
        if (r != NULL && PyTuple_Check(r) && PyTuple_GET_SIZE(r) > 0)
            Py_SETREF(r, Py_NewRef(PyTuple_GET_ITEM(r, 0)));
        if (r != NULL) {
            long v = PyLong_AsLong(r);
            Py_DECREF(r);
            if (!(v == -1 && PyErr_Occurred()))
                result = (int)v;
        }
        if (PyErr_Occurred())
            PyErr_WriteUnraisable(forward_target);
    }
    PyGILState_Release(gil);
    return result;
}

/* Has cuLaunchKernelEx's signature: calls forward_target with (function, gx, gy, gz, bx, by, bz, shared, stream,
 * params, extra, attrs), attrs a tuple of (id, the 64 bytes of the value) as the driver reads them. */
static int
forward_launch_ex(const KaLaunchConfig *cfg, void *function, void **params, void **extra)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    int result = 999;
    PyObject *attrs = PyTuple_New(cfg->n_attrs);
    for (unsigned int i = 0; attrs != NULL && i < cfg->n_attrs; i++) {
        PyObject *a = Py_BuildValue("(Iy#)", cfg->attrs[i].id, cfg->attrs[i].value.pad, (Py_ssize_t)64);
        if (a == NULL)
            Py_CLEAR(attrs);
        else
            PyTuple_SET_ITEM(attrs, i, a);
    }
    if (forward_target != NULL && attrs != NULL) {
        PyObject *r = PyObject_CallFunction(forward_target, "KIIIIIIIKKKO", (unsigned long long)(uintptr_t)function,
                                            cfg->grid[0], cfg->grid[1], cfg->grid[2], cfg->block[0], cfg->block[1],
                                            cfg->block[2], cfg->shared, (unsigned long long)(uintptr_t)cfg->stream,
                                            (unsigned long long)(uintptr_t)params,
                                            (unsigned long long)(uintptr_t)extra, attrs);
        if (r != NULL && PyTuple_Check(r) && PyTuple_GET_SIZE(r) > 0)
            Py_SETREF(r, Py_NewRef(PyTuple_GET_ITEM(r, 0)));
        if (r != NULL) {
            long v = PyLong_AsLong(r);
            Py_DECREF(r);
            if (!(v == -1 && PyErr_Occurred()))
                result = (int)v;
        }
    }
    Py_XDECREF(attrs);
    if (PyErr_Occurred())
        PyErr_WriteUnraisable(forward_target);
    PyGILState_Release(gil);
    return result;
}

static PyObject *
forward_ex_address(PyObject *module, PyObject *unused)
{
    return PyLong_FromVoidPtr((void *)(uintptr_t)&forward_launch_ex);
}

/* Has the driver's launch signature and does nothing: the host cost of the launch path itself, measured
 * where there is no driver (tools/bench_launch.py --no-gpu). */
static int
noop_launch(void *function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
            unsigned int bz, unsigned int shared, void *stream, void **params, void **extra)
{
    return 0;
}

static PyObject *
noop_address(PyObject *module, PyObject *unused)
{
    return PyLong_FromVoidPtr((void *)(uintptr_t)&noop_launch);
}

static PyObject *
forward_address(PyObject *module, PyObject *unused)
{
    return PyLong_FromVoidPtr((void *)(uintptr_t)&forward_launch);
}

static PyObject *
forward_to(PyObject *module, PyObject *target)
{
    Py_XSETREF(forward_target, target == Py_None ? NULL : Py_NewRef(target));
    Py_RETURN_NONE;
}

static double
seconds_now(void)
{
    struct timespec ts;
#if defined(CLOCK_MONOTONIC)
    clock_gettime(CLOCK_MONOTONIC, &ts);
#else
    timespec_get(&ts, TIME_UTC);
#endif
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static PyObject *
time_launches(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"launch", "function", "grid", "block_x", "shared", "stream", "kernel_params", "count",
                             NULL};
    unsigned long long launch, function, stream, kernel_params;
    unsigned int g[3], block_x, shared;
    Py_ssize_t count;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "KK(III)IIKKn", kwlist, &launch, &function, &g[0], &g[1], &g[2],
                                     &block_x, &shared, &stream, &kernel_params, &count))
        return NULL;
    if (launch == 0 || count < 1) {
        PyErr_SetString(PyExc_ValueError, "time_launches: needs a launch function and count >= 1");
        return NULL;
    }
    LaunchFn fn = (LaunchFn)(uintptr_t)launch;
    int first_error = 0;
    double t0, t1;
    Py_BEGIN_ALLOW_THREADS
    t0 = seconds_now();
    for (Py_ssize_t i = 0; i < count; i++) {
        int err = fn((void *)(uintptr_t)function, g[0], g[1], g[2], block_x, 1, 1, shared, (void *)(uintptr_t)stream,
                     (void **)(uintptr_t)kernel_params, NULL);
        if (err && !first_error)
            first_error = err;
    }
    t1 = seconds_now();
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(di)", t1 - t0, first_error);
}
