// `stalepipe launch --nproc K [--master-port P] -- train ... --executor processes`: starts K
// ranks of this program on this host with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT set (torchrun's conventions), prints each rank's output lines prefixed with
// "[rank r] ", forwards SIGINT and SIGTERM, and when a rank exits non-zero stops the others
// (SIGTERM, then SIGKILL after --grace-seconds) and exits with that rank's status (128 + the
// signal for a rank killed by one). Ranks run in their own process group and die with the
// launcher (PR_SET_PDEATHSIG), so no rank outlives it.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "stalepipe/common/error.h"

namespace stalepipe::cli {
namespace {

std::atomic<int> g_forward_signal{0};

extern "C" void on_launcher_signal(int sig) { g_forward_signal = sig; }

// A port that was free a moment ago (bind to port 0 and let the kernel choose).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  SP_CHECK(fd >= 0, "launch: socket(): ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  SP_CHECK(ok, "launch: cannot find a free port: ", std::strerror(errno));
  return ntohs(addr.sin_port);
}

std::string self_path() {
  char buffer[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  SP_CHECK(n > 0, "launch: cannot read /proc/self/exe: ", std::strerror(errno));
  return std::string(buffer, static_cast<size_t>(n));
}

std::mutex g_output;

// Copies the rank's output to stdout line by line, prefixed.
void pump(int fd, int rank) {
  const std::string prefix = "[rank " + std::to_string(rank) + "] ";
  std::string pending;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    size_t start = 0, end;
    std::lock_guard<std::mutex> lock(g_output);
    while ((end = pending.find('\n', start)) != std::string::npos) {
      std::fwrite(prefix.data(), 1, prefix.size(), stdout);
      std::fwrite(pending.data() + start, 1, end - start + 1, stdout);
      start = end + 1;
    }
    std::fflush(stdout);
    pending.erase(0, start);
  }
  if (!pending.empty()) {
    std::lock_guard<std::mutex> lock(g_output);
    std::fprintf(stdout, "%s%s\n", prefix.c_str(), pending.c_str());
    std::fflush(stdout);
  }
  ::close(fd);
}

void say(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_output);
  std::fprintf(stderr, "[launch] %s\n", line.c_str());
  std::fflush(stderr);
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Starts `nproc` ranks of this program with `args` (torchrun's environment), each in its own
// process group, its output prefixed by a reader thread.
std::vector<pid_t> start_ranks(int nproc, const std::string& addr, int master_port,
                               std::vector<std::string>& args, std::vector<std::thread>& readers) {
  const std::string exe = self_path();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t launcher = ::getpid();
  std::vector<pid_t> pids(nproc, -1);
  for (int r = 0; r < nproc; ++r) {
    int fds[2];
    SP_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "launch: pipe(): ", std::strerror(errno));
    const pid_t pid = ::fork();
    SP_CHECK(pid >= 0, "launch: fork(): ", std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, 0);  // a terminal's Ctrl-C reaches the launcher only; it forwards once
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(137);
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(master_port).c_str(), 1);
      ::execv(exe.c_str(), argv.data());
      std::fprintf(stderr, "launch: cannot run %s: %s\n", exe.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    ::close(fds[1]);
    pids[r] = pid;
    say("rank " + std::to_string(r) + ": pid " + std::to_string(pid));
    readers.emplace_back(pump, fds[0], r);
  }
  return pids;
}

// Waits for every rank; forwards the launcher's signals; when one fails, asks the others to
// stop and kills them after `grace` seconds. Returns the first failure's status, or 0.
int supervise(std::vector<pid_t>& pids, int grace) {
  const int nproc = static_cast<int>(pids.size());
  using Clock = std::chrono::steady_clock;
  int alive = nproc;
  int failure = -1;  // status of the first rank that failed
  Clock::time_point kill_at = Clock::time_point::max();
  auto signal_all = [&](int sig) {
    for (pid_t pid : pids) {
      if (pid > 0) ::kill(pid, sig);
    }
  };
  while (alive > 0) {
    if (const int sig = g_forward_signal.exchange(0); sig != 0) {
      say(std::string("forwarding ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " to the ranks");
      signal_all(sig);
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < nproc; ++r) {
        if (pids[r] != pid) continue;
        pids[r] = -1;
        --alive;
        const int code = exit_status(status);
        if (code != 0 && failure < 0) {
          failure = code;
          say("rank " + std::to_string(r) + " exited with status " + std::to_string(code) +
              (alive > 0 ? "; stopping the other ranks" : ""));
          signal_all(SIGTERM);
          kill_at = Clock::now() + std::chrono::seconds(grace);
        }
      }
      continue;
    }
    if (Clock::now() >= kill_at) {
      say("ranks still running after " + std::to_string(grace) + " s; killing them");
      signal_all(SIGKILL);
      kill_at = Clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return failure < 0 ? 0 : failure;
}

}  // namespace

Command add_launch(CLI::App& app) {
  auto nproc = std::make_shared<int>(2);
  auto addr = std::make_shared<std::string>("127.0.0.1");
  auto port = std::make_shared<int>(0);
  auto grace = std::make_shared<int>(5);
  auto args = std::make_shared<std::vector<std::string>>();
  app.add_option("--nproc", *nproc, "ranks to start on this host (= partitions)")->capture_default_str();
  app.add_option("--master-addr", *addr, "MASTER_ADDR given to the ranks")->capture_default_str();
  app.add_option("--master-port", *port, "MASTER_PORT given to the ranks (0: $MASTER_PORT, else a free port)")->capture_default_str();
  app.add_option("--grace-seconds", *grace, "after a rank fails, time the others get to exit before SIGKILL")->capture_default_str();
  app.add_option("command", *args, "the stalepipe command each rank runs, after --, e.g. -- train --executor processes ...")->required();

  return [nproc, addr, port, grace, args]() {
    SP_CHECK_ARG(*nproc >= 1 && *nproc <= 256, "--nproc must be 1..256, got ", *nproc);
    SP_CHECK_ARG(*grace >= 0, "--grace-seconds must be >= 0, got ", *grace);
    int master_port = *port;
    if (master_port == 0) {
      const char* env = std::getenv("MASTER_PORT");
      master_port = env && *env ? std::atoi(env) : free_port();
    }
    SP_CHECK_ARG(master_port >= 1 && master_port <= 65535, "--master-port ", master_port,
                 " is not a TCP port");
    g_forward_signal = 0;
    std::signal(SIGINT, on_launcher_signal);
    std::signal(SIGTERM, on_launcher_signal);
    std::vector<std::thread> readers;
    std::vector<pid_t> pids = start_ranks(*nproc, *addr, master_port, *args, readers);
    const int status = supervise(pids, *grace);
    for (auto& t : readers) t.join();
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    return status;
  };
}

}  // namespace stalepipe::cli
