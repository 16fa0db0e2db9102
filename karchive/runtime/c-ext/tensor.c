/* The directly read tensor type and reading a pointer argument (address, dtype, device).
 * Part of karchive's compiled launcher: compiled inside ../_fastlaunch.c, after fastlaunch.h. */

#include "fastlaunch.h"

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
