#include "cpu_runtime.hpp"

#include <plugin_support.hpp>

#include <unistd.h>

#include "blas_library.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

namespace fl::cpu {

namespace {

std::unique_ptr<Runtime>& instance() {
  static std::unique_ptr<Runtime> runtime;
  return runtime;
}

// Device blocks carry a 64-byte header (size, owner, magic) in front of the returned
// pointer, so fl_free knows the size for accounting and can reject foreign pointers.
constexpr size_t kAlignment = 64;
constexpr uint64_t kBlockMagic = 0x464c4350554d454dULL;  // "FLCPUMEM"

struct BlockHeader {
  uint64_t magic;
  uint64_t size;
  int32_t device;
};
static_assert(sizeof(BlockHeader) <= kAlignment);

uint64_t physical_memory() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return uint64_t{1} << 32;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

// Reads "key=value" from a "k=v;k=v" string; empty when absent.
std::string option_value(std::string_view options, std::string_view key) {
  size_t pos = 0;
  while (pos <= options.size()) {
    size_t end = options.find(';', pos);
    if (end == std::string_view::npos) end = options.size();
    std::string_view item = options.substr(pos, end - pos);
    size_t eq = item.find('=');
    if (eq != std::string_view::npos) {
      std::string_view k = item.substr(0, eq);
      while (!k.empty() && k.front() == ' ') k.remove_prefix(1);
      while (!k.empty() && k.back() == ' ') k.remove_suffix(1);
      if (k == key) return std::string(item.substr(eq + 1));
    }
    pos = end + 1;
  }
  return {};
}

int64_t parse_integer(const std::string& text, const char* what) {
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0')
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string("cpu plugin: bad ") + what + " '" + text + "'");
  return value;
}

}  // namespace

void Runtime::init(const char* options) {
  std::string_view opts = options ? options : "";
  int64_t devices = 1;
  std::string text = option_value(opts, "devices");
  if (text.empty()) {
    const char* env = std::getenv("FL_CPU_DEVICES");
    if (env != nullptr && *env != '\0') text = env;
  }
  if (!text.empty()) devices = parse_integer(text, "device count");
  if (devices < 0 || devices > 1024)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: device count must be in [0, 1024]");
  std::string seed_text = option_value(opts, "seed");
  uint64_t seed = seed_text.empty() ? 0 : static_cast<uint64_t>(parse_integer(seed_text, "seed"));
  // host_accessible=0 (or FL_CPU_HOST_ACCESSIBLE=0) makes the devices report memory the host
  // may not dereference, as a GPU's: the core then takes the staging paths a GPU plugin takes,
  // so CI exercises them without a GPU. The memory itself is still host memory, handed out at
  // addresses the host cannot dereference (device_address.hpp).
  std::string access = option_value(opts, "host_accessible");
  if (access.empty()) {
    const char* env = std::getenv("FL_CPU_HOST_ACCESSIBLE");
    if (env != nullptr && *env != '\0') access = env;
  }
  const bool host_accessible = access.empty() || parse_integer(access, "host_accessible") != 0;
  // threads=N (or FL_CPU_THREADS): the threads the kernels use (OpenBLAS's and the plugin's
  // own loops, kernel_team); without it, OpenBLAS's
  // own count (all cores, or OPENBLAS_NUM_THREADS). Beside other devices of the process,
  // fewer leave cores to the threads that feed those devices: OpenBLAS splits a GEMM evenly
  // over its threads, so one thread that shares a core with another busy thread holds the
  // whole GEMM back. The count is OpenBLAS's, for the whole process (the pthreads build this
  // plugin links; an OpenMP build would apply it to the calling thread only).
  std::string threads_text = option_value(opts, "threads");
  if (threads_text.empty()) {
    const char* env = std::getenv("FL_CPU_THREADS");
    if (env != nullptr && *env != '\0') threads_text = env;
  }
  int64_t threads = 0;
  if (!threads_text.empty()) {
    threads = parse_integer(threads_text, "thread count");
    if (threads < 1 || threads > 4096)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: threads must be in [1, 4096]");
  }
  // OpenBLAS's own count, as the process started (a later init without threads= returns to it).
  static const int blas_default = std::max(1, blas::get_num_threads());
  const int32_t host_threads = threads > 0 ? static_cast<int32_t>(threads) : blas_default;
  // Every option is valid: only now is the runtime built, and OpenBLAS's count changed only
  // once nothing else can fail (a failed init leaves no runtime and no changed count behind).
  auto runtime = std::unique_ptr<Runtime>(new Runtime(static_cast<int32_t>(devices), seed));
  runtime->host_accessible_ = host_accessible;
  runtime->host_threads_ = host_threads;
  runtime->copier_ = std::make_unique<plugin::ParallelCopy>(std::min(host_threads, kCopyThreads));
  runtime->kernel_team_ = std::make_unique<plugin::ParallelFor>(host_threads);
  blas::set_num_threads(host_threads);
  instance() = std::move(runtime);
}

void Runtime::shutdown() { instance().reset(); }

Runtime& Runtime::get() {
  auto& runtime = instance();
  if (!runtime) plugin::raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: not initialized");
  return *runtime;
}

Runtime::Runtime(int32_t devices, uint64_t seed) {
  total_memory_ = physical_memory();
  for (int32_t i = 0; i < devices; ++i) {
    auto device = std::make_unique<Device>();
    device->index = i;
    // Deterministic per device: the seed option plus the device index.
    device->rng.seed(seed + static_cast<uint64_t>(i));
    devices_.push_back(std::move(device));
  }
}

Runtime::~Runtime() {
  for (auto& dev : devices_) {
    for (StreamQueue* queue : dev->streams) delete queue;
    dev->streams.clear();
    dev->default_stream.reset();
  }
}

Device& Runtime::device(int32_t index) {
  if (index < 0 || index >= device_count())
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: no device " + std::to_string(index) +
                                               " (have " + std::to_string(device_count()) + ")");
  return *devices_[static_cast<size_t>(index)];
}

StreamQueue& Runtime::stream(int32_t index, fl_stream_t handle) {
  Device& dev = device(index);
  if (handle != nullptr) {
    auto* queue = reinterpret_cast<StreamQueue*>(handle);
    return *queue;
  }
  std::lock_guard<std::mutex> lock(dev.mutex);
  if (!dev.default_stream) dev.default_stream = std::make_unique<StreamQueue>(index);
  return *dev.default_stream;
}

StreamQueue* Runtime::create_stream(int32_t index) {
  Device& dev = device(index);
  auto queue = std::make_unique<StreamQueue>(index);
  std::lock_guard<std::mutex> lock(dev.mutex);
  dev.streams.insert(queue.get());
  return queue.release();
}

void Runtime::destroy_stream(int32_t index, fl_stream_t handle) {
  if (handle == nullptr) return;
  Device& dev = device(index);
  auto* queue = reinterpret_cast<StreamQueue*>(handle);
  {
    std::lock_guard<std::mutex> lock(dev.mutex);
    if (dev.streams.erase(queue) == 0)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: stream does not belong to device " +
                                                 std::to_string(index));
  }
  delete queue;  // drains first
}

void Runtime::synchronize_device(int32_t index) {
  Device& dev = device(index);
  std::vector<StreamQueue*> queues;
  {
    std::lock_guard<std::mutex> lock(dev.mutex);
    if (dev.default_stream) queues.push_back(dev.default_stream.get());
    queues.insert(queues.end(), dev.streams.begin(), dev.streams.end());
  }
  // Wait for all of them before reporting the first error, so every stream is drained.
  std::string first_error;
  fl_status_t status = FL_OK;
  for (StreamQueue* queue : queues) {
    try {
      queue->synchronize();
    } catch (const plugin::PluginError& e) {
      if (status == FL_OK) {
        status = e.status();
        first_error = e.what();
      }
    }
  }
  if (status != FL_OK) plugin::raise(status, first_error);
}

void* Runtime::allocate(int32_t index, size_t size) {
  Device& dev = device(index);
  if (size == 0) plugin::raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: fl_malloc of 0 bytes");
  if (size > total_memory_ || size + kAlignment < size)
    plugin::raise(FL_ERR_OUT_OF_MEMORY, "cpu plugin: cannot allocate " + std::to_string(size) +
                                            " bytes (host RAM is " + std::to_string(total_memory_) +
                                            ")");
  void* raw = nullptr;
  if (posix_memalign(&raw, kAlignment, size + kAlignment) != 0 || raw == nullptr)
    plugin::raise(FL_ERR_OUT_OF_MEMORY,
                  "cpu plugin: host allocation of " + std::to_string(size) + " bytes failed");
  auto* header = static_cast<BlockHeader*>(raw);
  header->magic = kBlockMagic;
  header->size = size;
  header->device = index;
  dev.bytes_in_use.fetch_add(size, std::memory_order_relaxed);
  return static_cast<char*>(raw) + kAlignment;
}

void Runtime::release(int32_t index, void* ptr) {
  if (ptr == nullptr) return;
  Device& dev = device(index);
  auto* header = reinterpret_cast<BlockHeader*>(static_cast<char*>(ptr) - kAlignment);
  if (header->magic != kBlockMagic)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: fl_free of a pointer not from fl_malloc");
  if (header->device != index)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: fl_free on device " + std::to_string(index) +
                                               " of a block from device " +
                                               std::to_string(header->device));
  dev.bytes_in_use.fetch_sub(header->size, std::memory_order_relaxed);
  header->magic = 0;
  std::free(header);
}

void* Runtime::allocate_pinned(size_t size) {
  if (size == 0) plugin::raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: fl_host_malloc of 0 bytes");
  if (size > total_memory_)
    plugin::raise(FL_ERR_OUT_OF_MEMORY, "cpu plugin: cannot allocate " + std::to_string(size) +
                                            " bytes of host memory");
  void* raw = nullptr;
  if (posix_memalign(&raw, kAlignment, size) != 0 || raw == nullptr)
    plugin::raise(FL_ERR_OUT_OF_MEMORY, "cpu plugin: host allocation failed");
  std::lock_guard<std::mutex> lock(pinned_mutex_);
  pinned_blocks_[reinterpret_cast<uintptr_t>(raw)] = size;
  return raw;
}

void Runtime::release_pinned(void* ptr) {
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(pinned_mutex_);
    if (pinned_blocks_.erase(reinterpret_cast<uintptr_t>(ptr)) == 0)
      plugin::raise(FL_ERR_INVALID_ARGUMENT,
                    "cpu plugin: fl_host_free of a pointer not from fl_host_malloc");
  }
  std::free(ptr);
}

bool Runtime::is_pinned(const void* ptr, size_t size) {
  auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(pinned_mutex_);
  auto it = pinned_blocks_.upper_bound(address);
  if (it == pinned_blocks_.begin()) return false;
  --it;
  return address >= it->first && address + size <= it->first + it->second;
}

}  // namespace fl::cpu
