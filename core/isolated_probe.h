// isolated_probe.h — isolated discovery: before the runtime loads plugins in-process, each
// candidate is opened, initialized and shut down in a forked child process. A candidate whose
// child dies by a signal, exits on its own, or hangs past the timeout is skipped (step
// "probe"); the survivors are then loaded in-process as usual. Enabled by
// plugins.isolated_discovery in the config or FL_ISOLATED_DISCOVERY=1.
//
// Not done: the child is a fork of the caller, so a plugin that only misbehaves when its
// driver was initialized in a fresh process is probed faithfully, but one that depends on
// state other threads of the caller hold (locks taken at fork time) may hang there and is then
// skipped as timed out. Probing runs before any plugin is loaded in-process, so no driver
// state of another plugin is inherited by the child.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace fl {

struct Config;
struct PluginCandidate;

struct ProbeResult {
  bool survived = false;  // the child finished (load errors included: the in-process load reports them)
  std::string reason;     // when not survived, e.g.
                          // "crashed during probe in a child process: signal 11 (SIGSEGV)"
};

// Forks; the child runs PluginLibrary::open + initialize(config.plugin_options(name)) +
// shutdown and exits without running the caller's exit handlers. The parent waits up to
// `timeout`, then kills the child (SIGKILL).
ProbeResult probe_plugin_in_child(const std::filesystem::path& file, const Config& config,
                                  std::chrono::milliseconds timeout);

// The timeout of one probe: FL_ISOLATED_DISCOVERY_TIMEOUT_MS if set and valid, else 20 s.
std::chrono::milliseconds isolated_probe_timeout();

// Probes every candidate that discovery did not refuse; returns path → reason for those that
// did not survive.
std::map<std::string, std::string> probe_candidates(const std::vector<PluginCandidate>& candidates,
                                                    const Config& config);

// "SIGSEGV" for 11, "signal 64" for one without a name.
std::string signal_name(int signal_number);

}  // namespace fl
