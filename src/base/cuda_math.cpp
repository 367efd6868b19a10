// CUDA math settings (base layer): whether float32 matrix products and convolutions on a GPU may
// use TF32 tensor cores. Compiled in every build, so the setting is declared (and documented) with
// or without the CUDA backend; the ops layer reads it for each cuBLASLt / cuDNN call.
#include "loom/config.h"
#include "loom/cuda.h"

namespace loom::cuda {
namespace {

// Note [TF32 is off by default]
// TF32 rounds float32 operands to a 10-bit mantissa inside the tensor cores: ~8x the throughput of
// exact float32 on an H200, at ~1e-3 relative error. Like PyTorch's matmul default
// (torch.backends.cuda.matmul.allow_tf32 = False) loom keeps float32 exact unless asked; unlike
// PyTorch, one switch covers convolutions too, so that a float32 model is exact everywhere or
// nowhere. float16, bfloat16 and float64 are unaffected.
const config::FlagSetting kAllowTf32(
    "LOOM_ALLOW_TF32", false,
    "float32 matrix products and convolutions on CUDA may use TF32 tensor cores");

}  // namespace

bool allow_tf32() {
  return kAllowTf32.get();
}

void set_allow_tf32(bool allow) {
  config::set(kAllowTf32.name(), allow ? "1" : "0");
}

}  // namespace loom::cuda
