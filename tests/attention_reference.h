// fp64 attention written out independently of the library, for the attention tests of both
// backends: the CPU path against every row of it (tests/cpu/test_attention.cpp), the GPU at
// 30,227 tokens against sampled rows (tests/gpu/test_attention_gpu.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace s3d::testing {

inline int64_t total_length(const std::vector<int32_t>& lengths) {
  int64_t t = 0;
  for (int32_t l : lengths) t += l;
  return t;
}

// One query row and head against n keys: softmax(q . k_j * scale) . v_j in fp64, into
// out[0, D). q(d), key(j, d) and value(j, d) give the inputs' elements.
template <class Query, class Key, class Value>
void fp64_attention_head(const Query& q, const Key& key, const Value& value, int64_t n, int D,
                         double scale, double* out) {
  std::vector<double> p(static_cast<size_t>(n));
  double m = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    double dot = 0;
    for (int d = 0; d < D; ++d) dot += q(d) * key(j, d);
    p[j] = dot * scale;
    m = std::max(m, p[j]);
  }
  for (double& e : p) sum += (e = std::exp(e - m));
  for (int d = 0; d < D; ++d) {
    double acc = 0;
    for (int64_t j = 0; j < n; ++j) acc += p[j] * value(j, d);
    out[d] = acc / sum;
  }
}

}  // namespace s3d::testing
