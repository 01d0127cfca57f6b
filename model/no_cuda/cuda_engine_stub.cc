// CPU-only builds: the CUDA engine is compiled out, and asking for it says so.
#include "model/cuda_engine.h"
#include "model/error.h"

namespace nmt {

std::unique_ptr<Engine> make_cuda_engine(const ModelConfig&, const Weights&,
                                         const TranslatorOptions&) {
  throw Error(ErrorCode::kInvalidArgument,
              "device 'cuda' requested, but this nmt-serve build has no CUDA support "
              "(rebuild where nvcc is installed, or use --device cpu)");
}

int cuda_device_count() { return 0; }

}  // namespace nmt
