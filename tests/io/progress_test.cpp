// Tests of lib/mpsim/io/progress.hpp: silent when its stream is not a terminal, the line it draws, and
// what reaches a real terminal (a pseudo-terminal opened here).
#include "mpsim/io/progress.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include "catch_compat.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using mpsim::io::ProgressBar;

namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;

// Everything readable on `fd` now.
std::string drain(int fd) {
  std::string got;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 50) > 0 && (p.revents & POLLIN)) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

}  // namespace

TEST_CASE("ProgressBar writes nothing when its stream is not a terminal", "[progress]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    ProgressBar bar("round big.npy", 512 * kMiB, ProgressBar::Unit::bytes, f, std::chrono::milliseconds(0));
    CHECK_FALSE(bar.enabled());
    for (int i = 0; i < 512; ++i) bar.advance(kMiB);
    bar.set_note("note");
    CHECK(bar.done() == 512 * kMiB);
  }  // the destructor would erase a line it had drawn
  CHECK(std::ftell(f) == 0);
  std::fclose(f);
}

TEST_CASE("ProgressBar::line: bar, amounts, rate and time left", "[progress]") {
  // A quarter of 256 MiB in 2 s: 6 of 24 bar cells, 32 MiB/s, the other 192 MiB in 6 s.
  CHECK(ProgressBar::line("round x.npy", 64 * kMiB, 256 * kMiB, ProgressBar::Unit::bytes, 2.0) ==
        "round x.npy [" + std::string(6, '#') + std::string(18, '.') + "] 64.0/256.0 MiB   25%  32.0 MiB/s  ETA 0:06");
  // 100 of 400 steps in 50 s: 2 steps/s, 300 left take 150 s = 2:30.
  CHECK(ProgressBar::line("train", 100, 400, ProgressBar::Unit::steps, 50.0, "loss 2.5") ==
        "train [" + std::string(6, '#') + std::string(18, '.') +
            "] 100/400 steps   25%  2 steps/s  ETA 2:30  loss 2.5");
  // Done; and nothing done yet (no rate, so no estimate); hours.
  CHECK(ProgressBar::line("s", 27, 27, ProgressBar::Unit::runs, 9.0) ==
        "s [" + std::string(24, '#') + "] 27/27 runs  100%  3 runs/s  ETA 0:00");
  CHECK(ProgressBar::line("s", 0, 27, ProgressBar::Unit::runs, 0.0) ==
        "s [" + std::string(24, '.') + "] 0/27 runs    0%  0 runs/s  ETA --:--");
  CHECK(ProgressBar::line("s", 1, 4, ProgressBar::Unit::runs, 1800.0).ends_with("ETA 1:30:00"));
}

TEST_CASE("ProgressBar draws on a terminal, at most ten times a second, and erases its line", "[progress]") {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) {
    WARN("SKIP: no pseudo-terminal here");
    return;
  }
  const char* slave_name = ::ptsname(master);
  REQUIRE(slave_name != nullptr);
  std::FILE* tty = std::fopen(slave_name, "w");
  REQUIRE(tty != nullptr);
  std::size_t redraws = 0;
  double seconds = 0;
  {
    ProgressBar bar("round big.npy", 400 * kMiB, ProgressBar::Unit::bytes, tty, std::chrono::milliseconds(0));
    REQUIRE(bar.enabled());
    const auto t0 = std::chrono::steady_clock::now();
    // 400 advances over about 0.4 s from two threads.
    std::thread other([&] {
      for (int i = 0; i < 200; ++i) {
        bar.advance(kMiB);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    for (int i = 0; i < 200; ++i) {
      bar.advance(kMiB);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    other.join();
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bar.finish();
    bar.finish();  // idempotent
  }
  std::fclose(tty);
  // The terminal turns "\n" into "\r\n" on output; the bar writes none.
  const std::string got = drain(master);
  ::close(master);
  for (std::size_t at = got.find("\rround big.npy ["); at != std::string::npos;
       at = got.find("\rround big.npy [", at + 1))
    ++redraws;
  INFO("terminal got: " << got);
  CHECK(got.find('\n') == std::string::npos);
  CHECK(redraws >= 1);
  CHECK(redraws <= 1 + static_cast<std::size_t>(seconds * 10) + 1);
  CHECK(got.find("MiB/s") != std::string::npos);
  CHECK(got.ends_with("\r\033[K"));
  WARN(redraws << " redraws in " << seconds << " s of 400 advances; the line is erased at the end");
}
