// naive_reference.h — scalar reference implementations used when the plugin under test is
// itself the reference plugin: the elementwise families, sum and mm. Other ops have none
// (the check then reports "skip: is the reference").
#pragma once

#include "case_catalog.h"

#include <optional>
#include <string>
#include <vector>

namespace fl::check {

// The outputs of `op` on `c`, computed in double and rounded to each output's dtype;
// nullopt when there is no naive implementation of `op`.
std::optional<std::vector<HostTensor>> naive_run(const std::string& op, const KernelCase& c);

}  // namespace fl::check
