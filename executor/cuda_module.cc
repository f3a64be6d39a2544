// Loading the cuda backend's module (see cuda_module.h).
#include "executor/cuda_module.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "planner/input_error.h"

namespace rm::exec {

const CudaModule& cuda_module() {
#ifndef RINGMASTER_HAVE_CUDA
  throw InputError(
      "--backend: cuda: this ringmaster was built without the CUDA backend (no nvcc or "
      "NCCL at configure time); use --backend cpu");
#else
  static const CudaModule* module = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    // Beside the binary (or library) this code is in.
    Dl_info self{};
    std::string path = "libringmaster_cuda.so";
    if (dladdr(reinterpret_cast<void*>(&cuda_module), &self) != 0 && self.dli_fname != nullptr) {
      const std::string image = self.dli_fname;
      const auto slash = image.find_last_of('/');
      if (slash != std::string::npos) path = image.substr(0, slash + 1) + path;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      error = dlerror();
      return;
    }
    using Entry = const CudaModule* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "ringmaster_cuda_module"));
    if (entry == nullptr) {
      error = path + " has no ringmaster_cuda_module";
      return;
    }
    module = entry();
  });
  if (module == nullptr)
    throw InputError("--backend: cuda: cannot load the cuda backend (" + error + "); use --backend cpu");
  return *module;
#endif
}

}  // namespace rm::exec
