// attention_kernels.cpp — fused scaled-dot-product attention, forward and backward: the
// entries "aten::_scaled_dot_product_fused_attention_overrideable" and its "_backward", whose
// contract abi/fl_abi.h states. The reference for the GPU plugins' fused kernels: each row's
// scores, softmax and weighted sum in one pass over the keys, never an [Lq, Lk] matrix in
// memory, with ATen math's semantics (top-left causal mask, an additive bias, 0 for a row with
// every key masked). Math in float for float32 and the 16-bit floats, double for float64.
// Any strides in and out; the bias arrives as 4 dims with stride 0 where broadcast.
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "tensor_desc.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

constexpr const char* kForward = "aten::_scaled_dot_product_fused_attention_overrideable";
constexpr const char* kBackward = "aten::_scaled_dot_product_fused_attention_overrideable_backward";

// Element [b, h, i, j] of a 4-D descriptor.
template <class T>
struct View4 {
  const char* data = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  View4() = default;
  explicit View4(const TensorDesc& t)
      : data(t.data), s0(t.strides[0]), s1(t.strides[1]), s2(t.strides[2]), s3(t.strides[3]) {}
  const T& at(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return reinterpret_cast<const T*>(data)[b * s0 + h * s1 + i * s2 + j * s3];
  }
  T& mut(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return const_cast<T*>(reinterpret_cast<const T*>(data))[b * s0 + h * s1 + i * s2 + j * s3];
  }
};

// The shapes every call checks: query [B,H,Lq,E], key [B,H,Lk,E], value [B,H,Lk,Ev].
struct AttentionShape {
  int64_t batch = 0, heads = 0, lq = 0, lk = 0, e = 0, ev = 0;
};

AttentionShape check_shapes(const char* op, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v) {
  if (q.ndim != 4 || k.ndim != 4 || v.ndim != 4)
    unsupported(op, "query, key and value must be 4-D [B, H, L, E] (got " + shape_string(q) + ", " +
                        shape_string(k) + ", " + shape_string(v) + ")");
  if (k.dtype != q.dtype || v.dtype != q.dtype) unsupported(op, "query, key and value differ in dtype");
  AttentionShape s{q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3]};
  if (k.shape[0] != s.batch || v.shape[0] != s.batch)
    invalid(op, "batch sizes differ: " + shape_string(q) + ", " + shape_string(k) + ", " + shape_string(v));
  if (k.shape[1] != s.heads || v.shape[1] != s.heads)
    unsupported(op, "key/value heads differ from the query's (grouped-query attention)");
  if (k.shape[3] != s.e) invalid(op, "query and key head sizes differ");
  if (v.shape[2] != s.lk) invalid(op, "key and value lengths differ");
  return s;
}

void check_shape(const char* op, const char* what, const TensorDesc& t, std::initializer_list<int64_t> shape) {
  bool ok = t.ndim == static_cast<int32_t>(shape.size());
  int d = 0;
  for (int64_t n : shape) ok = ok && t.shape[d++] == n;
  if (!ok) invalid(op, std::string(what) + " has shape " + shape_string(t));
}

// Optional bias: absent, or 4 dims of [B,H,Lq,Lk] (stride 0 where broadcast).
std::optional<TensorDesc> bias_of(const Args& args, int index, const char* op, const AttentionShape& s,
                                  fl_dtype_t dtype) {
  if (args.is_none(index)) return std::nullopt;
  TensorDesc bias = describe(args.tensor(index), op);
  check_shape(op, "attn_bias", bias, {s.batch, s.heads, s.lq, s.lk});
  if (bias.dtype != dtype) unsupported(op, "attn_bias's dtype differs from the query's");
  return bias;
}

double scale_of(const Args& args, int index, const AttentionShape& s) {
  return args.is_none(index) ? 1.0 / std::sqrt(static_cast<double>(s.e)) : args.number(index);
}

// Whether key j is visible to query i.
inline int64_t visible_keys(bool causal, int64_t i, int64_t lk) { return causal ? std::min(i + 1, lk) : lk; }

// Row i's scores over its first n keys, scale q.k_j plus the bias, into `scores`; returns
// their maximum (NaN if one is NaN, -inf if every one is). Forward and backward share it, so
// the backward's recomputed scores are the forward's bit for bit.
template <class T, class C>
C score_row(const View4<T>& K, const View4<T>* bias, int64_t b, int64_t h, int64_t i, int64_t n, int64_t head_size,
            const C* qrow, C scale, C* scores) {
  C max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    C dot = 0;
    for (int64_t e = 0; e < head_size; ++e) dot += qrow[e] * convert<C>(K.at(b, h, j, e));
    C score = dot * scale;
    if (bias) score += convert<C>(bias->at(b, h, i, j));
    scores[j] = score;
    max = std::isnan(score) || score > max ? score : max;
  }
  return max;
}

// Rows (b, h, i) per part: each costs about Lk * (E + Ev) multiply-adds.
int64_t row_grain(const AttentionShape& s) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, s.lk * (s.e + s.ev)));
}

template <class T>
struct ForwardWork {
  AttentionShape s;
  TensorDesc q, k, v, out, lse;
  std::optional<TensorDesc> bias;
  bool causal = false;
  double scale = 1.0;

  void run() const {
    using C = opmath_t<T>;
    const View4<T> Q(q), K(k), V(v), O(out);
    const View4<T> Bv = bias ? View4<T>(*bias) : View4<T>();
    float* lse_data = lse.ptr<float>();
    const C sc = static_cast<C>(scale);
    parallel_for(s.batch * s.heads * s.lq, row_grain(s), [&](int64_t begin, int64_t end) {
      std::vector<C> scores(static_cast<size_t>(s.lk)), qrow(static_cast<size_t>(s.e)), acc(static_cast<size_t>(s.ev));
      for (int64_t r = begin; r < end; ++r) {
        const int64_t b = r / (s.heads * s.lq), h = (r / s.lq) % s.heads, i = r % s.lq;
        const int64_t n = visible_keys(causal, i, s.lk);
        for (int64_t e = 0; e < s.e; ++e) qrow[static_cast<size_t>(e)] = convert<C>(Q.at(b, h, i, e));
        const C max = score_row(K, bias ? &Bv : nullptr, b, h, i, n, s.e, qrow.data(), sc, scores.data());
        std::fill(acc.begin(), acc.end(), C(0));
        C row_lse = -INFINITY;
        if (max != -INFINITY) {  // else every key is masked: output 0, as ATen's safe softmax
          C sum = 0;
          for (int64_t j = 0; j < n; ++j) {
            const C p = std::exp(scores[static_cast<size_t>(j)] - max);
            scores[static_cast<size_t>(j)] = p;
            sum += p;
          }
          for (int64_t j = 0; j < n; ++j) {
            const C p = scores[static_cast<size_t>(j)] / sum;
            if (p == C(0)) continue;
            for (int64_t e = 0; e < s.ev; ++e) acc[static_cast<size_t>(e)] += p * convert<C>(V.at(b, h, j, e));
          }
          row_lse = max + std::log(sum);
        }
        for (int64_t e = 0; e < s.ev; ++e) O.mut(b, h, i, e) = convert<T>(acc[static_cast<size_t>(e)]);
        lse_data[r] = static_cast<float>(row_lse);
      }
    });
  }
};

// inputs: query, key, value, attn_bias?, dropout_p, is_causal, return_debug_mask, scale?
// outputs: output [B,H,Lq,Ev], logsumexp [B,H,Lq] float32 contiguous
void attention_forward(const fl_kernel_call* call) {
  Args args(call);
  const char* op = kForward;
  TensorDesc q = describe(args.tensor(0), op), k = describe(args.tensor(1), op), v = describe(args.tensor(2), op);
  const AttentionShape s = check_shapes(op, q, k, v);
  std::optional<TensorDesc> bias = bias_of(args, 3, op, s, q.dtype);
  if (args.number(4) != 0.0) unsupported(op, "dropout_p > 0 (no fused dropout)");
  const bool causal = args.boolean(5);
  if (args.boolean(6)) unsupported(op, "return_debug_mask");
  const double scale = scale_of(args, 7, s);
  TensorDesc out = describe(args.output(0), op), lse = describe(args.output(1), op);
  check_shape(op, "output", out, {s.batch, s.heads, s.lq, s.ev});
  check_shape(op, "logsumexp", lse, {s.batch, s.heads, s.lq});
  if (out.dtype != q.dtype) invalid(op, "output dtype differs from the query's");
  if (lse.dtype != FL_DTYPE_FLOAT32 || !lse.contiguous()) invalid(op, "logsumexp must be contiguous float32");
  if (out.numel() == 0 && lse.numel() == 0) return;
  dispatch<kFloatingMask>(q.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ForwardWork<T> work{s, q, k, v, out, lse, bias, causal, scale};
    submit(call, [work] { work.run(); });
  });
}

template <class T>
struct BackwardWork {
  AttentionShape s;
  TensorDesc grad_out, q, k, v, out, lse;
  std::optional<TensorDesc> bias;
  std::optional<TensorDesc> grad_q, grad_k, grad_v, grad_bias;
  bool causal = false;
  double scale = 1.0;

  // One (b, h) per item: its dK and dV sum over every query row, kept here in C until written.
  void run() const {
    using C = opmath_t<T>;
    const View4<T> dO(grad_out), Q(q), K(k), V(v), O(out);
    const View4<T> Bv = bias ? View4<T>(*bias) : View4<T>();
    const View4<T> dQ = grad_q ? View4<T>(*grad_q) : View4<T>();
    const View4<T> dK = grad_k ? View4<T>(*grad_k) : View4<T>();
    const View4<T> dV = grad_v ? View4<T>(*grad_v) : View4<T>();
    const View4<T> dB = grad_bias ? View4<T>(*grad_bias) : View4<T>();
    const C sc = static_cast<C>(scale);
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, s.lq * s.lk * (s.e + s.ev)));
    parallel_for(s.batch * s.heads, grain, [&](int64_t begin, int64_t end) {
      std::vector<C> dk(static_cast<size_t>(s.lk * s.e)), dv(static_cast<size_t>(s.lk * s.ev));
      std::vector<C> qrow(static_cast<size_t>(s.e)), dorow(static_cast<size_t>(s.ev)), dq(static_cast<size_t>(s.e));
      std::vector<C> scores(static_cast<size_t>(s.lk));
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / s.heads, h = bh % s.heads;
        std::fill(dk.begin(), dk.end(), C(0));
        std::fill(dv.begin(), dv.end(), C(0));
        for (int64_t i = 0; i < s.lq; ++i) {
          const int64_t n = visible_keys(causal, i, s.lk);
          C delta = 0;  // sum_e dO[i,e] * O[i,e]: the softmax backward's row term
          for (int64_t e = 0; e < s.ev; ++e) {
            dorow[static_cast<size_t>(e)] = convert<C>(dO.at(b, h, i, e));
            delta += dorow[static_cast<size_t>(e)] * convert<C>(O.at(b, h, i, e));
          }
          for (int64_t e = 0; e < s.e; ++e) qrow[static_cast<size_t>(e)] = convert<C>(Q.at(b, h, i, e));
          // The row's scores and logsumexp again, in C: the saved logsumexp is float32, which
          // would cap a float64 call's gradients at float32 accuracy.
          const C max = score_row(K, bias ? &Bv : nullptr, b, h, i, n, s.e, qrow.data(), sc, scores.data());
          C row_lse = max;
          if (max != -INFINITY) {
            C sum = 0;
            for (int64_t j = 0; j < n; ++j) sum += std::exp(scores[static_cast<size_t>(j)] - max);
            row_lse = max + std::log(sum);
          }
          std::fill(dq.begin(), dq.end(), C(0));
          for (int64_t j = 0; j < s.lk; ++j) {
            C ds = 0;
            if (j < n && row_lse != -INFINITY) {
              const C p = std::exp(scores[static_cast<size_t>(j)] - row_lse);
              C dp = 0;
              for (int64_t e = 0; e < s.ev; ++e) {
                dp += dorow[static_cast<size_t>(e)] * convert<C>(V.at(b, h, j, e));
                dv[static_cast<size_t>(j * s.ev + e)] += p * dorow[static_cast<size_t>(e)];
              }
              ds = p * (dp - delta);
              for (int64_t e = 0; e < s.e; ++e) {
                dq[static_cast<size_t>(e)] += ds * convert<C>(K.at(b, h, j, e));
                dk[static_cast<size_t>(j * s.e + e)] += ds * qrow[static_cast<size_t>(e)];
              }
            }
            if (grad_bias) dB.mut(b, h, i, j) = convert<T>(ds);
          }
          if (grad_q)
            for (int64_t e = 0; e < s.e; ++e) dQ.mut(b, h, i, e) = convert<T>(dq[static_cast<size_t>(e)] * sc);
        }
        if (grad_k)
          for (int64_t j = 0; j < s.lk; ++j)
            for (int64_t e = 0; e < s.e; ++e) dK.mut(b, h, j, e) = convert<T>(dk[static_cast<size_t>(j * s.e + e)] * sc);
        if (grad_v)
          for (int64_t j = 0; j < s.lk; ++j)
            for (int64_t e = 0; e < s.ev; ++e) dV.mut(b, h, j, e) = convert<T>(dv[static_cast<size_t>(j * s.ev + e)]);
      }
    });
  }
};

// An output with ndim -1 is not wanted.
std::optional<TensorDesc> wanted_output(const Args& args, int index, const char* op) {
  const fl_tensor& t = args.output(index);
  if (t.ndim < 0) return std::nullopt;
  return describe(t, op);
}

// inputs: grad_out, query, key, value, attn_bias?, grad_input_mask, out, logsumexp, cum_seq_q,
// cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, scale?
// outputs: grad_query, grad_key, grad_value, grad_attn_bias [B,H,Lq,Lk] (each optional)
void attention_backward(const fl_kernel_call* call) {
  Args args(call);
  const char* op = kBackward;
  TensorDesc grad_out = describe(args.tensor(0), op);
  TensorDesc q = describe(args.tensor(1), op), k = describe(args.tensor(2), op), v = describe(args.tensor(3), op);
  const AttentionShape s = check_shapes(op, q, k, v);
  std::optional<TensorDesc> bias = bias_of(args, 4, op, s, q.dtype);
  TensorDesc out = describe(args.tensor(6), op), lse = describe(args.tensor(7), op);
  check_shape(op, "grad_out", grad_out, {s.batch, s.heads, s.lq, s.ev});
  check_shape(op, "out", out, {s.batch, s.heads, s.lq, s.ev});
  check_shape(op, "logsumexp", lse, {s.batch, s.heads, s.lq});
  if (grad_out.dtype != q.dtype || out.dtype != q.dtype) invalid(op, "grad_out/out dtype differs from the query's");
  if (lse.dtype != FL_DTYPE_FLOAT32 || !lse.contiguous()) invalid(op, "logsumexp must be contiguous float32");
  if (args.number(12) != 0.0) unsupported(op, "dropout_p > 0 (no fused dropout)");
  const bool causal = args.boolean(13);
  const double scale = scale_of(args, 16, s);
  std::optional<TensorDesc> gq = wanted_output(args, 0, op), gk = wanted_output(args, 1, op),
                            gv = wanted_output(args, 2, op), gb = wanted_output(args, 3, op);
  if (gq) check_shape(op, "grad_query", *gq, {s.batch, s.heads, s.lq, s.e});
  if (gk) check_shape(op, "grad_key", *gk, {s.batch, s.heads, s.lk, s.e});
  if (gv) check_shape(op, "grad_value", *gv, {s.batch, s.heads, s.lk, s.ev});
  if (gb) check_shape(op, "grad_attn_bias", *gb, {s.batch, s.heads, s.lq, s.lk});
  for (const auto* g : {&gq, &gk, &gv, &gb})
    if (*g && (*g)->dtype != q.dtype) invalid(op, "a gradient's dtype differs from the query's");
  if (s.batch * s.heads == 0) return;
  dispatch<kFloatingMask>(q.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    BackwardWork<T> work{s, grad_out, q, k, v, out, lse, bias, gq, gk, gv, gb, causal, scale};
    submit(call, [work] { work.run(); });
  });
}

}  // namespace

void register_attention_kernels(KernelRegistry& r) {
  const uint32_t f = FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_STRIDED_OUTPUTS | FL_KERNEL_DETERMINISTIC;
  r.add(kForward, kFloatingMask, f, guarded<attention_forward>);
  r.add(kBackward, kFloatingMask, f, guarded<attention_backward>);
}

}  // namespace fl::cpu::kernels
