// isolated_probe.cpp — probing plugins in forked children (see isolated_probe.h).
#include "isolated_probe.h"

#include "config.h"
#include "log.h"
#include "plugin_discovery.h"
#include "plugin_library.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

namespace fl {
namespace {

// What the child writes to the pipe before it exits normally.
constexpr char kChildLoaded = 'L';      // open + init + shutdown succeeded
constexpr char kChildLoadError = 'E';   // a clean PluginLoadError (the in-process load reports it)

[[noreturn]] void run_child(int write_fd, const std::filesystem::path& file, const Config& config) {
  // Default dispositions, so a crash is a crash (not a handler the parent installed), and no
  // core file for a probe.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS})
    ::signal(sig, SIG_DFL);
  struct rlimit no_core {0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  log().set_level(spdlog::level::off);  // the parent logs the outcome
  char outcome = kChildLoadError;
  try {
    auto plugin = PluginLibrary::open(file);
    plugin->initialize(config.plugin_options(plugin->name()));
    plugin->shutdown();
    outcome = kChildLoaded;
  } catch (...) {
    outcome = kChildLoadError;
  }
  ssize_t ignored = ::write(write_fd, &outcome, 1);
  (void)ignored;
  ::_exit(0);
}

}  // namespace

std::string signal_name(int signal_number) {
  const char* abbrev = ::sigabbrev_np(signal_number);
  if (abbrev == nullptr) return "signal " + std::to_string(signal_number);
  return std::string("SIG") + abbrev;
}

std::chrono::milliseconds isolated_probe_timeout() {
  if (const char* v = std::getenv("FL_ISOLATED_DISCOVERY_TIMEOUT_MS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    long long ms = std::strtoll(v, &end, 10);
    if (end != v && *end == '\0' && ms > 0) return std::chrono::milliseconds(ms);
    log().warn("FL_ISOLATED_DISCOVERY_TIMEOUT_MS='{}' is not a positive integer; using 20000", v);
  }
  return std::chrono::milliseconds(20000);
}

ProbeResult probe_plugin_in_child(const std::filesystem::path& file, const Config& config,
                                  std::chrono::milliseconds timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    return {false, std::string("cannot probe in a child process: pipe: ") + ::strerror(errno)};
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return {false, std::string("cannot probe in a child process: fork: ") + ::strerror(err)};
  }
  if (pid == 0) {
    ::close(fds[0]);
    run_child(fds[1], file, config);
  }
  ::close(fds[1]);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  bool timed_out = false;
  for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, std::chrono::milliseconds(20))) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      const int err = errno;
      ::close(fds[0]);
      return {false, std::string("cannot probe in a child process: waitpid: ") + ::strerror(err)};
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(pause);
  }
  char outcome = 0;
  ssize_t got = 0;
  do {
    got = ::read(fds[0], &outcome, 1);
  } while (got < 0 && errno == EINTR);
  ::close(fds[0]);

  if (timed_out)
    return {false, "hung during probe in a child process: no answer after " +
                       std::to_string(timeout.count()) + " ms (killed)"};
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return {false, "crashed during probe in a child process: signal " + std::to_string(sig) + " (" +
                       signal_name(sig) + ")"};
  }
  if (got == 1 && (outcome == kChildLoaded || outcome == kChildLoadError) && WIFEXITED(status) &&
      WEXITSTATUS(status) == 0)
    return {true, ""};
  // The plugin ended the process itself (exit/_exit in its code) before the probe finished.
  return {false, "exited during probe in a child process with status " +
                     std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                     " before the probe finished"};
}

std::map<std::string, std::string> probe_candidates(const std::vector<PluginCandidate>& candidates,
                                                    const Config& config) {
  std::map<std::string, std::string> failed;
  const auto timeout = isolated_probe_timeout();
  for (const auto& c : candidates) {
    if (!c.refused.empty()) continue;
    log().debug("plugin {}: probing in a child process", c.path.string());
    ProbeResult r = probe_plugin_in_child(c.path, config, timeout);
    if (r.survived) {
      log().debug("plugin {}: probe survived", c.path.string());
    } else {
      log().debug("plugin {}: probe failed: {}", c.path.string(), r.reason);
      failed[c.path.string()] = r.reason;
    }
  }
  return failed;
}

}  // namespace fl
