/* Entry: one loaded variant, made from its VariantRecord by karchive/runtime/launch/_native.py.
 * Part of karchive's compiled launcher: compiled inside ../_fastlaunch.c, after fastlaunch.h. */

#include "fastlaunch.h"

/* ------------------------------------------------------------------------------------------------ */
/* Entry: one variant loaded on one device (made from its VariantRecord by launch/_native.py)          */

typedef struct {
    Py_ssize_t value;  /* index into the call values; -1 for a scratch slot */
    Py_ssize_t offset; /* byte offset in the parameter buffer */
    char code;         /* pack code; 'D': a host tensor descriptor (several binary parameters) */
    Py_ssize_t size;   /* 'D': bytes the expansion writes at offset */
    PyObject *expand;  /* 'D': value -> bytes of exactly size (LaunchEntry.descriptor_packer); else NULL */
    /* 'D': the last karchive.TensorDescriptor expanded here (a weak reference: identity without keeping it or
     * its tensor alive), the address and device it had, and its bytes. A launch with the same object at the
     * same address copies them without calling Python; anything else calls expand (which checks and memoises
     * the same way in Python, descriptors.expand). */
    PyObject *memo_ref;
    PyObject *memo_blob;
    uint64_t memo_ptr;
    long memo_dev;
    int memo_has_dev;
    /* 'S': a scratch pointer: bytes per block (num_ctas counted), the entry's scratch index, and the buffer the
     * owner's pool gave last time (for this stream, this many bytes): taken again while it is large enough. */
    Py_ssize_t per_block;
    Py_ssize_t scratch_index;
    uint64_t scratch_stream;
    uint64_t scratch_bytes;
    uint64_t scratch_address;
    int scratch_known;
} PackSlot;

typedef struct {
    PyObject_HEAD
    LaunchFn launch;         /* NULL: launch through python_launch (or launch_ex) */
    LaunchExFn launch_ex;    /* cuLaunchKernelEx, for an entry with launch attributes; else NULL */
    KaLaunchAttr attrs[MAX_ATTRS]; /* its attributes, made once (the order LaunchEntry.raw_launch gives them) */
    unsigned int n_attrs;
    unsigned int cluster[3]; /* the grid of a cluster launch is counted in blocks: grid * cluster */
    void *function;
    unsigned int block_x;
    unsigned int shared;
    Py_ssize_t n_params;     /* the ABI's parameters (a descriptor is one), scratch slots included */
    Py_ssize_t n_binary;     /* the binary's parameters (a descriptor is several): kernelParams entries */
    Py_ssize_t buffer_size;
    PackSlot *slots;
    Py_ssize_t *param_offsets; /* per binary parameter: its byte offset in the buffer */
    PyObject *device;        /* int: argument of the default-stream function */
    PyObject *meta;          /* dict: what a callable grid sees besides the arguments */
    PyObject *python_launch; /* None, or owner.launch_dims(gx, gy, gz, stream, values) for every launch */
    PyObject *failed;        /* owner.failed(err, gx, gy, gz, stream, values) */
    PyObject *explain;       /* owner.explain(values, exc) -> the exception to raise */
    PyObject *desc_type;     /* karchive.TensorDescriptor (the type 'D' slots memoise in C), or None */
    PyObject *result;        /* what a launch of this entry returns (None unless set: Entry.result) */
    PyObject *effect;        /* None, or (obj, name, value): setattr'd before each launch (Entry.effect) */
    PyObject *scratch;       /* owner.scratch_for(index, nbytes, stream) -> (address, usable bytes), or NULL */
    int has_scratch;         /* some slot is 'S' */
} Entry;

static PyTypeObject EntryType;
static PyObject *str_fixed_ptr, *str_source; /* karchive.TensorDescriptor's attributes (interned at import) */

/* Whether the weak reference ref still points at o (identity only: o is alive, the caller holds it). */
static int
weak_is(PyObject *ref, PyObject *o)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *target;
    if (PyWeakref_GetRef(ref, &target) <= 0) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(target);
    return target == o;
#else
    return PyWeakref_GET_OBJECT(ref) == o;
#endif
}

/* The address (and device, where known) a karchive.TensorDescriptor points at now, read as
 * descriptors.expand reads it: its fixed address, else pointer_info(source) (torch read directly).
 * 1 when read; 0, no exception, when it cannot be read here (expand then says why, or reads it itself). */
static int
descriptor_address(PyObject *v, PyObject *pointer_info, uint64_t *ptr, long *dev, int *has_dev)
{
    PyObject *fixed = PyObject_GetAttr(v, str_fixed_ptr);
    if (fixed == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (fixed != Py_None) {
        *ptr = PyLong_CheckExact(fixed) ? as_u64(fixed) : (uint64_t)-1;
        *has_dev = 0;
        *dev = 0;
        Py_DECREF(fixed);
        if (*ptr == (uint64_t)-1) {
            PyErr_Clear();
            return 0;
        }
        return 1;
    }
    Py_DECREF(fixed);
    PyObject *source = PyObject_GetAttr(v, str_source);
    if (source == NULL) {
        PyErr_Clear();
        return 0;
    }
    /* read_pointer's two cases, without the dtype (not calling read_pointer itself keeps it inlined into the
     * key building of every launch: one call site) */
    *dev = 0;
    *has_dev = 0;
    PyObject *r, *d;
    if (is_read_tensor(source)) {
        r = tensor_data_ptr_of(source);
        d = r != NULL ? tensor_get_device_of(source) : NULL;
        Py_DECREF(source);
        if (d == NULL) {
            Py_XDECREF(r);
            PyErr_Clear();
            return 0;
        }
        *ptr = as_u64(r);
        *dev = PyLong_AsLong(d);
        *has_dev = 1;
        Py_DECREF(r);
        Py_DECREF(d);
    }
    else {
        r = PyObject_CallOneArg(pointer_info, source);
        Py_DECREF(source);
        if (r == NULL || !PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3 || !PyLong_Check(PyTuple_GET_ITEM(r, 0))) {
            Py_XDECREF(r);
            PyErr_Clear();
            return 0;
        }
        *ptr = as_u64(PyTuple_GET_ITEM(r, 0));
        d = PyTuple_GET_ITEM(r, 2);
        if (d != Py_None) {
            *dev = PyLong_AsLong(d);
            *has_dev = 1;
        }
        Py_DECREF(r);
    }
    if (PyErr_Occurred()) { /* an address or device that is not a C integer: expand says why */
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static int
entry_traverse(Entry *self, visitproc visit, void *arg)
{
    Py_VISIT(self->device);
    Py_VISIT(self->meta);
    Py_VISIT(self->python_launch);
    Py_VISIT(self->failed);
    Py_VISIT(self->explain);
    Py_VISIT(self->desc_type);
    Py_VISIT(self->result);
    Py_VISIT(self->effect);
    Py_VISIT(self->scratch);
    for (Py_ssize_t i = 0; self->slots != NULL && i < self->n_params; i++) {
        Py_VISIT(self->slots[i].expand);
        Py_VISIT(self->slots[i].memo_ref);
        Py_VISIT(self->slots[i].memo_blob);
    }
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
    Py_CLEAR(self->desc_type);
    Py_CLEAR(self->result);
    Py_CLEAR(self->effect);
    Py_CLEAR(self->scratch);
    for (Py_ssize_t i = 0; self->slots != NULL && i < self->n_params; i++) {
        Py_CLEAR(self->slots[i].expand);
        Py_CLEAR(self->slots[i].memo_ref);
        Py_CLEAR(self->slots[i].memo_blob);
    }
    return 0;
}

static void
entry_dealloc(Entry *self)
{
    PyObject_GC_UnTrack(self);
    entry_clear(self);
    PyMem_Free(self->slots);
    PyMem_Free(self->param_offsets);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
entry_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"launch", "function", "block_x", "shared", "device", "slots", "buffer_size", "meta",
                             "owner", "via_python", "param_offsets", "desc_type", "launch_ex", "cluster",
                             "cooperative", "pdl", NULL};
    unsigned long long launch, function, launch_ex = 0;
    unsigned int block_x, shared, cluster[3] = {1, 1, 1};
    PyObject *device, *slots, *meta, *owner, *param_offsets = NULL, *desc_type = Py_None;
    int via_python, cooperative = 0, pdl = 0;
    Py_ssize_t buffer_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "KKIIO!O!nO!Op|O!OK(III)pp", kwlist, &launch, &function, &block_x,
                                     &shared, &PyLong_Type, &device, &PyTuple_Type, &slots, &buffer_size,
                                     &PyDict_Type, &meta, &owner, &via_python, &PyTuple_Type, &param_offsets,
                                     &desc_type, &launch_ex, &cluster[0], &cluster[1], &cluster[2], &cooperative,
                                     &pdl))
        return NULL;
    if (cluster[0] == 0 || cluster[1] == 0 || cluster[2] == 0) {
        PyErr_SetString(PyExc_ValueError, "Entry: cluster dims must be positive");
        return NULL;
    }
    if (desc_type != Py_None && !PyType_Check(desc_type)) {
        PyErr_SetString(PyExc_TypeError, "Entry: desc_type must be a type or None");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(slots);
    Py_ssize_t nb = param_offsets != NULL ? PyTuple_GET_SIZE(param_offsets) : n;
    if (buffer_size < 0 || n > 4096 || nb > 4096 || nb < n) {
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
    self->n_params = n;
    self->param_offsets = PyMem_Calloc(nb ? nb : 1, sizeof(Py_ssize_t));
    if (self->param_offsets == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyTuple_GET_ITEM(slots, i);
        Py_ssize_t value, offset, size = 0;
        const char *code;
        Py_ssize_t code_len;
        PyObject *expand = NULL;
        /* (value, code, offset), or (value, "D", offset, expand, size) for a host tensor descriptor, or
         * (-1, "S", offset, scratch index, bytes per block) for a scratch pointer */
        if (!PyArg_ParseTuple(s, "ns#n|On", &value, &code, &code_len, &offset, &expand, &size)) {
            Py_DECREF(self);
            return NULL;
        }
        int desc = code_len == 1 && code[0] == 'D';
        int scr = code_len == 1 && code[0] == 'S';
        Py_ssize_t index = -1;
        if (scr) {
            index = expand != NULL && PyLong_CheckExact(expand) ? PyLong_AsSsize_t(expand) : -1;
            expand = NULL;
            self->has_scratch = 1;
        }
        Py_ssize_t width = desc ? size : scr ? 8 : code_len == 1 ? code_size(code[0]) : 0;
        if (code_len != 1 || width <= 0 || offset < 0 || offset + width > buffer_size
            || (code[0] == 'Z' || scr) != (value < 0) || (scr && (index < 0 || size <= 0))
            || desc != (expand != NULL) || (desc && !PyCallable_Check(expand))) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "Entry: bad slot %zd", i);
            Py_DECREF(self);
            return NULL;
        }
        self->slots[i].value = value;
        self->slots[i].offset = offset;
        self->slots[i].code = code[0];
        self->slots[i].size = width;
        self->slots[i].expand = Py_XNewRef(expand);
        self->slots[i].per_block = scr ? size : 0;
        self->slots[i].scratch_index = index;
    }
    for (Py_ssize_t k = 0; k < nb; k++) {
        Py_ssize_t offset = param_offsets != NULL ? PyLong_AsSsize_t(PyTuple_GET_ITEM(param_offsets, k))
                                                  : self->slots[k].offset;
        if (offset < 0 || offset >= buffer_size) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "Entry: bad parameter offset %zd", k);
            Py_DECREF(self);
            return NULL;
        }
        self->param_offsets[k] = offset;
    }
    self->launch = (LaunchFn)(uintptr_t)launch;
    self->function = (void *)(uintptr_t)function;
    self->block_x = block_x;
    self->shared = shared;
    self->n_binary = nb;
    self->buffer_size = buffer_size;
    self->device = Py_NewRef(device);
    self->meta = Py_NewRef(meta);
    self->desc_type = Py_NewRef(desc_type);
    self->result = Py_NewRef(Py_None);
    self->effect = Py_NewRef(Py_None);
    self->python_launch = via_python ? PyObject_GetAttrString(owner, "launch_dims") : Py_NewRef(Py_None);
    self->failed = PyObject_GetAttrString(owner, "failed");
    if (self->has_scratch && !via_python && (self->scratch = PyObject_GetAttrString(owner, "scratch_for")) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->explain = PyObject_GetAttrString(owner, "explain");
    if (self->python_launch == NULL || self->failed == NULL || self->explain == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->launch_ex = (LaunchExFn)(uintptr_t)launch_ex;
    memcpy(self->cluster, cluster, sizeof(cluster));
    self->n_attrs = 0;
    memset(self->attrs, 0, sizeof(self->attrs));
    if (pdl) {
        self->attrs[self->n_attrs].id = ATTR_PDL;
        self->attrs[self->n_attrs++].value.flag = 1;
    }
    if (cooperative) {
        self->attrs[self->n_attrs].id = ATTR_COOPERATIVE;
        self->attrs[self->n_attrs++].value.flag = 1;
    }
    if ((uint64_t)cluster[0] * cluster[1] * cluster[2] > 1) {
        self->attrs[self->n_attrs].id = ATTR_CLUSTER_DIMENSION;
        self->attrs[self->n_attrs].value.cluster.x = cluster[0];
        self->attrs[self->n_attrs].value.cluster.y = cluster[1];
        self->attrs[self->n_attrs++].value.cluster.z = cluster[2];
        self->attrs[self->n_attrs].id = ATTR_CLUSTER_SCHEDULING;
        self->attrs[self->n_attrs++].value.policy = CLUSTER_POLICY_SPREAD;
    }
    if (!via_python && launch == 0 && launch_ex == 0) {
        PyErr_SetString(PyExc_ValueError, "Entry: no launch function and not via_python");
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyObject *
entry_get_meta(Entry *self, void *closure)
{
    return Py_NewRef(self->meta);
}

static PyObject *
entry_get_result(Entry *self, void *closure)
{
    return Py_NewRef(self->result);
}

static int
entry_set_result(Entry *self, PyObject *value, void *closure)
{
    Py_XSETREF(self->result, Py_NewRef(value != NULL ? value : Py_None)); /* del: back to None */
    return 0;
}

static PyObject *
entry_get_effect(Entry *self, void *closure)
{
    return Py_NewRef(self->effect);
}

static int
entry_set_effect(Entry *self, PyObject *value, void *closure)
{
    int ok = value == NULL || value == Py_None
             || (PyTuple_CheckExact(value) && PyTuple_GET_SIZE(value) == 3
                 && PyUnicode_Check(PyTuple_GET_ITEM(value, 1)));
    if (!ok) {
        PyErr_SetString(PyExc_TypeError, "Entry.effect: None or (obj, name, value)");
        return -1;
    }
    Py_XSETREF(self->effect, Py_NewRef(value != NULL ? value : Py_None)); /* del: back to None */
    return 0;
}

static PyGetSetDef entry_getset[] = {
    {"meta", (getter)entry_get_meta, NULL, "the variant's meta-parameters", NULL},
    {"result", (getter)entry_get_result, (setter)entry_set_result, "what a launch of this entry returns", NULL},
    {"effect", (getter)entry_get_effect, (setter)entry_set_effect,
     "None, or (obj, name, value): setattr(obj, name, value) before each launch of this entry", NULL},
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
