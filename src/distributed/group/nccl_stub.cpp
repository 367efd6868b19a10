// The NCCL slot of the process group (CUDA tensors select it, see backend.h). Built while loom has
// no NCCL backend: a CUDA build with NCCL will compile nccl_backend.cpp in its place, chosen in
// CMake like the other optional parts (cuda_stub.cpp, uring_stub.cpp).
#include "distributed/group/backend.h"
#include "loom/error.h"

namespace loom::dist {

std::unique_ptr<Backend> make_nccl_backend(const BackendContext&) {
  LOOM_THROW(NotImplementedError,
             "[dist] GPU tensors need the NCCL backend, which is not available in this build (loom "
             "has no NCCL backend yet; copy the tensors to the CPU to use the cpu backend)");
}

}  // namespace loom::dist
