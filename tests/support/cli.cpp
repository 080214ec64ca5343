#include "support/cli.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <sstream>

#include "support/temp_dir.h"

namespace stalepipe::test {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

pid_t start_cli(const std::vector<std::string>& args, const std::string& out_path,
                const std::string& err_path, const std::string& cwd) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    const int in = open("/dev/null", O_RDONLY);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> argv;
    std::string binary = STALEPIPE_BINARY;
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

int wait_cli(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

CliResult run_cli(const std::vector<std::string>& args, const std::string& cwd) {
  TempDir dir;
  CliResult r;
  r.status = wait_cli(start_cli(args, dir.path() + "/out", dir.path() + "/err", cwd));
  r.out = slurp(dir.path() + "/out");
  r.err = slurp(dir.path() + "/err");
  return r;
}

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

void expect_one_line_error(const CliResult& r, int status, const std::string& fragment) {
  EXPECT_EQ(r.status, status) << r.err;
  EXPECT_NE(r.err.find("stalepipe: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << r.err;
  const std::string error = r.err.substr(r.err.find("stalepipe: error: "));
  EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 1) << "not one line: " << r.err;
}

void wait_for_checkpoint(const std::string& dir) {
  for (int i = 0; i < 1200 && !std::filesystem::exists(dir + "/checkpoint/manifest.json"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(std::filesystem::exists(dir + "/checkpoint/manifest.json"));
}

}  // namespace stalepipe::test
