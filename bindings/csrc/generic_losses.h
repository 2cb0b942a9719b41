// generic_losses.h — generic-tier kernels (see generic_kernels.h) for losses written in other
// ATen ops: smooth L1 and Huber losses with their backward ops, and xlogy (KL divergence). Any
// plugin with the elementwise and reduction kernels they call serves them on its device.
#pragma once

#include "generic_kernels.h"

namespace fl::binding {

// smooth_l1_loss.out(self, target, reduction, beta)
bool smooth_l1_loss(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out);
// smooth_l1_loss_backward.grad_input(grad_output, self, target, reduction, beta)
bool smooth_l1_loss_backward(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out);
// huber_loss.out(self, target, reduction, delta)
bool huber_loss(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out);
// huber_loss_backward.out(grad_output, self, target, reduction, delta)
bool huber_loss_backward(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out);
// xlogy.OutTensor(self, other)
bool xlogy(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out);

}  // namespace fl::binding
