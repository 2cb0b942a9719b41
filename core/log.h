// log.h — the core's logger ("torch_fl", spdlog). Level and sink come from the config's
// `logging` section (or FL_LOG_LEVEL / FL_LOG_FILE); the default is warnings to stderr.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace fl {

// The shared logger; created on first use.
spdlog::logger& log();

// Re-targets the logger: level is one of trace, debug, info, warn, error, off; an empty path
// logs to stderr, otherwise appends to that file. Throws fl::ConfigError on a bad level.
void configure_logging(const std::string& level, const std::string& path);

}  // namespace fl
