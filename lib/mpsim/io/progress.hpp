// The progress line of long commands (docs/design.md, "Outputs": long work shows progress on a terminal).
//
//   io::ProgressBar bar("round x.npy", total_bytes, io::ProgressBar::Unit::bytes);
//   ... bar.advance(chunk_bytes); ...
//   bar.finish();   // (or let it go out of scope) erases the line
//
// It draws only when its stream is a terminal, so pipes, logs and tests see nothing; it stays silent for
// the first `delay` (a job that ends sooner never draws) and then redraws at most ten times a second: a
// bar, the amount done, the rate and the time left. advance() may be called from several threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace mpsim::io {

class ProgressBar {
 public:
  enum class Unit : std::uint8_t { bytes, steps, runs };
  using Clock = std::chrono::steady_clock;

  // Draws on `out` if it is a terminal (isatty), otherwise never. `delay`: how long to stay silent.
  ProgressBar(std::string label, std::uint64_t total, Unit unit, std::FILE* out = stderr,
              Clock::duration delay = std::chrono::milliseconds(500));
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void advance(std::uint64_t n);
  // Replaces the text after the figures (e.g. the run now training); drawn at the next redraw.
  void set_note(std::string note);
  // Erases the line if one was drawn. Idempotent.
  void finish();
  bool enabled() const { return enabled_; }
  std::uint64_t done() const { return done_.load(std::memory_order_relaxed); }

  // The line drawn for `done` of `total` after `seconds`, without the carriage return and the erase
  // sequence: "label [#####.....]  12.0/100.0 MiB  12%  48.0 MiB/s  ETA 0:02  note". Exposed for tests.
  static std::string line(const std::string& label, std::uint64_t done, std::uint64_t total, Unit unit, double seconds,
                          const std::string& note = {});

 private:
  void maybe_draw(bool force);

  std::string label_, note_;
  std::uint64_t total_;
  Unit unit_;
  std::FILE* out_;
  bool enabled_;
  Clock::time_point start_, next_draw_;
  std::atomic<std::uint64_t> done_{0};
  std::mutex draw_mutex_;
  bool drawn_ = false;
};

}  // namespace mpsim::io
