// ivalue_map.h — rebuilds an operator argument with every tensor in it replaced: a Tensor,
// each of a Tensor[], each present one of a Tensor?[]; an fl Device becomes `device`. Used to
// move an op's arguments to meta (output_meta) and to the host (cpu_fallback).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <optional>

namespace fl::binding {

template <class MapTensor>
c10::IValue map_tensors(const c10::IValue& v, MapTensor&& map, c10::Device device) {
  if (v.isTensor()) return map(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(map(t));
    return out;
  }
  if (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& e : v.toListRef())
      out.push_back(e.isNone() ? std::optional<at::Tensor>() : std::optional<at::Tensor>(map(e.toTensor())));
    return out;
  }
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) return device;
  return v;
}

}  // namespace fl::binding
