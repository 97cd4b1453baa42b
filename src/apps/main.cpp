// sparse3d: the command line of the engine (apps/command_line.h). Exit codes: 0 success; 1 bad
// data or an engine error (one "sparse3d: error: ..." line); 2 a usage error (unknown option,
// missing or malformed argument, an unknown command); 3 an internal error (a bug: please
// report it).
#include <string>
#include <vector>

#include "apps/command_line.h"

int main(int argc, char** argv) {
  return s3d::apps::command_line(std::vector<std::string>(argv, argv + argc), "sparse3d");
}
