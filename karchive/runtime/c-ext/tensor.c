/* The directly read tensor type and reading a pointer argument (address, dtype, device).
 * Part of karchive's compiled launcher: compiled inside ../_fastlaunch.c, after fastlaunch.h. */

#include "fastlaunch.h"

/* ------------------------------------------------------------------------------------------------ */
/* The directly read tensor type (torch.Tensor once torch is in use; see args.TENSOR_TYPE)           */

static PyTypeObject *tensor_type = NULL;
/* A subclass read the same way (torch.nn.Parameter, whose __torch_function__ torch disables, so its
 * accessors behave exactly as torch.Tensor's): model weights are Parameters. */
static PyTypeObject *tensor_subtype = NULL;

static inline int
is_read_tensor(PyObject *a)
{
    return tensor_type != NULL && (Py_IS_TYPE(a, tensor_type) || (tensor_subtype != NULL && Py_IS_TYPE(a, tensor_subtype)));
}
static PyObject *tensor_data_ptr = NULL;   /* the unbound method data_ptr(self) */
static PyObject *tensor_get_device = NULL; /* the unbound method get_device(self) */
static PyObject *tensor_dtype = NULL;      /* the dtype descriptor (a data descriptor), or NULL */
/* torch defines data_ptr/get_device as METH_NOARGS C methods and dtype as a getset: calling their C
 * functions directly skips CPython's descriptor dispatch (about a sixth of what one read costs). */
static PyCFunction data_ptr_c = NULL, get_device_c = NULL;
static getter dtype_c = NULL;
static void *dtype_closure = NULL;

/* ------------------------------------------------------------------------------------------------ */
/* Reading a torch tensor through torch's stable C ABI                                              */

/* Each of data_ptr(), .dtype and get_device() is a C function of torch, but one that guards itself for
 * Python (a warning handler, a __torch_function__ check, an error translator) and returns a new Python
 * object: about 0.05 us each, 0.15 us per tensor argument on the H100 host (docs/benchmarks.md). torch's
 * stable C ABI (the AOTInductor shim, torch/csrc/inductor/aoti_torch/c/shim.h, exported with C linkage
 * from libtorch_cpu and kept stable across releases for compiled AOTI artifacts) answers the same three
 * questions from a tensor handle with plain C calls. The handle is an at::Tensor*; an at::Tensor is one
 * intrusive pointer to its TensorImpl, so the address of a local holding the TensorImpl* that the tensor
 * type's _cdata getter returns (THPVariable_get_cdata: var.unsafeGetTensorImpl()) is a valid read-only
 * handle for the duration of the call. One guarded getter instead of three, and no objects made.
 * Where the tensor object itself holds that at::Tensor at a fixed offset (torch 2.11's THPVariable:
 * PyObject_HEAD, then `at::Tensor cdata`; earlier releases wrapped it in a MaybeOwned with a flag first),
 * the handle is that address and not even the getter runs: _torch_abi.py offers the offset only after
 * reading, on every sample tensor, the TensorImpl* there that _cdata returns.
 *
 * Off until karchive/runtime/_torch_abi.py has found the four functions and checked, on real tensors of
 * every dtype, that this reader returns what data_ptr(), .dtype and get_device() return; anything it
 * cannot answer (an error code, a dtype or device type it was not told about) falls back to the three
 * accessors, which then raise or answer as they always did. */

typedef int32_t (*AbiPtrFn)(void *tensor, void **out);
typedef int32_t (*AbiI32Fn)(void *tensor, int32_t *out);

#define ABI_DTYPES 64 /* c10::ScalarType codes this reader maps (torch has ~45) */

static struct {
    int on; /* 0 off; 1 launches read through it; 2 on trial: only tensor_abi_read (the check) uses it */
    Py_ssize_t direct;  /* > 0: the at::Tensor's offset in the tensor object; 0: ask the _cdata getter */
    getter cdata;  /* the tensor type's _cdata getter */
    void *cdata_closure;
    AbiPtrFn data_ptr;       /* aoti_torch_get_data_ptr */
    AbiI32Fn dtype;          /* aoti_torch_get_dtype */
    AbiI32Fn device_type;    /* aoti_torch_get_device_type */
    AbiI32Fn device_index;   /* aoti_torch_get_device_index */
    int32_t host_type;       /* aoti_torch_device_type_cpu(): get_device() is -1 */
    int32_t gpu_type;        /* aoti_torch_device_type_cuda() (ROCm builds report their GPUs as cuda too) */
    PyObject *dtypes[ABI_DTYPES]; /* ScalarType code -> the torch.dtype object .dtype returns (strong refs) */
    /* The current stream: torch._C._cuda_getCurrentRawStream (a pybind function, ~0.1 us a launch) answered
     * by aoti_torch_get_current_cuda_stream (libtorch_cuda). stream_state: 0 not yet compared with the
     * getter (the first launch does, then 1), -1 they differed (the getter answers from then on). */
    PyObject *stream_getter;
    int32_t (*current_stream)(int32_t device, void **out);
    int stream_state;
} abi;

static void
abi_clear(void)
{
    abi.on = 0;
    abi.direct = 0;
    for (int i = 0; i < ABI_DTYPES; i++)
        Py_CLEAR(abi.dtypes[i]);
}

/* The tensor's (address, dtype, device) through the ABI: 1 with dtype borrowed, 0 when it cannot say
 * (no exception set: the accessors answer instead). */
static inline int
abi_read(PyObject *a, uint64_t *ptr, PyObject **dtype, long *dev)
{
    void *impl, *handle; /* an at::Tensor* (see above) */
    if (abi.direct > 0)
        handle = (char *)a + abi.direct;
    else {
        PyObject *c = abi.cdata(a, abi.cdata_closure);
        if (c == NULL) {
            PyErr_Clear();
            return 0;
        }
        impl = PyLong_CheckExact(c) ? PyLong_AsVoidPtr(c) : NULL;
        Py_DECREF(c);
        if (impl == NULL) {
            PyErr_Clear();
            return 0;
        }
        handle = &impl;
    }
    void *p;
    int32_t code, type, index;
    if (abi.data_ptr(handle, &p) != 0 || abi.dtype(handle, &code) != 0 || abi.device_type(handle, &type) != 0
        || code < 0 || code >= ABI_DTYPES || abi.dtypes[code] == NULL)
        return 0;
    if (type == abi.host_type)
        *dev = -1;
    else if (type == abi.gpu_type && abi.device_index(handle, &index) == 0)
        *dev = index;
    else
        return 0;
    *ptr = (uint64_t)(uintptr_t)p;
    *dtype = abi.dtypes[code];
    return 1;
}

/* The current stream of `device` for a launch whose stream comes from `getter` (the kernel's stream_fn):
 * 1 with *out set, 0 when the C ABI does not answer for it (no exception set: the getter is called). On its
 * first answer it calls the getter too and keeps using the ABI only if the two agree. */
static int
abi_stream(PyObject *getter, PyObject *device, uint64_t *out)
{
    if (getter != abi.stream_getter || abi.stream_getter == NULL || abi.stream_state < 0)
        return 0;
    long dev = PyLong_AsLong(device);
    void *s = NULL;
    if (dev < 0 || dev > INT32_MAX) {
        PyErr_Clear();
        return 0;
    }
    if (abi.current_stream((int32_t)dev, &s) != 0) {
        /* torch threw inside (no driver, a bad device): an error costs it a C++ exception and a symbolized
         * backtrace (~0.5M instructions), so the getter answers from now on and raises what it raises */
        abi.stream_state = -1;
        return 0;
    }
    if (abi.stream_state == 0) {
        PyObject *want = PyObject_CallOneArg(getter, device);
        uint64_t w = want != NULL && PyLong_CheckExact(want) ? as_u64(want) : (uint64_t)-1;
        Py_XDECREF(want);
        PyErr_Clear();
        abi.stream_state = (w == (uint64_t)(uintptr_t)s) ? 1 : -1;
        if (abi.stream_state < 0)
            return 0;
    }
    *out = (uint64_t)(uintptr_t)s;
    return 1;
}

/* set_tensor_stream(None) or set_tensor_stream(getter, address of aoti_torch_get_current_cuda_stream). */
static PyObject *
set_tensor_stream(PyObject *module, PyObject *args)
{
    PyObject *getter;
    unsigned long long address = 0;
    if (!PyArg_ParseTuple(args, "O|K", &getter, &address))
        return NULL;
    Py_CLEAR(abi.stream_getter);
    abi.current_stream = NULL;
    abi.stream_state = 0;
    if (getter == Py_None)
        Py_RETURN_NONE;
    if (!PyCallable_Check(getter) || address == 0) {
        PyErr_SetString(PyExc_TypeError, "set_tensor_stream: needs the getter and a function address");
        return NULL;
    }
    abi.current_stream = (int32_t(*)(int32_t, void **))(uintptr_t)address;
    abi.stream_getter = Py_NewRef(getter);
    Py_RETURN_NONE;
}

/* tensor_stream_state() -> 0 not compared yet, 1 the C ABI answers, -1 the getter does; None: not installed. */
static PyObject *
tensor_stream_state(PyObject *module, PyObject *unused)
{
    if (abi.stream_getter == NULL)
        Py_RETURN_NONE;
    return PyLong_FromLong(abi.stream_state);
}

/* set_tensor_abi(None) or set_tensor_abi((data_ptr, dtype, device_type, device_index), host_type, gpu_type,
 * {code: dtype}, direct_offset): the four functions' addresses; for the tensor type set_tensor_type was last
 * given, whose _cdata must be a getset descriptor; direct_offset 0 or where its objects hold the at::Tensor.
 * karchive/runtime/_torch_abi.py checks the result before relying on it. */
static PyObject *
set_tensor_abi(PyObject *module, PyObject *args)
{
    PyObject *fns = NULL, *dtypes = NULL;
    int host_type = 0, gpu_type = 0;
    Py_ssize_t direct = 0;
    if (!PyArg_ParseTuple(args, "O|iiO!n", &fns, &host_type, &gpu_type, &PyDict_Type, &dtypes, &direct))
        return NULL;
    abi_clear();
    if (fns == Py_None)
        Py_RETURN_NONE;
    unsigned long long addr[4];
    if (dtypes == NULL || tensor_type == NULL
        || !PyArg_ParseTuple(fns, "KKKK", &addr[0], &addr[1], &addr[2], &addr[3])) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "set_tensor_abi: needs a tensor type, four addresses and the dtypes");
        return NULL;
    }
    for (int i = 0; i < 4; i++)
        if (addr[i] == 0) {
            PyErr_SetString(PyExc_ValueError, "set_tensor_abi: a null function address");
            return NULL;
        }
    PyObject *descr = PyObject_GetAttrString((PyObject *)tensor_type, "_cdata");
    if (descr == NULL)
        return NULL;
    if (!Py_IS_TYPE(descr, &PyGetSetDescr_Type) || ((PyGetSetDescrObject *)descr)->d_getset->get == NULL) {
        Py_DECREF(descr);
        PyErr_SetString(PyExc_TypeError, "set_tensor_abi: the tensor type's _cdata is not a getset descriptor");
        return NULL;
    }
    abi.cdata = ((PyGetSetDescrObject *)descr)->d_getset->get;
    abi.cdata_closure = ((PyGetSetDescrObject *)descr)->d_getset->closure;
    Py_DECREF(descr); /* the type keeps it (and its PyGetSetDef, static in torch) alive */
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dtypes, &pos, &key, &value)) {
        long code = PyLong_AsLong(key);
        if (code < 0 || code >= ABI_DTYPES) {
            abi_clear();
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "set_tensor_abi: dtype code %ld out of range", code);
            return NULL;
        }
        Py_XSETREF(abi.dtypes[code], Py_NewRef(value));
    }
    if (direct != 0 && (direct < (Py_ssize_t)sizeof(PyObject) || direct % (Py_ssize_t)sizeof(void *) != 0
                        || direct + (Py_ssize_t)sizeof(void *) > tensor_type->tp_basicsize)) {
        abi_clear();
        PyErr_Format(PyExc_ValueError, "set_tensor_abi: offset %zd is not inside the tensor object", direct);
        return NULL;
    }
    abi.direct = direct;
    abi.data_ptr = (AbiPtrFn)(uintptr_t)addr[0];
    abi.dtype = (AbiI32Fn)(uintptr_t)addr[1];
    abi.device_type = (AbiI32Fn)(uintptr_t)addr[2];
    abi.device_index = (AbiI32Fn)(uintptr_t)addr[3];
    abi.host_type = host_type;
    abi.gpu_type = gpu_type;
    abi.on = 2; /* launches use it once _torch_abi.py has checked it (tensor_abi_activate) */
    Py_RETURN_NONE;
}

/* tensor_abi_activate(): launches read through the reader set_tensor_abi installed (checked meanwhile). */
static PyObject *
tensor_abi_activate(PyObject *module, PyObject *unused)
{
    if (abi.on == 0) {
        PyErr_SetString(PyExc_RuntimeError, "tensor_abi_activate: no reader installed");
        return NULL;
    }
    abi.on = 1;
    Py_RETURN_NONE;
}

/* tensor_abi_read(t) -> (address, dtype, device), or None where the installed reader declines: what a launch
 * reads for t (_torch_abi.py checks it against data_ptr(), .dtype and get_device() before relying on it). */
static PyObject *
tensor_abi_read(PyObject *module, PyObject *t)
{
    uint64_t ptr;
    PyObject *dtype;
    long dev;
    if (!is_read_tensor(t)) {
        PyErr_SetString(PyExc_TypeError, "tensor_abi_read: not an instance of the tensor type");
        return NULL;
    }
    if (!abi.on || !abi_read(t, &ptr, &dtype, &dev))
        Py_RETURN_NONE;
    return Py_BuildValue("(KOl)", (unsigned long long)ptr, dtype, dev);
}

/* tensor_abi_codes(t) -> (address, dtype code, device type, device index): the ABI's raw answers, for
 * _torch_abi.py to learn the dtype codes from and check them (None where a call fails). */
static PyObject *
tensor_abi_codes(PyObject *module, PyObject *args)
{
    PyObject *t;
    unsigned long long addr[4];
    if (!PyArg_ParseTuple(args, "O(KKKK)", &t, &addr[0], &addr[1], &addr[2], &addr[3]))
        return NULL;
    if (!is_read_tensor(t)) {
        PyErr_SetString(PyExc_TypeError, "tensor_abi_codes: not an instance of the tensor type");
        return NULL;
    }
    PyObject *c = PyObject_GetAttrString(t, "_cdata");
    if (c == NULL)
        return NULL;
    void *impl = PyLong_AsVoidPtr(c);
    Py_DECREF(c);
    if (impl == NULL)
        return PyErr_Occurred() ? NULL : Py_BuildValue("(OOOO)", Py_None, Py_None, Py_None, Py_None);
    void *handle = &impl, *p;
    int32_t v[3];
    PyObject *out[4];
    out[0] = ((AbiPtrFn)(uintptr_t)addr[0])(handle, &p) == 0 ? PyLong_FromVoidPtr(p) : Py_NewRef(Py_None);
    for (int i = 0; i < 3; i++)
        out[i + 1] = ((AbiI32Fn)(uintptr_t)addr[i + 1])(handle, &v[i]) == 0 ? PyLong_FromLong(v[i])
                                                                              : Py_NewRef(Py_None);
    return Py_BuildValue("(NNNN)", out[0], out[1], out[2], out[3]);
}

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
    abi_clear(); /* a reader for the old type; _torch_abi.py installs one for the new type */
    Py_CLEAR(tensor_subtype);
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

/* set_tensor_subtype(tp or None): a subclass of the tensor type whose instances are read as the type's are
 * (the caller vouches that its accessors behave the same: see tensor_subtype). */
static PyObject *
set_tensor_subtype(PyObject *module, PyObject *tp)
{
    if (tp != Py_None && (tensor_type == NULL || !PyType_Check(tp)
                          || !PyType_IsSubtype((PyTypeObject *)tp, tensor_type))) {
        PyErr_SetString(PyExc_TypeError, "set_tensor_subtype expects a subclass of the tensor type, or None");
        return NULL;
    }
    Py_XSETREF(tensor_subtype, tp == Py_None ? NULL : (PyTypeObject *)Py_NewRef(tp));
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
 * Returns 0 when dtype is a new reference, 1 when it is borrowed (Py_None for ints and None, the common
 * raw address case; a torch.dtype the ABI reader's table holds), -1 with an exception set when it cannot
 * be read. */
static int
read_pointer(PyObject *a, PyObject *pointer_info, uint64_t *ptr, PyObject **dtype, long *dev, int *has_dev)
{
    *dtype = NULL;
    *has_dev = 0;
    if (is_read_tensor(a)) {
        if (abi.on == 1 && abi_read(a, ptr, dtype, dev)) {
            *has_dev = 1;
            return 1;
        }
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
