/*
 * fl_abi.h — the Torch-FL plugin ABI.
 *
 * A vendor builds one shared object against this header alone and exports one symbol,
 * `fl_plugin_get_ops`, returning a `const fl_device_ops*`. The Torch-FL core loads it with
 * dlopen(RTLD_LOCAL), negotiates the version, and from then on calls only through that table.
 *
 * Language: C99, self-contained (<stddef.h>, <stdint.h> only); compiles as C++ too.
 * No C++ exception may cross this boundary: every plugin entry point catches.
 *
 * Versioning (see abi/CHANGELOG.md):
 *   - FL_ABI_MAJOR changes when a field is removed, reordered or changes meaning. The core
 *     refuses a plugin whose major differs from its own.
 *   - FL_ABI_MINOR changes when fields are appended to the end of a struct or new enum values
 *     are added. Every struct starts with `struct_size`; a reader treats every field that lies
 *     beyond the writer's `struct_size` as absent (NULL / zero). So a plugin built against an
 *     older minor keeps working with a newer core, and a newer plugin works with an older core
 *     (which simply never reads the appended fields). Window: every minor of the same major.
 *   - The layout of every struct is pinned by offset/size assertions in
 *     abi/fl_abi_layout_check.h, compiled as C and as C++ in the build.
 *
 * Threading: unless a field says otherwise, an entry may be called from any thread at any
 * time between `init` returning FL_OK and `shutdown` being called, concurrently with others.
 *
 * Errors: every fallible entry returns fl_status_t (FL_OK == 0). On failure the plugin
 * stores a message for the calling thread, readable with `last_error` until the next call
 * into the plugin from that thread.
 */
#ifndef FL_ABI_H
#define FL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FL_ABI_MAJOR 1
#define FL_ABI_MINOR 2

/* Name of the single symbol a plugin exports. */
#define FL_PLUGIN_ENTRY_SYMBOL "fl_plugin_get_ops"

#if defined(_WIN32)
#define FL_PLUGIN_EXPORT __declspec(dllexport)
#else
#define FL_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* ===================================================================================== */
/* Status codes                                                                          */
/* ===================================================================================== */

/* Status returned by every fallible entry. Plain int32_t so the width is fixed. */
typedef int32_t fl_status_t;

enum {
  FL_OK = 0,
  FL_ERR_INVALID_ARGUMENT = 1, /* a NULL pointer, bad index, bad size, bad enum value */
  FL_ERR_OUT_OF_MEMORY = 2,    /* the device (or host, for pinned memory) has no room */
  FL_ERR_NOT_SUPPORTED = 3,    /* the entry exists but this case (dtype, layout) is not handled */
  FL_ERR_DEVICE = 4,           /* the driver/runtime reported a failure */
  FL_ERR_NO_DEVICE = 5,        /* the driver or runtime is absent, or no device is present */
  FL_ERR_VERSION = 6,          /* the host's ABI version is not one this plugin accepts */
  FL_ERR_INTERNAL = 7          /* a bug or an exception caught at the boundary */
};

/* ===================================================================================== */
/* Data types                                                                            */
/* ===================================================================================== */

/* Element types. Values are pinned; new ones are appended (minor bump). */
typedef int32_t fl_dtype_t;

enum {
  FL_DTYPE_FLOAT32 = 0,
  FL_DTYPE_FLOAT64 = 1,
  FL_DTYPE_FLOAT16 = 2,
  FL_DTYPE_BFLOAT16 = 3,
  FL_DTYPE_INT64 = 4,
  FL_DTYPE_INT32 = 5,
  FL_DTYPE_INT16 = 6,
  FL_DTYPE_INT8 = 7,
  FL_DTYPE_UINT8 = 8,
  FL_DTYPE_BOOL = 9,
  FL_DTYPE_COMPLEX64 = 10,
  FL_DTYPE_COMPLEX128 = 11,
  FL_DTYPE_COUNT = 12
};

/* Bit for one dtype in a dtype mask (uint64_t). */
#define FL_DTYPE_BIT(dtype) (((uint64_t)1) << (dtype))

/* ===================================================================================== */
/* Opaque handles                                                                        */
/* ===================================================================================== */

/* A queue of work on one device; work on one stream runs in submission order.
 * Created by stream_create, owned by the caller until stream_destroy. NULL names the
 * device's default stream, which always exists and is never destroyed. */
typedef struct fl_stream_s* fl_stream_t;

/* A marker in a stream. Created by event_create, owned by the caller until event_destroy. */
typedef struct fl_event_s* fl_event_t;

/* ===================================================================================== */
/* Host services passed into the plugin                                                  */
/* ===================================================================================== */

/* Log levels for fl_host_services.log. */
enum {
  FL_LOG_TRACE = 0,
  FL_LOG_DEBUG = 1,
  FL_LOG_INFO = 2,
  FL_LOG_WARN = 3,
  FL_LOG_ERROR = 4
};

/* Services the core offers the plugin, so the plugin links no host symbol.
 * Owned by the core; valid from init until shutdown returns. Thread-safe. */
typedef struct fl_host_services {
  size_t struct_size;                 /* sizeof(fl_host_services) as the core built it */
  uint32_t host_abi_major;            /* the core's FL_ABI_MAJOR */
  uint32_t host_abi_minor;            /* the core's FL_ABI_MINOR */
  /* Write one log line through the core's logger. `message` is borrowed for the call.
   * May be NULL in a reader that predates it; plugins check before calling. Any thread. */
  void (*log)(void* user_data, int32_t level, const char* message);
  void* user_data;                    /* passed back to `log`; owned by the core */
} fl_host_services;

/* ===================================================================================== */
/* Device properties                                                                     */
/* ===================================================================================== */

/* Filled by device_get_properties. The caller zeroes it and sets struct_size; the plugin
 * fills the fields that lie within both its own and the caller's struct_size. Strings are
 * NUL-terminated and stored inline (no ownership to track). */
typedef struct fl_device_properties {
  size_t struct_size;            /* set by the caller */
  char vendor[64];               /* e.g. "NVIDIA", "AMD", "Huawei", "Torch-FL" */
  char name[128];                /* marketing name, e.g. "NVIDIA H200" */
  char stable_id[128];           /* identifies the same physical card across restarts:
                                    a UUID, or a PCI bus id; never an enumeration index */
  uint64_t total_memory;         /* bytes of device memory */
  int32_t compute_units;         /* SMs, CUs, AI cores, host threads... (informational) */
  uint32_t alignment;            /* byte alignment that fl_malloc guarantees; power of two */
  uint64_t dtype_mask;           /* FL_DTYPE_BIT of each dtype the device can hold */
  int32_t host_accessible;       /* 1: device pointers may be dereferenced by the host CPU */
  int32_t supports_pinned_host;  /* 1: host_malloc/host_free are available and fast */
  int32_t pci_bus_id;            /* -1 when not a PCI device */
  int32_t reserved0;             /* zero */
  /* Since 1.1. 1: the device's kernels and copies accept a pointer to any host memory (from
   * malloc, pageable or pinned) wherever they take device memory, so the core may hand them a
   * tensor that uses host memory in place instead of a copy (zero-copy). The core keeps that
   * memory allocated until the work queued on it has run (by events on every stream); not
   * writing it meanwhile is its caller's duty. A CPU device sets it; a GPU whose device
   * pointers the host can read (host_accessible) need not. */
  int32_t host_pointers_usable;
  int32_t reserved1;             /* zero */
} fl_device_properties;

/* ===================================================================================== */
/* Tensors and values crossing the kernel boundary                                       */
/* ===================================================================================== */

/* A borrowed view of a tensor, modelled on DLPack's DLTensor. Everything it points to is
 * owned by the core and valid only for the duration of the call that received it; a plugin
 * that runs the work later (asynchronously) copies the shape and strides it needs. The
 * memory at `data` stays valid until work already enqueued on the call's stream finishes. */
typedef struct fl_tensor {
  size_t struct_size;       /* sizeof(fl_tensor) */
  void* data;               /* base address from fl_malloc (or host memory for host values);
                               may be NULL when numel == 0 */
  int64_t byte_offset;      /* add to `data` to reach element [0,...,0]; not always aligned */
  fl_dtype_t dtype;         /* element type */
  int32_t ndim;             /* number of dimensions; 0 is a scalar with one element */
  const int64_t* shape;     /* ndim sizes */
  const int64_t* strides;   /* ndim strides in elements (not bytes), non-negative;
                               0 marks a broadcast (expanded) dimension */
  int32_t device;           /* plugin-local device index holding `data`, or FL_DEVICE_HOST
                               for a 0-dim host value (a wrapped Python number, as ATen
                               passes them): readable by the host during the call only */
  int32_t reserved0;        /* zero */
} fl_tensor;

/* fl_tensor.device of a 0-dim value in host memory. */
#define FL_DEVICE_HOST (-1)

/* Kinds of kernel argument. */
typedef int32_t fl_value_kind_t;

enum {
  FL_VALUE_NONE = 0,        /* an absent optional argument */
  FL_VALUE_TENSOR = 1,      /* u.tensor */
  FL_VALUE_INT = 2,         /* u.i (also SymInt, ScalarType, Layout, MemoryFormat as ints) */
  FL_VALUE_DOUBLE = 3,      /* u.d */
  FL_VALUE_BOOL = 4,        /* u.b (0 or 1) */
  FL_VALUE_INT_LIST = 5,    /* u.ints */
  FL_VALUE_DOUBLE_LIST = 6, /* u.doubles */
  FL_VALUE_TENSOR_LIST = 7, /* u.tensors; an undefined element has data == NULL, ndim == -1 */
  FL_VALUE_STRING = 8,      /* u.str */
  FL_VALUE_BOOL_LIST = 9    /* u.bools */
};

/* One argument of a kernel call, in the ATen schema's order. Borrowed for the call. */
typedef struct fl_value {
  fl_value_kind_t kind;
  int32_t reserved0; /* zero */
  union {
    const fl_tensor* tensor;
    int64_t i;
    double d;
    int32_t b;
    struct { const int64_t* data; int64_t len; } ints;
    struct { const double* data; int64_t len; } doubles;
    struct { const fl_tensor* data; int64_t len; } tensors;
    struct { const int32_t* data; int64_t len; } bools;
    const char* str;
  } u;
} fl_value;

/* Flags on a kernel call. */
enum {
  FL_CALL_PRECISE = 1u << 0,        /* IEEE results wanted (e.g. no TF32 for float32 GEMM) */
  FL_CALL_DETERMINISTIC = 1u << 1,  /* bitwise reproducible results wanted */
  FL_CALL_RNG = 1u << 2             /* (1.2) rng_seed and rng_offset are set: see fl_kernel_call */
};

/* Everything a kernel receives. Borrowed for the duration of the call. */
typedef struct fl_kernel_call {
  size_t struct_size;          /* sizeof(fl_kernel_call) as the core built it */
  int32_t device;              /* plugin-local device index to run on */
  uint32_t flags;              /* FL_CALL_* */
  fl_stream_t stream;          /* enqueue here; NULL is the default stream */
  int32_t num_inputs;
  int32_t num_outputs;
  const fl_value* inputs;      /* the schema's arguments except `out`, in schema order */
  const fl_tensor* outputs;    /* preallocated outputs, already sized by the core; an output
                                  may alias an input (in-place ops) when the entry has
                                  FL_KERNEL_ALIASING_OK; an output with ndim == -1 is not
                                  requested (e.g. a gradient masked off) and is skipped */
  void* kernel_data;           /* fl_kernel_entry.kernel_data, passed through */

  /* ---- appended in 1.2 (read only when struct_size covers them; FL_KERNEL_CALL_HAS_RNG) -- */

  /* With FL_CALL_RNG in `flags` (the core sets it on calls of ATen operators tagged
   * nondeterministic_seeded, e.g. aten::native_dropout): every random number the kernel
   * uses must be a function of (rng_seed, rng_offset) and the element's position alone, e.g.
   * Philox keyed by rng_seed with counter offset rng_offset. The core draws the pair from the
   * fl device's torch generator, so torch.manual_seed / torch.fl.manual_seed make the
   * kernel's output repeat, and every call gets a fresh pair. Without the flag (or from a
   * core older than 1.2) the plugin uses a generator of its own. */
  uint64_t rng_seed;
  uint64_t rng_offset;
} fl_kernel_call;

/* Whether `call` (from any core) carries an RNG pair for this call. */
#define FL_KERNEL_CALL_HAS_RNG(call)                                                   \
  ((call)->struct_size >= offsetof(fl_kernel_call, rng_offset) + sizeof(uint64_t) && \
   ((call)->flags & FL_CALL_RNG) != 0)

/* A kernel: enqueue the work on call->stream and return; FL_OK means enqueued (or done). */
typedef fl_status_t (*fl_kernel_fn)(const fl_kernel_call* call);

/* Capabilities of one kernel entry. */
enum {
  FL_KERNEL_STRIDED_INPUTS = 1u << 0,  /* accepts non-contiguous/expanded input tensors;
                                          without it the core passes contiguous copies */
  FL_KERNEL_STRIDED_OUTPUTS = 1u << 1, /* writes non-contiguous outputs; without it the core
                                          passes contiguous outputs and copies back */
  FL_KERNEL_ALIASING_OK = 1u << 2,     /* an output may be the same memory as an input
                                          (element-for-element); without it the core
                                          gives the kernel a separate output */
  FL_KERNEL_PRECISE = 1u << 3,         /* results are IEEE-accurate for the dtype */
  FL_KERNEL_DETERMINISTIC = 1u << 4    /* bitwise reproducible run to run */
};

/* One row of the kernel table. The table (and every string in it) is owned by the plugin
 * and lives until shutdown returns.
 *
 * `op` is the name of an ATen operator overload with the namespace, e.g. "aten::add.out",
 * "aten::mm.out", "aten::convolution_overrideable.out". For operators that have an out=
 * overload (ATen generates one for nearly every functional op), the table names the out=
 * overload and the core routes the functional and in-place forms to it (inputs: the non-out
 * arguments; outputs: the out arguments in order). A functional operator may instead be named
 * by its own overload ("aten::convolution_overrideable"): inputs are its arguments and outputs
 * its returns — the same call; the out= name is looked up first. `dtype_mask` refers to the
 * first tensor argument (for `where`, the bool condition).
 * Elementwise kernels broadcast their inputs to the output's shape as ATen does. A kernel
 * that cannot handle a particular call (a dtype mix, a layout) returns FL_ERR_NOT_SUPPORTED
 * before enqueuing anything; the core then takes the next fallback tier for that call.
 * A bad argument that only the running kernel can see (an index or a loss target out of
 * range: checking it first would need the tensor copied to the host) is reported as
 * FL_ERR_DEVICE, with last_error naming the op, the value and the valid range, by the next
 * stream_synchronize of the stream the kernel ran on or the next device_synchronize of its
 * device. The first such report is the one kept; the wait that returns it clears it, and the
 * device stays usable. The failed op's outputs are undefined. event_synchronize, stream_query
 * and event_query may report it too, or leave it to those waits. (ATen's CUDA kernels stop at
 * a device-side assert instead.) */
/* Entries for operators whose returns are not all tensors. The entry takes the operator's
 * arguments as inputs (schema order, as everywhere) and only the tensor returns named here
 * as outputs; the core makes the rest itself.
 *
 * "aten::_scaled_dot_product_fused_attention_overrideable" — fused attention (PyTorch's hook
 *   for PrivateUse1 backends):
 *   inputs:  query [B,H,Lq,E], key [B,H,Lk,E], value [B,H,Lk,Ev], one floating dtype;
 *            attn_bias: NONE, or a tensor of query's dtype broadcastable to [B,H,Lq,Lk] (its
 *            fl_tensor then has those 4 dims, stride 0 where broadcast), added to the scaled
 *            scores (-inf masks a key: a boolean mask arrives converted so);
 *            dropout_p (double); is_causal (bool: key j is masked for query i when j > i,
 *            top-left aligned, as ATen's math path); return_debug_mask (bool); scale (double,
 *            or NONE for 1/sqrt(E)).
 *   outputs: output [B,H,Lq,Ev], query's dtype, in query's dimension order (a query that is a
 *            transposed [B,Lq,H,E] gives an output laid out as [B,Lq,H,Ev]); logsumexp
 *            [B,H,Lq] float32, contiguous: row i's log(sum_j exp(s_ij)) over its scaled,
 *            biased, masked scores s_ij. A row whose every key is masked has logsumexp -inf
 *            and output 0 (ATen's safe softmax).
 *   The core fills the other returns (no cum_seq tensors, max_q = Lq, max_k = Lk, 0-dim int64
 *   philox seed and offset, no debug mask). It chooses fused attention for
 *   F.scaled_dot_product_attention on an fl device only when that device's entry lists the
 *   dtype, dropout_p is 0, the tensors are 4-D and H matches; otherwise ATen's math path runs
 *   over the other kernels. The core never passes dropout_p > 0 or return_debug_mask (it
 *   refuses such a direct call itself); the arguments are there for the schema's sake. A
 *   kernel declines (FL_ERR_NOT_SUPPORTED) any call it cannot serve (a head size, a layout, a
 *   bias it lacks): the core then runs the same computation as other fl ops.
 * "aten::_scaled_dot_product_fused_attention_overrideable_backward":
 *   inputs:  grad_out, query, key, value, attn_bias (NONE when the forward had none),
 *            grad_input_mask (bool[4]), out and logsumexp (the forward's outputs), cum_seq_q,
 *            cum_seq_k (NONE), max_q, max_k (ints), dropout_p, is_causal, philox_seed,
 *            philox_offset (0-dim int64 tensors), scale — the forward's values.
 *            attn_bias, as in the forward, has 4 dims with stride 0 where broadcast.
 *   outputs: grad_query, grad_key, grad_value shaped as query, key, value; grad_attn_bias
 *            [B,H,Lq,Lk] (the core sums it down to attn_bias's own shape). An output not
 *            wanted (grad_input_mask false, or no attn_bias) has ndim -1.
 */
typedef struct fl_kernel_entry {
  size_t struct_size;        /* sizeof(fl_kernel_entry) */
  const char* op;            /* ATen overload name; see above */
  uint64_t dtype_mask;       /* FL_DTYPE_BIT of each dtype handled (of the first tensor
                                argument, and of every floating argument for mixed ops) */
  uint32_t flags;            /* FL_KERNEL_* */
  uint32_t reserved0;        /* zero */
  fl_kernel_fn fn;           /* required */
  void* kernel_data;         /* opaque; passed back in fl_kernel_call.kernel_data */
} fl_kernel_entry;

/* ===================================================================================== */
/* The table a plugin fills                                                              */
/* ===================================================================================== */

/* Direction of a copy. */
typedef int32_t fl_memcpy_kind_t;

enum {
  FL_MEMCPY_HOST_TO_DEVICE = 0,
  FL_MEMCPY_DEVICE_TO_HOST = 1,
  FL_MEMCPY_DEVICE_TO_DEVICE = 2, /* same device, or peers when peer access is possible */
  FL_MEMCPY_HOST_TO_HOST = 3
};

/* Function-pointer types, named so vendors can declare their implementations. */
typedef fl_status_t (*fl_malloc_fn)(int32_t device, size_t size, void** ptr);
typedef fl_status_t (*fl_free_fn)(int32_t device, void* ptr);

/* The table returned by fl_plugin_get_ops. Owned by the plugin, immutable, valid for the
 * life of the loaded library. Entries marked "required" must be non-NULL; the core checks
 * them at load and refuses the plugin otherwise. Optional entries may be NULL (the core then
 * uses the default written beside them). */
typedef struct fl_device_ops {
  size_t struct_size;          /* sizeof(fl_device_ops) as the plugin was built */
  uint32_t abi_major;          /* FL_ABI_MAJOR the plugin was built against */
  uint32_t abi_minor;          /* FL_ABI_MINOR the plugin was built against */
  const char* plugin_name;     /* short lowercase name, unique among plugins, e.g. "cuda" */
  const char* plugin_version;  /* free-form, e.g. "1.2.0+cuda13.0" */

  /* ---- lifecycle ------------------------------------------------------------------- */

  /* Required. Called once, before any other entry but last_error. Probes the driver.
   * `host` is owned by the core and valid until shutdown returns. `options` is a
   * NUL-terminated "key=value;key=value" string from the core's config (may be ""),
   * borrowed for the call. Returns FL_ERR_NO_DEVICE when the driver is absent. Not
   * thread-safe with respect to any other entry. */
  fl_status_t (*init)(const fl_host_services* host, const char* options);

  /* Required. Releases everything. No entry but last_error may be called afterwards.
   * Not thread-safe with respect to any other entry. */
  void (*shutdown)(void);

  /* Required. The message of the calling thread's last failed call, or "" if none.
   * The string is owned by the plugin, thread-local, valid until the thread's next call
   * into the plugin. Callable at any time, even before init. */
  const char* (*last_error)(void);

  /* ---- devices --------------------------------------------------------------------- */

  /* Required. Number of devices this plugin drives (may be 0). */
  fl_status_t (*device_count)(int32_t* count);

  /* Required. Fill `props` (see fl_device_properties). */
  fl_status_t (*device_get_properties)(int32_t device, fl_device_properties* props);

  /* Required. Bytes free and total on the device right now. */
  fl_status_t (*device_memory_info)(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes);

  /* Required. Waits for all work on every stream of the device. */
  fl_status_t (*device_synchronize)(int32_t device);

  /* Optional (default: 0). *can_access = 1 when device memory of `peer` can be read by
   * kernels and copies of `device` directly. */
  fl_status_t (*device_can_access_peer)(int32_t device, int32_t peer, int32_t* can_access);

  /* ---- memory ---------------------------------------------------------------------- */

  /* Required. Allocates `size` bytes (size > 0) of device memory aligned to
   * properties.alignment. The caller owns the block until fl_free. Returns
   * FL_ERR_OUT_OF_MEMORY (not a NULL pointer with FL_OK) when there is no room. The core's
   * caching allocator sits above this; plugins should not cache. */
  fl_malloc_fn fl_malloc;

  /* Required. Frees a block from fl_malloc; NULL is a no-op. The block must not be in use by
   * enqueued work (the core synchronizes before returning memory). */
  fl_free_fn fl_free;

  /* Optional (default: the core uses plain host memory, copies stay synchronous).
   * Page-locked host memory for fast asynchronous copies. Owned by the caller. */
  fl_status_t (*fl_host_malloc)(size_t size, void** ptr);
  fl_status_t (*fl_host_free)(void* ptr);

  /* Required. Sets `size` bytes at `ptr` (device memory) to `value`, ordered on `stream`. */
  fl_status_t (*fl_memset_async)(int32_t device, void* ptr, int32_t value, size_t size,
                                 fl_stream_t stream);

  /* Required. Copies `size` bytes, ordered on `stream` of `device`. Host memory passed to an
   * asynchronous copy must stay valid and unchanged until the stream reaches the copy;
   * with memory from fl_host_malloc that is the whole contract, with other host memory
   * the plugin may copy synchronously. */
  fl_status_t (*fl_memcpy_async)(int32_t device, void* dst, const void* src, size_t size,
                                 fl_memcpy_kind_t kind, fl_stream_t stream);

  /* ---- streams --------------------------------------------------------------------- */

  /* Required. Creates a stream on `device`. priority: 0 normal, negative higher. */
  fl_status_t (*stream_create)(int32_t device, int32_t priority, fl_stream_t* stream);
  /* Required. Destroys a stream after the work on it finishes. NULL is a no-op. */
  fl_status_t (*stream_destroy)(int32_t device, fl_stream_t stream);
  /* Required. Blocks until all work enqueued on the stream so far has finished. */
  fl_status_t (*stream_synchronize)(int32_t device, fl_stream_t stream);
  /* Required. *done = 1 when all work enqueued so far has finished, else 0. Never blocks. */
  fl_status_t (*stream_query)(int32_t device, fl_stream_t stream, int32_t* done);
  /* Required. Work enqueued on `stream` after this call waits for `event` (which may be of
   * another stream of the same device) to complete. Returns without blocking the host. */
  fl_status_t (*stream_wait_event)(int32_t device, fl_stream_t stream, fl_event_t event);

  /* ---- events ---------------------------------------------------------------------- */

  /* Required. Creates an event. flags: FL_EVENT_TIMING to allow event_elapsed_ms. */
  fl_status_t (*event_create)(int32_t device, uint32_t flags, fl_event_t* event);
  /* Required. Destroys an event; NULL is a no-op. Pending waits on it stay valid. */
  fl_status_t (*event_destroy)(int32_t device, fl_event_t event);
  /* Required. Captures the work enqueued on `stream` so far; completes when it finishes.
   * Re-recording replaces the previous capture. */
  fl_status_t (*event_record)(int32_t device, fl_event_t event, fl_stream_t stream);
  /* Required. *done = 1 when the captured work has finished (or never recorded). */
  fl_status_t (*event_query)(int32_t device, fl_event_t event, int32_t* done);
  /* Required. Blocks the host until the captured work has finished. */
  fl_status_t (*event_synchronize)(int32_t device, fl_event_t event);
  /* Optional (default: timing unsupported). Milliseconds between two completed events
   * created with FL_EVENT_TIMING. */
  fl_status_t (*event_elapsed_ms)(int32_t device, fl_event_t start, fl_event_t end, float* ms);

  /* ---- kernels --------------------------------------------------------------------- */

  /* Required. Sets *entries to the plugin's kernel table (owned by the plugin, valid until
   * shutdown) and *count to its length. Entries lie `entries[0].struct_size` bytes apart (a
   * plugin built against a later minor may have longer entries; the core walks the array with
   * that stride and reads only the fields it knows). The same for every device of the plugin; a device
   * that cannot run an entry reports FL_ERR_NOT_SUPPORTED from the kernel. Called once
   * after init; the core builds its dispatch table from it. */
  fl_status_t (*kernels_get)(const fl_kernel_entry** entries, size_t* count);

  /* ---- extensions ------------------------------------------------------------------ */

  /* Optional (default: none). Extras by name; returns NULL when unknown. Thread-safe; the
   * returned pointer is valid until shutdown. Names starting "fl." are defined here, so
   * that the host can use a vendor's native libraries (NCCL, RCCL, HCCL) on fl memory;
   * every other name is the vendor's, with its type documented by the vendor
   * (e.g. "nvidia.cublas_handle").
   *
   *   "fl.native_device"  fl_status_t (*)(int32_t device, int32_t* ordinal)
   *       Writes the vendor runtime's ordinal for `device` in this process (the argument of
   *       cudaSetDevice / hipSetDevice / aclrtSetDevice). Pointers from fl_malloc on `device`
   *       are then valid device pointers of that runtime's ordinal.
   *   "fl.native_stream"  fl_status_t (*)(int32_t device, fl_stream_t stream, void** native)
   *       Writes the runtime's stream handle behind `stream` (NULL: the device's default
   *       stream): a cudaStream_t, hipStream_t or aclrtStream. Owned by the plugin, valid
   *       while `stream` lives (the default stream: until shutdown). Work the host enqueues
   *       on the native handle is ordered with the fl stream's work like the plugin's own.
   *   "fl.stream_wait_peer_event"
   *       fl_status_t (*)(int32_t device, fl_stream_t stream, int32_t event_device, fl_event_t event)
   *       stream_wait_event across two devices of this plugin: work enqueued on `stream` of
   *       `device` from now on waits for `event`, recorded on a stream of `event_device`
   *       (cudaStreamWaitEvent takes an event of any device). Without it the host orders
   *       work across devices by waiting for the source stream, which stalls a thread that
   *       feeds one device behind the work queued on another. */
  void* (*get_proc_address)(const char* name);
} fl_device_ops;

/* The extras of get_proc_address that this header defines (see there). */
#define FL_EXTRA_NATIVE_DEVICE "fl.native_device"
#define FL_EXTRA_NATIVE_STREAM "fl.native_stream"
#define FL_EXTRA_STREAM_WAIT_PEER_EVENT "fl.stream_wait_peer_event"
typedef fl_status_t (*fl_native_device_fn)(int32_t device, int32_t* ordinal);
typedef fl_status_t (*fl_native_stream_fn)(int32_t device, fl_stream_t stream, void** native);
typedef fl_status_t (*fl_stream_wait_peer_event_fn)(int32_t device, fl_stream_t stream, int32_t event_device,
                                                    fl_event_t event);

/* Flags for event_create. */
enum {
  FL_EVENT_TIMING = 1u << 0
};

/* The smallest fl_device_ops the core accepts under major 1: everything up to and including
 * kernels_get (the required entries of minor 0). A shorter table is refused. */
#define FL_DEVICE_OPS_MIN_SIZE \
  (offsetof(fl_device_ops, kernels_get) + sizeof(fl_status_t (*)(const fl_kernel_entry**, size_t*)))

/* The one exported symbol. Must have no side effects (no driver calls): the core calls it
 * to read the table, checks version and struct sizes, and only then calls init. */
typedef const fl_device_ops* (*fl_plugin_get_ops_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FL_ABI_H */
