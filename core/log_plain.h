// log_plain.h — the core logger for code that must not see spdlog or fmt headers (the torch
// binding compiles against libtorch's bundled fmt, which clashes with the system's). Messages
// are preformatted strings.
#pragma once

#include <string>

namespace fl {

enum class LogLevel { Trace, Debug, Info, Warn, Error };

void log_message(LogLevel level, const std::string& message);
bool log_enabled(LogLevel level);

}  // namespace fl
