#include "pointwise_common.hpp"

#include <cstring>

namespace fl::cpu::kernels {

ScalarOperand::ScalarOperand(const plugin::Args& args, int32_t index, const char* op) {
  const fl_value& v = args.at(index);
  desc_.ndim = 0;
  desc_.host_scalar = true;
  desc_.data = reinterpret_cast<char*>(storage_);
  switch (v.kind) {
    case FL_VALUE_INT:
      desc_.dtype = FL_DTYPE_INT64;
      std::memcpy(storage_, &v.u.i, sizeof(int64_t));
      break;
    case FL_VALUE_DOUBLE:
      desc_.dtype = FL_DTYPE_FLOAT64;
      std::memcpy(storage_, &v.u.d, sizeof(double));
      break;
    case FL_VALUE_BOOL:
      desc_.dtype = FL_DTYPE_BOOL;
      storage_[0] = v.u.b ? 1 : 0;
      break;
    case FL_VALUE_TENSOR: {
      const fl_tensor& t = *v.u.tensor;
      if (t.device != FL_DEVICE_HOST) {
        // A device tensor passed as a Scalar: read it as a 0-dim operand at run time.
        desc_ = describe(t, op);
        if (desc_.numel() != 1) invalid(op, "scalar argument with more than one element");
        break;
      }
      size_t size = plugin::dtype_size(t.dtype);
      if (size > sizeof(storage_)) unsupported(op, "complex scalars");
      desc_.dtype = t.dtype;
      std::memcpy(storage_, plugin::data_ptr<const void>(t), size);
      break;
    }
    default:
      invalid(op, "argument " + std::to_string(index) + " is not a scalar");
  }
}

namespace {

// Plans `inputs` (each converted to its PlanInput dtype) with `kernel` and enqueues the plan.
void launch_planned(const fl_kernel_call* call, const char* op, const TensorDesc& out, const PlanInput* in,
                    int n, ContigFn kernel, std::initializer_list<Param> params) {
  ElementwisePlan plan;
  switch (n) {
    case 1: plan = plan_elementwise(op, out, {in[0]}, kernel); break;
    case 2: plan = plan_elementwise(op, out, {in[0], in[1]}, kernel); break;
    case 3: plan = plan_elementwise(op, out, {in[0], in[1], in[2]}, kernel); break;
    case 4: plan = plan_elementwise(op, out, {in[0], in[1], in[2], in[3]}, kernel); break;
    default: invalid(op, "bad operand count");
  }
  int i = 0;
  for (const Param& p : params) plan.params[i++] = p;
  submit_elementwise(call, plan);
}

}  // namespace

void launch_pointwise_as(const fl_kernel_call* call, const char* op, const TensorDesc& out,
                         fl_dtype_t compute, std::initializer_list<const TensorDesc*> inputs,
                         KernelSelector select, std::initializer_list<Param> params) {
  ContigFn kernel = select(compute, op);
  PlanInput plan_inputs[kMaxOperands - 1];
  int n = 0;
  for (const TensorDesc* t : inputs) plan_inputs[n++] = PlanInput{t, compute};
  launch_planned(call, op, out, plan_inputs, n, kernel, params);
}

void launch_pointwise(const fl_kernel_call* call, const char* op, const TensorDesc& out,
                      std::initializer_list<const TensorDesc*> typing,
                      std::initializer_list<const TensorDesc*> inputs, KernelSelector select,
                      Promotion promotion, std::initializer_list<Param> params,
                      OpmathOperandSelector opmath_b) {
  fl_dtype_t compute = result_type(typing);
  if (promotion == Promotion::kIntToFloat && !is_floating(compute)) compute = FL_DTYPE_FLOAT32;
  if (promotion == Promotion::kCompare) {
    if (out.dtype != FL_DTYPE_BOOL)
      unsupported(op, std::string("output dtype ") + plugin::dtype_name(out.dtype) + " (expected bool)");
  } else if (out.dtype != compute) {
    unsupported(op, std::string("output dtype ") + plugin::dtype_name(out.dtype) +
                        " differs from the computation dtype " + plugin::dtype_name(compute));
  }
  if (opmath_b != nullptr && inputs.size() == 2 && inputs.begin()[1]->numel() == 1) {
    if (ContigFn kernel = opmath_b(compute)) {  // (see contiguous_kernel_opmath_b)
      const PlanInput in[2] = {{inputs.begin()[0], compute}, {inputs.begin()[1], FL_DTYPE_FLOAT32}};
      launch_planned(call, op, out, in, 2, kernel, params);
      return;
    }
  }
  launch_pointwise_as(call, op, out, compute, inputs, select, params);
}

int64_t gelu_approximation(const plugin::Args& args, int32_t index) {
  if (args.is_none(index)) return 0;
  const fl_value& v = args.at(index);
  if (v.kind != FL_VALUE_STRING || v.u.str == nullptr)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "gelu: approximate is not a string");
  std::string s = v.u.str;
  if (s == "none") return 0;
  if (s == "tanh") return 1;
  plugin::raise(FL_ERR_INVALID_ARGUMENT, "gelu: approximate must be 'none' or 'tanh', got '" + s + "'");
}

}  // namespace fl::cpu::kernels
