#include "log.h"

#include "error.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

namespace fl {
namespace {

std::mutex& logger_mutex() {
  static std::mutex m;
  return m;
}

std::shared_ptr<spdlog::logger>& logger_slot() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>(
        "torch_fl", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    l->set_pattern("[torch_fl %^%l%$] %v");
    l->set_level(spdlog::level::warn);
    return l;
  }();
  return logger;
}

}  // namespace

spdlog::logger& log() { return *logger_slot(); }

void configure_logging(const std::string& level, const std::string& path) {
  auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off")
    throw ConfigError("unknown log level '" + level +
                      "' (expected trace, debug, info, warn, error or off)");
  std::lock_guard lock(logger_mutex());
  std::shared_ptr<spdlog::logger> l;
  if (path.empty()) {
    l = std::make_shared<spdlog::logger>(
        "torch_fl", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  } else {
    l = std::make_shared<spdlog::logger>(
        "torch_fl", std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false));
  }
  l->set_pattern(path.empty() ? "[torch_fl %^%l%$] %v" : "[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  l->set_level(parsed);
  l->flush_on(spdlog::level::trace);
  logger_slot() = l;
}

}  // namespace fl

#include "log_plain.h"

namespace fl {
namespace {
spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::Trace: return spdlog::level::trace;
    case LogLevel::Debug: return spdlog::level::debug;
    case LogLevel::Info: return spdlog::level::info;
    case LogLevel::Warn: return spdlog::level::warn;
    case LogLevel::Error: return spdlog::level::err;
  }
  return spdlog::level::info;
}
}  // namespace

void log_message(LogLevel level, const std::string& message) {
  log().log(to_spdlog(level), "{}", message);
}

bool log_enabled(LogLevel level) { return log().should_log(to_spdlog(level)); }

}  // namespace fl
