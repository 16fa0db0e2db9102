/* Shared by every file of karchive's compiled launcher (see ../_fastlaunch.c for the whole path).
 * Not a public header: the files are compiled as one translation unit (../_fastlaunch.c includes
 * them in order), so the per-call path inlines across concerns and every symbol stays static. */
#ifndef KARCHIVE_FASTLAUNCH_H
#define KARCHIVE_FASTLAUNCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define ABI_VERSION 8

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

/* Kept out of line: a rare branch that would otherwise grow the per-call function and change what the compiler
 * inlines into it (Py_NOINLINE is public only from Python 3.12 on). */
#if defined(__GNUC__) || defined(__clang__)
#define KA_NOINLINE __attribute__((noinline))
#elif defined(_MSC_VER)
#define KA_NOINLINE __declspec(noinline)
#else
#define KA_NOINLINE
#endif

typedef int (*LaunchFn)(void *function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, void *stream, void **params,
                        void **extra);

/* cuLaunchKernelEx (cuda.h, CUDA >= 12.0): CUresult (const CUlaunchConfig *, CUfunction, void **params, void **extra),
 * with CUlaunchConfig and CUlaunchAttribute laid out as cuda.h lays them out (checked below), so that launches with
 * clusters, cooperative grids or PDL are packed here like the rest (as Triton's driver.c does). The attribute ids
 * and the cluster scheduling policy are cuda.h's numbers. */
typedef struct {
    unsigned int id;
    char pad[4];
    union {
        char pad[64];
        int flag;                                   /* cooperative, programmaticStreamSerializationAllowed */
        struct { unsigned int x, y, z; } cluster;   /* clusterDim */
        unsigned int policy;                        /* clusterSchedulingPolicyPreference */
    } value;
} KaLaunchAttr;

typedef struct {
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int shared;
    void *stream;
    KaLaunchAttr *attrs;
    unsigned int n_attrs;
} KaLaunchConfig;

_Static_assert(sizeof(KaLaunchAttr) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(offsetof(KaLaunchConfig, stream) == 32 && offsetof(KaLaunchConfig, attrs) == 40
               && offsetof(KaLaunchConfig, n_attrs) == 48 && sizeof(KaLaunchConfig) == 56, "CUlaunchConfig layout");

typedef int (*LaunchExFn)(const KaLaunchConfig *config, void *function, void **params, void **extra);

enum { ATTR_COOPERATIVE = 2, ATTR_CLUSTER_DIMENSION = 4, ATTR_CLUSTER_SCHEDULING = 5, ATTR_PDL = 6,
       CLUSTER_POLICY_SPREAD = 1 };
#define MAX_ATTRS 4

/* Parameter roles and key flags: the same numbers as karchive/runtime/launch/_native.py sends (from _plan.py). */
enum { ROLE_PTR = 1, ROLE_INT = 2, ROLE_FLOAT = 3, ROLE_VALUE = 4, ROLE_MIXED = 5 };
enum { F_ALIGN = 1, F_EQ1 = 2, F_DIV16 = 4, F_RANGE = 8, F_PRESENT = 0x100 };
/* Key flags of a kernel with a meta-parameter resolver (autotune / heuristics), set by launch/_native.py where the
 * resolver reads the parameter: F_VALUE keys the value itself (ints, floats; a pointer given as an int address;
 * a mixed parameter's scalar), F_EXACT sends a call whose int/float argument is not exactly int/float/bool (a
 * numpy scalar: Triton's autotune key reads its dtype) to the slow path. */
enum { F_EXACT = 0x10, F_VALUE = 0x20 };

#define MAX_SLOTS 192          /* kernel parameters + launch options a Dispatcher accepts */
#define MAX_CACHE 256          /* resolved keys kept per kernel (least recently used dropped) */
#define STACK_BYTES 4096       /* parameter bytes packed on the stack (more: on the heap) */
#define STACK_PARAMS 128       /* kernel parameters whose pointers fit the stack array */

/* The whole C <-> Python contract (the Python side: karchive/runtime/_fastlaunch.pyi, launch/_native.py).
 *
 * Dispatcher(..., owner): one owner object per dispatcher (launch/_native.Owner); its methods are read once,
 * when the dispatcher is made, and are all the C code calls back:
 *   owner.miss(grid, args, kwargs) -> target   a key seen for the first time; target.native (an Entry),
 *                                             target.stream_fn (device -> stream, or None), target.extra
 *                                             (None or ((slot, value), ...): values the resolver adds to the
 *                                             call), target.remember (False: launch it, keep no key);
 *                                             or an instance of owner.done_type (None: never): a call the
 *                                             owner answered itself, whose .result the call returns (no key kept)
 *   owner.slow(grid, args, kwargs) -> result  a call the C code cannot bind or key: every step in Python
 *   owner.grid(grid, meta, values) -> (gx, gy, gz, reads)   a grid that is not a tuple of small ints; reads:
 *                                             None, or (slot indices, global names) a callable grid read,
 *                                             under which its result is memoised (dispatcher.c: GridMemo)
 *   owner.stream_handle(obj) -> int, owner.pointer_info(obj) -> (ptr, dtype, device), owner.mixed_key(obj)
 * Entry(..., owner, via_python, launch_ex, cluster, cooperative, pdl): the variant's launch entry
 * (launch/_record.LaunchEntry); with launch_ex (cuLaunchKernelEx's address) its launch attributes are packed here:
 *   owner.failed(err, gx, gy, gz, stream, values)   a non-zero driver result: retry or raise
 *   owner.explain(values, exc) -> exception          values that did not pack
 *   owner.launch_dims(gx, gy, gz, stream, values)    every launch of an entry made with via_python=True
 *   owner.scratch_for(index, nbytes, stream) -> (address, usable bytes)   a scratch slot ("S") whose last
 *                                                    buffer is another stream's or too small
 *   and, per descriptor slot, the slot's expand(value) -> bytes
 * Entry.result: what a launch of the entry returns (default None; settable).
 * Entry.effect: None (default), or (obj, name, value): every launch of the entry first does setattr(obj, name,
 *   value), before the grid is evaluated (a served autotuned call site's Autotuner.best_config, set as Triton's
 *   Autotuner.run sets it before its launch). */

#endif /* KARCHIVE_FASTLAUNCH_H */
