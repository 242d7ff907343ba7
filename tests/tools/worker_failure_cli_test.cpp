// A failure on a worker thread reaches the command line as a clean runtime error (exit 3, the message
// printed, no output file) instead of std::terminate (exit 134): the library's fan-out
// (lib/mpsim/parallel.hpp) throws on its last worker when MPSIM_INJECT_WORKER_FAILURE names the fan-out.
// Checked for the bulk engine (`mpsim round`, an array large enough for two threads) and for training
// (`mpsim train --threads 2`, which also leaves no run folder behind when it fails before its first
// checkpoint).
#include "catch_compat.hpp"

#include <cstdlib>
#include <string>
#include <vector>

#include "../io/test_files.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/io/npy.hpp"
#include "run_mpsim.hpp"

using mpsim::test::quote;
using mpsim::test::run_mpsim;
using mpsim::test::ScratchDir;

namespace {

// Sets MPSIM_INJECT_WORKER_FAILURE for the commands run while it lives (std::system passes it on).
struct InjectedFailure {
  explicit InjectedFailure(const char* site) { ::setenv("MPSIM_INJECT_WORKER_FAILURE", site, 1); }
  ~InjectedFailure() { ::unsetenv("MPSIM_INJECT_WORKER_FAILURE"); }
};

void check_clean_failure(const mpsim::test::RunResult& r, const std::string& site, const ScratchDir& dir,
                         const std::vector<std::string>& files_before) {
  std::printf("%s: exit %d, output: %s", site.c_str(), r.status, r.output.c_str());
  CHECK(r.status == 3);
  CHECK(r.output.find("mpsim: internal error: injected failure on worker") != std::string::npos);
  CHECK(r.output.find("(" + site + ", MPSIM_INJECT_WORKER_FAILURE)") != std::string::npos);
  CHECK(dir.files() == files_before);  // nothing written beside what was there
}

}  // namespace

TEST_CASE("a failing bulk-engine worker: exit 3 with the message, no output file", "[worker_failure_cli]") {
  ScratchDir dir("worker-failure-bulk");
  // 2^18 elements: the engine gives each thread at least 2^16 (bulk.cpp kMinPerThread), so --threads 0
  // on two or more cores splits the array; on one core the one worker is the last and fails the same.
  std::vector<float> x(std::size_t{1} << 18);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.001f;
  mpsim::io::write_npy(dir / "in.npy", mpsim::io::make_npy(x, {static_cast<std::int64_t>(x.size())}));
  const std::string args =
      "round --to fp16 " + quote((dir / "in.npy").string()) + " " + quote((dir / "out.npy").string());
  {
    const auto ok = run_mpsim(dir, args);
    CHECK(ok.status == 0);  // the same command without the hook succeeds
    std::filesystem::remove(dir / "out.npy");
  }
  InjectedFailure hook("bulk");
  check_clean_failure(run_mpsim(dir, args), "bulk", dir, {"in.npy"});
}

TEST_CASE("a failing training worker: exit 3 with the message, no run folder left behind", "[worker_failure_cli]") {
  ScratchDir dir("worker-failure-train");
  InjectedFailure hook("train");
  // The failure comes in step 1's unscale pass, before any checkpoint.
  const std::string args = "train --model lstm --steps 1 --size 8 --batch 2 --threads 2 --hist-steps 1 --out ";
  check_clean_failure(run_mpsim(dir, args + quote((dir / "run").string())), "train", dir, {});
  // A folder that existed before keeps what it held and gets nothing from the failed run.
  std::filesystem::create_directories(dir / "given");
  mpsim::io::write_text_file(dir / "given" / "notes.txt", "kept\n");
  const auto r = run_mpsim(dir, args + quote((dir / "given").string()));
  CHECK(r.status == 3);
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "given"))
    left.push_back(std::filesystem::relative(e.path(), dir / "given").string());
  std::printf("train into an existing folder: exit %d, the folder holds %zu entries afterwards\n", r.status,
              left.size());
  CHECK(left == std::vector<std::string>{"notes.txt"});
}
