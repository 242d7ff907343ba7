#include "mpsim/io/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <utility>

#include "mpsim/error.hpp"

namespace mpsim::io {

namespace {

// ---- the live temporaries, for the signal handler ----------------------------------------------------------
// Fixed storage and lock-free atomics only: the handler may run at any instruction of any thread, so it can
// neither allocate nor take a lock (POSIX.1-2017, 2.4.3 "Signal Actions": unlink, sigaction and raise are
// async-signal-safe; lock-free std::atomic operations are, per [support.signal]).
constexpr int kSlots = 64;
constexpr std::size_t kSlotPath = 4096;  // PATH_MAX on Linux
enum SlotState : int { kFree = 0, kClaimed = 1, kLive = 2 };
struct Slot {
  std::atomic<int> state{kFree};
  char path[kSlotPath];
};
Slot g_slots[kSlots];
static_assert(std::atomic<int>::is_always_lock_free);

constexpr int kCleanedSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void remove_temporaries_and_die(int sig) {
  for (auto& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == kLive) ::unlink(s.path);
  // The default action, re-raised: the signal is blocked while this handler runs, so it is delivered (and
  // ends the process as if mpsim had never caught it, with the shell seeing 128 + sig) when the handler returns.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

// Looked at for every temporary (three sigaction calls, nothing beside creating a file): a signal set back to
// its default since the last file gets the handler again.
void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = remove_temporaries_and_die;
  sigemptyset(&sa.sa_mask);
  for (int sig : kCleanedSignals) sigaddset(&sa.sa_mask, sig);
  for (int sig : kCleanedSignals) {
    struct sigaction old {};
    // Only signals at their default action: an ignored SIGHUP (nohup) stays ignored, a host's handler stays.
    if (::sigaction(sig, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL)
      ::sigaction(sig, &sa, nullptr);
  }
}

int register_temporary(const std::string& path) {
  if (path.size() >= kSlotPath) return -1;  // still removed by the destructor, just not on a signal
  install_signal_handlers();
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (g_slots[i].state.compare_exchange_strong(expected, kClaimed, std::memory_order_acq_rel)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].state.store(kLive, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot < 0) return;
  g_slots[slot].state.store(kClaimed, std::memory_order_release);
  g_slots[slot].state.store(kFree, std::memory_order_release);
}

bool is_live_temporary(const std::string& path) {
  for (auto& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == kLive && path == s.path) return true;
  return false;
}

// ---- where the bytes go -------------------------------------------------------------------------------------

// The path with its symbolic links followed (also a dangling one: the file is created where it points).
std::filesystem::path follow_links(const std::filesystem::path& target) {
  std::filesystem::path p = target;
  std::error_code ec;
  for (int hops = 0; std::filesystem::is_symlink(p, ec); ++hops) {
    if (hops == 40)
      throw Error(fmt::format("{}: too many levels of symbolic links", target.string()));  // ELOOP's limit
    const auto link = std::filesystem::read_symlink(p, ec);
    if (ec) break;
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
  return p;
}

// The descriptor a /dev/stdout, /dev/stderr, /dev/fd/N or /proc/self/fd/N path names, or -1. Writing through
// a copy of it keeps the open file's offset and append mode (`mpsim ... --json /dev/stdout >> log`).
int named_descriptor(const std::string& path) {
  if (path == "/dev/stdout") return STDOUT_FILENO;
  if (path == "/dev/stderr") return STDERR_FILENO;
  for (std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (path.rfind(prefix, 0) != 0) continue;
    int fd = -1;
    const char* begin = path.c_str() + prefix.size();
    const char* end = path.c_str() + path.size();
    const auto [ptr, ec] = std::from_chars(begin, end, fd);
    if (ec == std::errc() && ptr == end && begin != end) return fd;
  }
  return -1;
}

// Removes TARGET.tmp.PID files whose process is gone (left by a run killed with SIGKILL, or by a crash).
void remove_stale_temporaries(const std::filesystem::path& final_path) {
  const std::string prefix = final_path.filename().string() + ".tmp.";
  std::filesystem::path dir = final_path.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    long pid = 0;
    const char* begin = name.c_str() + prefix.size();
    const char* stop = name.c_str() + name.size();
    const auto [ptr, err] = std::from_chars(begin, stop, pid);
    if (err != std::errc() || ptr != stop || pid <= 0) continue;
    // A PID that answers kill(pid, 0), or that we may not signal (EPERM: someone else's), may still be writing.
    if (pid == static_cast<long>(::getpid())) {
      if (is_live_temporary(it->path().string())) continue;
    } else if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) {
      continue;
    }
    std::error_code ignored;
    std::filesystem::remove(it->path(), ignored);
  }
}

}  // namespace

std::filesystem::path temporary_name(const std::filesystem::path& target, long pid) {
  std::filesystem::path temp = target;
  temp += ".tmp." + std::to_string(pid);
  return temp;
}

void AtomicFile::fail(std::string_view what, int err) const {
  throw Error(fmt::format("{}: {}: {}", target_.string(), what, std::strerror(err)));
}

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
  const std::string given = target_.string();
  struct stat st {};
  const bool exists = ::stat(given.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) fail("cannot write a file there", EISDIR);
  if (exists && S_ISBLK(st.st_mode))
    throw Error(
        fmt::format("{}: is a block device; mpsim writes its outputs to files, pipes and character "
                    "devices only",
                    given));
  const bool special_path = given.rfind("/dev/", 0) == 0 || given.rfind("/proc/", 0) == 0;
  if (special_path || (exists && !S_ISREG(st.st_mode))) {
    // In place: a FIFO, /dev/null, a terminal, bash's >(...) are opened and written, never replaced.
    int fd = -1;
    if (const int named = named_descriptor(given); named >= 0) fd = ::fcntl(named, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) fd = ::open(given.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) fail("cannot open for writing", errno);
    file_ = ::fdopen(fd, "wb");
    if (!file_) {
      const int err = errno;
      ::close(fd);
      fail("cannot open for writing", err);
    }
    final_ = target_;
    return;
  }

  final_ = follow_links(target_);
  remove_stale_temporaries(final_);
  temp_ = temporary_name(final_, static_cast<long>(::getpid()));
  // O_EXCL: never write through a link or into a file someone else made under the temporary's name.
  int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0 && errno == EEXIST && !is_live_temporary(temp_.string())) {
    ::unlink(temp_.c_str());  // left by an earlier process that had this PID (common in containers)
    fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  }
  if (fd < 0) {
    const int err = errno;
    temp_.clear();
    fail("cannot create", err);
  }
  registry_slot_ = register_temporary(temp_.string());
  if (exists) {
    // The replacement keeps the replaced file's permissions; the owner only where allowed (root, or a
    // group the user is in), silently otherwise, as `install -p` would not and `sed -i` does.
    ::fchmod(fd, st.st_mode & 07777);
    if (::fchown(fd, st.st_uid, st.st_gid) != 0) { /* not allowed: the file becomes the user's */
    }
  }
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp_.c_str());
    unregister_temporary(registry_slot_);
    registry_slot_ = -1;
    temp_.clear();
    fail("cannot create", err);
  }
}

AtomicFile::~AtomicFile() {
  if (file_) {
    std::fclose(file_);
    if (!temp_.empty()) ::unlink(temp_.c_str());
  }
  unregister_temporary(registry_slot_);
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  if (!file_) throw Error(target_.string() + ": written after commit");
  errno = 0;
  if (bytes && std::fwrite(data, 1, bytes, file_) != bytes) fail("write failed", errno ? errno : EIO);
}

void AtomicFile::write_at(std::uint64_t offset, const void* data, std::size_t bytes) {
  if (!file_) throw Error(target_.string() + ": written after commit");
  if (::fseeko(file_, static_cast<off_t>(offset), SEEK_SET) != 0) {
    if (errno == ESPIPE)
      throw Error(
          fmt::format("{}: this output is written out of order and needs a regular file, not a pipe "
                      "({})",
                      target_.string(), std::strerror(ESPIPE)));
    fail("seek failed", errno);
  }
  write(data, bytes);
}

void AtomicFile::commit() {
  if (!file_) throw Error(target_.string() + ": committed twice");
  errno = 0;
  if (std::fflush(file_) != 0 || std::ferror(file_)) fail("write failed", errno ? errno : EIO);
  // The data reaches the disk before the rename makes it the target's: after a crash the target holds the
  // old bytes or the new ones, never a renamed empty file (ext4's auto_da_alloc is a heuristic, not a promise).
  // Pipes and devices have nothing to sync (EINVAL); in place there is nothing to rename.
  if (!in_place() && ::fsync(::fileno(file_)) != 0 && errno != EINVAL) fail("cannot sync to disk", errno);
  const int closed = std::fclose(file_);
  const int close_errno = errno;
  file_ = nullptr;
  if (closed != 0) {
    if (!in_place()) ::unlink(temp_.c_str());
    unregister_temporary(std::exchange(registry_slot_, -1));
    fail("write failed", close_errno);
  }
  if (in_place()) return;
  if (::rename(temp_.c_str(), final_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    unregister_temporary(std::exchange(registry_slot_, -1));
    fail("cannot rename the finished file into place", err);
  }
  unregister_temporary(std::exchange(registry_slot_, -1));
  // The rename itself, made durable (best effort: a folder that cannot be opened or synced is left as is).
  std::filesystem::path dir = final_.parent_path();
  if (dir.empty()) dir = ".";
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_text_file(const std::filesystem::path& path, std::string_view text) {
  AtomicFile f(path);
  f.write(text);
  f.commit();
}

}  // namespace mpsim::io
