// doctor.h — fl-smi --doctor: a checklist of what commonly stops Torch-FL from finding a
// device. Each check is ok, warn (worth a look), fail (will not work) or info.
#pragma once

#include "inventory.h"

#include <string>
#include <vector>

namespace fl::smi {

struct Check {
  std::string name;    // e.g. "FL_PLUGIN_PATH entry /opt/x"
  std::string status;  // "ok", "warn", "fail", "info"
  std::string detail;
};

// FL_PLUGIN_PATH entries exist and are readable; the config file parses (the error names the
// file, line and key); plugins loaded or why not; /dev nodes of known vendors are present and
// accessible; where the log goes and whether it can be written.
std::vector<Check> run_doctor(const Inventory& inventory);

}  // namespace fl::smi
