// lib/mpsim/io/atomic_file: the edges of the output path. Each case builds the situation with system calls
// (fork, mkfifo, symlink, chmod) and checks the file system afterwards with stat/lstat, independently of the
// class under test.
#include "mpsim/io/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "catch_compat.hpp"
#include "mpsim/error.hpp"
#include "test_files.hpp"

using mpsim::io::AtomicFile;
using mpsim::io::write_text_file;
using mpsim::test::error_of;
using mpsim::test::ScratchDir;
using mpsim::test::slurp;
namespace fs = std::filesystem;

namespace {

struct stat lstat_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st;
}

// A PID that no process has now: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

}  // namespace

TEST_CASE("a replaced file keeps its permission bits; a new one gets the umask's", "[atomic_file]") {
  ScratchDir dir("atomic-mode");
  const auto target = dir / "report.json";
  write_text_file(target, "old\n");
  REQUIRE(::chmod(target.c_str(), 0640) == 0);
  write_text_file(target, "new\n");
  const auto st = lstat_of(target);
  std::printf("replaced file: mode %o (was 640), contents %zu bytes\n", st.st_mode & 07777, slurp(target).size());
  CHECK((st.st_mode & 07777) == 0640);
  CHECK(slurp(target) == "new\n");
  // A read-only file is replaced too (rename needs the folder's permission, not the file's), and stays read-only.
  REQUIRE(::chmod(target.c_str(), 0444) == 0);
  write_text_file(target, "newer\n");
  CHECK((lstat_of(target).st_mode & 07777) == 0444);
  CHECK(slurp(target) == "newer\n");
  const mode_t mask = ::umask(022);
  write_text_file(dir / "fresh.json", "x");
  ::umask(mask);
  CHECK((lstat_of(dir / "fresh.json").st_mode & 07777) == 0644);
  CHECK(dir.files().size() == 2);
}

TEST_CASE("a symbolic link is followed: the file it points at is replaced, the link stays", "[atomic_file]") {
  ScratchDir dir("atomic-link");
  fs::create_directory(dir / "real");
  write_text_file(dir / "real" / "r.json", "old");
  fs::create_symlink("real/r.json", dir / "link.json");
  write_text_file(dir / "link.json", "new");
  CHECK(S_ISLNK(lstat_of(dir / "link.json").st_mode));
  CHECK(slurp(dir / "real" / "r.json") == "new");
  // A dangling link: the file is created where it points.
  fs::create_symlink("real/later.json", dir / "dangling.json");
  write_text_file(dir / "dangling.json", "made");
  CHECK(S_ISLNK(lstat_of(dir / "dangling.json").st_mode));
  CHECK(slurp(dir / "real" / "later.json") == "made");
  // No temporary is left beside the link or the file.
  std::size_t entries = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path()))
    entries += e.path().string().find(".tmp.") == std::string::npos;
  std::printf("symlinks: %zu entries, the links still links\n", entries);
  CHECK(entries == 5);
}

TEST_CASE("a FIFO is written in place, never replaced by a regular file", "[atomic_file]") {
  ScratchDir dir("atomic-fifo");
  const auto fifo = dir / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  std::thread reader([&] { got = slurp(fifo); });
  {
    AtomicFile f(fifo);
    CHECK(f.in_place());
    f.write("through the pipe\n");
    f.commit();
  }
  reader.join();
  std::printf("FIFO: reader got %zu bytes; still a FIFO: %d\n", got.size(), int(S_ISFIFO(lstat_of(fifo).st_mode)));
  CHECK(got == "through the pipe\n");
  CHECK(S_ISFIFO(lstat_of(fifo).st_mode));
  CHECK(dir.files().size() == 1);
}

TEST_CASE("a character device stays a device (/dev/null); /dev/full reports the disk-full error", "[atomic_file]") {
  ScratchDir dir("atomic-devices");
  const std::string null_dev = mpsim::test::safe_device(dir, "null", 1, 3);
  const std::string full_dev = mpsim::test::safe_device(dir, "full", 1, 7);
  if (null_dev.empty()) {
    WARN("no device node can be made here (root without CAP_MKNOD): skipped");
    return;
  }
  struct stat before {};
  REQUIRE(::stat(null_dev.c_str(), &before) == 0);
  write_text_file(null_dev, "discarded\n");
  const auto after = lstat_of(null_dev);
  std::printf("%s: still a character device %d, same device %d\n", null_dev.c_str(), int(S_ISCHR(after.st_mode)),
              int(after.st_rdev == before.st_rdev));
  CHECK(S_ISCHR(after.st_mode));
  CHECK(after.st_rdev == before.st_rdev);
  CHECK_FALSE(fs::exists(mpsim::io::temporary_name(null_dev, ::getpid())));
  const std::string msg = error_of([&] { write_text_file(full_dev, std::string(1 << 16, 'x')); });
  std::printf("%s: %s\n", full_dev.c_str(), msg.c_str());
  CHECK(msg.find(std::strerror(ENOSPC)) != std::string::npos);
  CHECK(S_ISCHR(lstat_of(full_dev).st_mode));
  // /dev/stdout is the descriptor itself, whatever it is (here: a pipe).
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const int saved = ::dup(STDOUT_FILENO);
  ::dup2(fds[1], STDOUT_FILENO);
  ::close(fds[1]);
  write_text_file("/dev/stdout", "to the pipe");
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  char got[32] = {};
  const auto n = ::read(fds[0], got, sizeof got - 1);
  ::close(fds[0]);
  std::printf("/dev/stdout onto a pipe: read back %zd bytes\n", n);
  CHECK(std::string(got) == "to the pipe");
}

TEST_CASE("a layout written out of order into a pipe is refused with the reason", "[atomic_file]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const std::string path = "/dev/fd/" + std::to_string(fds[1]);
  const std::string msg = error_of([&] {
    AtomicFile f(path);
    const char b = 'x';
    f.write_at(100, &b, 1);
  });
  ::close(fds[0]);
  ::close(fds[1]);
  std::printf("write_at on a pipe: %s\n", msg.c_str());
  CHECK(msg.find(path) != std::string::npos);
  CHECK(msg.find("regular file") != std::string::npos);
}

TEST_CASE("failures name the file and the system's reason, never \"Success\"", "[atomic_file]") {
  ScratchDir dir("atomic-errors");
  // The rename fails: a folder took the target's name while the file was being written.
  const std::string rename_msg = error_of([&] {
    AtomicFile f(dir / "t.json");
    f.write("x");
    fs::create_directory(dir / "t.json");
    fs::create_directory(dir / "t.json" / "inside");
    f.commit();
  });
  std::printf("rename onto a folder: %s\n", rename_msg.c_str());
  CHECK(rename_msg.find("t.json") != std::string::npos);
  CHECK((rename_msg.find(std::strerror(EISDIR)) != std::string::npos ||
         rename_msg.find(std::strerror(ENOTEMPTY)) != std::string::npos));
  CHECK(rename_msg.find("Success") == std::string::npos);
  // The temporary cannot be created: a missing folder.
  const std::string open_msg = error_of([&] { write_text_file(dir / "missing" / "t.json", "x"); });
  std::printf("missing folder: %s\n", open_msg.c_str());
  CHECK(open_msg.find(std::strerror(ENOENT)) != std::string::npos);
  // The target is a folder.
  const std::string dir_msg = error_of([&] { write_text_file(dir.path(), "x"); });
  CHECK(dir_msg.find(std::strerror(EISDIR)) != std::string::npos);
  std::size_t left = 0;
  for (const auto& name : dir.files()) left += name.find(".tmp.") != std::string::npos;
  CHECK(left == 0);
}

TEST_CASE("a stale temporary of a dead process is removed by the next write; a live one's stays", "[atomic_file]") {
  ScratchDir dir("atomic-stale");
  const auto target = dir / "out.npy";
  const auto stale = mpsim::io::temporary_name(target, dead_pid());
  const auto live = mpsim::io::temporary_name(target, ::getppid());
  const auto other = mpsim::io::temporary_name(dir / "other.npy", dead_pid());
  for (const auto& p : {stale, live, other}) write_text_file(p, "left by a killed run");
  write_text_file(target, "done");
  std::printf("stale %s removed: %d; live parent's kept: %d; another target's kept: %d\n", stale.filename().c_str(),
              int(!fs::exists(stale)), int(fs::exists(live)), int(fs::exists(other)));
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(live));
  CHECK(fs::exists(other));
  // Our own PID's name, left by an earlier process that had this PID (containers reuse small PIDs).
  const auto ours = mpsim::io::temporary_name(target, ::getpid());
  std::ofstream(ours) << "earlier process";
  write_text_file(target, "again");
  CHECK(slurp(target) == "again");
  CHECK_FALSE(fs::exists(ours));
}

TEST_CASE("SIGINT, SIGTERM and SIGHUP remove the live temporaries, then end the process by the signal",
          "[atomic_file]") {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    ScratchDir dir("atomic-signal");
    const auto target = dir / "big.npy";
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The child starts from the default actions, as a command-line process does.
      for (int s : {SIGINT, SIGTERM, SIGHUP}) ::signal(s, SIG_DFL);
      ::close(ready[0]);
      try {
        AtomicFile a(target), b(dir / "second.json");
        a.write(std::string(1 << 20, 'a'));
        b.write("b");
        (void)!::write(ready[1], "r", 1);
        for (;;) ::pause();
      } catch (...) {
        ::_exit(99);
      }
    }
    ::close(ready[1]);
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
    const auto temps_before = dir.files().size();
    ::kill(child, sig);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    std::printf("signal %d (%s): child ended by signal %d; %zu temporaries before, %zu files after\n", sig,
                ::strsignal(sig), WIFSIGNALED(status) ? WTERMSIG(status) : -1, temps_before, dir.files().size());
    CHECK(temps_before == 2);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    CHECK(dir.files().empty());
  }
}
