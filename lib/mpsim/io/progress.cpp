#include "mpsim/io/progress.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace mpsim::io {

namespace {

// Redraws at most this often: faster than the eye needs costs a write() and a terminal repaint each.
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);
constexpr int kBarWidth = 24;
constexpr double kMiB = 1024.0 * 1024.0;

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = static_cast<std::uint64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

ProgressBar::ProgressBar(std::string label, std::uint64_t total, Unit unit, std::FILE* out, Clock::duration delay)
    : label_(std::move(label)),
      total_(total),
      unit_(unit),
      out_(out),
      enabled_(out != nullptr && total > 0 && ::isatty(::fileno(out)) == 1),
      start_(Clock::now()),
      next_draw_(start_ + delay) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::advance(std::uint64_t n) {
  done_.fetch_add(n, std::memory_order_relaxed);
  if (enabled_) maybe_draw(false);
}

void ProgressBar::set_note(std::string note) {
  if (!enabled_) return;
  const std::lock_guard lock(draw_mutex_);
  note_ = std::move(note);
}

void ProgressBar::finish() {
  if (!enabled_) return;
  const std::lock_guard lock(draw_mutex_);
  if (drawn_) {
    std::fputs("\r\033[K", out_);
    std::fflush(out_);
  }
  enabled_ = false;
}

void ProgressBar::maybe_draw(bool force) {
  // Another thread drawing right now: this update shows at the next redraw.
  std::unique_lock lock(draw_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || !enabled_) return;
  const auto now = Clock::now();
  if (!force && now < next_draw_) return;
  next_draw_ = now + kRedrawEvery;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const std::string text = line(label_, std::min(done(), total_), total_, unit_, seconds, note_);
  // \r returns to the start of the line and \033[K (erase to end of line) clears what a longer line left.
  std::fputs(("\r" + text + "\033[K").c_str(), out_);
  std::fflush(out_);
  drawn_ = true;
}

std::string ProgressBar::line(const std::string& label, std::uint64_t done, std::uint64_t total, Unit unit,
                              double seconds, const std::string& note) {
  const double fraction = total ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 1.0;
  const int filled = static_cast<int>(fraction * kBarWidth);
  std::string text = fmt::format("{} [{}{}] ", label, std::string(filled, '#'), std::string(kBarWidth - filled, '.'));
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  const double left = rate > 0 ? static_cast<double>(total - std::min(done, total)) / rate : NAN;
  if (unit == Unit::bytes) {
    text += fmt::format("{:.1f}/{:.1f} MiB  {:3.0f}%  {:.1f} MiB/s", done / kMiB, total / kMiB, 100 * fraction,
                        rate / kMiB);
  } else {
    const char* name = unit == Unit::steps ? "steps" : "runs";
    text += fmt::format("{}/{} {}  {:3.0f}%  {:.3g} {}/s", done, total, name, 100 * fraction, rate, name);
  }
  text += "  ETA " + clock_text(left);
  if (!note.empty()) text += "  " + note;
  return text;
}

}  // namespace mpsim::io
