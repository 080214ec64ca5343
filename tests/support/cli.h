// Runs the stalepipe CLI as a child process, for integration tests.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace stalepipe::test {

struct CliResult {
  int status = -1;  // exit status, or 128 + signal
  std::string out, err;
};

// Runs `stalepipe args...` to completion (stdin closed), capturing its output; in the working
// directory `cwd` where one is given.
CliResult run_cli(const std::vector<std::string>& args, const std::string& cwd = "");

// Starts `stalepipe args...` with stdout/stderr sent to files; returns its pid.
pid_t start_cli(const std::vector<std::string>& args, const std::string& out_path,
                const std::string& err_path, const std::string& cwd = "");
// Waits for pid; returns its exit status, or 128 + signal.
int wait_cli(pid_t pid);

// `base` followed by `more`.
std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more);
// The run exited with `status` and one line "stalepipe: error: ..." holding `fragment`.
void expect_one_line_error(const CliResult& r, int status, const std::string& fragment);
// Waits until the run in `dir` has written its first checkpoint.
void wait_for_checkpoint(const std::string& dir);

}  // namespace stalepipe::test
