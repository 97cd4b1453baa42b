#include "contract/fingerprint.h"

#include <cuda_runtime.h>

#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

#include "attention/attention.h"
#include "core/context.h"
#include "core/cuda_util.h"
#include "gemm/linear.h"

namespace s3d::contract {
namespace {

std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string read_nvidia_driver() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!f || !std::getline(f, line)) return "unknown";
  std::smatch m;
  if (std::regex_search(line, m, std::regex(R"((\d+\.\d+(\.\d+)?))"))) return m[1];
  return "unknown";
}

}  // namespace

Fingerprint environment_fingerprint() {
  Fingerprint f;
  f.engine_version = SPARSE3D_VERSION;
  int rt = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) f.cuda_runtime = cuda_version_string(rt);
  f.has_gpu = cuda_available();
  if (!f.has_gpu) {
    f.cublaslt = f.cudnn = "none";
    return f;
  }
  int dev = 0, drv = 0;
  S3D_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  S3D_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  f.gpu_name = prop.name;
  f.sm_count = prop.multiProcessorCount;
  f.compute_capability = prop.major * 10 + prop.minor;
  f.gpu_memory_bytes = prop.totalGlobalMem;
  if (cudaDriverGetVersion(&drv) == cudaSuccess) f.cuda_driver_api = cuda_version_string(drv);
  f.nvidia_driver = read_nvidia_driver();
  f.cublaslt = gemm::cublaslt_version();
  f.cudnn = attention::cudnn_version();
  return f;
}

io::Json Fingerprint::to_json() const {
  return io::Json{{"engine_version", engine_version},
                  {"has_gpu", has_gpu},
                  {"gpu_name", gpu_name},
                  {"sm_count", sm_count},
                  {"compute_capability", compute_capability},
                  {"gpu_memory_bytes", gpu_memory_bytes},
                  {"nvidia_driver", nvidia_driver},
                  {"cuda_driver_api", cuda_driver_api},
                  {"cuda_runtime", cuda_runtime},
                  {"cublaslt", cublaslt},
                  {"cudnn", cudnn}};
}

std::string Fingerprint::to_text() const {
  std::ostringstream os;
  os << "engine: sparse3d " << engine_version << "\n";
  if (!has_gpu) {
    os << "gpu: none (CPU backend)\n"
       << "cuda runtime: " << cuda_runtime << "\n";
    return os.str();
  }
  os << "gpu: " << gpu_name << " (sm_" << compute_capability << ", " << sm_count << " SMs, "
     << gpu_memory_bytes / (1024 * 1024) << " MiB)\n"
     << "nvidia driver: " << nvidia_driver << " (CUDA driver API " << cuda_driver_api << ")\n"
     << "cuda runtime: " << cuda_runtime << "\n"
     << "cublaslt: " << cublaslt << "\n"
     << "cudnn: " << cudnn << "\n";
  return os.str();
}

namespace {

struct FingerprintSlot {
  std::once_flag once;
  Fingerprint fingerprint;
};

}  // namespace

const Fingerprint& context_fingerprint() {
  FingerprintSlot& slot = current_context().state<FingerprintSlot>();
  std::call_once(slot.once, [&] { slot.fingerprint = environment_fingerprint(); });
  return slot.fingerprint;
}

}  // namespace s3d::contract
