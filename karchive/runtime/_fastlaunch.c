/* karchive's compiled launch path: the per-call work of kernel[grid](...) in C.
 *
 * Read karchive/runtime/dispatch.py first: it describes the whole path; karchive/runtime/plan.py says
 * what the selection key holds; karchive/runtime/pydispatch.py is the same steps in Python (the
 * fallback where this file is not compiled). kernel[grid] is `subscript` (Kernel.__getitem__), which
 * returns a GridLaunch; calling it runs dispatch() of the kernel's Dispatcher. Per call, dispatch():
 *
 *   1. binds positional and keyword arguments to the kernel's parameters and launch options;
 *   2. builds the selection key (per pointer: Python type, dtype object, device, 16-byte alignment;
 *      per int: type and the hints some variant specialises on; constexprs and launch options: value);
 *   3. finds the key among the keys it resolved before (most recently used first), or asks Python
 *      (Kernel._miss: full checks, selection, module load) and remembers the answer;
 *   4. resolves the grid and the stream, packs the kernel parameters into a buffer on the C stack and
 *      calls the driver's launch function with the GIL released.
 *
 * Everything unusual calls back into Python, so that both paths raise the same errors and share one
 * implementation of the rare cases: calls it cannot bind (Kernel._slow), callable grids, stream
 * objects, launches with clusters / cooperative grids / PDL / scratch (LaunchEntry.launch_dims),
 * values that do not pack (LaunchEntry.explain), driver errors (LaunchEntry.failed).
 *
 * No CUDA or HIP header or library is needed to build this file. The driver's launch function is
 * reached through the address cuda-python's cuGetProcAddress (hip-python's hipGetProcAddress) returns,
 * and called through the C signature cuLaunchKernel (cuda.h) and hipModuleLaunchKernel
 * (hip_runtime_api.h) share: (function, grid x/y/z, block x/y/z, shared bytes, stream, void **params,
 * void **extra) -> an int-sized result, 0 on success.
 *
 * For tests without a GPU the module also exports a launch function with that signature that forwards
 * each call to a Python callable (forward_address / forward_to), one that does nothing (noop_address,
 * for measuring the path's own cost), and time_launches(), which times a C loop of raw launches for the
 * benchmark. Bound is the base of the bound launcher (karchive/runtime/native.py).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define ABI_VERSION 2

#if PY_VERSION_HEX < 0x030B0000 /* public from 3.11 on; before, private and taking unsigned char * */
#define PyFloat_Pack2(x, p, le) _PyFloat_Pack2((x), (unsigned char *)(p), (le))
#define PyFloat_Pack4(x, p, le) _PyFloat_Pack4((x), (unsigned char *)(p), (le))
#define PyFloat_Pack8(x, p, le) _PyFloat_Pack8((x), (unsigned char *)(p), (le))
#endif

/* An address from a Python int. PyLong_AsUnsignedLongLong converts multi-digit ints through a generic
 * byte-array routine (measurably slow for 47-bit addresses); PyLong_AsUnsignedLong walks the digits,
 * and is 64 bits wide where unsigned long is (Linux, macOS). Same errors: OverflowError, TypeError. */
#if ULONG_MAX == UINT64_MAX
#define as_u64(o) ((uint64_t)PyLong_AsUnsignedLong(o))
#else
#define as_u64(o) ((uint64_t)PyLong_AsUnsignedLongLong(o))
#endif

typedef int (*LaunchFn)(void *function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, void *stream, void **params,
                        void **extra);

/* Parameter roles and key flags: the same numbers as karchive/runtime/native.py sends (from plan.py). */
enum { ROLE_PTR = 1, ROLE_INT = 2, ROLE_FLOAT = 3, ROLE_VALUE = 4, ROLE_MIXED = 5 };
enum { F_ALIGN = 1, F_EQ1 = 2, F_DIV16 = 4, F_RANGE = 8, F_PRESENT = 0x100 };

#define MAX_SLOTS 192          /* kernel parameters + launch options a Dispatcher accepts */
#define MAX_CACHE 256          /* resolved keys kept per kernel (least recently used dropped) */
#define STACK_BYTES 4096       /* parameter bytes packed on the stack (more: on the heap) */
#define STACK_PARAMS 128       /* kernel parameters whose pointers fit the stack array */

/* ------------------------------------------------------------------------------------------------ */
/* The directly read tensor type (torch.Tensor once torch is in use; see args.TENSOR_TYPE)           */

static PyTypeObject *tensor_type = NULL;
static PyObject *tensor_data_ptr = NULL;   /* the unbound method data_ptr(self) */
static PyObject *tensor_get_device = NULL; /* the unbound method get_device(self) */
static PyObject *tensor_dtype = NULL;      /* the dtype descriptor (a data descriptor), or NULL */
/* torch defines data_ptr/get_device as METH_NOARGS C methods and dtype as a getset: calling their C
 * functions directly skips CPython's descriptor dispatch (about a sixth of what one read costs). */
static PyCFunction data_ptr_c = NULL, get_device_c = NULL;
static getter dtype_c = NULL;
static void *dtype_closure = NULL;

static PyCFunction
noargs_c_function(PyObject *descr)
{
    if (descr != NULL && Py_IS_TYPE(descr, &PyMethodDescr_Type)) {
        PyMethodDef *def = ((PyMethodDescrObject *)descr)->d_method;
        if ((def->ml_flags & ~METH_COEXIST) == METH_NOARGS)
            return def->ml_meth;
    }
    return NULL;
}

static PyObject *
set_tensor_type(PyObject *module, PyObject *tp)
{
    PyObject *data_ptr = NULL, *get_device = NULL, *dtype = NULL;
    if (tp != Py_None) {
        if (!PyType_Check(tp)) {
            PyErr_SetString(PyExc_TypeError, "set_tensor_type expects a type or None");
            return NULL;
        }
        data_ptr = PyObject_GetAttrString(tp, "data_ptr"); /* torch: method descriptors of TensorBase */
        get_device = PyObject_GetAttrString(tp, "get_device");
        if (data_ptr == NULL || get_device == NULL) {
            Py_XDECREF(data_ptr);
            Py_XDECREF(get_device);
            return NULL;
        }
        /* torch: a getset (data) descriptor, so no instance attribute can hide it; anything else is read
         * with a plain getattr */
        dtype = PyObject_GetAttrString(tp, "dtype");
        if (dtype == NULL)
            PyErr_Clear();
        else if (Py_TYPE(dtype)->tp_descr_get == NULL || Py_TYPE(dtype)->tp_descr_set == NULL)
            Py_CLEAR(dtype);
    }
    Py_XSETREF(tensor_data_ptr, data_ptr);
    Py_XSETREF(tensor_get_device, get_device);
    Py_XSETREF(tensor_dtype, dtype);
    Py_XSETREF(tensor_type, tp == Py_None ? NULL : (PyTypeObject *)Py_NewRef(tp));
    data_ptr_c = noargs_c_function(tensor_data_ptr);
    get_device_c = noargs_c_function(tensor_get_device);
    dtype_c = NULL;
    dtype_closure = NULL;
    if (tensor_dtype != NULL && Py_IS_TYPE(tensor_dtype, &PyGetSetDescr_Type)) {
        PyGetSetDef *def = ((PyGetSetDescrObject *)tensor_dtype)->d_getset;
        dtype_c = def->get;
        dtype_closure = def->closure;
    }
    Py_RETURN_NONE;
}

static inline PyObject *
tensor_data_ptr_of(PyObject *a)
{
    return data_ptr_c ? data_ptr_c(a, NULL) : PyObject_Vectorcall(tensor_data_ptr, &a, 1, NULL);
}

static inline PyObject *
tensor_get_device_of(PyObject *a)
{
    return get_device_c ? get_device_c(a, NULL) : PyObject_Vectorcall(tensor_get_device, &a, 1, NULL);
}

static inline PyObject *
tensor_read_dtype(PyObject *a)
{
    if (dtype_c != NULL)
        return dtype_c(a, dtype_closure);
    if (tensor_dtype != NULL)
        return Py_TYPE(tensor_dtype)->tp_descr_get(tensor_dtype, a, (PyObject *)Py_TYPE(a));
    return PyObject_GetAttrString(a, "dtype");
}

/* (address, dtype, device) of a pointer argument; *has_dev is 0 when the object does not say its device.
 * Returns 0 when dtype is a new reference, 1 when it is Py_None borrowed (ints and None: the common raw
 * address case costs no reference counting), -1 with an exception set when it cannot be read. */
static int
read_pointer(PyObject *a, PyObject *pointer_info, uint64_t *ptr, PyObject **dtype, long *dev, int *has_dev)
{
    *dtype = NULL;
    *has_dev = 0;
    if (tensor_type != NULL && Py_IS_TYPE(a, tensor_type)) {
        PyObject *r = tensor_data_ptr_of(a);
        if (r == NULL)
            return -1;
        *ptr = as_u64(r);
        Py_DECREF(r);
        if (*ptr == (uint64_t)-1 && PyErr_Occurred())
            return -1;
        *dtype = tensor_read_dtype(a);
        if (*dtype == NULL)
            return -1;
        r = tensor_get_device_of(a);
        if (r == NULL)
            goto fail;
        *dev = PyLong_AsLong(r);
        Py_DECREF(r);
        if (*dev == -1 && PyErr_Occurred())
            goto fail;
        *has_dev = 1;
        return 0;
    }
    if (PyLong_CheckExact(a)) {
        *ptr = as_u64(a);
        if (*ptr == (uint64_t)-1 && PyErr_Occurred())
            return -1;
        *dtype = Py_None; /* immortal enough: borrowed (the caller knows, see make_key) */
        return 1;
    }
    if (a == Py_None) {
        *ptr = 0;
        *dtype = Py_None;
        return 1;
    }
    {
        PyObject *r = PyObject_CallOneArg(pointer_info, a);
        if (r == NULL)
            return -1;
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3 || !PyLong_Check(PyTuple_GET_ITEM(r, 0))) {
            Py_DECREF(r);
            PyErr_SetString(PyExc_TypeError, "pointer_info must return (int, dtype, device)");
            return -1;
        }
        *ptr = as_u64(PyTuple_GET_ITEM(r, 0));
        if (*ptr == (uint64_t)-1 && PyErr_Occurred()) {
            Py_DECREF(r);
            return -1;
        }
        PyObject *d = PyTuple_GET_ITEM(r, 2);
        if (d != Py_None) {
            *dev = PyLong_AsLong(d);
            if (*dev == -1 && PyErr_Occurred()) {
                Py_DECREF(r);
                return -1;
            }
            *has_dev = 1;
        }
        *dtype = Py_NewRef(PyTuple_GET_ITEM(r, 1));
        Py_DECREF(r);
        return 0;
    }
fail:
    Py_CLEAR(*dtype);
    return -1;
}

/* 8 bytes of an address, little-endian as the driver reads it. */
static inline void
put_u64(unsigned char *dst, uint64_t v)
{
#if PY_LITTLE_ENDIAN
    memcpy(dst, &v, 8);
#else
    for (int k = 0; k < 8; k++)
        dst[k] = (unsigned char)(v >> (8 * k));
#endif
}

/* ------------------------------------------------------------------------------------------------ */
/* Packing one value exactly as Python's struct module packs it with the same format ("<b", "<f", ...) */

static int
pack_int(char code, PyObject *o, unsigned char *dst)
{
    PyObject *v;
    if (PyLong_Check(o)) {
        v = Py_NewRef(o);
    }
    else if (PyIndex_Check(o)) {
        v = PyNumber_Index(o);
        if (v == NULL)
            return -1;
    }
    else {
        PyErr_SetString(PyExc_TypeError, "required argument is not an integer");
        return -1;
    }
    uint64_t bits;
    int size;
    if (code == 'Q') {
        unsigned long long x = as_u64(v);
        Py_DECREF(v);
        if (x == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        bits = x;
        size = 8;
    }
    else {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        Py_DECREF(v);
        if (x == -1 && PyErr_Occurred())
            return -1;
        long long lo, hi;
        switch (code) {
        case 'b': lo = -128; hi = 127; size = 1; break;
        case 'B': lo = 0; hi = 255; size = 1; break;
        case 'h': lo = -32768; hi = 32767; size = 2; break;
        case 'H': lo = 0; hi = 65535; size = 2; break;
        case 'i': lo = INT32_MIN; hi = INT32_MAX; size = 4; break;
        case 'I': lo = 0; hi = UINT32_MAX; size = 4; break;
        default: lo = INT64_MIN; hi = INT64_MAX; size = 8; break; /* 'q' */
        }
        if (overflow || x < lo || x > hi) {
            PyErr_Format(PyExc_OverflowError, "%c format requires %lld <= number <= %lld", code, lo, hi);
            return -1;
        }
        bits = (uint64_t)x;
    }
    for (int k = 0; k < size; k++)
        dst[k] = (unsigned char)(bits >> (8 * k)); /* little-endian, as the driver reads it */
    return 0;
}

/* One scalar at dst. Codes are karchive.runtime.launch._argpack.pack_code's: struct characters, and "E" for bf16 as
 * Triton's launcher makes it (float -> fp32 round-to-nearest-even -> keep the high 16 bits). */
static int
pack_scalar(char code, PyObject *o, unsigned char *dst)
{
    double x;
    switch (code) {
    case 'e': case 'f': case 'd': case 'E':
        x = PyFloat_AsDouble(o);
        if (x == -1.0 && PyErr_Occurred())
            return -1;
        if (code == 'e')
            return PyFloat_Pack2(x, (char *)dst, 1);
        if (code == 'f')
            return PyFloat_Pack4(x, (char *)dst, 1);
        if (code == 'd')
            return PyFloat_Pack8(x, (char *)dst, 1);
        {
            unsigned char f32[4];
            if (PyFloat_Pack4(x, (char *)f32, 1) < 0)
                return -1;
            dst[0] = f32[2];
            dst[1] = f32[3];
            return 0;
        }
    default:
        return pack_int(code, o, dst);
    }
}

/* Bytes a pack code writes (0: not a code). */
static Py_ssize_t
code_size(char code)
{
    switch (code) {
    case 'b': case 'B': return 1;
    case 'h': case 'H': case 'e': case 'E': return 2;
    case 'i': case 'I': case 'f': return 4;
    case 'q': case 'Q': case 'd': case 'P': case 'Z': return 8;
    default: return 0;
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Entry: one variant loaded on one device (made from a LaunchEntry by karchive/runtime/native.py)      */

typedef struct {
    Py_ssize_t value;  /* index into the call values; -1 for a scratch slot */
    Py_ssize_t offset; /* byte offset in the parameter buffer */
    char code;         /* pack code */
} PackSlot;

typedef struct {
    PyObject_HEAD
    LaunchFn launch;         /* NULL: launch through python_launch */
    void *function;
    unsigned int block_x;
    unsigned int shared;
    Py_ssize_t n_params;     /* the binary's parameters, scratch slots included */
    Py_ssize_t buffer_size;
    PackSlot *slots;
    PyObject *device;        /* int: argument of the default-stream function */
    PyObject *meta;          /* dict: what a callable grid sees besides the arguments */
    PyObject *python_launch; /* None, or launch_dims(gx, gy, gz, stream, values) for every launch */
    PyObject *failed;        /* failed(err, gx, gy, gz, stream, values) */
    PyObject *explain;       /* explain(values, exc) -> the exception to raise */
} Entry;

static PyTypeObject EntryType;

static int
entry_traverse(Entry *self, visitproc visit, void *arg)
{
    Py_VISIT(self->device);
    Py_VISIT(self->meta);
    Py_VISIT(self->python_launch);
    Py_VISIT(self->failed);
    Py_VISIT(self->explain);
    return 0;
}

static int
entry_clear(Entry *self)
{
    Py_CLEAR(self->device);
    Py_CLEAR(self->meta);
    Py_CLEAR(self->python_launch);
    Py_CLEAR(self->failed);
    Py_CLEAR(self->explain);
    return 0;
}

static void
entry_dealloc(Entry *self)
{
    PyObject_GC_UnTrack(self);
    entry_clear(self);
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
entry_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"launch", "function", "block_x", "shared", "device", "slots", "buffer_size", "meta",
                             "python_launch", "failed", "explain", NULL};
    unsigned long long launch, function;
    unsigned int block_x, shared;
    PyObject *device, *slots, *meta, *python_launch, *failed, *explain;
    Py_ssize_t buffer_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "KKIIO!O!nO!OOO", kwlist, &launch, &function, &block_x, &shared,
                                     &PyLong_Type, &device, &PyTuple_Type, &slots, &buffer_size, &PyDict_Type,
                                     &meta, &python_launch, &failed, &explain))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(slots);
    if (buffer_size < 0 || n > 4096) {
        PyErr_SetString(PyExc_ValueError, "Entry: bad parameter layout");
        return NULL;
    }
    Entry *self = (Entry *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->slots = PyMem_Calloc(n ? n : 1, sizeof(PackSlot));
    if (self->slots == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyTuple_GET_ITEM(slots, i);
        Py_ssize_t value, offset;
        const char *code;
        Py_ssize_t code_len;
        if (!PyArg_ParseTuple(s, "ns#n", &value, &code, &code_len, &offset)) {
            Py_DECREF(self);
            return NULL;
        }
        if (code_len != 1 || code_size(code[0]) == 0 || offset < 0 || offset + code_size(code[0]) > buffer_size
            || (code[0] == 'Z') != (value < 0)) {
            PyErr_Format(PyExc_ValueError, "Entry: bad slot %zd", i);
            Py_DECREF(self);
            return NULL;
        }
        self->slots[i].value = value;
        self->slots[i].offset = offset;
        self->slots[i].code = code[0];
    }
    self->launch = (LaunchFn)(uintptr_t)launch;
    self->function = (void *)(uintptr_t)function;
    self->block_x = block_x;
    self->shared = shared;
    self->n_params = n;
    self->buffer_size = buffer_size;
    self->device = Py_NewRef(device);
    self->meta = Py_NewRef(meta);
    self->python_launch = Py_NewRef(python_launch);
    self->failed = Py_NewRef(failed);
    self->explain = Py_NewRef(explain);
    return (PyObject *)self;
}

static PyObject *
entry_get_meta(Entry *self, void *closure)
{
    return Py_NewRef(self->meta);
}

static PyGetSetDef entry_getset[] = {
    {"meta", (getter)entry_get_meta, NULL, "the variant's meta-parameters", NULL},
    {NULL},
};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "karchive.runtime._fastlaunch.Entry",
    .tp_doc = "One variant loaded on one device, as the compiled launcher needs it.",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = entry_new,
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_traverse = (traverseproc)entry_traverse,
    .tp_clear = (inquiry)entry_clear,
    .tp_getset = entry_getset,
};

/* ------------------------------------------------------------------------------------------------ */
/* Key: one resolved selection key and what it leads to                                              */

typedef struct {
    PyObject *obj;  /* compared by identity, else same type and == (dtypes, constexpr values) */
    PyObject *type; /* compared by identity (the argument's Python type) */
    uint64_t bits;  /* device and hints */
} KeyPart;

typedef struct {
    PyObject_VAR_HEAD
    Entry *entry;
    PyObject *stream_fn; /* device -> stream handle, or None for stream 0 */
    KeyPart part[1];
} Key;

static PyTypeObject KeyType;

static int
key_traverse(Key *self, visitproc visit, void *arg)
{
    Py_VISIT(self->entry);
    Py_VISIT(self->stream_fn);
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) {
        Py_VISIT(self->part[i].obj);
        Py_VISIT(self->part[i].type);
    }
    return 0;
}

static int
key_clear(Key *self)
{
    Py_CLEAR(self->entry);
    Py_CLEAR(self->stream_fn);
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) {
        Py_CLEAR(self->part[i].obj);
        Py_CLEAR(self->part[i].type);
    }
    return 0;
}

static void
key_dealloc(Key *self)
{
    PyObject_GC_UnTrack(self);
    key_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject KeyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "karchive.runtime._fastlaunch.Key",
    .tp_basicsize = sizeof(Key) - sizeof(KeyPart),
    .tp_itemsize = sizeof(KeyPart),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)key_dealloc,
    .tp_traverse = (traverseproc)key_traverse,
    .tp_clear = (inquiry)key_clear,
};

/* The key of the call being made: parts on the stack (objects borrowed unless own[i]). */
typedef struct {
    PyObject *obj[MAX_SLOTS];
    PyObject *type[MAX_SLOTS];
    uint64_t bits[MAX_SLOTS];
    unsigned char own[MAX_SLOTS];
} CallKey;

/* ------------------------------------------------------------------------------------------------ */
/* Dispatcher: kernel[grid](...) for one kernel                                                      */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Py_ssize_t n_params;        /* the kernel's parameters (positional or by keyword) */
    Py_ssize_t n_slots;         /* n_params + launch options (keyword only) */
    Py_ssize_t n_calls;         /* call values: parameters that are not constexpr in every variant */
    PyObject *names;            /* tuple: parameter names, option names, "stream" (interned) */
    PyObject *qualname;         /* the Python path's function name, for Python's own binding errors */
    unsigned char roles[MAX_SLOTS];
    unsigned char flags[MAX_SLOTS];
    Py_ssize_t call_positions[MAX_SLOTS];
    PyObject *cache;            /* list of Key, most recently used first */
    PyObject *miss;             /* Kernel._miss(args, kwargs) -> CallTarget */
    PyObject *slow;             /* Kernel._slow(grid, args, kwargs) */
    PyObject *grid_of;          /* Kernel._grid_of(grid, meta, values) */
    PyObject *grid_dims;        /* launcher.grid_dims(grid) -> (gx, gy, gz) */
    PyObject *stream_handle;    /* backend.stream_handle(obj) -> int */
    PyObject *pointer_info;     /* args.pointer_info(obj) -> (ptr, dtype, device) */
    PyObject *mixed_key;        /* plan.mixed_key(obj) */
    PyObject *missing;          /* select.MISSING */
} Dispatcher;

static PyTypeObject DispatcherType;

static Py_ssize_t
find_name(Dispatcher *d, PyObject *name)
{
    Py_ssize_t n = PyTuple_GET_SIZE(d->names);
    for (Py_ssize_t j = 0; j < n; j++)
        if (PyTuple_GET_ITEM(d->names, j) == name)
            return j; /* identifiers at call sites are interned, as are ours */
    for (Py_ssize_t j = 0; j < n; j++) {
        int eq = PyUnicode_Compare(PyTuple_GET_ITEM(d->names, j), name);
        if (eq == 0)
            return j;
        if (eq == -1 && PyErr_Occurred())
            PyErr_Clear();
    }
    return -1;
}

static void
release_key(Dispatcher *d, CallKey *k)
{
    for (Py_ssize_t i = 0; i < d->n_slots; i++)
        if (k->own[i])
            Py_CLEAR(k->obj[i]);
}

/* 1 when the key is built, 0 when this call cannot be keyed here (the slow path takes it), -1 on error.
 * Every part of k is written (release_key may run after a failure part-way). */
static int
make_key(Dispatcher *d, PyObject **vals, CallKey *k, uint64_t *ptrs)
{
    for (Py_ssize_t i = 0; i < d->n_slots; i++) {
        PyObject *a = vals[i];
        k->obj[i] = NULL;
        k->type[i] = NULL;
        k->bits[i] = 0;
        k->own[i] = 0;
        if (a == NULL)
            continue; /* not passed: part of the key as "missing" */
        switch (d->roles[i]) {
        case ROLE_PTR: {
            PyObject *dtype;
            long dev = 0;
            int has_dev;
            int got = read_pointer(a, d->pointer_info, &ptrs[i], &dtype, &dev, &has_dev);
            if (got < 0)
                return -1;
            k->obj[i] = dtype;
            k->own[i] = (got == 0);
            k->type[i] = (PyObject *)Py_TYPE(a);
            uint64_t devcode = has_dev ? (uint64_t)(dev + 2) : 0; /* unknown 0, host 1, ordinal n: n + 2 */
            k->bits[i] = F_PRESENT | (devcode << 16) | (((d->flags[i] & F_ALIGN) && !(ptrs[i] & 15)) ? F_ALIGN : 0);
            break;
        }
        case ROLE_INT: {
            k->type[i] = (PyObject *)Py_TYPE(a);
            unsigned char want = d->flags[i] & (F_EQ1 | F_DIV16 | F_RANGE);
            if (!want)
                break;
            PyObject *v;
            if (PyLong_Check(a))
                v = Py_NewRef(a);
            else if (PyIndex_Check(a)) {
                v = PyNumber_Index(a);
                if (v == NULL)
                    return -1;
            }
            else
                return 0; /* not an integer: the checks in Python say why */
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            uint64_t low = PyLong_AsUnsignedLongLongMask(v);
            Py_DECREF(v);
            if (PyErr_Occurred())
                return -1;
            uint64_t bits = F_PRESENT;
            if ((want & F_EQ1) && !overflow && x == 1)
                bits |= F_EQ1;
            if ((want & F_DIV16) && (low & 15) == 0)
                bits |= F_DIV16;
            if ((want & F_RANGE) && !overflow && x >= INT32_MIN && x <= INT32_MAX)
                bits |= F_RANGE;
            k->bits[i] = bits;
            break;
        }
        case ROLE_FLOAT:
            k->type[i] = (PyObject *)Py_TYPE(a);
            break;
        case ROLE_VALUE:
            k->obj[i] = a;
            break;
        case ROLE_MIXED: {
            PyObject *o = PyObject_CallOneArg(d->mixed_key, a);
            if (o == NULL)
                return -1;
            k->obj[i] = o;
            k->own[i] = 1;
            break;
        }
        }
    }
    return 1;
}

static int
key_matches(Dispatcher *d, Key *c, CallKey *k)
{
    for (Py_ssize_t i = 0; i < d->n_slots; i++) {
        PyObject *x = c->part[i].obj, *y = k->obj[i];
        if (c->part[i].bits != k->bits[i] || c->part[i].type != k->type[i])
            return 0;
        if (x == y)
            continue;
        if (x == NULL || y == NULL || Py_TYPE(x) != Py_TYPE(y))
            return 0;
        int eq = PyObject_RichCompareBool(x, y, Py_EQ);
        if (eq < 0) {
            PyErr_Clear();
            return 0;
        }
        if (!eq)
            return 0;
    }
    return 1;
}

/* A new reference to the matching Key, moved to the front; NULL (no error) when there is none. */
static Key *
lookup(Dispatcher *d, CallKey *k)
{
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(d->cache); j++) {
        Key *c = (Key *)Py_NewRef(PyList_GET_ITEM(d->cache, j));
        if (key_matches(d, c, k)) {
            /* key_matches may have run Python code (==): move to the front only if the list is unchanged */
            if (j > 0 && j < PyList_GET_SIZE(d->cache) && PyList_GET_ITEM(d->cache, j) == (PyObject *)c) {
                PyObject **items = ((PyListObject *)d->cache)->ob_item;
                memmove(items + 1, items, (size_t)j * sizeof(PyObject *));
                items[0] = (PyObject *)c;
            }
            return c;
        }
        Py_DECREF(c);
    }
    return NULL;
}

static Key *
insert(Dispatcher *d, CallKey *k, PyObject *target)
{
    PyObject *native = PyObject_GetAttrString(target, "native"); /* made from the variant's record (_native.py) */
    if (native == NULL)
        return NULL;
    if (!Py_IS_TYPE(native, &EntryType)) {
        Py_DECREF(native);
        PyErr_SetString(PyExc_TypeError, "CallTarget.native must be a _fastlaunch.Entry");
        return NULL;
    }
    Entry *e = (Entry *)native;
    for (Py_ssize_t s = 0; s < e->n_params; s++) { /* the entry reads this dispatcher's call values */
        PackSlot *slot = &e->slots[s];
        if (slot->code == 'Z')
            continue;
        if (slot->value < 0 || slot->value >= d->n_calls
            || (slot->code == 'P' && d->roles[d->call_positions[slot->value]] != ROLE_PTR)) {
            Py_DECREF(native);
            PyErr_SetString(PyExc_ValueError, "Entry does not fit this kernel's call values");
            return NULL;
        }
    }
    PyObject *stream_fn = PyObject_GetAttrString(target, "stream_fn");
    if (stream_fn == NULL) {
        Py_DECREF(native);
        return NULL;
    }
    Key *c = PyObject_GC_NewVar(Key, &KeyType, d->n_slots);
    if (c == NULL) {
        Py_DECREF(native);
        Py_DECREF(stream_fn);
        return NULL;
    }
    c->entry = (Entry *)native;
    c->stream_fn = stream_fn;
    for (Py_ssize_t i = 0; i < d->n_slots; i++) {
        c->part[i].obj = Py_XNewRef(k->obj[i]);
        c->part[i].type = Py_XNewRef(k->type[i]);
        c->part[i].bits = k->bits[i];
    }
    PyObject_GC_Track(c);
    if (PyList_Insert(d->cache, 0, (PyObject *)c) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    if (PyList_GET_SIZE(d->cache) > MAX_CACHE
        && PyList_SetSlice(d->cache, MAX_CACHE, PyList_GET_SIZE(d->cache), NULL) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    return c;
}

/* (args, kwargs) of the call for the Python side: the npos kernel arguments, keyword values after them. */
static int
call_args(PyObject *const *args, Py_ssize_t npos, PyObject *kwnames, PyObject **t, PyObject **kw)
{
    *t = PyTuple_New(npos);
    *kw = PyDict_New();
    if (*t == NULL || *kw == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < npos; i++)
        PyTuple_SET_ITEM(*t, i, Py_NewRef(args[i]));
    if (kwnames != NULL) {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); k++)
            if (PyDict_SetItem(*kw, PyTuple_GET_ITEM(kwnames, k), args[npos + k]) < 0)
                goto fail;
    }
    return 0;
fail:
    Py_CLEAR(*t);
    Py_CLEAR(*kw);
    return -1;
}

static PyObject *
call_slow(Dispatcher *d, PyObject *grid, PyObject *const *args, Py_ssize_t npos, PyObject *kwnames)
{
    PyObject *t, *kw;
    if (call_args(args, npos, kwnames, &t, &kw) < 0)
        return NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(d->slow, grid, t, kw, NULL);
    Py_DECREF(t);
    Py_DECREF(kw);
    return r;
}

/* The call values (Python objects, read pointers as ints) for callbacks into Python. */
static PyObject *
call_values(Dispatcher *d, PyObject **vals, const uint64_t *ptrs)
{
    PyObject *t = PyTuple_New(d->n_calls);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < d->n_calls; j++) {
        Py_ssize_t i = d->call_positions[j];
        PyObject *v;
        if (vals[i] == NULL)
            v = Py_NewRef(d->missing);
        else if (d->roles[i] == ROLE_PTR)
            v = PyLong_FromUnsignedLongLong(ptrs[i]);
        else
            v = Py_NewRef(vals[i]);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, j, v);
    }
    return t;
}

/* All parameter values with MISSING where not given (what a callable grid is evaluated on). */
static PyObject *
all_values(Dispatcher *d, PyObject **vals)
{
    PyObject *t = PyTuple_New(d->n_params);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < d->n_params; i++)
        PyTuple_SET_ITEM(t, i, Py_NewRef(vals[i] ? vals[i] : d->missing));
    return t;
}

/* Raise entry.explain(values, exc) in place of the pending exception. */
static PyObject *
raise_explained(Dispatcher *d, Entry *e, PyObject **vals, const uint64_t *ptrs)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *values = call_values(d, vals, ptrs);
    PyObject *err = values ? PyObject_CallFunctionObjArgs(e->explain, values, value ? value : Py_None, NULL) : NULL;
    Py_XDECREF(values);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (err == NULL)
        return NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(err), err);
    Py_DECREF(err);
    return NULL;
}

/* gx, gy, gz of a tuple of 1 to 3 plain ints in [0, 2**32); 0 when the grid is anything else. */
static int
fast_grid(PyObject *grid, unsigned int *g)
{
    if (!PyTuple_CheckExact(grid))
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(grid);
    if (n < 1 || n > 3)
        return 0;
    g[0] = g[1] = g[2] = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(grid, i);
        if (!PyLong_CheckExact(v))
            return 0;
        unsigned long long x = as_u64(v);
        if (x == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (x > UINT32_MAX)
            return 0;
        g[i] = (unsigned int)x;
    }
    return 1;
}

static int
grid_of_call(Dispatcher *d, Entry *e, PyObject *grid, PyObject **vals, unsigned int *g)
{
    PyObject *resolved;
    if (PyTuple_CheckExact(grid)) {
        resolved = Py_NewRef(grid);
    }
    else {
        PyObject *values = all_values(d, vals);
        if (values == NULL)
            return -1;
        resolved = PyObject_CallFunctionObjArgs(d->grid_of, grid, e->meta, values, NULL);
        Py_DECREF(values);
        if (resolved == NULL)
            return -1;
    }
    if (!fast_grid(resolved, g)) {
        PyObject *dims = PyObject_CallOneArg(d->grid_dims, resolved);
        if (dims == NULL) {
            Py_DECREF(resolved);
            return -1;
        }
        int ok = PyArg_ParseTuple(dims, "III", &g[0], &g[1], &g[2]);
        Py_DECREF(dims);
        if (!ok) {
            Py_DECREF(resolved);
            return -1;
        }
    }
    Py_DECREF(resolved);
    return 0;
}

static int
stream_value(Dispatcher *d, PyObject *stream, Key *hit, uint64_t *out)
{
    PyObject *obj;
    if (stream == NULL) {
        if (hit->stream_fn == Py_None) {
            *out = 0;
            return 0;
        }
        obj = PyObject_CallOneArg(hit->stream_fn, hit->entry->device);
        if (obj == NULL)
            return -1;
    }
    else {
        obj = Py_NewRef(stream);
    }
    if (PyLong_CheckExact(obj)) {
        *out = as_u64(obj);
        if (!(*out == (uint64_t)-1 && PyErr_Occurred())) {
            Py_DECREF(obj);
            return 0;
        }
        PyErr_Clear();
    }
    PyObject *h = PyObject_CallOneArg(d->stream_handle, obj); /* validates, and raises ArgumentError */
    Py_DECREF(obj);
    if (h == NULL)
        return -1;
    *out = as_u64(h);
    Py_DECREF(h);
    return (*out == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

/* Step 4: grid, stream, pack, launch. */
static PyObject *
launch_hit(Dispatcher *d, Key *hit, PyObject *grid, PyObject *stream, PyObject **vals, uint64_t *ptrs)
{
    Entry *e = hit->entry;
    unsigned int g[3];
    if (!fast_grid(grid, g) && grid_of_call(d, e, grid, vals, g) < 0)
        return NULL;
    if ((uint64_t)g[0] * g[1] * g[2] == 0)
        Py_RETURN_NONE; /* Triton launches nothing for an empty grid */

    if (e->launch == NULL || e->python_launch != Py_None) {
        /* launch attributes, scratch, conversions: LaunchEntry.launch_dims, with the stream as given */
        PyObject *values = call_values(d, vals, ptrs);
        if (values == NULL)
            return NULL;
        PyObject *s;
        if (stream != NULL)
            s = Py_NewRef(stream);
        else if (hit->stream_fn != Py_None)
            s = PyObject_CallOneArg(hit->stream_fn, e->device);
        else
            s = PyLong_FromLong(0);
        PyObject *r = s ? PyObject_CallFunction(e->python_launch, "IIIOO", g[0], g[1], g[2], s, values) : NULL;
        Py_XDECREF(s);
        Py_DECREF(values);
        return r;
    }

    uint64_t stack_bytes[STACK_BYTES / 8];
    void *stack_params[STACK_PARAMS];
    unsigned char *buf = (unsigned char *)stack_bytes;
    void **params = stack_params;
    if (e->buffer_size > STACK_BYTES) {
        buf = PyMem_Calloc(1, (size_t)e->buffer_size);
        if (buf == NULL)
            return PyErr_NoMemory();
    }
    else {
        memset(buf, 0, (size_t)e->buffer_size);
    }
    if (e->n_params > STACK_PARAMS) {
        params = PyMem_Malloc(sizeof(void *) * (size_t)e->n_params);
        if (params == NULL) {
            if (buf != (unsigned char *)stack_bytes)
                PyMem_Free(buf);
            return PyErr_NoMemory();
        }
    }
    PyObject *result = NULL;
    for (Py_ssize_t s = 0; s < e->n_params; s++) {
        PackSlot *slot = &e->slots[s];
        unsigned char *dst = buf + slot->offset;
        params[s] = dst;
        if (slot->code == 'Z')
            continue; /* a null scratch pointer */
        Py_ssize_t i = d->call_positions[slot->value];
        if (slot->code == 'P') {
            put_u64(dst, ptrs[i]);
            continue;
        }
        if (vals[i] == NULL) {
            PyErr_SetString(PyExc_TypeError, "missing value");
            raise_explained(d, e, vals, ptrs);
            goto done;
        }
        if (pack_scalar(slot->code, vals[i], dst) < 0) {
            raise_explained(d, e, vals, ptrs);
            goto done;
        }
    }
    uint64_t sh;
    if (stream_value(d, stream, hit, &sh) < 0)
        goto done;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = e->launch(e->function, g[0], g[1], g[2], e->block_x, 1, 1, e->shared, (void *)(uintptr_t)sh, params, NULL);
    Py_END_ALLOW_THREADS
    if (err != 0) {
        PyObject *values = call_values(d, vals, ptrs);
        if (values == NULL)
            goto done;
        result = PyObject_CallFunction(e->failed, "iIIIKO", err, g[0], g[1], g[2], (unsigned long long)sh, values);
        Py_DECREF(values);
        if (result == NULL)
            goto done;
        Py_DECREF(result);
    }
    result = Py_NewRef(Py_None);
done:
    if (buf != (unsigned char *)stack_bytes)
        PyMem_Free(buf);
    if (params != stack_params)
        PyMem_Free(params);
    return result;
}

/* One launch: ``args`` are the kernel's arguments (npos by position, then the values of kwnames). */
static PyObject *
dispatch(Dispatcher *d, PyObject *grid, PyObject *const *args, Py_ssize_t npos, PyObject *kwnames)
{
    PyObject *vals[MAX_SLOTS];
    PyObject *stream = NULL;

    /* 1. bind */
    if (npos > d->n_params)
        return call_slow(d, grid, args, npos, kwnames);
    for (Py_ssize_t i = 0; i < d->n_slots; i++)
        vals[i] = (i < npos && args[i] != d->missing) ? args[i] : NULL;
    if (kwnames != NULL) {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); k++) {
            PyObject *value = args[npos + k];
            Py_ssize_t j = find_name(d, PyTuple_GET_ITEM(kwnames, k));
            if (j < 0)
                return call_slow(d, grid, args, npos, kwnames); /* unknown keyword: the slow path names it */
            if (j == d->n_slots) {
                stream = value == Py_None ? NULL : value;
                continue;
            }
            if (j < npos) {
                /* what Python's call binding says on the pure-Python path, before any karchive code runs */
                PyErr_Format(PyExc_TypeError, "%U() got multiple values for argument '%U'", d->qualname,
                             PyTuple_GET_ITEM(d->names, j));
                return NULL;
            }
            if (value != d->missing)
                vals[j] = value;
        }
    }

    /* 2. key */
    CallKey key;
    uint64_t ptrs[MAX_SLOTS];
    int ok = make_key(d, vals, &key, ptrs);
    if (ok <= 0) {
        release_key(d, &key);
        if (ok < 0)
            PyErr_Clear(); /* the slow path reads the same argument and reports it properly */
        return call_slow(d, grid, args, npos, kwnames);
    }

    /* 3. look up, or resolve in Python */
    Key *hit = lookup(d, &key);
    if (hit == NULL) {
        PyObject *t, *kw;
        if (call_args(args, npos, kwnames, &t, &kw) < 0) {
            release_key(d, &key);
            return NULL;
        }
        PyObject *target = PyObject_CallFunctionObjArgs(d->miss, t, kw, NULL);
        Py_DECREF(t);
        Py_DECREF(kw);
        if (target == NULL) {
            release_key(d, &key);
            return NULL;
        }
        hit = insert(d, &key, target);
        Py_DECREF(target);
        if (hit == NULL) {
            release_key(d, &key);
            return NULL;
        }
    }
    release_key(d, &key);

    /* 4. launch */
    PyObject *r = launch_hit(d, hit, grid, stream, vals, ptrs);
    Py_DECREF(hit);
    return r;
}

/* dispatcher(grid, *args, **kwargs) */
static PyObject *
dispatcher_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "a launch needs a grid: kernel[grid](...)");
        return NULL;
    }
    return dispatch((Dispatcher *)op, args[0], args + 1, nargs - 1, kwnames);
}

static PyObject *
dispatcher_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"names", "roles", "flags", "n_params", "call_positions", "miss", "slow", "grid_of",
                             "grid_dims", "stream_handle", "pointer_info", "mixed_key", "missing", "qualname", NULL};
    PyObject *names, *call_positions, *miss, *slow, *grid_of, *grid_dims, *stream_handle, *pointer_info, *mixed_key,
        *missing, *qualname;
    const char *roles, *flags;
    Py_ssize_t n_roles, n_flags, n_params;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!y#y#nO!OOOOOOOOU", kwlist, &PyTuple_Type, &names, &roles,
                                     &n_roles, &flags, &n_flags, &n_params, &PyTuple_Type, &call_positions, &miss,
                                     &slow, &grid_of, &grid_dims, &stream_handle, &pointer_info, &mixed_key, &missing,
                                     &qualname))
        return NULL;
    if (n_roles != n_flags || n_roles >= MAX_SLOTS || PyTuple_GET_SIZE(names) != n_roles + 1 || n_params > n_roles
        || n_params < 0 || PyTuple_GET_SIZE(call_positions) > n_params) {
        PyErr_SetString(PyExc_ValueError, "Dispatcher: inconsistent plan (or more parameters than it supports)");
        return NULL;
    }
    Dispatcher *d = (Dispatcher *)type->tp_alloc(type, 0);
    if (d == NULL)
        return NULL;
    d->vectorcall = dispatcher_vectorcall;
    d->n_params = n_params;
    d->n_slots = n_roles;
    d->n_calls = PyTuple_GET_SIZE(call_positions);
    for (Py_ssize_t i = 0; i < n_roles; i++) {
        d->roles[i] = (unsigned char)roles[i];
        d->flags[i] = (unsigned char)flags[i];
        if (d->roles[i] < ROLE_PTR || d->roles[i] > ROLE_MIXED) {
            PyErr_SetString(PyExc_ValueError, "Dispatcher: unknown role");
            Py_DECREF(d);
            return NULL;
        }
    }
    for (Py_ssize_t j = 0; j < d->n_calls; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(call_positions, j));
        if (i < 0 || i >= n_params) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "Dispatcher: bad call position");
            Py_DECREF(d);
            return NULL;
        }
        d->call_positions[j] = i;
    }
    d->names = PyTuple_New(n_roles + 1);
    if (d->names == NULL) {
        Py_DECREF(d);
        return NULL;
    }
    for (Py_ssize_t i = 0; i <= n_roles; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_CheckExact(name)) {
            PyErr_SetString(PyExc_TypeError, "Dispatcher: names must be str");
            Py_DECREF(d);
            return NULL;
        }
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        PyTuple_SET_ITEM(d->names, i, name);
    }
    d->cache = PyList_New(0);
    if (d->cache == NULL) {
        Py_DECREF(d);
        return NULL;
    }
    d->miss = Py_NewRef(miss);
    d->slow = Py_NewRef(slow);
    d->grid_of = Py_NewRef(grid_of);
    d->grid_dims = Py_NewRef(grid_dims);
    d->stream_handle = Py_NewRef(stream_handle);
    d->pointer_info = Py_NewRef(pointer_info);
    d->mixed_key = Py_NewRef(mixed_key);
    d->missing = Py_NewRef(missing);
    d->qualname = Py_NewRef(qualname);
    return (PyObject *)d;
}

static int
dispatcher_traverse(Dispatcher *d, visitproc visit, void *arg)
{
    Py_VISIT(d->names);
    Py_VISIT(d->qualname);
    Py_VISIT(d->cache);
    Py_VISIT(d->miss);
    Py_VISIT(d->slow);
    Py_VISIT(d->grid_of);
    Py_VISIT(d->grid_dims);
    Py_VISIT(d->stream_handle);
    Py_VISIT(d->pointer_info);
    Py_VISIT(d->mixed_key);
    Py_VISIT(d->missing);
    return 0;
}

static int
dispatcher_clear(Dispatcher *d)
{
    Py_CLEAR(d->names);
    Py_CLEAR(d->qualname);
    Py_CLEAR(d->cache);
    Py_CLEAR(d->miss);
    Py_CLEAR(d->slow);
    Py_CLEAR(d->grid_of);
    Py_CLEAR(d->grid_dims);
    Py_CLEAR(d->stream_handle);
    Py_CLEAR(d->pointer_info);
    Py_CLEAR(d->mixed_key);
    Py_CLEAR(d->missing);
    return 0;
}

static void
dispatcher_dealloc(Dispatcher *d)
{
    PyObject_GC_UnTrack(d);
    dispatcher_clear(d);
    Py_TYPE(d)->tp_free((PyObject *)d);
}

static Py_ssize_t
dispatcher_len(Dispatcher *d)
{
    return d->cache ? PyList_GET_SIZE(d->cache) : 0;
}

static PyObject *
dispatcher_clear_cache(Dispatcher *d, PyObject *unused)
{
    if (d->cache && PyList_SetSlice(d->cache, 0, PyList_GET_SIZE(d->cache), NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef dispatcher_methods[] = {
    {"clear", (PyCFunction)dispatcher_clear_cache, METH_NOARGS, "forget every resolved key"},
    {NULL},
};

static PySequenceMethods dispatcher_as_sequence = {
    .sq_length = (lenfunc)dispatcher_len,
};

static PyTypeObject DispatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "karchive.runtime._fastlaunch.Dispatcher",
    .tp_doc = "kernel[grid](...) of one kernel: bind, key, look up, pack, launch (len(): resolved keys).",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Dispatcher, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = dispatcher_new,
    .tp_dealloc = (destructor)dispatcher_dealloc,
    .tp_traverse = (traverseproc)dispatcher_traverse,
    .tp_clear = (inquiry)dispatcher_clear,
    .tp_methods = dispatcher_methods,
    .tp_as_sequence = &dispatcher_as_sequence,
};

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
        if (tensor_type != NULL && Py_IS_TYPE(o, tensor_type)) {
            PyObject *r = tensor_data_ptr_of(o);
            if (r == NULL)
                goto fail;
            p = as_u64(r);
            Py_DECREF(r);
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

static PyMethodDef module_methods[] = {
    {"set_tensor_type", (PyCFunction)set_tensor_type, METH_O,
     "set_tensor_type(tp or None): the type whose data_ptr()/dtype/get_device() are read directly"},
    {"forward_address", (PyCFunction)forward_address, METH_NOARGS,
     "address of a C function with cuLaunchKernel's signature that forwards each call to forward_to's target"},
    {"noop_address", (PyCFunction)noop_address, METH_NOARGS,
     "address of a C function with cuLaunchKernel's signature that does nothing (host-cost benchmarks)"},
    {"forward_to", (PyCFunction)forward_to, METH_O,
     "forward_to(callable or None): where forward_address's function sends launches (tests)"},
    {"time_launches", (PyCFunction)(void (*)(void))time_launches, METH_VARARGS | METH_KEYWORDS,
     "time_launches(...) -> (seconds, first error): a C loop of raw launches with a packed void**"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fastlaunch",
    "karchive's compiled launch path (see karchive/runtime/dispatch.py).", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__fastlaunch(void)
{
    if (PyType_Ready(&EntryType) < 0 || PyType_Ready(&KeyType) < 0 || PyType_Ready(&DispatcherType) < 0
        || PyType_Ready(&BoundType) < 0 || PyType_Ready(&GridLaunchType) < 0 || PyType_Ready(&SubscriptType) < 0)
        return NULL;
    str_run = PyUnicode_InternFromString("_run");
    Subscript *subscript = PyObject_New(Subscript, &SubscriptType);
    if (str_run == NULL || subscript == NULL)
        return NULL;
    subscript->vectorcall = subscript_vectorcall;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION) < 0
        || PyModule_AddIntConstant(m, "MAX_SLOTS", MAX_SLOTS) < 0
        || PyModule_AddObjectRef(m, "Dispatcher", (PyObject *)&DispatcherType) < 0
        || PyModule_AddObjectRef(m, "Entry", (PyObject *)&EntryType) < 0
        || PyModule_AddObjectRef(m, "Bound", (PyObject *)&BoundType) < 0
        || PyModule_AddObjectRef(m, "GridLaunch", (PyObject *)&GridLaunchType) < 0
        || PyModule_AddObject(m, "subscript", (PyObject *)subscript) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
