#include "support/ranks.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <torch/serialize.h>

#include "stalepipe/exec/checkpoint.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"

namespace stalepipe::test {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
            const std::string& log, const char* binary, const std::string& cwd) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (const auto& e : env) ::putenv(::strdup(e.c_str()));
    std::vector<char*> argv{const_cast<char*>(binary)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(binary, argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_for(pid_t pid, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

::testing::AssertionResult file_shows(const std::string& path, const std::string& text, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (slurp(path).find(text) == std::string::npos) {
    if (Clock::now() > deadline) {
      return ::testing::AssertionFailure() << path << " does not show '" << text << "' after " << seconds
                                           << " s:\n" << slurp(path);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ::testing::AssertionSuccess();
}

nlohmann::json json_file(const std::string& path) { return nlohmann::json::parse(slurp(path)); }

std::vector<std::string> train_args(const std::string& ppv, int partitions, const std::string& out,
                                    const std::string& executor, int epochs, const std::string& data) {
  return {"train", "--model", "lenet5", "--data", data, "--test-subset", "64",
          "--pipeline", ppv, "--epochs", std::to_string(epochs), "--batch-size", "32",
          "--threads", std::to_string(partitions), "--threads-per-worker", "1",
          "--eval-batch-size", "50", "--progress", "none", "--executor", executor,
          "--out", out};
}

std::vector<std::string> launch_args(int nproc, std::vector<std::string> rest) {
  std::vector<std::string> args{"launch", "--nproc", std::to_string(nproc), "--master-port",
                                std::to_string(free_port()), "--"};
  args.insert(args.end(), rest.begin(), rest.end());
  return args;
}

int run_launch(int nproc, const std::vector<std::string>& rest, const std::string& log,
               double seconds, const std::vector<std::string>& env) {
  for (int attempt = 0;; ++attempt) {
    const int status = wait_for(spawn(launch_args(nproc, rest), env, log), seconds);
    if (status == 0 || attempt == 2 || slurp(log).find("is the port already in use") == std::string::npos) {
      return status;
    }
  }
}

::testing::AssertionResult same_checkpoints(const std::string& a, const std::string& b) {
  const auto ma = json_file(a + "/checkpoint/manifest.json");
  const auto mb = json_file(b + "/checkpoint/manifest.json");
  if (ma["step"] != mb["step"] || ma["shards"] != mb["shards"]) {
    return ::testing::AssertionFailure() << "manifests differ: " << ma.dump() << " vs " << mb.dump();
  }
  for (const auto& shard : ma["shards"]) {
    torch::serialize::InputArchive xa, xb;
    xa.load_from(a + "/checkpoint/" + shard.get<std::string>());
    xb.load_from(b + "/checkpoint/" + shard.get<std::string>());
    const auto keys = xa.keys();
    if (keys != xb.keys()) return ::testing::AssertionFailure() << shard << ": keys differ";
    for (const auto& key : keys) {
      torch::Tensor ta, tb;
      if (!xa.try_read(key, ta) || !xb.try_read(key, tb)) continue;  // nested archives
      if (!torch::equal(ta, tb)) {
        return ::testing::AssertionFailure() << shard << " " << key << " differs";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

void expect_same_results(const std::string& a, const std::string& b) {
  const auto sa = json_file(a + "/summary.json");
  const auto sb = json_file(b + "/summary.json");
  for (const char* key : {"test_loss", "test_accuracy", "train_loss", "steps"}) {
    EXPECT_EQ(sa[key], sb[key]) << key;
  }
  EXPECT_TRUE(same_checkpoints(a, b));
}

std::vector<std::string> rank_env(int rank, int world, int port) {
  return {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world),
          "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)};
}

std::vector<PartitionTensors> checkpoint_tensors(const std::string& run_dir, const std::string& model_name,
                                                 const std::string& ppv, int64_t classes) {
  models::InputShape input;
  input.channels = 1;
  input.num_classes = classes;
  auto model = models::make_model(model_name, input);
  const auto plan = partition::make_plan(model, partition::parse_ppv(ppv));
  exec::Pipeline pipeline(model, plan, std::vector<torch::Device>(plan.num_partitions(), torch::kCPU),
                          optim::UpdateOptions());
  exec::load_checkpoint(run_dir, pipeline.stages());
  std::vector<PartitionTensors> out;
  for (int k = 0; k < pipeline.num_stages(); ++k) {
    out.push_back({pipeline.stage(k).module()->parameters(), pipeline.stage(k).module()->buffers()});
  }
  return out;
}

std::string weights_digest(const std::string& run_dir, const std::string& model_name, const std::string& ppv) {
  uint64_t h = 14695981039346656037ULL;
  auto add = [&h](const torch::Tensor& t) {
    const auto c = t.detach().contiguous().cpu();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ULL;
  };
  for (const auto& partition : checkpoint_tensors(run_dir, model_name, ppv)) {
    for (const auto& t : partition.parameters) add(t);
    for (const auto& t : partition.buffers) add(t);
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

std::vector<torch::Tensor> model_tensors(const std::string& run_dir, const std::string& model_name,
                                         const std::string& ppv, int64_t classes) {
  std::vector<torch::Tensor> parameters, buffers;
  for (const auto& partition : checkpoint_tensors(run_dir, model_name, ppv, classes)) {
    parameters.insert(parameters.end(), partition.parameters.begin(), partition.parameters.end());
    buffers.insert(buffers.end(), partition.buffers.begin(), partition.buffers.end());
  }
  parameters.insert(parameters.end(), buffers.begin(), buffers.end());
  return parameters;
}

}  // namespace stalepipe::test
