// report.h — fl-plugin-check's results: named checks with pass/fail/skip, a message and a
// duration, printed as a table or as JSON.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace fl::check {

enum class Status { Pass, Fail, Skip };
const char* to_string(Status status);

struct CheckResult {
  std::string name;
  Status status = Status::Pass;
  std::string message;
  double duration_ms = 0;
};

struct PluginIdentity {
  std::string path, name, version, build_id;
  uint32_t abi_major = 0, abi_minor = 0;
};

class Report {
 public:
  // Runs `body` (which returns the status and fills the message), timing it; an exception
  // from `body` is a failure with its text.
  void run(const std::string& name, const std::function<Status(std::string& message)>& body);
  void add(CheckResult result) { checks_.push_back(std::move(result)); }
  const std::vector<CheckResult>& checks() const { return checks_; }
  int count(Status status) const;
  bool failed() const { return count(Status::Fail) > 0; }

  PluginIdentity plugin;
  std::vector<std::string> notes;  // printed under the table ("no device: ...")

  void print_table(std::ostream& out) const;
  void print_json(std::ostream& out) const;

 private:
  std::vector<CheckResult> checks_;
};

}  // namespace fl::check
