// render.h — fl-smi output: a plain-text table, or one JSON document (--json).
#pragma once

#include "doctor.h"
#include "inventory.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace fl::smi {

std::string render_text(const Inventory& inventory, const std::optional<std::vector<Check>>& doctor);
nlohmann::json render_json(const Inventory& inventory, const std::optional<std::vector<Check>>& doctor);

}  // namespace fl::smi
