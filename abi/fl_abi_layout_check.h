/*
 * fl_abi_layout_check.h — pins the layout of every struct in fl_abi.h (LP64).
 *
 * Included by abi/layout_check.c (compiled as C99) and abi/layout_check.cpp (as C++20) in the
 * build, so an accidental reorder, resize or insertion fails compilation. When a minor adds a
 * field at the end of a struct, add its line here and update the size; never edit the others.
 */
#ifndef FL_ABI_LAYOUT_CHECK_H
#define FL_ABI_LAYOUT_CHECK_H

#include "fl_abi.h"

#ifdef __cplusplus
#define FL_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#include <assert.h>
#define FL_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#define FL_PIN(type, field, off) \
  FL_STATIC_ASSERT(offsetof(type, field) == (off), #type "." #field " moved")
#define FL_PIN_SIZE(type, size) FL_STATIC_ASSERT(sizeof(type) == (size), #type " changed size")

FL_STATIC_ASSERT(sizeof(void*) == 8, "the pinned layout is for 64-bit targets");

FL_PIN(fl_host_services, struct_size, 0);
FL_PIN(fl_host_services, host_abi_major, 8);
FL_PIN(fl_host_services, host_abi_minor, 12);
FL_PIN(fl_host_services, log, 16);
FL_PIN(fl_host_services, user_data, 24);
FL_PIN_SIZE(fl_host_services, 32);

FL_PIN(fl_device_properties, struct_size, 0);
FL_PIN(fl_device_properties, vendor, 8);
FL_PIN(fl_device_properties, name, 72);
FL_PIN(fl_device_properties, stable_id, 200);
FL_PIN(fl_device_properties, total_memory, 328);
FL_PIN(fl_device_properties, compute_units, 336);
FL_PIN(fl_device_properties, alignment, 340);
FL_PIN(fl_device_properties, dtype_mask, 344);
FL_PIN(fl_device_properties, host_accessible, 352);
FL_PIN(fl_device_properties, supports_pinned_host, 356);
FL_PIN(fl_device_properties, pci_bus_id, 360);
FL_PIN(fl_device_properties, reserved0, 364);
FL_PIN(fl_device_properties, host_pointers_usable, 368);
FL_PIN(fl_device_properties, reserved1, 372);
FL_PIN_SIZE(fl_device_properties, 376);

FL_PIN(fl_tensor, struct_size, 0);
FL_PIN(fl_tensor, data, 8);
FL_PIN(fl_tensor, byte_offset, 16);
FL_PIN(fl_tensor, dtype, 24);
FL_PIN(fl_tensor, ndim, 28);
FL_PIN(fl_tensor, shape, 32);
FL_PIN(fl_tensor, strides, 40);
FL_PIN(fl_tensor, device, 48);
FL_PIN(fl_tensor, reserved0, 52);
FL_PIN_SIZE(fl_tensor, 56);

FL_PIN(fl_value, kind, 0);
FL_PIN(fl_value, u, 8);
FL_PIN_SIZE(fl_value, 24);

FL_PIN(fl_kernel_call, struct_size, 0);
FL_PIN(fl_kernel_call, device, 8);
FL_PIN(fl_kernel_call, flags, 12);
FL_PIN(fl_kernel_call, stream, 16);
FL_PIN(fl_kernel_call, num_inputs, 24);
FL_PIN(fl_kernel_call, num_outputs, 28);
FL_PIN(fl_kernel_call, inputs, 32);
FL_PIN(fl_kernel_call, outputs, 40);
FL_PIN(fl_kernel_call, kernel_data, 48);
FL_PIN(fl_kernel_call, rng_seed, 56);
FL_PIN(fl_kernel_call, rng_offset, 64);
FL_PIN_SIZE(fl_kernel_call, 72);

FL_PIN(fl_kernel_entry, struct_size, 0);
FL_PIN(fl_kernel_entry, op, 8);
FL_PIN(fl_kernel_entry, dtype_mask, 16);
FL_PIN(fl_kernel_entry, flags, 24);
FL_PIN(fl_kernel_entry, reserved0, 28);
FL_PIN(fl_kernel_entry, fn, 32);
FL_PIN(fl_kernel_entry, kernel_data, 40);
FL_PIN_SIZE(fl_kernel_entry, 48);

FL_PIN(fl_device_ops, struct_size, 0);
FL_PIN(fl_device_ops, abi_major, 8);
FL_PIN(fl_device_ops, abi_minor, 12);
FL_PIN(fl_device_ops, plugin_name, 16);
FL_PIN(fl_device_ops, plugin_version, 24);
FL_PIN(fl_device_ops, init, 32);
FL_PIN(fl_device_ops, shutdown, 40);
FL_PIN(fl_device_ops, last_error, 48);
FL_PIN(fl_device_ops, device_count, 56);
FL_PIN(fl_device_ops, device_get_properties, 64);
FL_PIN(fl_device_ops, device_memory_info, 72);
FL_PIN(fl_device_ops, device_synchronize, 80);
FL_PIN(fl_device_ops, device_can_access_peer, 88);
FL_PIN(fl_device_ops, fl_malloc, 96);
FL_PIN(fl_device_ops, fl_free, 104);
FL_PIN(fl_device_ops, fl_host_malloc, 112);
FL_PIN(fl_device_ops, fl_host_free, 120);
FL_PIN(fl_device_ops, fl_memset_async, 128);
FL_PIN(fl_device_ops, fl_memcpy_async, 136);
FL_PIN(fl_device_ops, stream_create, 144);
FL_PIN(fl_device_ops, stream_destroy, 152);
FL_PIN(fl_device_ops, stream_synchronize, 160);
FL_PIN(fl_device_ops, stream_query, 168);
FL_PIN(fl_device_ops, stream_wait_event, 176);
FL_PIN(fl_device_ops, event_create, 184);
FL_PIN(fl_device_ops, event_destroy, 192);
FL_PIN(fl_device_ops, event_record, 200);
FL_PIN(fl_device_ops, event_query, 208);
FL_PIN(fl_device_ops, event_synchronize, 216);
FL_PIN(fl_device_ops, event_elapsed_ms, 224);
FL_PIN(fl_device_ops, kernels_get, 232);
FL_PIN(fl_device_ops, get_proc_address, 240);
FL_PIN_SIZE(fl_device_ops, 248);
FL_STATIC_ASSERT(FL_DEVICE_OPS_MIN_SIZE == 240, "minimum fl_device_ops size changed");

#endif /* FL_ABI_LAYOUT_CHECK_H */
