// Tests of core/dispatch_table: lookup by op name, dtype filtering, first-entry-wins, names.
#include "dispatch_table.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace {

fl_status_t kernel_a(const fl_kernel_call*) { return FL_OK; }
fl_status_t kernel_b(const fl_kernel_call*) { return FL_ERR_DEVICE; }

fl_kernel_entry entry(const char* op, uint64_t mask, fl_kernel_fn fn) {
  fl_kernel_entry e{};
  e.struct_size = sizeof(fl_kernel_entry);
  e.op = op;
  e.dtype_mask = mask;
  e.fn = fn;
  return e;
}

}  // namespace

TEST_CASE("dispatch table: empty by default") {
  fl::DispatchTable table;
  CHECK(table.size() == 0);
  CHECK(table.find("aten::add.out") == nullptr);
  CHECK(table.op_names().empty());
}

TEST_CASE("dispatch table: finds entries by exact overload name") {
  const std::vector<fl_kernel_entry> entries = {
      entry("aten::add.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), kernel_a),
      entry("aten::mm.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32) | FL_DTYPE_BIT(FL_DTYPE_FLOAT64), kernel_b),
  };
  fl::DispatchTable table(entries);
  CHECK(table.size() == 2);
  const fl_kernel_entry* add = table.find("aten::add.out");
  REQUIRE(add != nullptr);
  CHECK(add == &entries[0]);  // points into the plugin's table, no copy
  CHECK(add->fn == kernel_a);
  CHECK(table.find("aten::mm.out")->fn == kernel_b);
  CHECK(table.find("aten::add") == nullptr);
  CHECK(table.find("aten::add.Tensor") == nullptr);
  CHECK(table.find("add.out") == nullptr);
  CHECK(table.find("") == nullptr);
  const std::string key = "aten::mm.out";
  CHECK(table.find(std::string_view(key)) == &entries[1]);
}

TEST_CASE("dispatch table: dtype filter follows dtype_mask and rejects out-of-range dtypes") {
  const std::vector<fl_kernel_entry> entries = {
      entry("aten::mm.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32) | FL_DTYPE_BIT(FL_DTYPE_FLOAT64), kernel_a),
  };
  fl::DispatchTable table(entries);
  CHECK(table.find("aten::mm.out", FL_DTYPE_FLOAT32) == &entries[0]);
  CHECK(table.find("aten::mm.out", FL_DTYPE_FLOAT64) == &entries[0]);
  CHECK(table.find("aten::mm.out", FL_DTYPE_INT64) == nullptr);
  CHECK(table.find("aten::mm.out", FL_DTYPE_BOOL) == nullptr);
  CHECK(table.find("aten::mm.out", -1) == nullptr);
  CHECK(table.find("aten::mm.out", FL_DTYPE_COUNT) == nullptr);
  CHECK(table.find("aten::mm.out", 63) == nullptr);
  CHECK(table.find("aten::missing.out", FL_DTYPE_FLOAT32) == nullptr);
}

TEST_CASE("dispatch table: the first entry of a duplicated op wins") {
  const std::vector<fl_kernel_entry> entries = {
      entry("aten::add.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), kernel_a),
      entry("aten::add.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT64), kernel_b),
  };
  fl::DispatchTable table(entries);
  CHECK(table.size() == 1);
  CHECK(table.find("aten::add.out")->fn == kernel_a);
  CHECK(table.find("aten::add.out", FL_DTYPE_FLOAT64) == nullptr);
}

TEST_CASE("dispatch table: op_names is sorted") {
  const std::vector<fl_kernel_entry> entries = {
      entry("aten::sum.IntList_out", 1, kernel_a),
      entry("aten::add.out", 1, kernel_a),
      entry("aten::mm.out", 1, kernel_a),
  };
  fl::DispatchTable table(entries);
  CHECK(table.op_names() == std::vector<std::string>{"aten::add.out", "aten::mm.out", "aten::sum.IntList_out"});
}

TEST_CASE("dispatch table: op names are copied (the lookup does not depend on the caller's buffer)") {
  std::string name = "aten::relu.out";
  std::vector<fl_kernel_entry> entries = {entry(name.c_str(), 1, kernel_a)};
  fl::DispatchTable table(entries);
  name = "aten::XXXX.out";  // same length, buffer rewritten in place
  CHECK(table.find("aten::relu.out") == &entries[0]);
  CHECK(table.find("aten::XXXX.out") == nullptr);
}
