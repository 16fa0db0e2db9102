/* karchive's compiled launch path: the per-call work of kernel[grid](...) in C.
 *
 * Read karchive/runtime/launch/kernel.py first: it describes the whole path; launch/_plan.py says
 * what the selection key holds; launch/_pypath.py is the same steps in Python (the
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
 * objects, launches with scratch (LaunchEntry.launch_dims; clusters, cooperative grids and PDL are packed
 * here into a CUlaunchConfig for cuLaunchKernelEx where the binding gives its address),
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
 * benchmark. Bound is the base of the bound launcher (karchive/runtime/launch/_native.py).
 */

/* One file per concern under c-ext/, compiled as one translation unit in this order (each needs the
 * ones before it): the hot path inlines across them and nothing is exported but PyInit__fastlaunch. */
#include "c-ext/fastlaunch.h"
#include "c-ext/tensor.c"
#include "c-ext/pack.c"
#include "c-ext/entry.c"
#include "c-ext/dispatcher.c"
#include "c-ext/subscript.c"
#include "c-ext/bound.c"
#include "c-ext/testing.c"

/* ------------------------------------------------------------------------------------------------ */
/* The module                                                                                        */

static PyMethodDef module_methods[] = {
    {"set_tensor_type", (PyCFunction)set_tensor_type, METH_O,
     "set_tensor_type(tp or None): the type whose data_ptr()/dtype/get_device() are read directly"},
    {"set_tensor_subtype", (PyCFunction)set_tensor_subtype, METH_O,
     "set_tensor_subtype(tp or None): a subclass of that type read the same way (torch.nn.Parameter)"},
    {"set_tensor_abi", (PyCFunction)set_tensor_abi, METH_VARARGS,
     "set_tensor_abi(None | (fns, host_type, gpu_type, {code: dtype})): read that type through torch's C ABI"},
    {"tensor_abi_activate", (PyCFunction)tensor_abi_activate, METH_NOARGS,
     "tensor_abi_activate(): launches read through the reader set_tensor_abi installed (after checking it)"},
    {"set_tensor_stream", (PyCFunction)set_tensor_stream, METH_VARARGS,
     "set_tensor_stream(None | (getter, address)): answer getter(device) with torch's C ABI current stream"},
    {"tensor_stream_state", (PyCFunction)tensor_stream_state, METH_NOARGS,
     "tensor_stream_state() -> None, 0 (not compared yet), 1 (C ABI answers) or -1 (the getter answers)"},
    {"tensor_abi_codes", (PyCFunction)tensor_abi_codes, METH_VARARGS,
     "tensor_abi_codes(t, fns) -> (address, dtype code, device type, device index) as the ABI answers"},
    {"tensor_abi_read", (PyCFunction)tensor_abi_read, METH_O,
     "tensor_abi_read(t) -> (address, dtype, device) as a launch reads it, or None where the reader declines"},
    {"forward_address", (PyCFunction)forward_address, METH_NOARGS,
     "address of a C function with cuLaunchKernel's signature that forwards each call to forward_to's target"},
    {"forward_ex_address", (PyCFunction)forward_ex_address, METH_NOARGS,
     "address of a C function with cuLaunchKernelEx's signature that forwards each call (and its attributes)"},
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
    "karchive's compiled launch path (see karchive/runtime/launch/kernel.py).", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__fastlaunch(void)
{
    if (PyType_Ready(&EntryType) < 0 || PyType_Ready(&KeyType) < 0 || PyType_Ready(&DispatcherType) < 0
        || PyType_Ready(&BoundType) < 0 || PyType_Ready(&GridLaunchType) < 0 || PyType_Ready(&SubscriptType) < 0)
        return NULL;
    str_run = PyUnicode_InternFromString("_run");
    str_fixed_ptr = PyUnicode_InternFromString("_fixed_ptr");
    str_source = PyUnicode_InternFromString("source");
    if (str_fixed_ptr == NULL || str_source == NULL)
        return NULL;
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
