// render.cpp — text and JSON output of fl-smi.
#include "render.h"

#include <cstdio>
#include <sstream>

namespace fl::smi {
namespace {

std::string human(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

nlohmann::json allocator_json(const AllocatorStats& s) {
  return {{"allocated_bytes", s.allocated_bytes}, {"reserved_bytes", s.reserved_bytes},
          {"peak_allocated_bytes", s.peak_allocated_bytes}, {"peak_reserved_bytes", s.peak_reserved_bytes},
          {"limit_bytes", s.limit_bytes}, {"num_allocs", s.num_allocs}, {"num_ooms", s.num_ooms},
          {"num_segments", s.num_segments}};
}

}  // namespace

std::string render_text(const Inventory& inv, const std::optional<std::vector<Check>>& doctor) {
  std::ostringstream out;
  out << "Torch-FL fl-smi " << FL_SMI_VERSION << " (host ABI " << FL_ABI_MAJOR << "." << FL_ABI_MINOR << ")\n";
  out << "Config: " << inv.config_source << "\n";
  if (!inv.config_error.empty()) out << "  config error (defaults used): " << inv.config_error << "\n";

  int loaded = 0;
  for (const auto& p : inv.plugins) loaded += p.loaded ? 1 : 0;
  out << "\nPlugins: " << inv.plugins.size() << " found, " << loaded << " loaded, "
      << inv.plugins.size() - loaded << " skipped\n";
  for (const auto& p : inv.plugins) {
    if (p.loaded)
      out << "  loaded   " << p.name << " " << p.version << " (ABI " << p.abi << ", " << p.devices
          << " device(s), " << p.kernels << " kernel(s)" << (p.build_id.empty() ? "" : ", build id " + p.build_id.substr(0, 12))
          << ")\n           " << p.path << (p.origin.empty() ? "" : " [" + p.origin + "]") << "\n";
    else
      out << "  skipped  " << p.path << (p.origin.empty() ? "" : " [" + p.origin + "]") << "\n           at "
          << p.step << ": " << p.reason << "\n";
  }

  out << "\nDevices: " << inv.devices.size() << "\n";
  for (const auto& d : inv.devices) {
    out << "  fl:" << d.index << "  " << d.plugin << ":" << d.local << "  " << d.vendor << " " << d.name << "  ["
        << d.stable_id << "]\n";
    if (d.memory_known)
      out << "        device memory: " << human(d.used_bytes) << " in use of " << human(d.total_memory) << " ("
          << human(d.free_bytes) << " free, all processes)\n";
    else
      out << "        device memory: unknown (" << d.memory_error << ")\n";
    out << "        allocator (this process): " << human(d.allocator.allocated_bytes) << " allocated, "
        << human(d.allocator.reserved_bytes) << " reserved, peak " << human(d.allocator.peak_reserved_bytes)
        << ", limit " << (d.allocator.limit_bytes ? human(d.allocator.limit_bytes) : std::string("none"))
        << " (memory_fraction " << d.memory_fraction << ")\n";
  }

  if (doctor) {
    out << "\nDoctor:\n";
    for (const auto& c : *doctor) out << "  [" << c.status << "] " << c.name << ": " << c.detail << "\n";
  }
  return out.str();
}

nlohmann::json render_json(const Inventory& inv, const std::optional<std::vector<Check>>& doctor) {
  nlohmann::json j;
  j["version"] = FL_SMI_VERSION;
  j["host_abi"] = std::to_string(FL_ABI_MAJOR) + "." + std::to_string(FL_ABI_MINOR);
  j["config"] = {{"source", inv.config_source}, {"error", inv.config_error}};
  j["plugins"] = nlohmann::json::array();
  for (const auto& p : inv.plugins) {
    nlohmann::json row = {{"path", p.path}, {"origin", p.origin}, {"status", p.loaded ? "loaded" : "skipped"}};
    if (p.loaded) {
      row.update({{"name", p.name}, {"version", p.version}, {"abi", p.abi}, {"build_id", p.build_id},
                  {"devices", p.devices}, {"kernels", p.kernels}});
    } else {
      row.update({{"step", p.step}, {"reason", p.reason}});
    }
    j["plugins"].push_back(row);
  }
  j["devices"] = nlohmann::json::array();
  for (const auto& d : inv.devices) {
    nlohmann::json row = {{"index", d.index}, {"device", "fl:" + std::to_string(d.index)}, {"plugin", d.plugin},
                          {"local", d.local}, {"vendor", d.vendor}, {"name", d.name}, {"stable_id", d.stable_id},
                          {"total_memory", d.total_memory}, {"memory_fraction", d.memory_fraction},
                          {"allocator", allocator_json(d.allocator)}};
    if (d.memory_known)
      row.update({{"free_memory", d.free_bytes}, {"used_memory", d.used_bytes}});
    else
      row["memory_error"] = d.memory_error;
    j["devices"].push_back(row);
  }
  if (doctor) {
    j["doctor"] = nlohmann::json::array();
    for (const auto& c : *doctor) j["doctor"].push_back({{"check", c.name}, {"status", c.status}, {"detail", c.detail}});
  }
  return j;
}

}  // namespace fl::smi
