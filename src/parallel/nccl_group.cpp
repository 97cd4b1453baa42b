// The NCCL group (group.h). Built when nccl.h is found (SPARSE3D_HAVE_NCCL); the library is opened
// with dlopen at the first make_nccl_group, so nothing links NCCL.
#include <cstdlib>
#include <set>

#include "core/cuda_util.h"
#include "core/error.h"
#include "parallel/group.h"

#ifdef SPARSE3D_HAVE_NCCL
#include <dlfcn.h>
#include <nccl.h>
#endif

namespace s3d::parallel {

#ifdef SPARSE3D_HAVE_NCCL
namespace {

// The NCCL entry points this file calls, looked up once in libnccl.so.2 (or the file named by
// SPARSE3D_NCCL_LIBRARY).
struct NcclApi {
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
  ncclResult_t (*get_version)(int*) = nullptr;
  std::string error;  // why it did not load; empty when it did
};

template <class F>
bool find(void* lib, const char* name, F& fn, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr && error.empty()) error = std::string("it has no ") + name;
  return fn != nullptr;
}

const NcclApi& api() {
  static const NcclApi loaded = [] {
    NcclApi a;
    const char* env = std::getenv("SPARSE3D_NCCL_LIBRARY");
    const std::string path = env && *env ? env : "libnccl.so.2";
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      a.error = "cannot open " + path + " (" + (why ? why : "unknown") +
                "); install NCCL (pip install nvidia-nccl-cu13, or the "
                "libnccl2 package) or set "
                "SPARSE3D_NCCL_LIBRARY";
      return a;
    }
    std::string missing;
    find(lib, "ncclCommInitAll", a.comm_init_all, missing);
    find(lib, "ncclCommDestroy", a.comm_destroy, missing);
    find(lib, "ncclGroupStart", a.group_start, missing);
    find(lib, "ncclGroupEnd", a.group_end, missing);
    find(lib, "ncclSend", a.send, missing);
    find(lib, "ncclRecv", a.recv, missing);
    find(lib, "ncclGetErrorString", a.error_string, missing);
    find(lib, "ncclGetVersion", a.get_version, missing);
    if (!missing.empty()) a.error = path + " is not a usable NCCL: " + missing;
    return a;
  }();
  return loaded;
}

void nccl_check(ncclResult_t r, const char* what) {
  S3D_CHECK(r == ncclSuccess, "NCCL: ", what, " failed: ", api().error_string(r));
}

class NcclGroup final : public Group {
 public:
  explicit NcclGroup(const std::vector<Context*>& contexts) : contexts_(contexts) {
    const NcclApi& a = api();
    S3D_CHECK(a.error.empty(), "NCCL group: ", a.error);
    S3D_CHECK(!contexts.empty(), "NCCL group: needs at least one rank");
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    std::set<int> seen;
    for (Context* c : contexts) {
      S3D_CHECK(c != nullptr && c->device() >= 0, "NCCL group: a rank has no CUDA device");
      const int d = c->device();
      S3D_CHECK(d < count, "NCCL group: device ", d, " is missing (this machine has ", count,
                " CUDA device", count == 1 ? "" : "s", ")");
      S3D_CHECK(seen.insert(d).second, "NCCL group: device ", d, " is given to two ranks");
      devices_.push_back(d);
    }
    comms_.resize(devices_.size());
    int home = 0;
    S3D_CUDA_CHECK(cudaGetDevice(&home));
    const ncclResult_t r =
        a.comm_init_all(comms_.data(), static_cast<int>(devices_.size()), devices_.data());
    cudaSetDevice(home);
    nccl_check(r, "ncclCommInitAll");
  }
  ~NcclGroup() override {
    for (ncclComm_t c : comms_)
      if (c) api().comm_destroy(c);
  }
  int size() const override { return static_cast<int>(devices_.size()); }
  std::string describe() const override {
    std::string s = "nccl " + nccl_version() + ": GPUs";
    for (size_t r = 0; r < devices_.size(); ++r)
      s += (r ? ", " : " ") + std::to_string(devices_[r]);
    return s;
  }
  Context* context(int rank) const override { return contexts_[static_cast<size_t>(rank)]; }
  // One NCCL group call: every send on its source rank's context stream, every receive on its
  // destination's; a transfer to the same rank is a send and a receive on one communicator, which
  // NCCL allows.
  void exchange(const std::vector<Transfer>& transfers) override {
    for (size_t i = 0; i < transfers.size(); ++i) {
      check(transfers[i], i);
      S3D_CHECK(
          transfers[i].src.device() == Device::CUDA && transfers[i].dst.device() == Device::CUDA,
          "NCCL group: transfer ", i, " has a buffer outside GPU memory");
    }
    const NcclApi& a = api();
    nccl_check(a.group_start(), "ncclGroupStart");
    ncclResult_t r = ncclSuccess;
    for (const Transfer& t : transfers) {
      const size_t bytes = t.src.nbytes();
      if (bytes == 0) continue;
      const auto f = static_cast<size_t>(t.from), to = static_cast<size_t>(t.to);
      r = a.send(t.src.data(), bytes, ncclUint8, t.to, comms_[f], contexts_[f]->stream());
      if (r != ncclSuccess) break;
      r = a.recv(const_cast<void*>(t.dst.data()), bytes, ncclUint8, t.from, comms_[to],
                 contexts_[to]->stream());
      if (r != ncclSuccess) break;
    }
    const ncclResult_t end = a.group_end();  // always closes the group it opened
    nccl_check(r, "ncclSend/ncclRecv");
    nccl_check(end, "ncclGroupEnd");
  }

 private:
  std::vector<Context*> contexts_;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace

bool nccl_built() { return true; }

std::string nccl_version() {
  const NcclApi& a = api();
  if (!a.error.empty()) return "none (" + a.error + ")";
  int v = 0;
  if (a.get_version(&v) != ncclSuccess) return "none (ncclGetVersion failed)";
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

std::unique_ptr<Group> make_nccl_group(const std::vector<Context*>& contexts) {
  return std::make_unique<NcclGroup>(contexts);
}

#else

bool nccl_built() { return false; }
std::string nccl_version() { return "none (this build has no NCCL: nccl.h was not found)"; }
std::unique_ptr<Group> make_nccl_group(const std::vector<Context*>&) {
  fail(
      "NCCL group: this build has no NCCL (nccl.h was not found when it was "
      "configured)");
}

#endif

}  // namespace s3d::parallel
