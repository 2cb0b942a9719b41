// report.cpp — running, timing and printing checks.
#include "report.h"

#include <fl_abi.h>

#include <nlohmann/json.hpp>

#include <iomanip>
#include <ostream>

namespace fl::check {

const char* to_string(Status status) {
  switch (status) {
    case Status::Pass: return "pass";
    case Status::Fail: return "fail";
    case Status::Skip: return "skip";
  }
  return "?";
}

void Report::run(const std::string& name, const std::function<Status(std::string& message)>& body) {
  CheckResult result;
  result.name = name;
  const auto start = std::chrono::steady_clock::now();
  try {
    result.status = body(result.message);
  } catch (const std::exception& e) {
    result.status = Status::Fail;
    result.message = e.what();
  } catch (...) {
    result.status = Status::Fail;
    result.message = "unknown exception";
  }
  result.duration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  checks_.push_back(std::move(result));
}

int Report::count(Status status) const {
  int n = 0;
  for (const CheckResult& c : checks_) n += c.status == status;
  return n;
}

void Report::print_table(std::ostream& out) const {
  out << "fl-plugin-check: " << plugin.path << "\n  plugin " << plugin.name << " " << plugin.version << ", ABI "
      << plugin.abi_major << "." << plugin.abi_minor << ", build-id " << (plugin.build_id.empty() ? "none" : plugin.build_id)
      << "\n\n";
  size_t width = 10;
  for (const CheckResult& c : checks_) width = std::max(width, c.name.size());
  for (const CheckResult& c : checks_) {
    out << "  " << std::left << std::setw(static_cast<int>(width)) << c.name << "  " << std::setw(4) << to_string(c.status)
        << "  " << std::right << std::setw(8) << std::fixed << std::setprecision(1) << c.duration_ms << " ms  " << c.message
        << "\n";
  }
  out << "\n" << count(Status::Pass) << " passed, " << count(Status::Fail) << " failed, " << count(Status::Skip)
      << " skipped\n";
  for (const std::string& note : notes) out << note << "\n";
}

void Report::print_json(std::ostream& out) const {
  nlohmann::json j;
  j["tool_version"] = FL_PLUGIN_CHECK_VERSION;
  j["abi_version"] = std::to_string(FL_ABI_MAJOR) + "." + std::to_string(FL_ABI_MINOR);
  j["plugin"] = {{"path", plugin.path}, {"name", plugin.name}, {"version", plugin.version},
                 {"abi_major", plugin.abi_major}, {"abi_minor", plugin.abi_minor}, {"build_id", plugin.build_id}};
  j["checks"] = nlohmann::json::array();
  for (const CheckResult& c : checks_)
    j["checks"].push_back({{"name", c.name}, {"status", to_string(c.status)}, {"message", c.message},
                           {"duration_ms", c.duration_ms}});
  j["summary"] = {{"passed", count(Status::Pass)}, {"failed", count(Status::Fail)}, {"skipped", count(Status::Skip)}};
  j["notes"] = notes;
  out << j.dump(2) << "\n";
}

}  // namespace fl::check
