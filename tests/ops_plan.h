// The op plan of a set of flags, for tests that call an op (ops/) with chosen candidates:
// plan_of({}) runs every op's reference; plan_of({Flag::modulated_layernorm}) lets
// modulated_layernorm try its bitwise candidate.
#pragma once

#include <initializer_list>

#include "ops/op.h"
#include "sparse3d/flags.h"

namespace s3d::test {

inline ops::OpPlan plan_of(std::initializer_list<sparse3d::Flag> flags) {
  return ops::OpPlan::resolve(sparse3d::FlagSet(flags));
}

// The plan with `flag` on when `on`, else none.
inline ops::OpPlan plan_if(bool on, sparse3d::Flag flag) {
  return on ? plan_of({flag}) : plan_of({});
}

}  // namespace s3d::test
