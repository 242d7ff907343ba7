// Output files appear whole or not at all (docs/design.md, "Errors"): write to a temporary name beside the
// target (TARGET.tmp.PID), flush it to disk, then rename over it. An AtomicFile that is destroyed without
// commit() removes its temporary.
//
// The edges of that path (docs/cli.md, "Output files"):
// - SIGINT, SIGTERM and SIGHUP remove every live temporary before the process dies of the signal (the
//   handler is installed when a temporary is made, only for signals at their default action, so a host such
//   as Python keeps its own SIGINT handler). A temporary left by a process killed outright (kill -9) is
//   removed by the next AtomicFile for the same target, once its PID is no longer running.
// - A symbolic link is followed: the file it points at is replaced, the link stays.
// - A target that exists and is not a regular file (a FIFO, a character device such as /dev/null or
//   /dev/full, a socket), and any path under /dev/ or /proc/ (/dev/stdout, bash's `>(...)` /dev/fd/N), is
//   written in place: opened for writing, never replaced. Such a write is not atomic, and a layout written
//   out of order (an .npz) needs a seekable target. A block device or a folder is refused.
// - A replaced regular file keeps its permission bits (and its owner where the process may set it).
// - Every failure names the file and the system's reason (strerror of the failing call's errno).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace mpsim::io {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Writes at a byte offset (a file laid out in advance; a gap reads as zeros until written). A later
  // write() continues after these bytes.
  void write_at(std::uint64_t offset, const void* data, std::size_t bytes);
  // Flushes, syncs to disk, closes and renames onto the target. Throws mpsim::Error naming the file on failure.
  void commit();
  const std::filesystem::path& target() const { return target_; }
  // True when the target is written in place (a FIFO, a device, a /dev/ or /proc/ path) rather than replaced.
  bool in_place() const { return temp_.empty(); }
  // The temporary being written ("" when in place).
  const std::filesystem::path& temporary() const { return temp_; }

 private:
  [[noreturn]] void fail(std::string_view what, int err) const;
  std::filesystem::path target_;  // as given (the messages name it)
  std::filesystem::path final_;   // where the rename goes: the target with its symbolic links followed
  std::filesystem::path temp_;
  std::FILE* file_ = nullptr;
  int registry_slot_ = -1;  // in the signal handler's list of live temporaries; -1 when not there
};

// Writes the whole text atomically.
void write_text_file(const std::filesystem::path& path, std::string_view text);

// The temporary name AtomicFile uses for `target` in process `pid`.
std::filesystem::path temporary_name(const std::filesystem::path& target, long pid);

}  // namespace mpsim::io
