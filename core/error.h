// error.h — the core's exception types. Plugin status codes become exceptions here, at one
// place (fl::check_status); nothing above the core sees a raw fl_status_t.
#pragma once

#include <fl_abi.h>

#include <stdexcept>
#include <string>

namespace fl {

const char* status_name(fl_status_t status);

// Any failure reported by the core. `status` is the plugin status behind it, if any.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, fl_status_t status = FL_ERR_INTERNAL)
      : std::runtime_error(message), status_(status) {}
  fl_status_t status() const noexcept { return status_; }

 private:
  fl_status_t status_;
};

// The device (or the memory_fraction cap) has no room; the message carries allocator stats.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& message) : Error(message, FL_ERR_OUT_OF_MEMORY) {}
};

// A configuration file or variable is invalid; the message names the file, line and key.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(message, FL_ERR_INVALID_ARGUMENT) {}
};

// A kernel or case the device does not handle.
class NotSupportedError : public Error {
 public:
  explicit NotSupportedError(const std::string& message) : Error(message, FL_ERR_NOT_SUPPORTED) {}
};

}  // namespace fl
