// plugin_library.cpp — loading, negotiating and initializing one plugin.
#include "plugin_library.h"

#include "log.h"
#include "plugin_validation.h"

#include <boost/dll/shared_library.hpp>
#include <boost/system/system_error.hpp>

#include <elf.h>

#include <cstring>
#include <exception>
#include <fstream>
#include <system_error>
#include <utility>

namespace fl {

const char* to_string(LoadStep step) {
  switch (step) {
    case LoadStep::Open: return "open";
    case LoadStep::EntrySymbol: return "entry symbol";
    case LoadStep::Table: return "table";
    case LoadStep::Version: return "version";
    case LoadStep::StructSize: return "struct size";
    case LoadStep::RequiredEntries: return "required entries";
    case LoadStep::Init: return "init";
    case LoadStep::Devices: return "devices";
    case LoadStep::Kernels: return "kernels";
  }
  return "unknown step";
}

PluginLoadError::PluginLoadError(std::filesystem::path path, LoadStep step, std::string reason)
    : Error("plugin " + path.string() + ": " + to_string(step) + " failed: " + reason,
            step == LoadStep::Version ? FL_ERR_VERSION : FL_ERR_INTERNAL),
      path_(std::move(path)),
      step_(step),
      reason_(std::move(reason)) {}

struct PluginLibrary::Impl {
  boost::dll::shared_library library;
};

namespace {

// Runs a call into the plugin; a C++ exception escaping it (a buggy plugin) becomes a message.
template <class Call>
bool call_plugin(Call&& call, std::string& exception_message) {
  try {
    call();
    return true;
  } catch (const std::exception& e) {
    exception_message = std::string("C++ exception escaped the plugin: ") + e.what();
  } catch (...) {
    exception_message = "C++ exception escaped the plugin (not a std::exception)";
  }
  return false;
}

spdlog::level::level_enum to_spdlog_level(int32_t level) {
  switch (level) {
    case FL_LOG_TRACE: return spdlog::level::trace;
    case FL_LOG_DEBUG: return spdlog::level::debug;
    case FL_LOG_INFO: return spdlog::level::info;
    case FL_LOG_WARN: return spdlog::level::warn;
    default: return spdlog::level::err;
  }
}

// Boost.DLL's message embeds the dynamic loader's text as "(dlerror system message: TEXT): ";
// return TEXT, or the whole message when it has no such part.
std::string dlerror_text(const std::string& boost_message) {
  const std::string marker = "dlerror system message: ";
  auto begin = boost_message.find(marker);
  if (begin == std::string::npos) return boost_message;
  begin += marker.size();
  auto end = boost_message.rfind("): ");
  if (end == std::string::npos || end < begin) return boost_message.substr(begin);
  return boost_message.substr(begin, end - begin);
}

}  // namespace

PluginLibrary::PluginLibrary(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PluginLibrary::~PluginLibrary() {
  try {
    shutdown();
  } catch (...) {
    // shutdown() does not throw; nothing to report from a destructor.
  }
}

std::shared_ptr<PluginLibrary> PluginLibrary::open(const std::filesystem::path& file) {
  std::error_code fs_error;
  std::filesystem::path path = std::filesystem::canonical(file, fs_error);
  if (fs_error) throw PluginLoadError(file, LoadStep::Open, "cannot resolve path: " + fs_error.message());
  log().debug("plugin {}: opening", path.string());

  auto impl = std::make_unique<Impl>();
  try {
    impl->library.load(path, boost::dll::load_mode::rtld_local | boost::dll::load_mode::rtld_now);
  } catch (const std::system_error& e) {  // with BOOST_DLL_USE_STD_FS: filesystem_error
    throw PluginLoadError(path, LoadStep::Open, dlerror_text(e.what()));
  } catch (const boost::system::system_error& e) {
    throw PluginLoadError(path, LoadStep::Open, dlerror_text(e.what()));
  }
  log().debug("plugin {}: opened", path.string());

  if (!impl->library.has(FL_PLUGIN_ENTRY_SYMBOL))
    throw PluginLoadError(path, LoadStep::EntrySymbol,
                          std::string("symbol '") + FL_PLUGIN_ENTRY_SYMBOL + "' not exported");
  auto get_ops = impl->library.get<const fl_device_ops*()>(FL_PLUGIN_ENTRY_SYMBOL);
  log().debug("plugin {}: found {}", path.string(), FL_PLUGIN_ENTRY_SYMBOL);

  const fl_device_ops* table = nullptr;
  std::string exception_message;
  if (!call_plugin([&] { table = get_ops(); }, exception_message))
    throw PluginLoadError(path, LoadStep::Table, std::string(FL_PLUGIN_ENTRY_SYMBOL) + ": " + exception_message);
  LoadStep failed_step = LoadStep::Table;
  const std::string problem = validate_device_ops(table, SIZE_MAX, &failed_step);
  if (!problem.empty()) throw PluginLoadError(path, failed_step, problem);
  log().debug("plugin {}: table at {}: ABI {}.{} accepted (host {}.{}), struct_size {} (host {})",
              path.string(), static_cast<const void*>(table), table->abi_major, table->abi_minor,
              FL_ABI_MAJOR, FL_ABI_MINOR, table->struct_size, sizeof(fl_device_ops));

  std::shared_ptr<PluginLibrary> plugin(new PluginLibrary(std::move(impl)));
  plugin->path_ = path;
  std::memcpy(&plugin->ops_, table, std::min(table->struct_size, sizeof(fl_device_ops)));
  plugin->name_ = table->plugin_name;
  plugin->version_ = table->plugin_version != nullptr ? table->plugin_version : "";
  plugin->build_id_ = read_elf_build_id(path);
  log().debug("plugin {}: '{}' {} ready (build-id {})", path.string(), plugin->name_,
              plugin->version_, plugin->build_id_.empty() ? "none" : plugin->build_id_);
  return plugin;
}

void PluginLibrary::host_log(void* user_data, int32_t level, const char* message) {
  auto* self = static_cast<PluginLibrary*>(user_data);
  log().log(to_spdlog_level(level), "[plugin {}] {}", self->name_, message != nullptr ? message : "");
}

void PluginLibrary::fail_after_init(LoadStep step, const std::string& reason) {
  std::string ignored;
  call_plugin([&] { ops_.shutdown(); }, ignored);
  initialized_ = false;
  devices_.clear();
  kernels_.clear();
  throw PluginLoadError(path_, step, reason);
}

void PluginLibrary::initialize(const std::string& options) {
  if (init_attempted_) throw Error("plugin " + name_ + ": initialize called twice");
  init_attempted_ = true;
  host_.struct_size = sizeof(fl_host_services);
  host_.host_abi_major = FL_ABI_MAJOR;
  host_.host_abi_minor = FL_ABI_MINOR;
  host_.log = &PluginLibrary::host_log;
  host_.user_data = this;

  log().debug("plugin {}: init(\"{}\")", path_.string(), options);
  fl_status_t status = FL_OK;
  std::string exception_message;
  if (!call_plugin([&] { status = ops_.init(&host_, options.c_str()); }, exception_message)) {
    // The plugin did not finish init; calling its shutdown could touch half-built state.
    throw PluginLoadError(path_, LoadStep::Init, exception_message);
  }
  if (status == FL_ERR_NO_DEVICE)
    throw PluginLoadError(path_, LoadStep::Init, "no device: " + last_error());
  if (status != FL_OK)
    throw PluginLoadError(path_, LoadStep::Init, std::string(status_name(status)) + ": " + last_error());
  initialized_ = true;
  log().debug("plugin {}: initialized", path_.string());
  read_devices();
  read_kernels();
}

void PluginLibrary::read_devices() {
  int32_t count = -1;
  fl_status_t status = FL_OK;
  std::string exception_message;
  if (!call_plugin([&] { status = ops_.device_count(&count); }, exception_message))
    fail_after_init(LoadStep::Devices, "device_count: " + exception_message);
  if (status != FL_OK)
    fail_after_init(LoadStep::Devices,
                    std::string("device_count: ") + status_name(status) + ": " + last_error());
  if (count < 0)
    fail_after_init(LoadStep::Devices, "device_count returned a negative count " + std::to_string(count));
  for (int32_t d = 0; d < count; ++d) {
    fl_device_properties props{};
    props.struct_size = sizeof(fl_device_properties);
    if (!call_plugin([&] { status = ops_.device_get_properties(d, &props); }, exception_message))
      fail_after_init(LoadStep::Devices, "device_get_properties(" + std::to_string(d) + "): " + exception_message);
    if (status != FL_OK)
      fail_after_init(LoadStep::Devices, "device_get_properties(" + std::to_string(d) +
                                             "): " + status_name(status) + ": " + last_error());
    props.struct_size = sizeof(fl_device_properties);
    props.vendor[sizeof(props.vendor) - 1] = '\0';
    props.name[sizeof(props.name) - 1] = '\0';
    props.stable_id[sizeof(props.stable_id) - 1] = '\0';
    devices_.push_back(props);
    log().debug("plugin {}: device {} '{}' stable id '{}'", path_.string(), d, props.name, props.stable_id);
  }
}

void PluginLibrary::read_kernels() {
  const fl_kernel_entry* entries = nullptr;
  size_t count = 0;
  fl_status_t status = FL_OK;
  std::string exception_message;
  if (!call_plugin([&] { status = ops_.kernels_get(&entries, &count); }, exception_message))
    fail_after_init(LoadStep::Kernels, "kernels_get: " + exception_message);
  if (status != FL_OK)
    fail_after_init(LoadStep::Kernels, std::string("kernels_get: ") + status_name(status) + ": " + last_error());
  KernelTableCheck check = validate_kernel_table(entries, count);
  if (!check.error.empty()) fail_after_init(LoadStep::Kernels, check.error);
  for (const std::string& why : check.rejected)
    log().warn("plugin {}: kernel entry dropped: {}", name_, why);
  kernels_ = std::move(check.accepted);
  rejected_kernels_ = std::move(check.rejected);
  log().debug("plugin {}: {} kernels ({} dropped)", path_.string(), kernels_.size(), rejected_kernels_.size());
}

void PluginLibrary::shutdown() {
  if (!initialized_) return;
  initialized_ = false;
  kernels_.clear();
  std::string exception_message;
  if (!call_plugin([&] { ops_.shutdown(); }, exception_message))
    log().warn("plugin {}: shutdown: {}", name_, exception_message);
  log().debug("plugin {}: shut down", path_.string());
}

std::string PluginLibrary::last_error() const {
  const char* message = nullptr;
  std::string exception_message;
  if (!call_plugin([&] { message = ops_.last_error(); }, exception_message)) return exception_message;
  return message != nullptr ? message : "";
}

void* PluginLibrary::extra(const char* name) const {
  auto get = entry(&fl_device_ops::get_proc_address);
  return get != nullptr ? get(name) : nullptr;
}

void PluginLibrary::check(fl_status_t status, const std::string& what) const {
  if (status == FL_OK) return;
  std::string message = what + " failed on plugin " + name_ + ": " + status_name(status) + ": " + last_error();
  if (status == FL_ERR_OUT_OF_MEMORY) throw OutOfMemoryError(message);
  if (status == FL_ERR_NOT_SUPPORTED) throw NotSupportedError(message);
  throw Error(message, status);
}

std::string read_elf_build_id(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  Elf64_Ehdr header{};
  if (!in.read(reinterpret_cast<char*>(&header), sizeof(header))) return "";
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64 ||
      header.e_phentsize != sizeof(Elf64_Phdr) || header.e_phnum > 4096)
    return "";
  for (unsigned i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr ph{};
    in.seekg(static_cast<std::streamoff>(header.e_phoff + i * sizeof(Elf64_Phdr)));
    if (!in.read(reinterpret_cast<char*>(&ph), sizeof(ph))) return "";
    if (ph.p_type != PT_NOTE || ph.p_filesz > (1u << 20)) continue;
    std::string notes(ph.p_filesz, '\0');
    in.seekg(static_cast<std::streamoff>(ph.p_offset));
    if (!in.read(notes.data(), static_cast<std::streamsize>(notes.size()))) return "";
    size_t pos = 0;
    auto align4 = [](size_t n) { return (n + 3) & ~size_t{3}; };
    while (pos + sizeof(Elf64_Nhdr) <= notes.size()) {
      Elf64_Nhdr note{};
      std::memcpy(&note, notes.data() + pos, sizeof(note));
      size_t name_at = pos + sizeof(note);
      size_t desc_at = name_at + align4(note.n_namesz);
      size_t next = desc_at + align4(note.n_descsz);
      if (next > notes.size()) break;
      if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 &&
          std::memcmp(notes.data() + name_at, "GNU", 4) == 0) {
        static const char* hex = "0123456789abcdef";
        std::string id;
        for (size_t k = 0; k < note.n_descsz; ++k) {
          auto byte = static_cast<unsigned char>(notes[desc_at + k]);
          id += hex[byte >> 4];
          id += hex[byte & 15];
        }
        return id;
      }
      pos = next;
    }
  }
  return "";
}

}  // namespace fl
