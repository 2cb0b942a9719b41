// plugin_library.h — one vendor plugin: load it (dlopen, RTLD_LOCAL), negotiate the ABI,
// initialize it, and read its devices and kernel table. Every loader step is checked and
// logged on its own; a failure names the step (PluginLoadError). Nothing above this file
// calls a plugin entry without going through the table it keeps.
#pragma once

#include <fl_abi.h>

#include "error.h"

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace fl {

// The loader's steps, in order. Open .. RequiredEntries happen in PluginLibrary::open;
// Init .. Kernels in PluginLibrary::initialize.
enum class LoadStep { Open, EntrySymbol, Table, Version, StructSize, RequiredEntries, Init, Devices, Kernels };

// "open", "entry symbol", "table", "version", "struct size", "required entries", "init",
// "devices", "kernels".
const char* to_string(LoadStep step);

// A plugin could not be loaded or initialized. what() is
// "plugin <path>: <step> failed: <reason>".
class PluginLoadError : public Error {
 public:
  PluginLoadError(std::filesystem::path path, LoadStep step, std::string reason);
  const std::filesystem::path& path() const { return path_; }
  LoadStep step() const { return step_; }
  const std::string& reason() const { return reason_; }

 private:
  std::filesystem::path path_;
  LoadStep step_;
  std::string reason_;
};

class PluginLibrary {
 public:
  // Opens the file (rtld_local | rtld_now, never rtld_global), finds FL_PLUGIN_ENTRY_SYMBOL,
  // calls it and checks the table: non-NULL, same major, struct_size >= FL_DEVICE_OPS_MIN_SIZE,
  // plugin_name non-empty, every required entry non-NULL. Does not call init.
  // Throws PluginLoadError naming the failing step.
  static std::shared_ptr<PluginLibrary> open(const std::filesystem::path& file);

  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  // init(host services, options), then device_count, device_get_properties of each device,
  // kernels_get (validated). Throws PluginLoadError(Init/Devices/Kernels); after a failure
  // past init the plugin is shut down again. Calling it twice throws fl::Error.
  void initialize(const std::string& options);
  bool initialized() const { return initialized_; }

  // Calls the plugin's shutdown once; idempotent. The library stays loaded until this object
  // is destroyed (so code and tables it handed out stay mapped).
  void shutdown();

  // The plugin's table, copied into a full-size, zeroed fl_device_ops: entries beyond the
  // plugin's struct_size read as NULL. struct_size keeps the plugin's value.
  const fl_device_ops& ops() const { return ops_; }

  // An optional entry honouring struct_size: nullptr when the member lies beyond the plugin's
  // struct_size (an older minor) or is NULL.
  template <class Fn>
  Fn entry(Fn fl_device_ops::*member) const {
    static const fl_device_ops probe{};
    const auto offset = static_cast<size_t>(reinterpret_cast<const char*>(&(probe.*member)) -
                                            reinterpret_cast<const char*>(&probe));
    if (offset + sizeof(Fn) > ops_.struct_size) return nullptr;
    return ops_.*member;
  }

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::filesystem::path& path() const { return path_; }
  uint32_t abi_major() const { return ops_.abi_major; }
  uint32_t abi_minor() const { return ops_.abi_minor; }
  // GNU build-id of the file as lowercase hex (from its ELF note), "" if it has none.
  const std::string& build_id() const { return build_id_; }

  // After initialize.
  int32_t device_count() const { return static_cast<int32_t>(devices_.size()); }
  const std::vector<fl_device_properties>& devices() const { return devices_; }
  std::span<const fl_kernel_entry> kernels() const { return kernels_; }
  // Entries kernels_get returned that were dropped, each "<index>: <why>".
  const std::vector<std::string>& rejected_kernels() const { return rejected_kernels_; }

  // Throws fl::Error (OutOfMemoryError for FL_ERR_OUT_OF_MEMORY, NotSupportedError for
  // FL_ERR_NOT_SUPPORTED) "<what> failed on plugin <name>: <STATUS>: <last_error>" when
  // status != FL_OK.
  void check(fl_status_t status, const std::string& what) const;

  // The plugin's last_error() for this thread, "" when it returns NULL.
  std::string last_error() const;

  // get_proc_address(name), or NULL when the plugin has no get_proc_address or no such extra.
  void* extra(const char* name) const;

 private:
  struct Impl;
  explicit PluginLibrary(std::unique_ptr<Impl> impl);
  static void host_log(void* user_data, int32_t level, const char* message);
  void read_devices();
  void read_kernels();
  [[noreturn]] void fail_after_init(LoadStep step, const std::string& reason);

  std::unique_ptr<Impl> impl_;  // the loaded library (Boost.DLL)
  fl_device_ops ops_{};
  std::filesystem::path path_;
  std::string name_;
  std::string version_;
  std::string build_id_;
  fl_host_services host_{};
  bool initialized_ = false;
  bool init_attempted_ = false;
  std::vector<fl_device_properties> devices_;
  std::vector<fl_kernel_entry> kernels_;
  std::vector<std::string> rejected_kernels_;
};

// Reads the GNU build-id note of an ELF64 file as lowercase hex; "" when the file is not
// ELF64 or has no such note. Does not throw.
std::string read_elf_build_id(const std::filesystem::path& file);

}  // namespace fl
