// kernel_checks.cpp — comparing each kernel with the reference plugin or the naive loops.
#include "kernel_checks.h"

#include "case_runner.h"
#include "naive_reference.h"

#include <cstring>

namespace fl::check {
namespace {

constexpr fl_dtype_t kCheckedDtypes[] = {FL_DTYPE_FLOAT32, FL_DTYPE_FLOAT64, FL_DTYPE_BFLOAT16, FL_DTYPE_FLOAT16,
                                         FL_DTYPE_INT64};

Status check_kernel(const PluginLibrary& plugin, const fl_kernel_entry& entry, const PluginLibrary* reference,
                    std::string& message) {
  const std::string op = entry.op;
  const CatalogEntry* catalog = find_catalog_entry(op);
  if (catalog == nullptr) {
    message = "no case";
    return Status::Skip;
  }
  const bool is_reference = reference != nullptr && reference->name() == plugin.name();
  const fl_kernel_entry* reference_entry =
      reference != nullptr && !is_reference ? find_entry(*reference, op) : nullptr;
  std::string against = reference_entry != nullptr ? "reference " + reference->name() : "naive reference";
  int compared = 0, unsupported = 0, reference_declined = 0, identical = 0;
  std::string dtypes_seen;
  std::string first_unsupported;
  for (fl_dtype_t dtype : kCheckedDtypes) {
    if ((entry.dtype_mask & FL_DTYPE_BIT(dtype)) == 0) continue;
    const auto cases = catalog->build(dtype, (entry.flags & FL_KERNEL_STRIDED_INPUTS) != 0);
    if (cases.empty()) continue;
    dtypes_seen += (dtypes_seen.empty() ? "" : ",") + std::string(dtype_label(dtype));
    for (const KernelCase& c : cases) {
      const std::string where = std::string(dtype_label(dtype)) + " " + c.label;
      std::vector<HostTensor> expected;
      if (reference_entry != nullptr) {
        CaseRun ref = run_case(*reference, *reference_entry, c, 0);
        if (ref.status != FL_OK) {
          ++reference_declined;
          continue;
        }
        expected = std::move(ref.outputs);
      } else {
        auto naive = naive_run(op, c);
        if (!naive) {
          message = is_reference ? "is the reference (no naive implementation)"
                                 : (reference == nullptr ? "no reference plugin (and no naive implementation)"
                                                         : "reference " + reference->name() + " has no kernel (and no naive implementation)");
          return Status::Skip;
        }
        expected = std::move(*naive);
      }
      CaseRun run = run_case(plugin, entry, c, 0);
      if (run.status == FL_ERR_NOT_SUPPORTED) {
        ++unsupported;
        if (first_unsupported.empty()) first_unsupported = where;
        continue;
      }
      if (run.status != FL_OK) {
        message = where + ": " + run.error;
        return Status::Fail;
      }
      if (catalog->canonical_order) {
        catalog->canonical_order(c, run.outputs);
        catalog->canonical_order(c, expected);
      }
      if (auto mismatch = compare_outputs(run.outputs, expected, c.outputs, catalog->tolerance_scale)) {
        message = where + " vs " + against + ": " + *mismatch;
        return Status::Fail;
      }
      ++compared;
      identical += identical_outputs(run.outputs, expected, c.outputs) ? 1 : 0;
    }
  }
  if (dtypes_seen.empty()) {
    message = "no case for the dtypes in its mask";
    return Status::Skip;
  }
  std::string notes;
  if (unsupported > 0) notes += ", " + std::to_string(unsupported) + " FL_ERR_NOT_SUPPORTED (first: " + first_unsupported + ")";
  if (reference_declined > 0) notes += ", " + std::to_string(reference_declined) + " declined by the reference";
  if (compared == 0) {
    message = "no case ran to comparison (" + dtypes_seen + notes + ")";
    return Status::Skip;
  }
  message = std::to_string(compared) + " cases match the " + against + " (" + dtypes_seen + notes + ")";
  // Against another plugin: how many matched value for value. Replicas of a model on ranks of
  // two plugins (DDP) stay identical only where the optimizer's ops do (add with alpha,
  // addcmul, addcdiv, lerp, foreach forms: the CPU plugin fuses their multiply-add).
  if (reference_entry != nullptr)
    message += "; " + std::to_string(identical) + " of " + std::to_string(compared) + " value for value";
  return Status::Pass;
}

// native_dropout's output is random, so no reference can match it: instead, the kernel must
// keep about 1 - p of the elements, scaled by 1 / (1 - p), and (a plugin built against 1.2 or
// later) follow the call's RNG pair (FL_CALL_RNG): the same pair gives the same bits, another
// seed or offset other bits. A 1.0/1.1 plugin never reads the pair (it draws its own numbers)
// and keeps working, as the versioning rules promise.
Status check_seeded_dropout(const PluginLibrary& plugin, const fl_kernel_entry& entry, std::string& message) {
  if ((entry.dtype_mask & FL_DTYPE_BIT(FL_DTYPE_FLOAT32)) == 0) {
    message = "no float32 in its mask";
    return Status::Skip;
  }
  constexpr int64_t n = 4096;
  KernelCase c;
  c.label = "ones [4096], p 0.5, train";
  c.inputs = {CaseArg::of(HostTensor::from_values(FL_DTYPE_FLOAT32, {n}, std::vector<double>(n, 1.0))),
              CaseArg::real(0.5), CaseArg::boolean(true)};
  c.outputs = {OutputSpec{FL_DTYPE_FLOAT32, {n}}, OutputSpec{FL_DTYPE_BOOL, {n}}};
  const RngPair pairs[] = {{0x5EED, 7}, {0x5EED, 7}, {0x5EEE, 7}, {0x5EED, 8}};
  const bool reads_pair = plugin.abi_minor() >= 2;
  std::vector<std::vector<double>> masks;
  for (const RngPair& pair : pairs) {
    if (!reads_pair && !masks.empty()) break;  // one run: the scaling and the rate
    CaseRun run = run_case(plugin, entry, c, 0, &pair);
    if (run.status != FL_OK) {
      message = c.label + ": " + run.error;
      return Status::Fail;
    }
    const std::vector<double> out = run.outputs[0].values();
    masks.push_back(run.outputs[1].values());
    for (int64_t i = 0; i < n; ++i) {
      const double want = masks.back()[i] != 0 ? 2.0 : 0.0;
      if (out[i] != want) {
        message = "element " + std::to_string(i) + " is " + std::to_string(out[i]) + ", its mask says " +
                  std::to_string(want);
        return Status::Fail;
      }
    }
  }
  int64_t kept = 0;
  for (double m : masks[0]) kept += m != 0 ? 1 : 0;
  if (kept < n * 45 / 100 || kept > n * 55 / 100) {
    message = "kept " + std::to_string(kept) + " of " + std::to_string(n) + " at p = 0.5";
    return Status::Fail;
  }
  if (!reads_pair) {
    message = "kept " + std::to_string(kept) + " of " + std::to_string(n) + " at p = 0.5, scaled by 2; built against ABI 1." +
              std::to_string(plugin.abi_minor()) + ", before the RNG pair (1.2): it draws its own numbers, so "
              "torch.manual_seed does not repeat its masks";
    return Status::Pass;
  }
  if (masks[0] != masks[1]) {
    message = "the same RNG pair (FL_CALL_RNG) gave different masks: the kernel ignores rng_seed/rng_offset";
    return Status::Fail;
  }
  if (masks[0] == masks[2] || masks[0] == masks[3]) {
    message = std::string("another ") + (masks[0] == masks[2] ? "rng_seed" : "rng_offset") +
              " gave the same mask: the kernel ignores it";
    return Status::Fail;
  }
  message = "the same RNG pair repeats its mask, another seed or offset changes it; kept " + std::to_string(kept) +
            " of " + std::to_string(n) + " at p = 0.5, scaled by 2";
  return Status::Pass;
}

}  // namespace

void run_kernel_checks(const PluginLibrary& plugin, const PluginLibrary* reference, Report& report) {
  for (const fl_kernel_entry& entry : plugin.kernels()) {
    const std::string op = entry.op;
    const bool seeded = op == "aten::native_dropout" || op == "aten::native_dropout.out";
    report.run(std::string("kernel ") + entry.op, [&](std::string& message) {
      return seeded ? check_seeded_dropout(plugin, entry, message) : check_kernel(plugin, entry, reference, message);
    });
  }
}

const fl_kernel_entry* find_entry(const PluginLibrary& plugin, const std::string& op) {
  for (const fl_kernel_entry& e : plugin.kernels())
    if (op == e.op) return &e;
  return nullptr;
}

}  // namespace fl::check
