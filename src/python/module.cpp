// sparse3d_engine._native: the Python binding of the public API (include/sparse3d/), nothing else.
// Tensors cross as DLPack through nanobind's ndarray: inputs are any DLPack producer (torch,
// CuPy, JAX, NumPy), used in place; results are DLPack arrays that own the engine's memory.
// The package's Python layer (python/sparse3d_engine/__init__.py) adds the friendly signatures,
// the caller's stream and framework, and the TRELLIS.2 drop-in; docs/PYTHON.md.
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "apps/command_line.h"
#include "sparse3d/sparse3d.h"

namespace nb = nanobind;
using namespace nb::literals;

void bind_glb(nb::module_& m);  // glb_binding.cpp

namespace {

using sparse3d::Array;
using sparse3d::DType;
using sparse3d::Device;
using sparse3d::TensorView;
using AnyArray = nb::ndarray<nb::ro>;  // an input: any DLPack producer
using OutArray = nb::ndarray<>;        // a caller's buffer the engine writes

// An exception from a Python callable the engine calls mid-request (a log or message sink)
// must not unwind through the engine's frames: it is reported as unraisable. A
// KeyboardInterrupt is a Ctrl-C whose handler happened to run inside that callable: the
// signal is made pending again, so that sample()'s check between steps still sees it.
void discard_keeping_interrupt(nb::python_error& e, const char* where) {
  if (e.matches(PyExc_KeyboardInterrupt)) {
    PyErr_SetInterrupt();
    return;
  }
  e.discard_as_unraisable(where);
}

// ---- DLPack <-> TensorView ------------------------------------------------------------

std::string dtype_text(const nb::dlpack::dtype& d) {
  const char* kind = "unknown";
  switch (static_cast<nb::dlpack::dtype_code>(d.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: kind = "bool"; break;
    default: kind = "float8-or-other"; break;
  }
  return std::string(kind) + std::to_string(d.bits);
}

// "[0, 4]"
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A view of a DLPack tensor: float32, bfloat16 or int32, row-major contiguous, on the CPU
// (pinned memory too) or a CUDA device. Anything else is one error naming the argument.
template <class A>
TensorView view_of(const A& a, const char* what) {
  TensorView v;
  const nb::dlpack::dtype d = a.dtype();
  if (d.lanes != 1) throw sparse3d::Error(std::string(what) + ": vector dtypes are not supported");
  if (d == nb::dtype<float>()) {
    v.dtype = DType::F32;
  } else if (d == nb::dtype<int32_t>()) {
    v.dtype = DType::I32;
  } else if (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) && d.bits == 16) {
    v.dtype = DType::BF16;
  } else {
    throw sparse3d::Error(std::string(what) + ": dtype " + dtype_text(d) +
                          " is not supported (float32, bfloat16 or int32)");
  }
  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:
      v.device = Device::CPU;
      break;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value:
      v.device = Device::CUDA;
      v.device_index = static_cast<int>(a.device_id());
      break;
    default:
      throw sparse3d::Error(std::string(what) + ": DLPack device type " +
                            std::to_string(a.device_type()) + " is neither the CPU nor CUDA");
  }
  for (size_t i = 0; i < a.ndim(); ++i) v.shape.push_back(static_cast<int64_t>(a.shape(i)));
  // A zero-size array holds no data: no input of the engine can be one, and its strides
  // (whatever the producer chose) say nothing about its layout, so it is named as what it
  // is before the layout check could call it non-contiguous.
  if (a.size() == 0)
    throw sparse3d::Error(std::string(what) + ": empty (shape " + shape_text(v.shape) +
                          ", zero elements); pass an array with data");
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) {
      throw sparse3d::Error(std::string(what) +
                            ": not contiguous (row-major) in memory; pass a contiguous copy");
    }
    expected *= static_cast<int64_t>(a.shape(i));
  }
  v.data = const_cast<void*>(a.data());
  return v;
}

template <class A>
TensorView optional_view(const std::optional<A>& a, const char* what) {
  return a ? view_of(*a, what) : TensorView{};
}

// The arrays of a call are taken as Python objects and converted here, so that one of the
// wrong kind is one error naming the argument (nanobind's own refusal lists the whole
// signature over several lines and names none). The package checks them first; these are
// what a direct caller of the native module sees.
std::string type_of(nb::handle h) { return nb::cast<std::string>(h.type().attr("__name__")); }

// An input: any DLPack producer (torch, NumPy, CuPy, JAX) or buffer, or None when optional.
std::optional<AnyArray> input_array(nb::handle h, const char* what, bool optional = true) {
  if (h.is_none()) {
    if (optional) return std::nullopt;
    throw sparse3d::Error(std::string(what) + ": required, got None");
  }
  AnyArray a;
  if (!nb::try_cast<AnyArray>(h, a, false))
    throw sparse3d::Error(std::string(what) + ": not an array (a DLPack producer such as a torch, "
                          "NumPy, CuPy or JAX array), got " + type_of(h));
  return a;
}

// The caller's buffer for a result: writable, or None.
std::optional<OutArray> output_array(nb::handle h) {
  if (h.is_none()) return std::nullopt;
  OutArray a;
  if (nb::try_cast<OutArray>(h, a, false)) return a;
  AnyArray read_only;
  if (nb::try_cast<AnyArray>(h, read_only, false))
    throw sparse3d::Error("out: read-only; the engine writes the result into it: pass a "
                          "writable array");
  throw sparse3d::Error("out: not an array (a DLPack producer such as a torch, NumPy, CuPy or "
                        "JAX array), got " + type_of(h));
}

// from_tensors()'s tensors: a sequence of (name, array) pairs.
std::vector<std::pair<std::string, AnyArray>> named_arrays(nb::handle tensors) {
  if (!nb::isinstance<nb::list>(tensors) && !nb::isinstance<nb::tuple>(tensors))
    throw sparse3d::Error("tensors: not a list of (name, array) pairs, got " + type_of(tensors));
  std::vector<std::pair<std::string, AnyArray>> out;
  size_t i = 0;
  for (nb::handle item : tensors) {
    const bool pair = nb::isinstance<nb::tuple>(item) && nb::len(item) == 2 &&
                      nb::isinstance<nb::str>(nb::borrow<nb::tuple>(item)[0]);
    if (!pair)
      throw sparse3d::Error("tensors: item " + std::to_string(i) +
                            " is not a (name, array) pair, got " + type_of(item));
    const nb::tuple t = nb::borrow<nb::tuple>(item);
    const std::string name = nb::cast<std::string>(t[0]);
    out.emplace_back(name, *input_array(t[1], name.c_str(), false));
    ++i;
  }
  return out;
}

nb::dlpack::dtype dlpack_dtype(DType d) {
  switch (d) {
    case DType::F32: return nb::dtype<float>();
    case DType::I32: return nb::dtype<int32_t>();
    default: return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
  }
}

// A DLPack array that keeps the engine's result alive (its memory returns to the engine's
// allocator when the last consumer lets go).
nb::object to_python(const Array& a) {
  if (!a.defined()) return nb::none();
  auto* keep = new Array(a);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Array*>(p); });
  std::vector<size_t> shape(a.view.shape.begin(), a.view.shape.end());
  const int device = a.view.device == Device::CUDA ? nb::device::cuda::value : nb::device::cpu::value;
  nb::ndarray<nb::array_api> out(a.view.data, shape.size(), shape.data(), owner, nullptr,
                    dlpack_dtype(a.view.dtype), device, a.view.device_index);
  return nb::cast(out);
}

// A borrowed, read-only view for the duration of a callback (the step's latent).
nb::object borrowed(const TensorView& v) {
  if (v.empty()) return nb::none();
  std::vector<size_t> shape(v.shape.begin(), v.shape.end());
  const int device = v.device == Device::CUDA ? nb::device::cuda::value : nb::device::cpu::value;
  // An owner that frees nothing: the engine owns the memory for the callback's duration.
  nb::capsule owner(v.data, [](void*) noexcept {});
  nb::ndarray<nb::array_api, nb::ro> out(v.data, shape.size(), shape.data(), owner, nullptr,
                          dlpack_dtype(v.dtype), device, v.device_index);
  return nb::cast(out);
}

// ---- Options and settings -----------------------------------------------------------------

sparse3d::DeviceChoice device_choice(const std::string& d) {
  if (d == "auto") return sparse3d::DeviceChoice::Auto;
  if (d == "cuda") return sparse3d::DeviceChoice::CUDA;
  if (d == "cpu") return sparse3d::DeviceChoice::CPU;
  throw sparse3d::Error("device must be \"auto\", \"cuda\" or \"cpu\", got \"" + d + "\"");
}

// An engine's `log` callable. The Python Engine object owns the reference, so that the
// garbage collector sees it (tp_traverse below) and can break a cycle through the engine: a
// lambda logging to a module's logger holds that module's globals, which hold the engine.
// Held only inside the C++ engine's std::function, such a cycle was invisible to the
// collector: the engine (and its device memory) lived until the interpreter's end, and
// nanobind reported it leaked there. The engine's log function reaches the callable here.
struct LogSink {
  nb::object fn;  // read and cleared with the GIL held; null once the collector cleared it
};

sparse3d::EngineOptions engine_options(const std::string& path, const std::string& device,
                                       int device_index, double max_device_memory_gib,
                                       const std::string& cache_dir, bool persist_qualification,
                                       const std::vector<int64_t>& qualify_m,
                                       const std::shared_ptr<LogSink>& log,
                                       const std::vector<int>& devices,
                                       int64_t parallel_min_tokens) {
  sparse3d::EngineOptions o;
  o.devices = devices;
  o.parallel_min_tokens = parallel_min_tokens;
  o.path = path;
  o.device = device_choice(device);
  o.device_index = device_index;
  o.max_device_memory_gib = max_device_memory_gib;
  o.cache_dir = cache_dir;
  o.persist_qualification = persist_qualification;
  o.qualify_m = qualify_m;
  if (log) {
    // Start-up lines come from the constructor's thread, which may not hold the GIL; the
    // engine's other lines from a request, which holds the engine's lock. An exception must
    // not unwind through the engine's frames (a request would end half done): as the message
    // sink's, it is reported as unraisable and the engine goes on.
    o.log = [log](const std::string& line) {
      nb::gil_scoped_acquire gil;
      try {
        if (log->fn.is_valid()) log->fn(line);
      } catch (nb::python_error& e) {
        discard_keeping_interrupt(e, "sparse3d_engine engine log");
      }
    };
  }
  return o;
}

// The sink of an optional `log` argument (null without one). Made with the GIL held.
std::shared_ptr<LogSink> log_sink(const std::optional<nb::callable>& log) {
  if (!log) return nullptr;
  auto sink = std::make_shared<LogSink>();
  sink->fn = *log;
  return sink;
}

// SamplerSettings' fields, spelled once: the dict the Python layer passes in and gets back.
#define SPARSE3D_SAMPLER_FIELDS(X) \
  X(steps) X(rescale_t) X(guidance) X(interval_lo) X(interval_hi) X(guidance_rescale) X(sigma_min)

// One setting's value: an int (not a bool, not a float: either would change what was
// meant) in the range of the field's C++ type, or a real number for a floating-point field.
// nb::cast's std::bad_cast would name neither the setting nor the value.
template <class T>
T setting_value(const std::string& key, nb::handle value) {
  T out{};
  bool ok = !PyBool_Check(value.ptr());
  if constexpr (std::is_integral_v<T>) ok = ok && !PyFloat_Check(value.ptr());
  ok = ok && nb::try_cast<T>(value, out);
  if (!ok) {
    throw sparse3d::Error("sampler setting '" + key + "' must be " +
                          (std::is_integral_v<T> ? "an integer in [" +
                                                       std::to_string(std::numeric_limits<T>::min()) +
                                                       ", " +
                                                       std::to_string(std::numeric_limits<T>::max()) + "]"
                                                 : std::string("a real number")) +
                          ", got " + nb::cast<std::string>(nb::repr(value)));
  }
  return out;
}

sparse3d::SamplerSettings sampler_settings(const nb::dict& d) {
  sparse3d::SamplerSettings s;
  for (auto [key, value] : d) {
    const std::string k = nb::cast<std::string>(key);
#define SPARSE3D_READ(f)                                        \
  if (k == #f) {                                                \
    s.f = setting_value<decltype(s.f)>(k, value);               \
    continue;                                                   \
  }
    SPARSE3D_SAMPLER_FIELDS(SPARSE3D_READ)
#undef SPARSE3D_READ
#define SPARSE3D_NAME(f) " " #f
    throw sparse3d::Error("sampler setting '" + k + "' is not one of:" SPARSE3D_SAMPLER_FIELDS(SPARSE3D_NAME));
#undef SPARSE3D_NAME
  }
  return s;
}

nb::dict settings_dict(const sparse3d::SamplerSettings& s) {
  nb::dict d;
#define SPARSE3D_PUT(f) d[#f] = s.f;
  SPARSE3D_SAMPLER_FIELDS(SPARSE3D_PUT)
#undef SPARSE3D_PUT
  return d;
}

std::optional<sparse3d::FlagSet> flags_of(const std::optional<std::string>& path) {
  if (!path) return std::nullopt;
  return sparse3d::ExecutionPlan::parse(*path).flags();
}

void* stream_of(uintptr_t stream) { return reinterpret_cast<void*>(stream); }

// ---- Results as plain Python ----------------------------------------------------------------

// Each result struct's dict is declared once, as a table of (key, member) pairs; to_dict()
// copies the members in that order. What is not a plain member (a computed total, a nested
// map or list) is added after the table by the struct's own function.
template <class S, class T>
struct Field {
  const char* key;
  T S::*member;
};
template <class S, class T>
constexpr Field<S, T> field(const char* key, T S::*member) {
  return {key, member};
}

template <class S, class... T>
nb::dict to_dict(const S& s, const Field<S, T>&... fields) {
  nb::dict d;
  ((d[fields.key] = s.*(fields.member)), ...);
  return d;
}

using sparse3d::Counters;
using sparse3d::ModelInfo;
using sparse3d::RequestStats;
using sparse3d::Residency;
using sparse3d::StepInfo;

nb::dict stats_dict(const RequestStats& st) {
  nb::dict d = to_dict(
      st, field("plan", &RequestStats::plan), field("tokens", &RequestStats::tokens),
      field("setup_seconds", &RequestStats::setup_seconds),
      field("loop_seconds", &RequestStats::loop_seconds), field("launches", &RequestStats::launches),
      field("launches_before_loop", &RequestStats::launches_before_loop),
      field("peak_device_bytes", &RequestStats::peak_device_bytes),
      field("peak_device_reserved_bytes", &RequestStats::peak_device_reserved_bytes),
      field("graphs_captured", &RequestStats::graphs_captured),
      field("graph_capture_seconds", &RequestStats::graph_capture_seconds),
      field("graph_nodes", &RequestStats::graph_nodes),
      // sample() only: the whole call, its null-context work, and the one-time work per new
      // shape (docs/CONTRACTS.md, "First requests").
      field("wall_seconds", &RequestStats::wall_seconds),
      field("null_context_seconds", &RequestStats::null_context_seconds),
      field("devices", &RequestStats::devices),
      field("devices_reason", &RequestStats::devices_reason));
  d["request_seconds"] = st.request_seconds();
  nb::dict by_op;
  for (const auto& [op, n] : st.launches_by_op) by_op[op.c_str()] = n;
  d["launches_by_op"] = by_op;
  nb::dict first_use;
  for (const auto& [kind, c] : st.first_use) {
    nb::dict one;
    one["count"] = c.count;
    one["seconds"] = c.seconds;
    first_use[kind.c_str()] = one;
  }
  d["first_use"] = first_use;
  return d;
}

nb::dict step_dict(const StepInfo& s) {
  return to_dict(s, field("index", &StepInfo::index), field("total", &StepInfo::total),
                 field("t", &StepInfo::t), field("t_prev", &StepInfo::t_prev),
                 field("cfg", &StepInfo::cfg), field("elapsed_s", &StepInfo::elapsed_s));
}

nb::dict counters_dict(const Counters& c) {
  nb::dict d = to_dict(
      c, field("requests", &Counters::requests), field("launches", &Counters::launches),
      field("device_bytes_in_use", &Counters::device_bytes_in_use),
      field("device_bytes_reserved", &Counters::device_bytes_reserved),
      field("peak_device_bytes", &Counters::peak_device_bytes),
      field("qualifications_run", &Counters::qualifications_run),
      field("qualification_cache_hits", &Counters::qualification_cache_hits),
      field("qualification_cache_refusals", &Counters::qualification_cache_refusals));
  nb::list fallbacks;
  for (const auto& f : c.fallbacks) {
    nb::dict e;
    e["optimization"] = f.optimization;
    e["reason"] = f.reason;
    e["count"] = f.count;
    fallbacks.append(e);
  }
  d["fallbacks"] = fallbacks;
  return d;
}

nb::dict model_dict(const ModelInfo& m) {
  return to_dict(
      m, field("family", &ModelInfo::family), field("layout", &ModelInfo::layout),
      field("sampler_preset", &ModelInfo::sampler_preset),
      field("checkpoint", &ModelInfo::checkpoint), field("content_hash", &ModelInfo::content_hash),
      field("weight_format", &ModelInfo::weight_format),
      field("resolution", &ModelInfo::resolution), field("in_channels", &ModelInfo::in_channels),
      field("out_channels", &ModelInfo::out_channels),
      field("model_channels", &ModelInfo::model_channels),
      field("cond_channels", &ModelInfo::cond_channels),
      field("num_blocks", &ModelInfo::num_blocks), field("num_heads", &ModelInfo::num_heads),
      field("parameters", &ModelInfo::parameters));
}

nb::dict residency_dict(const Residency& r) {
  return to_dict(
      r, field("resident", &Residency::resident), field("weight_bytes", &Residency::weight_bytes),
      field("host_copy_bytes", &Residency::host_copy_bytes),
      field("offloads", &Residency::offloads), field("reloads", &Residency::reloads),
      field("bytes_offloaded", &Residency::bytes_offloaded),
      field("bytes_reloaded", &Residency::bytes_reloaded),
      field("device_bytes_released", &Residency::device_bytes_released),
      field("offload_seconds", &Residency::offload_seconds),
      field("reload_seconds", &Residency::reload_seconds),
      field("weights_source", &Residency::weights_source));
}

// The arrays a borrowing engine keeps as its weights (InMemoryCheckpoint::keep_alive): let go
// with the GIL held, from whichever thread drops the last reference; left alone once the
// interpreter is finalizing (the process is ending and their memory with it).
std::shared_ptr<void> hold_arrays(std::vector<std::pair<std::string, AnyArray>> arrays) {
  auto* held = new std::vector<std::pair<std::string, AnyArray>>(std::move(arrays));
  return std::shared_ptr<void>(held, [](void* p) {
    auto* h = static_cast<std::vector<std::pair<std::string, AnyArray>>*>(p);
    if (!Py_IsInitialized() || !nb::is_alive()) return;
    nb::gil_scoped_acquire gil;
    delete h;
  });
}

nb::list qualification_list(const std::vector<sparse3d::QualificationState>& states) {
  nb::list out;
  for (const auto& q : states) {
    nb::dict d;
    d["context_tokens"] = q.context_tokens;
    d["tuned_gemm"] = q.tuned_gemm;
    d["applicable"] = q.applicable;
    d["reason"] = q.reason;
    d["facts"] = q.facts;
    nb::list shapes;
    for (const auto& s : q.shapes) {
      nb::dict e;
      e["tokens"] = s.tokens;
      e["batched"] = s.batched;
      e["m"] = s.m;
      e["source"] = s.source;
      e["summary"] = s.summary;
      shapes.append(e);
    }
    d["shapes"] = shapes;
    out.append(d);
  }
  return out;
}

// fn() without the GIL.
template <class F>
auto unlocked(F fn) {
  nb::gil_scoped_release release;
  return fn();
}

// ---- The engine -------------------------------------------------------------------------

// One Python callback error, kept until the request returns (an exception must not unwind
// through the engine's C++ frames as a Python error state).
struct CallbackFailure {
  std::unique_ptr<nb::python_error> error;
  std::unique_ptr<nb::python_error> interrupt;  // a signal's exception (KeyboardInterrupt)

  // Runs a Python call with the GIL held, unless one failed before (the first error ends the
  // callbacks); its error is kept, not thrown.
  template <class Call>
  void guard(Call&& call) {
    nb::gil_scoped_acquire gil;
    if (error) return;
    try {
      call();
    } catch (nb::python_error& e) {
      error = std::make_unique<nb::python_error>(std::move(e));
    }
  }
};

// Whether the calling thread is Python's main thread, the only one that runs signal handlers.
bool on_main_thread() {
  const nb::module_ threading = nb::module_::import_("threading");
  return threading.attr("current_thread")().is(threading.attr("main_thread")());
}

class PyEngine {
 public:
  // Construction (reading, hashing and uploading the weights, starting CUDA) runs without
  // the GIL: engines build in parallel on several threads. `log_` keeps the log callable's
  // reference, so that it goes with the GIL held (members are destroyed after `release` is
  // undone), even when the constructor throws.
  PyEngine(const std::string& checkpoint, sparse3d::EngineOptions options,
           std::shared_ptr<LogSink> log)
      : log_(std::move(log)) {
    nb::gil_scoped_release release;
    engine_ = std::make_unique<sparse3d::Engine>(checkpoint, std::move(options));
  }
  PyEngine(const std::string& config_json, const std::vector<std::pair<std::string, AnyArray>>& tensors,
           const std::string& name, sparse3d::EngineOptions options, std::shared_ptr<LogSink> log,
           bool borrow)
      : log_(std::move(log)) {
    sparse3d::InMemoryCheckpoint ck;
    ck.config_json = config_json;
    ck.name = name;
    for (const auto& [key, array] : tensors) ck.tensors.emplace_back(key, view_of(array, key.c_str()));
    ck.borrow = borrow;
    if (borrow) ck.keep_alive = hold_arrays(tensors);
    nb::gil_scoped_release release;
    engine_ = std::make_unique<sparse3d::Engine>(ck, std::move(options));
  }

  // coords None: the dense model's volume mode (SampleRequest/ForwardRequest with empty
  // coords; the engine refuses it for a SLatFlowModel).
  nb::dict sample(nb::handle coords_arg, nb::handle cond_arg, int batch, nb::handle noise_arg,
                  uint64_t seed, nb::handle concat_cond_arg, const nb::dict& sampler,
                  const std::optional<std::string>& path, nb::handle out_arg,
                  std::optional<nb::callable> callback, bool keep_first_forward, uintptr_t stream,
                  std::optional<nb::callable> progress) {
    // Converted first, and kept for the call: the request reads them in place.
    const auto coords = input_array(coords_arg, "coords");
    const auto cond = *input_array(cond_arg, "cond", false);
    const auto noise = input_array(noise_arg, "noise");
    const auto concat_cond = input_array(concat_cond_arg, "concat_cond");
    const auto out = output_array(out_arg);
    sparse3d::SampleRequest r;
    r.coords = optional_view(coords, "coords");
    r.cond = view_of(cond, "cond");
    r.batch = batch;
    r.noise = optional_view(noise, "noise");
    r.seed = seed;
    r.concat_cond = optional_view(concat_cond, "concat_cond");
    r.sampler = sampler_settings(sampler);
    r.flags = flags_of(path);
    r.out = optional_view(out, "out");
    r.keep_first_forward = keep_first_forward;
    r.cuda_stream = stream_of(stream);
    auto failure = std::make_shared<CallbackFailure>();
    if (callback) {
      auto fn = std::make_shared<nb::callable>(*callback);
      r.on_step = [fn, failure](const sparse3d::StepInfo& s) {
        failure->guard([&] { (*fn)(s.index, s.t, borrowed(s.latent)); });
      };
    }
    // progress(done, total): steps the device has finished, never waiting for the device
    // (SampleRequest::on_progress).
    if (progress) {
      auto fn = std::make_shared<nb::callable>(*progress);
      r.on_progress = [fn, failure](int done, int total) {
        failure->guard([&] { (*fn)(done, total); });
      };
    }
    // Ctrl-C: between steps, a pending signal runs its Python handler (the GIL taken for
    // that moment); the exception it raises (KeyboardInterrupt) stops the request, as does
    // one the step callback raised.
    if (on_main_thread()) {
      r.stop = [failure] {
        nb::gil_scoped_acquire gil;
        if (failure->error && failure->error->matches(PyExc_KeyboardInterrupt)) return true;
        if (PyErr_CheckSignals() == 0) return false;
        failure->interrupt = std::make_unique<nb::python_error>();
        return true;
      };
    }
    sparse3d::SampleResult result;
    try {
      nb::gil_scoped_release release;
      result = engine_->sample(r);
    } catch (const sparse3d::Error&) {
      if (failure->interrupt) throw nb::python_error(*failure->interrupt);
      if (failure->error && failure->error->matches(PyExc_KeyboardInterrupt))
        throw nb::python_error(*failure->error);
      throw;
    }
    if (failure->error) throw nb::python_error(*failure->error);
    nb::dict d;
    d["latent"] = to_python(result.latent);
    d["first_v_cond"] = to_python(result.first_v_cond);
    d["first_v_uncond"] = to_python(result.first_v_uncond);
    nb::list steps;
    for (const auto& s : result.steps) steps.append(step_dict(s));
    d["steps"] = steps;
    d["stats"] = stats_dict(result.stats);
    return d;
  }

  nb::object forward(nb::handle x_arg, nb::handle t_arg, nb::handle coords_arg, nb::handle cond_arg,
                     int batch, nb::handle concat_cond_arg, const std::optional<std::string>& path,
                     nb::handle out_arg, uintptr_t stream) {
    const auto x = *input_array(x_arg, "x", false);
    const auto t = *input_array(t_arg, "t", false);
    const auto coords = input_array(coords_arg, "coords");
    const auto cond = *input_array(cond_arg, "cond", false);
    const auto concat_cond = input_array(concat_cond_arg, "concat_cond");
    const auto out = output_array(out_arg);
    sparse3d::ForwardRequest r;
    r.x = view_of(x, "x");
    r.t = view_of(t, "t");
    r.coords = optional_view(coords, "coords");
    r.cond = view_of(cond, "cond");
    r.batch = batch;
    r.concat_cond = optional_view(concat_cond, "concat_cond");
    r.flags = flags_of(path);
    r.out = optional_view(out, "out");
    r.cuda_stream = stream_of(stream);
    Array v;
    {
      nb::gil_scoped_release release;
      v = engine_->forward(r);
    }
    return to_python(v);
  }

  void warm_up(const std::vector<int64_t>& tokens, int cond_tokens) {
    nb::gil_scoped_release release;
    engine_->warm_up(tokens, cond_tokens);
  }

  std::string fits(int64_t tokens, int batch, int cond_tokens, const std::optional<std::string>& path) {
    const sparse3d::FlagSet flags = path ? *flags_of(path) : engine_->plan().flags();
    nb::gil_scoped_release release;
    return engine_->fits(tokens, batch, cond_tokens, flags);
  }

  sparse3d::Engine& engine() { return *engine_; }
  LogSink* log() const { return log_.get(); }

 private:
  std::shared_ptr<LogSink> log_;  // declared first: outlives the engine's copy
  std::unique_ptr<sparse3d::Engine> engine_;
};

// Garbage collection of an Engine (nanobind's documented pattern): what the object
// references is its log callable, and clearing it breaks any cycle through it (the engine
// then logs nothing more; it is about to be freed).
int engine_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));  // a heap type's instances reference their type
  if (!nb::inst_ready(self)) return 0;  // during __init__: no C++ state yet
  if (LogSink* log = nb::inst_ptr<PyEngine>(self)->log()) Py_VISIT(log->fn.ptr());
  return 0;
}

int engine_clear(PyObject* self) {
  if (!nb::inst_ready(self)) return 0;
  if (LogSink* log = nb::inst_ptr<PyEngine>(self)->log()) log->fn.reset();
  return 0;
}

PyType_Slot engine_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(engine_traverse)},
                              {Py_tp_clear, reinterpret_cast<void*>(engine_clear)},
                              {0, nullptr}};

// ---- Messages -------------------------------------------------------------------------------

// The Python callable behind the process-wide message sink (sparse3d/messages.h). Messages
// come from the thread running a request, which has released the GIL: the sink takes it for
// the call. The reference is dropped with the GIL held, whichever thread lets go last.
struct PySinkFn {
  PyObject* fn;
  explicit PySinkFn(nb::callable f) : fn(f.release().ptr()) {}
  ~PySinkFn() {
    if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing left to release
    nb::gil_scoped_acquire gil;
    Py_DECREF(fn);
  }
};

const char* level_name(sparse3d::MessageLevel level) {
  return level == sparse3d::MessageLevel::Info ? "info" : "warning";
}

// Installs fn(level, kind, text, optimization, reason) as the sink; None restores stderr.
// The package installs its logger's sink at import and restores stderr at exit (atexit),
// before the interpreter goes.
void set_python_message_sink(std::optional<nb::callable> fn) {
  if (!fn) {
    sparse3d::set_message_sink({});
    return;
  }
  auto holder = std::make_shared<PySinkFn>(std::move(*fn));
  sparse3d::set_message_sink([holder](const sparse3d::Message& m) {
    if (!Py_IsInitialized()) {
      sparse3d::write_to_stderr(m);
      return;
    }
    nb::gil_scoped_acquire gil;
    try {
      nb::handle(holder->fn)(level_name(m.level), m.kind, m.text, m.optimization, m.reason);
    } catch (nb::python_error& e) {
      // A sink must not throw into the engine: Python reports it as unraisable.
      discard_keeping_interrupt(e, "sparse3d_engine message sink");
    } catch (...) {
    }
  });
}

// ---- Synthetic checkpoints ---------------------------------------------------------------------

nb::dict synthetic_checkpoint(const std::string& preset, uint64_t seed, const std::string& out,
                              const std::string& dtype) {
  if (dtype != "bf16" && dtype != "f32")
    throw sparse3d::Error("make_synthetic_checkpoint: dtype must be \"bf16\" or \"f32\", got \"" +
                          dtype + "\"");
  sparse3d::SyntheticCheckpoint c;
  {
    nb::gil_scoped_release release;  // the 1.3B presets write gigabytes
    c = sparse3d::make_synthetic_checkpoint(preset, seed, out,
                                            dtype == "f32" ? DType::F32 : DType::BF16);
  }
  nb::dict d;
  d["json"] = c.json_path;
  d["safetensors"] = c.safetensors_path;
  d["family"] = c.family;
  d["parameters"] = c.parameters;
  d["preset"] = preset;
  d["seed"] = seed;
  d["dtype"] = dtype;
  return d;
}

}  // namespace

namespace {

// PyTorch's caching allocator as a workspace's memory source (Workspace(memory="torch")):
// torch.cuda.caching_allocator_alloc on the device's current stream, and
// caching_allocator_delete. Nothing of Python is kept in the source (it may outlive the
// interpreter): torch.cuda is looked up at each call, under the GIL. Once the interpreter has
// gone, a block is left to the process's exit.
sparse3d::DeviceMemorySource torch_memory_source(int device) {
  sparse3d::DeviceMemorySource source;
  source.name = "PyTorch's caching allocator";
  source.allocate = [device](size_t bytes) -> void* {
    if (!nb::is_alive())
      throw sparse3d::Error("PyTorch's caching allocator: the Python interpreter has exited");
    nb::gil_scoped_acquire gil;
    try {
      nb::module_ cuda = nb::module_::import_("torch.cuda");
      nb::object ptr = cuda.attr("caching_allocator_alloc")(bytes, device);
      return reinterpret_cast<void*>(nb::cast<uintptr_t>(ptr));
    } catch (nb::python_error& e) {
      nb::module_ torch = nb::module_::import_("torch");
      if (nb::hasattr(torch, "OutOfMemoryError") && e.matches(torch.attr("OutOfMemoryError")))
        return nullptr;  // the allocator's caller says what was asked and what is free
      throw sparse3d::Error(std::string("PyTorch's caching allocator failed: ") + e.what());
    }
  };
  source.release = [](void* ptr) {
    if (!nb::is_alive()) return;
    nb::gil_scoped_acquire gil;
    try {
      nb::module_::import_("torch.cuda").attr("caching_allocator_delete")(
          reinterpret_cast<uintptr_t>(ptr));
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("sparse3d: returning a workspace block to PyTorch");
    }
  };
  return source;
}

}  // namespace

// A device workspace shared by engines (sparse3d::Workspace).
static void bind_workspace(nb::module_& m) {
  nb::class_<sparse3d::Workspace>(m, "Workspace")
      .def(nb::init<int>(), "device_index"_a = 0)
      .def_prop_ro("device_index", &sparse3d::Workspace::device_index)
      // Workspace(memory=...) in __init__.py checks the value: True takes PyTorch's memory.
      .def("use_torch_memory", [](sparse3d::Workspace& w, bool torch) {
        auto source =
            torch ? torch_memory_source(w.device_index()) : sparse3d::DeviceMemorySource{};
        unlocked([&] { w.set_memory_source(std::move(source)); return 0; });
      }, "torch"_a)
      .def_prop_ro("memory_source", &sparse3d::Workspace::memory_source)
      .def("release_cache", [](sparse3d::Workspace& w) {
        return unlocked([&] { return w.release_cache(); });
      })
      .def("stats", [](sparse3d::Workspace& w) {
        nb::dict d;
        d["bytes_in_use"] = w.bytes_in_use();
        d["bytes_reserved"] = w.bytes_reserved();
        d["peak_bytes"] = w.peak_bytes();
        return d;
      })
      .def("reset_peak", &sparse3d::Workspace::reset_peak);
}

// Engine's constructors: from a checkpoint file, or from tensors in memory.
static void bind_engine_constructors(nb::class_<PyEngine>& engine) {
  engine
      .def("__init__",
           [](PyEngine* self, const std::string& checkpoint, const std::string& path,
              const std::string& device, int device_index, double max_device_memory_gib,
              const std::string& cache_dir, bool persist_qualification,
              const std::vector<int64_t>& qualify_m, std::optional<nb::callable> log,
              const std::vector<int>& devices, int64_t parallel_min_tokens,
              std::shared_ptr<sparse3d::Workspace> workspace, bool fit_to_reference,
              const std::string& weight_format) {
             auto sink = log_sink(log);
             auto options = engine_options(path, device, device_index, max_device_memory_gib,
                                           cache_dir, persist_qualification, qualify_m, sink,
                                           devices, parallel_min_tokens);
             options.workspace = std::move(workspace);
             options.fit_to_reference = fit_to_reference;
             options.weight_format = weight_format;
             new (self) PyEngine(checkpoint, std::move(options), std::move(sink));
           },
           "checkpoint"_a, "path"_a = "", "device"_a = "auto", "device_index"_a = 0,
           "max_device_memory_gib"_a = 0.0, "cache_dir"_a = "", "persist_qualification"_a = true,
           "qualify_m"_a = std::vector<int64_t>{}, "log"_a = nb::none(),
           "devices"_a = std::vector<int>{}, "parallel_min_tokens"_a = int64_t{8192},
           "workspace"_a = nb::none(), "fit_to_reference"_a = false, "weight_format"_a = "")
      .def_static(
          "from_tensors",
          [](const std::string& config_json, nb::handle tensors_arg, const std::string& name,
             const std::string& path, const std::string& device,
             int device_index, double max_device_memory_gib, const std::string& cache_dir,
             bool persist_qualification, const std::vector<int64_t>& qualify_m,
             std::optional<nb::callable> log, const std::vector<int>& devices,
             int64_t parallel_min_tokens, bool borrow,
             std::shared_ptr<sparse3d::Workspace> workspace, bool fit_to_reference,
             const std::string& weight_format) {
            // Kept while the engine copies them; with borrow, for as long as it uses them.
            const auto tensors = named_arrays(tensors_arg);
            auto sink = log_sink(log);
            auto options = engine_options(path, device, device_index, max_device_memory_gib,
                                          cache_dir, persist_qualification, qualify_m, sink,
                                          devices, parallel_min_tokens);
            options.workspace = std::move(workspace);
            options.fit_to_reference = fit_to_reference;
            options.weight_format = weight_format;
            return new PyEngine(config_json, tensors, name, std::move(options), std::move(sink),
                                borrow);
          },
          "config_json"_a, "tensors"_a, "name"_a = "in-memory checkpoint", "path"_a = "",
          "device"_a = "auto", "device_index"_a = 0, "max_device_memory_gib"_a = 0.0,
          "cache_dir"_a = "", "persist_qualification"_a = true,
          "qualify_m"_a = std::vector<int64_t>{}, "log"_a = nb::none(),
          "devices"_a = std::vector<int>{}, "parallel_min_tokens"_a = int64_t{8192},
          "borrow"_a = false, "workspace"_a = nb::none(), "fit_to_reference"_a = false,
          "weight_format"_a = "", nb::rv_policy::take_ownership);
}

// Engine's requests: sample, forward, warm_up, and fits (will a request fit in memory).
static void bind_engine_requests(nb::class_<PyEngine>& engine) {
  engine
      .def("sample", &PyEngine::sample, "coords"_a.none(), "cond"_a.none(), "batch"_a, "noise"_a.none() = nb::none(),
           "seed"_a = 0, "concat_cond"_a.none() = nb::none(), "sampler"_a = nb::dict(),
           "path"_a = nb::none(), "out"_a.none() = nb::none(), "callback"_a = nb::none(),
           "keep_first_forward"_a = false, "stream"_a = 0, "progress"_a = nb::none())
      .def("forward", &PyEngine::forward, "x"_a.none(), "t"_a.none(), "coords"_a.none(),
           "cond"_a.none(), "batch"_a, "concat_cond"_a.none() = nb::none(), "path"_a = nb::none(),
           "out"_a.none() = nb::none(), "stream"_a = 0)
      .def("warm_up", &PyEngine::warm_up, "tokens"_a, "cond_tokens"_a)
      .def("fits", &PyEngine::fits, "tokens"_a, "batch"_a, "cond_tokens"_a, "path"_a = nb::none());
}

// Engine's state: counters, fingerprint, qualification, residency, and its model, device and
// plan.
static void bind_engine_state(nb::class_<PyEngine>& engine) {
  engine
      // These wait for a request running on another thread (one request at a time per
      // engine), so they let go of the GIL, which that request's callback may need.
      .def("counters", [](PyEngine& e) {
        return counters_dict(unlocked([&] { return e.engine().counters(); }));
      })
      .def("reset_counters", [](PyEngine& e) { unlocked([&] { e.engine().reset_counters(); return 0; }); })
      .def("fingerprint", [](PyEngine& e) {
        nb::dict d;
        for (const auto& [k, v] : unlocked([&] { return e.engine().fingerprint(); })) {
          if (k == "has_gpu")
            d[k.c_str()] = nb::bool_(v == "true");  // a boolean, not the string "false"
          else
            d[k.c_str()] = v;
        }
        return d;
      })
      .def("qualification", [](PyEngine& e) {
        return qualification_list(unlocked([&] { return e.engine().qualification(); }));
      })
      // Residency: moves of gigabytes, without the GIL.
      .def("offload", [](PyEngine& e) { unlocked([&] { e.engine().offload(); return 0; }); })
      .def("reload", [](PyEngine& e) { unlocked([&] { e.engine().reload(); return 0; }); })
      .def("release_cache", [](PyEngine& e) {
        return unlocked([&] { return e.engine().release_cache(); });
      })
      .def("residency", [](PyEngine& e) {
        return residency_dict(unlocked([&] { return e.engine().residency(); }));
      })
      .def_prop_ro("model", [](PyEngine& e) { return model_dict(e.engine().model()); })
      .def_prop_ro("device", [](PyEngine& e) {
        return std::string(e.engine().device() == Device::CUDA ? "cuda" : "cpu");
      })
      .def_prop_ro("plan", [](PyEngine& e) { return e.engine().plan().label(); });
}

// The Engine class: construction (from a file or tensors), requests, state and residency.
static void bind_engine(nb::module_& m) {
  nb::class_<PyEngine> engine(m, "Engine", nb::type_slots(engine_slots));
  bind_engine_constructors(engine);
  bind_engine_requests(engine);
  bind_engine_state(engine);
}

// The execution paths and optimization flags the engine knows (what `sparse3d paths` prints),
// and a path spec's label.
static void bind_paths_and_flags(nb::module_& m) {
  m.def("paths", [] {
    nb::list out;
    for (const auto& p : sparse3d::execution_paths()) {
      nb::dict d;
      d["name"] = std::string(p.name);
      d["help"] = std::string(p.help);
      std::vector<std::string> flags;
      for (auto f : p.flags.flags()) flags.emplace_back(sparse3d::name(f));
      d["flags"] = flags;
      out.append(d);
    }
    return out;
  });
  m.def("flags", [] {
    nb::list out;
    for (const auto& f : sparse3d::flag_infos()) {
      nb::dict d;
      d["name"] = std::string(f.name);
      d["help"] = std::string(f.help);
      d["contract"] = std::string(f.contract);
      out.append(d);
    }
    return out;
  });
  m.def("plan_label", [](const std::string& spec) { return sparse3d::ExecutionPlan::parse(spec).label(); },
        "spec"_a);
}

NB_MODULE(_native, m) {
  m.doc() = "sparse3d's native engine (the public C++ API over DLPack); use the sparse3d_engine package.";
  nb::exception<sparse3d::Error>(m, "Error", PyExc_RuntimeError);

  m.def("version", [] { return std::string(sparse3d::version()); });
  // The `sparse3d` command line itself (apps/command_line.h), for the package's
  // `sparse3d-engine` and `python -m sparse3d_engine`: one implementation for both. It runs
  // without the GIL and calls no Python; the caller sends the engine's messages to stderr first.
  // The arguments come as bytes (os.fsencode): a file name that is not UTF-8 passes unchanged.
  m.def("command_line", [](const std::vector<nb::bytes>& args, const std::string& name) {
        std::vector<std::string> argv;
        for (const nb::bytes& a : args) argv.emplace_back(a.c_str(), a.size());
        nb::gil_scoped_release release;
        return s3d::apps::command_line(argv, name);
      }, "args"_a, "name"_a,
      "Runs the sparse3d command line on args (bytes; args[0]: the program as typed); returns its "
      "exit code. Fatal signals end the process (after removing files under way), as they do "
      "the sparse3d executable.");
  m.def("default_path", [] { return std::string(sparse3d::default_path()); });
  // The environment fingerprint without an engine (`sparse3d info --json`): one JSON object.
  m.def("environment_json", [] { return unlocked([] { return sparse3d::environment_report(true); }); });
  bind_paths_and_flags(m);
  m.def("draw_noise", [](uint64_t seed, int64_t rows, int64_t cols, uint64_t offset) {
        return to_python(sparse3d::draw_noise(seed, rows, cols, offset));
      }, "seed"_a, "rows"_a, "cols"_a, "offset"_a = 0);
  m.def("timesteps", [](const nb::dict& sampler) { return sparse3d::timesteps(sampler_settings(sampler)); },
        "sampler"_a);
  m.def("sampler_preset", [](const std::string& name) {
        return settings_dict(sparse3d::SamplerSettings::preset(name));
      }, "name"_a);
  m.def("set_message_sink", &set_python_message_sink, "sink"_a.none(),
        "Sends the engine's messages (fallbacks) to sink(level, kind, text, optimization, "
        "reason) instead of stderr; None: back to stderr.");
  m.def("model_families", [] {
        nb::list out;
        for (const sparse3d::FamilyInfo& f : sparse3d::model_families()) {
          nb::dict d;
          d["name"] = f.name;
          d["layout"] = f.layout;
          d["sampler_preset"] = f.sampler_preset;
          d["reads_rope_freq"] = f.reads_rope_freq;
          out.append(d);
        }
        return out;
      }, "Every model family of the engine's registry: [{name, layout, sampler_preset, "
         "reads_rope_freq}].");
  m.def("synthetic_presets", &sparse3d::synthetic_presets);
  m.def("synthetic_parameter_count", &sparse3d::synthetic_parameter_count, "preset"_a);
  m.def("make_synthetic_checkpoint", &synthetic_checkpoint, "preset"_a, "seed"_a, "out_prefix"_a,
        "dtype"_a = "bf16",
        "Writes OUT_PREFIX.json and OUT_PREFIX.safetensors with synthetic weights; returns "
        "{json, safetensors, family, parameters, preset, seed, dtype}.");

  bind_workspace(m);
  bind_engine(m);
  bind_glb(m);
}
