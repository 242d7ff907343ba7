#include "mpsim/parallel.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace mpsim::parallel_detail {

void inject_failure(std::string_view site, int worker, int workers) {
  static const char* const wanted = std::getenv("MPSIM_INJECT_WORKER_FAILURE");
  if (wanted == nullptr || worker != workers - 1 || site != wanted) return;
  throw std::runtime_error("injected failure on worker " + std::to_string(worker) + " of " + std::to_string(workers) +
                           " (" + std::string(site) + ", MPSIM_INJECT_WORKER_FAILURE)");
}

}  // namespace mpsim::parallel_detail
