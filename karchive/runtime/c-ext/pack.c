/* Packing one scalar exactly as Python's struct module does (the per-argument work of a launch).
 * Part of karchive's compiled launcher: compiled inside ../_fastlaunch.c, after fastlaunch.h. */

#include "fastlaunch.h"

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
