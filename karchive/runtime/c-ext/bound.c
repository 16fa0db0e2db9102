/* Bound: the base of _native.NativeBoundLauncher; bound() is one driver call.
 * Part of karchive's compiled launcher: compiled inside ../_fastlaunch.c, after fastlaunch.h. */

#include "fastlaunch.h"

/* ------------------------------------------------------------------------------------------------ */
/* Bound: the base of native.NativeBoundLauncher; bound() is one driver call                         */

typedef struct {
    Py_ssize_t offset;
    char code;
    char aligned; /* a ``:16`` pointer: its address must be 16-byte aligned */
} BoundSlot;

typedef struct {
    PyObject_HEAD
    LaunchFn launch;
    void *function;
    unsigned int grid[3];
    unsigned int block_x, shared;
    void *stream;
    void **params;          /* the Python ParamLayout's void** (kept alive by the subclass) */
    unsigned char *buffer;  /* the Python ParamLayout's buffer */
    Py_ssize_t buffer_size;
    Py_ssize_t n;
    BoundSlot *slots;
    PyObject *pointer_value; /* args.pointer_value */
} Bound;

static int
bound_traverse(Bound *self, visitproc visit, void *arg)
{
    Py_VISIT(self->pointer_value);
    return 0;
}

static int
bound_clear(Bound *self)
{
    Py_CLEAR(self->pointer_value);
    return 0;
}

static void
bound_dealloc(Bound *self)
{
    PyObject_GC_UnTrack(self);
    bound_clear(self);
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self); /* a Python subclass's dealloc releases its type afterwards */
}

static PyObject *
bound_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    return type->tp_alloc(type, 0); /* configured by _configure */
}

static PyObject *
bound_configure(Bound *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"launch", "function", "grid", "block_x", "shared", "stream", "kernel_params", "buffer",
                             "buffer_size", "slots", "pointer_value", NULL};
    unsigned long long launch, function, stream, kernel_params, buffer;
    unsigned int g[3], block_x, shared;
    Py_ssize_t buffer_size;
    PyObject *slots, *pointer_value;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "KK(III)IIKKKnO!O", kwlist, &launch, &function, &g[0], &g[1], &g[2],
                                     &block_x, &shared, &stream, &kernel_params, &buffer, &buffer_size, &PyTuple_Type,
                                     &slots, &pointer_value))
        return NULL;
    if (launch == 0 || buffer == 0 || buffer_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "Bound: needs a launch function and a parameter buffer");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(slots);
    BoundSlot *bs = PyMem_Calloc(n ? n : 1, sizeof(BoundSlot));
    if (bs == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *code;
        Py_ssize_t code_len, offset;
        int aligned;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(slots, i), "s#np", &code, &code_len, &offset, &aligned)) {
            PyMem_Free(bs);
            return NULL;
        }
        if (code_len != 1 || code_size(code[0]) == 0 || code[0] == 'Z' || offset < 0
            || offset + code_size(code[0]) > buffer_size) {
            PyMem_Free(bs);
            PyErr_Format(PyExc_ValueError, "Bound: bad slot %zd", i);
            return NULL;
        }
        bs[i].code = code[0];
        bs[i].offset = offset;
        bs[i].aligned = (char)aligned;
    }
    PyMem_Free(self->slots);
    self->slots = bs;
    self->n = n;
    self->launch = (LaunchFn)(uintptr_t)launch;
    self->function = (void *)(uintptr_t)function;
    memcpy(self->grid, g, sizeof(g));
    self->block_x = block_x;
    self->shared = shared;
    self->stream = (void *)(uintptr_t)stream;
    self->params = (void **)(uintptr_t)kernel_params;
    self->buffer = (unsigned char *)(uintptr_t)buffer;
    self->buffer_size = buffer_size;
    Py_XSETREF(self->pointer_value, Py_NewRef(pointer_value));
    Py_RETURN_NONE;
}

static PyObject *
bound_set_grid(Bound *self, PyObject *args)
{
    if (!PyArg_ParseTuple(args, "III", &self->grid[0], &self->grid[1], &self->grid[2]))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
bound_set_stream(Bound *self, PyObject *arg)
{
    unsigned long long s = as_u64(arg);
    if (s == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    self->stream = (void *)(uintptr_t)s;
    Py_RETURN_NONE;
}

static PyObject *
bound_explain(Bound *self, PyObject *args)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *err = PyObject_CallMethod((PyObject *)self, "_explain", "OO", args, value ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (err != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(err), err);
        Py_DECREF(err);
    }
    return NULL;
}

static int
bound_repack(Bound *self, PyObject *args)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n != self->n) {
        PyErr_SetString(PyExc_TypeError, "wrong number of values");
        return -1;
    }
    unsigned char stack_copy[STACK_BYTES];
    unsigned char *tmp = stack_copy;
    if (self->buffer_size > STACK_BYTES && (tmp = PyMem_Malloc((size_t)self->buffer_size)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(tmp, self->buffer, (size_t)self->buffer_size);
    for (Py_ssize_t k = 0; k < n; k++) {
        BoundSlot *s = &self->slots[k];
        PyObject *o = PyTuple_GET_ITEM(args, k);
        unsigned char *dst = tmp + s->offset;
        if (s->code != 'P') {
            if (pack_scalar(s->code, o, dst) < 0)
                goto fail;
            continue;
        }
        uint64_t p;
        PyObject *dtype;
        long dev;
        if (is_read_tensor(o)) {
            if (!(abi.on == 1 && abi_read(o, &p, &dtype, &dev))) {
                PyObject *r = tensor_data_ptr_of(o);
                if (r == NULL)
                    goto fail;
                p = as_u64(r);
                Py_DECREF(r);
            }
        }
        else if (PyLong_CheckExact(o)) {
            p = as_u64(o);
        }
        else if (o == Py_None) {
            p = 0;
        }
        else {
            PyObject *r = PyObject_CallOneArg(self->pointer_value, o);
            if (r == NULL)
                goto fail;
            p = as_u64(r);
            Py_DECREF(r);
        }
        if (p == (uint64_t)-1 && PyErr_Occurred())
            goto fail;
        if (s->aligned && (p & 15)) {
            PyErr_SetString(PyExc_ValueError, "misaligned");
            goto fail;
        }
        put_u64(dst, p);
    }
    memcpy(self->buffer, tmp, (size_t)self->buffer_size); /* all or nothing */
    if (tmp != stack_copy)
        PyMem_Free(tmp);
    return 0;
fail:
    if (tmp != stack_copy)
        PyMem_Free(tmp);
    return -1;
}

static PyObject *
bound_call(Bound *self, PyObject *args, PyObject *kwds)
{
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "a bound launcher takes its values by position");
        return NULL;
    }
    if (self->launch == NULL) {
        PyErr_SetString(PyExc_TypeError, "bound launcher is not configured");
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) && bound_repack(self, args) < 0)
        return bound_explain(self, args);
    unsigned int *g = self->grid;
    if ((uint64_t)g[0] * g[1] * g[2] == 0)
        Py_RETURN_NONE;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = self->launch(self->function, g[0], g[1], g[2], self->block_x, 1, 1, self->shared, self->stream,
                       self->params, NULL);
    Py_END_ALLOW_THREADS
    if (err != 0)
        return PyObject_CallMethod((PyObject *)self, "_failed", "i", err);
    Py_RETURN_NONE;
}

static PyObject *
bound_launch(Bound *self, PyObject *args)
{
    return bound_call(self, args, NULL);
}

static PyMethodDef bound_methods[] = {
    {"_configure", (PyCFunction)(void (*)(void))bound_configure, METH_VARARGS | METH_KEYWORDS,
     "set what bound() launches"},
    {"_set_grid", (PyCFunction)bound_set_grid, METH_VARARGS, "(gx, gy, gz)"},
    {"_set_stream", (PyCFunction)bound_set_stream, METH_O, "raw stream handle"},
    {"launch", (PyCFunction)bound_launch, METH_VARARGS, "same as calling the launcher"},
    {NULL},
};

static PyTypeObject BoundType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "karchive.runtime._fastlaunch.Bound",
    .tp_doc = "Base of the compiled path's bound launcher: bound(*values) packs and launches in C.",
    .tp_basicsize = sizeof(Bound),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_new = bound_new,
    .tp_call = (ternaryfunc)bound_call,
    .tp_dealloc = (destructor)bound_dealloc,
    .tp_traverse = (traverseproc)bound_traverse,
    .tp_clear = (inquiry)bound_clear,
    .tp_methods = bound_methods,
};
