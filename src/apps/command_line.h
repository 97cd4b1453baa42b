// The sparse3d command line as a function: what the `sparse3d` executable runs, and what the
// Python package's command line (`sparse3d-engine`, `python -m sparse3d_engine`) runs through
// its native module, so that both are one implementation: the same options, checks, messages,
// exit codes, readers and writers.
#pragma once

#include <string>
#include <vector>

namespace s3d::apps {

// Parses `args` (args[0]: the program as the user typed it, which the usage lines show) and
// runs the command. Returns the exit code: 0 success; 1 bad data or an engine error (one
// "NAME: error: ..." line on stderr, NAME being `name`); 2 a usage error; 3 an internal error
// (a bug). For its duration the fatal signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE)
// remove the files under way and end the process by the signal, as they do in the executable;
// the handlers the caller had are put back when it returns. Standard output is flushed before
// it returns.
int command_line(const std::vector<std::string>& args, const std::string& name);

}  // namespace s3d::apps
