// probe_zoo_plugin.cpp — plugins that misbehave in ways only a child-process probe survives,
// built from the stub (stub_plugin.cpp with FL_STUB_NO_ENTRY) with one -D switch:
//   PROBE_HANG   init never returns
//   PROBE_EXIT   init calls exit(3), ending the whole process
// Never load them in-process.
#include <fl_abi.h>

#include "stub_plugin.hpp"

#include <chrono>
#include <cstdlib>
#include <thread>

namespace {

fl_status_t misbehaving_init(const fl_host_services*, const char*) {
#if defined(PROBE_HANG)
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
#elif defined(PROBE_EXIT)
  std::exit(3);
#endif
  return FL_OK;
}

const fl_device_ops* table() {
  static const fl_device_ops ops = [] {
    fl_device_ops o = fl::stub::base_ops();
    o.plugin_name = PROBE_NAME;
    o.init = misbehaving_init;
    return o;
  }();
  return &ops;
}

}  // namespace

extern "C" FL_PLUGIN_EXPORT const fl_device_ops* fl_plugin_get_ops(void) { return table(); }
