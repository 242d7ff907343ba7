// The edges of the output path at the command line (docs/cli.md, "Output files"): reports written onto
// special files in place, a full standard output, a re-used `train --out` (refused, or emptied with --force),
// names that are not UTF-8, a folder given as the checkpoint, a FIFO with no writer as an input. Each case
// checks the exit status, the message and what is left on disk (with stat, independently of mpsim).
#include "catch_compat.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "../io/test_files.hpp"
#include "run_mpsim.hpp"

using mpsim::test::quote;
using mpsim::test::run_mpsim;
using mpsim::test::ScratchDir;
namespace fs = std::filesystem;

namespace {

// The smallest lstm run the model allows: the CLI is what is tested here.
const std::string kTrain = "train --model lstm --policy mixed-fp16 --steps 2 --size 8 --batch 2 ";

struct stat lstat_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// `mpsim ARGS` through the shell with its standard output sent to `stdout_to` (run_mpsim captures it), under a
// `timeout` so that a hang fails the test instead of stalling the suite: the exit status and standard error.
mpsim::test::RunResult run_shell(const ScratchDir& dir, const std::string& args, const std::string& stdout_to) {
  const auto log = dir.path().parent_path() / (dir.path().filename().string() + ".stderr.log");
  const std::string cmd =
      "timeout 60 " + quote(std::getenv("MPSIM_BIN")) + " " + args + " > " + stdout_to + " 2> " + quote(log.string());
  const int raw = std::system(cmd.c_str());
  std::ifstream f(log);
  const std::string err((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  fs::remove(log);
  std::printf("$ %s\nexit %d: %s", cmd.c_str(), WEXITSTATUS(raw), err.c_str());
  REQUIRE(WIFEXITED(raw));
  return {WEXITSTATUS(raw), err};
}

}  // namespace

TEST_CASE("reports onto /dev/null, /dev/full, a symlink and a full standard output", "[output_path_cli]") {
  ScratchDir dir("out-special");
  // Device nodes made in the scratch folder when running as root (tests/io/test_files.hpp): a regression must
  // not replace the machine's /dev/null.
  const std::string null_dev = mpsim::test::safe_device(dir, "null", 1, 3);
  const std::string full_dev = mpsim::test::safe_device(dir, "full", 1, 7);
  if (!null_dev.empty()) {
    struct stat null_before {};
    REQUIRE(::stat(null_dev.c_str(), &null_before) == 0);
    const auto to_null = run_mpsim(dir, "formats --json " + quote(null_dev));
    const auto null_after = lstat_of(null_dev);
    std::printf("formats --json %s: exit %d; still the character device: %d (uid %d)\n", null_dev.c_str(),
                to_null.status, int(S_ISCHR(null_after.st_mode) && null_after.st_rdev == null_before.st_rdev),
                int(::geteuid()));
    CHECK(to_null.status == 0);
    CHECK(S_ISCHR(null_after.st_mode));
    CHECK(null_after.st_rdev == null_before.st_rdev);

    const auto to_full = run_mpsim(dir, "formats --json " + quote(full_dev));
    std::printf("formats --json %s: exit %d: %s", full_dev.c_str(), to_full.status, to_full.output.c_str());
    CHECK(to_full.status == 2);
    CHECK(has(to_full.output, full_dev));
    CHECK(has(to_full.output, "No space left on device"));
    CHECK(S_ISCHR(lstat_of(full_dev).st_mode));
    // The human output onto a full standard output: exit 2 with the reason.
    const auto full_stdout = run_shell(dir, "formats", quote(full_dev));
    CHECK(full_stdout.status == 2);
    CHECK(has(full_stdout.output, "standard output: write failed"));
    // --help and --version are written by CLI11 before the command runs: the same rule (they exited 0).
    for (const char* flag : {"--help", "--version", "round --help"}) {
      const auto help = run_shell(dir, flag, quote(full_dev));
      std::printf("%s > full device: exit %d: %s", flag, help.status, help.output.c_str());
      CHECK(help.status == 2);
      CHECK(has(help.output, "standard output: write failed"));
    }
  } else {
    WARN("no device node can be made here (root without CAP_MKNOD): devices skipped");
  }

  // bash's process substitution: the report goes through /dev/fd/N into the reader, nothing is created.
  const std::string subst = "bash -c " + quote(quote(std::getenv("MPSIM_BIN")) + " formats --json >(cat > " +
                                               quote((dir / "via_pipe.json").string()) + ") > /dev/null; wait $!");
  const int subst_raw = std::system(subst.c_str());
  std::printf(
      "formats --json >(cat > via_pipe.json): exit %d, %ju bytes through the pipe\n", WEXITSTATUS(subst_raw),
      fs::exists(dir / "via_pipe.json") ? static_cast<std::uintmax_t>(fs::file_size(dir / "via_pipe.json")) : 0);
  CHECK(WEXITSTATUS(subst_raw) == 0);
  CHECK((fs::exists(dir / "via_pipe.json") && fs::file_size(dir / "via_pipe.json") > 100));

  fs::create_directory(dir / "real");
  fs::create_symlink("real/formats.json", dir / "link.json");
  REQUIRE(run_mpsim(dir, "formats --json " + quote((dir / "link.json").string())).status == 0);
  CHECK(S_ISLNK(lstat_of(dir / "link.json").st_mode));
  CHECK(fs::file_size(dir / "real" / "formats.json") > 100);
}

TEST_CASE("train --out re-used: refused before training, replaced with --force", "[output_path_cli]") {
  ScratchDir dir("out-reuse");
  const fs::path out = dir / "run";
  REQUIRE(run_mpsim(dir, kTrain + "--hist-steps 1,2 --dump-grads --out " + quote(out.string())).status == 0);
  REQUIRE(fs::exists(out / "hist" / "step_000001.json"));
  REQUIRE(fs::exists(out / "grads" / "step_000001.safetensors"));
  std::ofstream(out / "notes.txt") << "the user's own file";
  const auto csv_before = fs::last_write_time(out / "steps.csv");

  const auto again = run_mpsim(dir, kTrain + "--out " + quote(out.string()));
  std::printf("re-used --out: exit %d: %s", again.status, again.output.c_str());
  CHECK(again.status == 2);
  CHECK(has(again.output, "holds a previous run"));
  CHECK(has(again.output, "--force"));
  CHECK(fs::last_write_time(out / "steps.csv") == csv_before);

  // --force: the old run's files go (hist/step_000001 of the old run, grads/), the new run's come; other files stay.
  const auto forced = run_mpsim(dir, kTrain + "--hist-steps 2 --force --out " + quote(out.string()));
  CHECK(forced.status == 0);
  std::size_t hist_files = 0;
  for (const auto& e : fs::directory_iterator(out / "hist")) hist_files += e.is_regular_file();
  std::printf("--force: hist/ holds %zu file(s), grads/ exists: %d, notes.txt kept: %d\n", hist_files,
              int(fs::exists(out / "grads")), int(fs::exists(out / "notes.txt")));
  CHECK(hist_files == 1);
  CHECK(fs::exists(out / "hist" / "step_000002.json"));
  CHECK_FALSE(fs::exists(out / "grads"));
  CHECK(fs::exists(out / "notes.txt"));

  // Resuming into the same folder reads the checkpoint before --force removes it.
  const auto resumed =
      run_mpsim(dir,
                "train --model lstm --policy mixed-fp16 --steps 3 --size 8 --batch 2 --force "
                "--resume " +
                    quote((out / "checkpoint.safetensors").string()) + " --out " + quote(out.string()));
  CHECK(resumed.status == 0);
  CHECK(fs::exists(out / "checkpoint.safetensors"));
}

TEST_CASE("names that are not UTF-8, a folder as checkpoint, a FIFO as input: exit 2 with the name",
          "[output_path_cli]") {
  ScratchDir dir("out-names");
  const std::string odd = (dir / "run_\xe9").string();
  const auto bad_out = run_mpsim(dir, kTrain + "--out " + quote(odd));
  std::printf("train --out run_\\xe9: exit %d: %s", bad_out.status, bad_out.output.c_str());
  CHECK(bad_out.status == 2);
  CHECK(has(bad_out.output, "run_\\xe9"));
  CHECK_FALSE(fs::exists(odd));

  const auto folder =
      run_mpsim(dir, kTrain + "--resume " + quote(dir.path().string()) + " --out " + quote((dir / "r").string()));
  std::printf("train --resume FOLDER: exit %d: %s", folder.status, folder.output.c_str());
  CHECK(folder.status == 2);
  CHECK(has(folder.output, "is a folder"));
  CHECK_FALSE(fs::exists(dir / "r"));

  // An input whose name is not UTF-8 (the JSON report would have to name it).
  std::ofstream(dir / "g\xe9.npy") << "x";
  const auto odd_in = run_mpsim(
      dir, "underflow " + quote((dir / "g\xe9.npy").string()) + " --json " + quote((dir / "u.json").string()));
  std::printf("underflow g\\xe9.npy: exit %d: %s", odd_in.status, odd_in.output.c_str());
  CHECK(odd_in.status == 2);
  CHECK(has(odd_in.output, "g\\xe9.npy"));
  CHECK_FALSE(fs::exists(dir / "u.json"));

  // A FIFO nobody writes to: refused at once (the test's own timeout is the hang guard).
  REQUIRE(::mkfifo((dir / "pipe").c_str(), 0600) == 0);
  const auto fifo = run_shell(dir, "underflow " + quote((dir / "pipe").string()), "/dev/null");
  CHECK(fifo.status == 2);
  CHECK(has(fifo.output, "is a pipe"));
}
