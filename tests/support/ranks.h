// Running the CLI as separate processes (ranks of the processes executor, the launcher) from
// a test: start, wait with a bound, read their files, compare their results.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/types.h>

namespace stalepipe::test {

// A TCP port on loopback that was free a moment ago.
int free_port();

// Starts `binary` (the CLI by default) with `args`, extra environment `env` ("K=V"), output
// to `log`, in the working directory `cwd` where one is given.
pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
            const std::string& log, const char* binary = STALEPIPE_BINARY, const std::string& cwd = "");

// Exit status (128+signal if killed), or -1 if still running after `seconds` (then killed).
int wait_for(pid_t pid, double seconds);

std::string slurp(const std::string& path);
// Waits until the file at `path` holds `text` (e.g. "pipeline": training runs); fails with the
// file's content after `seconds`.
::testing::AssertionResult file_shows(const std::string& path, const std::string& text, double seconds);
nlohmann::json json_file(const std::string& path);

// `train` of lenet5 on synthetic data with registers after `ppv`, one intra-op thread per
// partition, into `out`.
std::vector<std::string> train_args(const std::string& ppv, int partitions, const std::string& out,
                                    const std::string& executor, int epochs = 2,
                                    const std::string& data = "synthetic:256");
// `launch --nproc nproc --master-port <free> -- rest`.
std::vector<std::string> launch_args(int nproc, std::vector<std::string> rest);

// Runs `stalepipe launch --nproc nproc -- rest` to its end and returns its exit status. A
// master port that another test took between free_port() and the rendezvous is retried
// with a fresh one (twice at most).
int run_launch(int nproc, const std::vector<std::string>& rest, const std::string& log,
               double seconds, const std::vector<std::string>& env = {});

// torchrun's environment for `rank` of `world` with the master on 127.0.0.1:port.
std::vector<std::string> rank_env(int rank, int world, int port);

// Every tensor of every shard of the two runs' checkpoints is bitwise equal.
::testing::AssertionResult same_checkpoints(const std::string& a, const std::string& b);
// The summaries' losses, accuracies and steps are equal, and so are the checkpoints.
void expect_same_results(const std::string& a, const std::string& b);

// The last checkpoint of run_dir, a run of zoo model `model_name` (1 channel, `classes`
// classes) cut at `ppv`: per partition, its parameters and its buffers.
struct PartitionTensors {
  std::vector<torch::Tensor> parameters, buffers;
};
std::vector<PartitionTensors> checkpoint_tensors(const std::string& run_dir, const std::string& model_name,
                                                 const std::string& ppv, int64_t classes = 10);
// FNV-1a 64 over the bytes of each partition's parameters, then its buffers, partition by
// partition, as 16 hex digits.
std::string weights_digest(const std::string& run_dir, const std::string& model_name, const std::string& ppv);
// Every parameter, then every buffer, in model order whatever the cut: two runs of one model
// cut differently hold the same network where these are equal.
std::vector<torch::Tensor> model_tensors(const std::string& run_dir, const std::string& model_name,
                                         const std::string& ppv, int64_t classes = 10);

}  // namespace stalepipe::test
