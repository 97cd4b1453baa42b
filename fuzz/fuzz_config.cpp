// libFuzzer target: strict JSON parsing, the typed getters, and the model config reader.
// Only s3d::Error may escape; a config that parses must also survive config_to_json and
// parse back to the same JSON (a broken round trip traps).
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/json.h"
#include "model/config.h"

namespace {

template <class F>
void quietly(F&& f) {
  try {
    f();
  } catch (const s3d::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace s3d;
  const std::string text(reinterpret_cast<const char*>(data), size);
  io::Json j;
  try {
    j = io::parse_json(text, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  // The getters on whatever shape of value came in, at the top and one level down.
  for (const io::Json* obj : {&j, j.is_object() && j.contains("args") ? &j.at("args") : &j}) {
    for (const char* key : {"num_blocks", "mlp_ratio", "share_mod", "name", "dtype"}) {
      quietly([&] { io::get_int(*obj, key, "fuzz", -5, 1 << 20); });
      quietly([&] { io::get_u64(*obj, key, "fuzz"); });
      quietly([&] { io::get_number(*obj, key, "fuzz", -1e9, 1e9); });
      quietly([&] { io::get_bool_or(*obj, key, "fuzz", false); });
      quietly([&] { io::get_string_or(*obj, key, "fuzz", ""); });
    }
  }
  model::ModelConfig c;
  try {
    c = model::config_from_json(j, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  io::Json out = model::config_to_json(c);
  if (model::config_to_json(model::config_from_json(out, "round trip")) != out) __builtin_trap();
  return 0;
}
