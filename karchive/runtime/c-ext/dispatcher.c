/* Key and Dispatcher: kernel[grid](...) for one kernel: bind, key, look up, launch.
 * Part of karchive's compiled launcher: compiled inside ../_fastlaunch.c, after fastlaunch.h. */

#include "fastlaunch.h"

/* ------------------------------------------------------------------------------------------------ */
/* Key: one resolved selection key and what it leads to                                              */

typedef struct {
    PyObject *obj;  /* compared by identity, else same type and == (dtypes, constexpr values) */
    PyObject *type; /* compared by identity (the argument's Python type) */
    uint64_t bits;  /* device and hints */
} KeyPart;

#define MAX_GRID_READS 16

/* A callable grid's result, remembered with what it read (owner.grid says what that was; launch/_grid.py
 * says when it is safe): its code, globals dict and defaults (none), its closure cells' values, the values of
 * the parameters it read and the identity of the globals it named. A call whose grid function has the same
 * code and globals and sees the same values takes the remembered dims; anything else evaluates the grid again
 * (and remembers that). The meta-parameters it read are the key's entry's, fixed. */
typedef struct {
    PyObject *code;      /* NULL: nothing remembered */
    PyObject *globals;
    PyObject *cells;     /* tuple: each closure cell's value then (NULL: no closure) */
    PyObject *names;     /* tuple: the global names it reads */
    PyObject *gvals;     /* tuple: their values then (compared by identity) */
    PyObject *read_vals; /* tuple: the values of the parameters it read */
    Py_ssize_t n_reads;
    Py_ssize_t read_slot[MAX_GRID_READS];
    unsigned int g[3];
} GridMemo;

typedef struct {
    PyObject_VAR_HEAD
    Entry *entry;
    PyObject *stream_fn; /* device -> stream handle, or None for stream 0 */
    PyObject *extra;     /* NULL, or a tuple of (slot, value): values a resolver adds to the call */
    GridMemo grid;
    KeyPart part[1];
} Key;

static void
grid_memo_clear(GridMemo *m)
{
    Py_CLEAR(m->code);
    Py_CLEAR(m->globals);
    Py_CLEAR(m->cells);
    Py_CLEAR(m->names);
    Py_CLEAR(m->gvals);
    Py_CLEAR(m->read_vals);
    m->n_reads = 0;
}

static PyTypeObject KeyType;

static int
key_traverse(Key *self, visitproc visit, void *arg)
{
    Py_VISIT(self->entry);
    Py_VISIT(self->stream_fn);
    Py_VISIT(self->extra);
    Py_VISIT(self->grid.code);
    Py_VISIT(self->grid.globals);
    Py_VISIT(self->grid.cells);
    Py_VISIT(self->grid.names);
    Py_VISIT(self->grid.gvals);
    Py_VISIT(self->grid.read_vals);
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
    Py_CLEAR(self->extra);
    grid_memo_clear(&self->grid);
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
    PyObject *owner;            /* the Python side of the contract (fastlaunch.h); its methods, read once: */
    PyObject *miss;             /* owner.miss(grid, args, kwargs) -> target */
    PyObject *slow;             /* owner.slow(grid, args, kwargs) -> result */
    PyObject *grid_of;          /* owner.grid(grid, meta, values) -> (gx, gy, gz, reads) */
    PyObject *stream_handle;    /* owner.stream_handle(obj) -> int */
    PyObject *pointer_info;     /* owner.pointer_info(obj) -> (ptr, dtype, device) */
    PyObject *mixed_key;        /* owner.mixed_key(obj) */
    PyObject *missing;          /* select.MISSING */
    PyObject *done_type;        /* owner.done_type: a miss answered in Python returns one (.result); None: never */
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

/* make_key's way out part-way (at slot i): the slots after i are marked as owning nothing, so that
 * release_key, which walks every slot, never reads what this call did not write (issue 34: a pointer
 * argument whose address could not be read at slot 0 freed stack garbage). */
static int
key_stop(Dispatcher *d, CallKey *k, Py_ssize_t i, int rc)
{
    for (Py_ssize_t j = i + 1; j < d->n_slots; j++)
        k->own[j] = 0;
    return rc;
}

/* 1 when the key is built, 0 when this call cannot be keyed here (the slow path takes it), -1 on error.
 * Every part of k that release_key reads is written (it may run after a failure part-way: key_stop). */
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
                return key_stop(d, k, i, -1);
            k->obj[i] = dtype;
            k->own[i] = (got == 0);
            k->type[i] = (PyObject *)Py_TYPE(a);
            if ((d->flags[i] & F_VALUE) && PyLong_CheckExact(a)) {
                /* a resolver reads it: an int address is keyed by its value (a tensor by its dtype) */
                if (k->own[i])
                    Py_CLEAR(k->obj[i]);
                k->obj[i] = a;
                k->own[i] = 0;
            }
            uint64_t devcode = has_dev ? (uint64_t)(dev + 2) : 0; /* unknown 0, host 1, ordinal n: n + 2 */
            k->bits[i] = F_PRESENT | (devcode << 16) | (((d->flags[i] & F_ALIGN) && !(ptrs[i] & 15)) ? F_ALIGN : 0);
            break;
        }
        case ROLE_INT: {
            k->type[i] = (PyObject *)Py_TYPE(a);
            if ((d->flags[i] & F_EXACT) && !PyLong_CheckExact(a) && !PyBool_Check(a))
                return key_stop(d, k, i, 0); /* not a plain int: the resolver reads it in Python */
            if (d->flags[i] & F_VALUE)
                k->obj[i] = a;
            unsigned char want = d->flags[i] & (F_EQ1 | F_DIV16 | F_RANGE);
            if (!want)
                break;
            PyObject *v;
            if (PyLong_Check(a))
                v = Py_NewRef(a);
            else if (PyIndex_Check(a)) {
                v = PyNumber_Index(a);
                if (v == NULL)
                    return key_stop(d, k, i, -1);
            }
            else
                return key_stop(d, k, i, 0); /* not an integer: the checks in Python say why */
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            uint64_t low = PyLong_AsUnsignedLongLongMask(v);
            Py_DECREF(v);
            if (PyErr_Occurred())
                return key_stop(d, k, i, -1);
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
            if ((d->flags[i] & F_EXACT) && !PyFloat_CheckExact(a) && !PyLong_CheckExact(a) && !PyBool_Check(a))
                return key_stop(d, k, i, 0);
            if (d->flags[i] & F_VALUE)
                k->obj[i] = a;
            break;
        case ROLE_VALUE:
            k->obj[i] = a;
            break;
        case ROLE_MIXED: {
            if ((d->flags[i] & F_VALUE) && (PyLong_CheckExact(a) || PyFloat_CheckExact(a) || PyBool_Check(a)
                                            || PyUnicode_CheckExact(a) || a == Py_None)) {
                k->obj[i] = a; /* a scalar a resolver reads: by type and value */
                k->type[i] = (PyObject *)Py_TYPE(a);
                break;
            }
            PyObject *o = PyObject_CallOneArg(d->mixed_key, a);
            if (o == NULL)
                return key_stop(d, k, i, -1);
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

/* target.extra: ((slot, value), ...) with each slot a kernel parameter that is not a pointer. */
static int
check_extra(Dispatcher *d, PyObject *extra)
{
    if (!PyTuple_CheckExact(extra))
        goto bad;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(extra); j++) {
        PyObject *pair = PyTuple_GET_ITEM(extra, j);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyLong_CheckExact(PyTuple_GET_ITEM(pair, 0)))
            goto bad;
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0));
        if (i < 0 || i >= d->n_params || d->roles[i] == ROLE_PTR) {
            PyErr_Clear();
            goto bad;
        }
    }
    return 1;
bad:
    PyErr_SetString(PyExc_TypeError, "target.extra must be ((parameter index, value), ...), no pointer");
    return 0;
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
    /* An entry launched from Python (launch attributes, scratch, a pointer whose role is mixed across the
       kernel's variants: None in one, a tensor in another) converts its own values there; only an entry the
       C code packs must read pointers this dispatcher extracted. */
    int packed_here = (e->launch != NULL || e->launch_ex != NULL) && e->python_launch == Py_None;
    for (Py_ssize_t s = 0; s < e->n_params; s++) { /* the entry reads this dispatcher's call values */
        PackSlot *slot = &e->slots[s];
        if (slot->code == 'Z' || slot->code == 'S')
            continue;
        if (slot->value < 0 || slot->value >= d->n_calls
            || (packed_here && slot->code == 'P' && d->roles[d->call_positions[slot->value]] != ROLE_PTR)) {
            Py_DECREF(native);
            PyErr_SetString(PyExc_ValueError, "Entry does not fit this kernel's call values");
            return NULL;
        }
    }
    PyObject *stream_fn = PyObject_GetAttrString(target, "stream_fn");
    PyObject *extra = stream_fn ? PyObject_GetAttrString(target, "extra") : NULL;
    PyObject *remember = extra ? PyObject_GetAttrString(target, "remember") : NULL;
    int keep = remember ? PyObject_IsTrue(remember) : -1;
    Py_XDECREF(remember);
    if (keep < 0 || (extra != NULL && extra != Py_None && !check_extra(d, extra))) {
        Py_DECREF(native);
        Py_XDECREF(stream_fn);
        Py_XDECREF(extra);
        return NULL;
    }
    Key *c = PyObject_GC_NewVar(Key, &KeyType, d->n_slots);
    if (c == NULL) {
        Py_DECREF(native);
        Py_DECREF(stream_fn);
        Py_DECREF(extra);
        return NULL;
    }
    c->entry = (Entry *)native;
    c->stream_fn = stream_fn;
    c->extra = NULL;
    if (extra != Py_None)
        c->extra = Py_NewRef(extra);
    Py_DECREF(extra);
    memset(&c->grid, 0, sizeof(GridMemo));
    for (Py_ssize_t i = 0; i < d->n_slots; i++) {
        c->part[i].obj = Py_XNewRef(k->obj[i]);
        c->part[i].type = Py_XNewRef(k->type[i]);
        c->part[i].bits = k->bits[i];
    }
    PyObject_GC_Track(c);
    if (!keep)
        return c; /* launched once, not remembered (the resolver could answer differently next time) */
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

/* Whether two values a grid read are the same: identical, or of one type and == (a NaN never is). */
static int
same_value(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (a == NULL || b == NULL || Py_TYPE(a) != Py_TYPE(b))
        return 0;
    int eq = PyObject_RichCompareBool(a, b, Py_EQ);
    if (eq < 0) {
        PyErr_Clear();
        return 0;
    }
    return eq;
}

/* Whether the memo answers this call of the grid function fn (see GridMemo). */
static int
grid_memo_holds(GridMemo *m, PyObject *fn, PyObject **vals)
{
    if (m->code == NULL || PyFunction_GET_CODE(fn) != m->code || PyFunction_GET_GLOBALS(fn) != m->globals
        || PyFunction_GET_DEFAULTS(fn) != NULL || PyFunction_GET_KW_DEFAULTS(fn) != NULL)
        return 0;
    PyObject *closure = PyFunction_GET_CLOSURE(fn);
    Py_ssize_t nc = closure != NULL ? PyTuple_GET_SIZE(closure) : 0;
    if (nc != (m->cells != NULL ? PyTuple_GET_SIZE(m->cells) : 0))
        return 0;
    for (Py_ssize_t i = 0; i < nc; i++)
        if (!same_value(PyCell_GET(PyTuple_GET_ITEM(closure, i)), PyTuple_GET_ITEM(m->cells, i)))
            return 0;
    for (Py_ssize_t i = 0; i < m->n_reads; i++)
        if (!same_value(vals[m->read_slot[i]], PyTuple_GET_ITEM(m->read_vals, i)))
            return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(m->names); i++) {
        PyObject *v = PyDict_GetItemWithError(m->globals, PyTuple_GET_ITEM(m->names, i));
        if (v != PyTuple_GET_ITEM(m->gvals, i)) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* Remember fn's dims under what owner.grid says it read: reads = (slot indices, global names). Nothing is
 * remembered when the answer is not in that shape (the grid is then evaluated on every call). */
static void
grid_memo_set(Dispatcher *d, GridMemo *m, PyObject *fn, PyObject *reads, PyObject **vals, const unsigned int *g)
{
    grid_memo_clear(m);
    PyObject *slots, *names;
    if (!PyTuple_CheckExact(reads) || PyTuple_GET_SIZE(reads) != 2)
        return;
    slots = PyTuple_GET_ITEM(reads, 0);
    names = PyTuple_GET_ITEM(reads, 1);
    if (!PyTuple_CheckExact(slots) || !PyTuple_CheckExact(names) || PyTuple_GET_SIZE(slots) > MAX_GRID_READS)
        return;
    PyObject *globals = PyFunction_GET_GLOBALS(fn);
    PyObject *closure = PyFunction_GET_CLOSURE(fn);
    Py_ssize_t nc = closure != NULL ? PyTuple_GET_SIZE(closure) : 0;
    PyObject *cells = nc ? PyTuple_New(nc) : NULL;
    PyObject *gvals = PyTuple_New(PyTuple_GET_SIZE(names));
    PyObject *read_vals = PyTuple_New(PyTuple_GET_SIZE(slots));
    if ((nc && cells == NULL) || gvals == NULL || read_vals == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < nc; i++) {
        PyObject *v = PyCell_GET(PyTuple_GET_ITEM(closure, i));
        if (v == NULL)
            goto fail; /* an empty cell */
        PyTuple_SET_ITEM(cells, i, Py_NewRef(v));
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(slots); i++) {
        Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
        if (j < 0 || j >= d->n_params || vals[j] == NULL)
            goto fail;
        m->read_slot[i] = j;
        PyTuple_SET_ITEM(read_vals, i, Py_NewRef(vals[j]));
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        PyObject *v = PyUnicode_CheckExact(name) ? PyDict_GetItemWithError(globals, name) : NULL;
        if (v == NULL)
            goto fail;
        PyTuple_SET_ITEM(gvals, i, Py_NewRef(v));
    }
    m->code = Py_NewRef(PyFunction_GET_CODE(fn));
    m->globals = Py_NewRef(globals);
    m->cells = cells;
    m->names = Py_NewRef(names);
    m->gvals = gvals;
    m->read_vals = read_vals;
    m->n_reads = PyTuple_GET_SIZE(slots);
    m->g[0] = g[0];
    m->g[1] = g[1];
    m->g[2] = g[2];
    return;
fail:
    PyErr_Clear();
    Py_XDECREF(cells);
    Py_XDECREF(gvals);
    Py_XDECREF(read_vals);
    m->n_reads = 0;
}

/* A grid that is not a tuple of small ints: a callable grid remembered (GridMemo), else owner.grid. */
static int
grid_of_call(Dispatcher *d, Key *hit, PyObject *grid, PyObject **vals, unsigned int *g)
{
    int fn = PyFunction_Check(grid);
    if (fn && grid_memo_holds(&hit->grid, grid, vals)) {
        g[0] = hit->grid.g[0];
        g[1] = hit->grid.g[1];
        g[2] = hit->grid.g[2];
        return 0;
    }
    PyObject *values = all_values(d, vals);
    if (values == NULL)
        return -1;
    PyObject *r = PyObject_CallFunctionObjArgs(d->grid_of, grid, hit->entry->meta, values, NULL);
    Py_DECREF(values);
    if (r == NULL)
        return -1;
    PyObject *reads = Py_None;
    int ok = PyArg_ParseTuple(r, "IIIO", &g[0], &g[1], &g[2], &reads);
    if (ok && fn && reads != Py_None)
        grid_memo_set(d, &hit->grid, grid, reads, vals, g);
    Py_DECREF(r);
    return ok ? 0 : -1;
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
        if (abi_stream(hit->stream_fn, hit->entry->device, out))
            return 0;
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

/* A host tensor descriptor's slot: its expansion (map, shape, strides...) as the packed bytes the Python
 * entry returns (descriptors.expand: the checks, the errors, the map cache), copied to dst; in the steady state
 * from this slot's memo without calling Python. 0 done, -1 expand raised (the caller explains it), -2 other
 * error. Kept out of launch_hit: the plain path's code stays as small as it was (inlined packing). */
static KA_NOINLINE int
pack_descriptor(PackSlot *slot, PyObject *v, PyObject *desc_type, PyObject *pointer_info, unsigned char *dst)
{
    uint64_t dptr = 0;
    long ddev = 0;
    int dhas = 0, known = 0;
    if ((PyObject *)Py_TYPE(v) == desc_type) {
        /* the C memo: the same descriptor object at the same address (and device) as this slot's last
         * expansion gets the same bytes; its shape, strides, dtype and block are fixed at construction,
         * as descriptors.expand's own memo assumes. (The entry's device and the parameter's block are
         * fixed too; descriptor_block_from_variant only ever turns on, which only relaxes the check.) */
        known = descriptor_address(v, pointer_info, &dptr, &ddev, &dhas);
        if (known && slot->memo_ref != NULL && slot->memo_ptr == dptr && slot->memo_has_dev == dhas
            && slot->memo_dev == ddev && weak_is(slot->memo_ref, v)) {
            memcpy(dst, PyBytes_AS_STRING(slot->memo_blob), (size_t)slot->size);
            return 0;
        }
    }
    PyObject *blob = PyObject_CallOneArg(slot->expand, v);
    if (blob == NULL)
        return -1;
    if (!PyBytes_CheckExact(blob) || PyBytes_GET_SIZE(blob) != slot->size) {
        Py_DECREF(blob);
        PyErr_SetString(PyExc_SystemError, "descriptor expansion of the wrong size");
        return -2;
    }
    memcpy(dst, PyBytes_AS_STRING(blob), (size_t)slot->size);
    Py_CLEAR(slot->memo_ref);
    Py_CLEAR(slot->memo_blob);
    if (known) { /* expand checked it: remember it (no memo where no weak reference can be made) */
        slot->memo_ref = PyWeakref_NewRef(v, NULL);
        if (slot->memo_ref == NULL)
            PyErr_Clear();
        else {
            slot->memo_blob = Py_NewRef(blob);
            slot->memo_ptr = dptr;
            slot->memo_dev = ddev;
            slot->memo_has_dev = dhas;
        }
    }
    Py_DECREF(blob);
    return 0;
}

static int scratch_pointer(Entry *e, PackSlot *slot, uint64_t blocks, uint64_t stream, unsigned char *dst);

/* Each scratch slot's pointer (after the values are packed and the stream is known, the Python launch's order):
 * the buffer the pool gave last time while it is this stream's and large enough (the pool keeps a buffer it
 * outgrew alive), else owner.scratch_for(index, bytes, stream) -> (address, usable bytes). */
static KA_NOINLINE int
scratch_pointers(Entry *e, unsigned char *buf, const unsigned int *g, uint64_t stream)
{
    uint64_t blocks = (uint64_t)g[0] * g[1] * g[2];
    for (Py_ssize_t s = 0; s < e->n_params; s++) {
        PackSlot *slot = &e->slots[s];
        if (slot->code == 'S' && scratch_pointer(e, slot, blocks, stream, buf + slot->offset) < 0)
            return -1;
    }
    return 0;
}

static int
scratch_pointer(Entry *e, PackSlot *slot, uint64_t blocks, uint64_t stream, unsigned char *dst)
{
    uint64_t need = blocks * (uint64_t)slot->per_block;
    if (!(slot->scratch_known && slot->scratch_stream == stream && need <= slot->scratch_bytes)) {
        PyObject *r = PyObject_CallFunction(e->scratch, "nKK", slot->scratch_index, (unsigned long long)need,
                                            (unsigned long long)stream);
        unsigned long long address, usable;
        if (r == NULL)
            return -1;
        int ok = PyArg_ParseTuple(r, "KK", &address, &usable);
        Py_DECREF(r);
        if (!ok)
            return -1;
        slot->scratch_known = 1;
        slot->scratch_stream = stream;
        slot->scratch_bytes = usable;
        slot->scratch_address = address;
    }
    put_u64(dst, slot->scratch_address);
    return 0;
}

/* cuLaunchKernelEx with the entry's attributes: a CUlaunchConfig on the stack (GIL released around the call). */
static KA_NOINLINE int
launch_with_attributes(Entry *e, const unsigned int *g, uint64_t stream, void **params)
{
    KaLaunchConfig cfg = {{g[0] * e->cluster[0], g[1] * e->cluster[1], g[2] * e->cluster[2]}, {e->block_x, 1, 1},
                          e->shared, (void *)(uintptr_t)stream, e->attrs, e->n_attrs};
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = e->launch_ex(&cfg, e->function, params, NULL);
    Py_END_ALLOW_THREADS
    return err;
}

/* An entry's Entry.effect: setattr(obj, name, value) (held while it runs: Python code may replace it). */
static KA_NOINLINE int
apply_effect(Entry *e)
{
    PyObject *eff = Py_NewRef(e->effect);
    int rc = PyObject_SetAttr(PyTuple_GET_ITEM(eff, 0), PyTuple_GET_ITEM(eff, 1), PyTuple_GET_ITEM(eff, 2));
    Py_DECREF(eff);
    return rc;
}

/* Step 4: effect, grid, stream, pack, launch. */
static PyObject *
launch_hit(Dispatcher *d, Key *hit, PyObject *grid, PyObject *stream, PyObject **vals, uint64_t *ptrs)
{
    Entry *e = hit->entry;
    if (e->effect != Py_None && apply_effect(e) < 0)
        return NULL; /* first, as Triton's Autotuner.run sets best_config before its launch (which may raise) */
    if (hit->extra != NULL) /* the resolver's values (the key holds them while this call runs) */
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(hit->extra); j++) {
            PyObject *pair = PyTuple_GET_ITEM(hit->extra, j);
            vals[PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0))] = PyTuple_GET_ITEM(pair, 1);
        }
    unsigned int g[3];
    if (!fast_grid(grid, g) && grid_of_call(d, hit, grid, vals, g) < 0)
        return NULL;
    if ((uint64_t)g[0] * g[1] * g[2] == 0)
        return Py_NewRef(e->result); /* Triton launches nothing for an empty grid */

    if ((e->launch == NULL && e->launch_ex == NULL) || e->python_launch != Py_None) {
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
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        return Py_NewRef(e->result);
    }

    /* 64 bytes of slack: the buffer starts 64-byte aligned, as a CUtensorMap parameter is read (the Python
     * path's ParamLayout aligns its buffer the same way) */
    uint64_t stack_bytes[STACK_BYTES / 8 + 8];
    void *stack_params[STACK_PARAMS];
    unsigned char *heap = NULL;
    unsigned char *buf;
    void **params = stack_params;
    if (e->buffer_size > STACK_BYTES) {
        heap = PyMem_Calloc(1, (size_t)e->buffer_size + 64);
        if (heap == NULL)
            return PyErr_NoMemory();
        buf = heap + ((64 - ((uintptr_t)heap & 63)) & 63);
    }
    else {
        buf = (unsigned char *)stack_bytes + ((64 - ((uintptr_t)stack_bytes & 63)) & 63);
        memset(buf, 0, (size_t)e->buffer_size);
    }
    if (e->n_binary > STACK_PARAMS) {
        params = PyMem_Malloc(sizeof(void *) * (size_t)e->n_binary);
        if (params == NULL) {
            PyMem_Free(heap);
            return PyErr_NoMemory();
        }
    }
    /* one kernelParams entry per ABI parameter, or (descriptors: several binary parameters each) per offset */
    int plain = e->n_binary == e->n_params;
    if (!plain)
        for (Py_ssize_t k = 0; k < e->n_binary; k++)
            params[k] = buf + e->param_offsets[k];
    PyObject *result = NULL;
    for (Py_ssize_t s = 0; s < e->n_params; s++) {
        PackSlot *slot = &e->slots[s];
        unsigned char *dst = buf + slot->offset;
        if (plain)
            params[s] = dst;
        if (slot->value < 0)
            continue; /* a scratch pointer: null ('Z'), or the pool's buffer ('S', once the stream is known) */
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
        if (slot->code == 'D') {
            int r = pack_descriptor(slot, vals[i], e->desc_type, d->pointer_info, dst);
            if (r == -1)
                raise_explained(d, e, vals, ptrs);
            if (r < 0)
                goto done;
            continue;
        }
        if (pack_scalar(slot->code, vals[i], dst) < 0) {
            raise_explained(d, e, vals, ptrs);
            goto done;
        }
    }
    uint64_t sh;
    if (stream_value(d, stream, hit, &sh) < 0 || (e->has_scratch && scratch_pointers(e, buf, g, sh) < 0))
        goto done;
    int err;
    if (e->launch_ex != NULL)
        err = launch_with_attributes(e, g, sh, params);
    else {
        Py_BEGIN_ALLOW_THREADS
        err = e->launch(e->function, g[0], g[1], g[2], e->block_x, 1, 1, e->shared, (void *)(uintptr_t)sh, params,
                        NULL);
        Py_END_ALLOW_THREADS
    }
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
    result = Py_NewRef(e->result);
done:
    PyMem_Free(heap);
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
        PyObject *target = PyObject_CallFunctionObjArgs(d->miss, grid, t, kw, NULL);
        Py_DECREF(t);
        Py_DECREF(kw);
        if (target == NULL) {
            release_key(d, &key);
            return NULL;
        }
        if (d->done_type != Py_None && (PyObject *)Py_TYPE(target) == d->done_type) {
            /* the owner answered this call itself (launched or refused elsewhere): its result, nothing kept */
            PyObject *r = PyObject_GetAttrString(target, "result");
            Py_DECREF(target);
            release_key(d, &key);
            return r;
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
    static char *kwlist[] = {"names", "roles", "flags", "n_params", "call_positions", "owner", "missing", "qualname",
                             NULL};
    PyObject *names, *call_positions, *owner, *missing, *qualname;
    const char *roles, *flags;
    Py_ssize_t n_roles, n_flags, n_params;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!y#y#nO!OOU", kwlist, &PyTuple_Type, &names, &roles,
                                     &n_roles, &flags, &n_flags, &n_params, &PyTuple_Type, &call_positions, &owner,
                                     &missing, &qualname))
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
    d->owner = Py_NewRef(owner);
    d->miss = PyObject_GetAttrString(owner, "miss");
    d->slow = d->miss ? PyObject_GetAttrString(owner, "slow") : NULL;
    d->grid_of = d->slow ? PyObject_GetAttrString(owner, "grid") : NULL;
    d->stream_handle = d->grid_of ? PyObject_GetAttrString(owner, "stream_handle") : NULL;
    d->pointer_info = d->stream_handle ? PyObject_GetAttrString(owner, "pointer_info") : NULL;
    d->mixed_key = d->pointer_info ? PyObject_GetAttrString(owner, "mixed_key") : NULL;
    if (d->mixed_key != NULL) {
        /* optional: an owner without it answers every miss with a target */
        d->done_type = PyObject_GetAttrString(owner, "done_type");
        if (d->done_type == NULL) {
            PyErr_Clear();
            d->done_type = Py_NewRef(Py_None);
        }
    }
    if (d->mixed_key == NULL) {
        Py_DECREF(d);
        return NULL;
    }
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
    Py_VISIT(d->owner);
    Py_VISIT(d->miss);
    Py_VISIT(d->slow);
    Py_VISIT(d->grid_of);
    Py_VISIT(d->stream_handle);
    Py_VISIT(d->pointer_info);
    Py_VISIT(d->mixed_key);
    Py_VISIT(d->missing);
    Py_VISIT(d->done_type);
    return 0;
}

static int
dispatcher_clear(Dispatcher *d)
{
    Py_CLEAR(d->names);
    Py_CLEAR(d->qualname);
    Py_CLEAR(d->cache);
    Py_CLEAR(d->owner);
    Py_CLEAR(d->miss);
    Py_CLEAR(d->slow);
    Py_CLEAR(d->grid_of);
    Py_CLEAR(d->stream_handle);
    Py_CLEAR(d->pointer_info);
    Py_CLEAR(d->mixed_key);
    Py_CLEAR(d->missing);
    Py_CLEAR(d->done_type);
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
