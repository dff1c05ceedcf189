#include "runtime/team_policy.h"

#include "ir/error.h"
#include "runtime/thread_pool.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace ampfuse::runtime {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TeamChoice parse_choice() {
  const char* env = std::getenv("AMPFUSE_TEAMS");
  if (!env) return TeamChoice::adaptive;
  const std::string v = env;
  if (v == "adaptive") return TeamChoice::adaptive;
  if (v == "always") return TeamChoice::always;
  if (v == "never") return TeamChoice::never;
  fail("AMPFUSE_TEAMS='{}': expected adaptive, always or never", v);
}

std::atomic<int> g_choice{-1};  // a TeamChoice once read

// schedstat's second field: nanoseconds spent waiting on a run queue.
int64_t read_run_delay(int fd) {
  char buf[96];
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char* end = nullptr;
  std::strtoll(buf, &end, 10);  // time on a CPU
  if (end == buf) return -1;
  const char* second = end;
  const long long delay = std::strtoll(second, &end, 10);
  return end == second ? -1 : delay;
}

int open_schedstat(long tid) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/schedstat";
  return open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

bool schedstat_available() {
  static const bool available = thread_run_delay_ns() >= 0;
  return available;
}

// The threads of this thread's OpenMP team (libgomp keeps one pool of workers per thread
// that starts parallel regions), as open schedstat files. Found by a region of the largest
// team size this thread's parallel ops ask for.
class TeamFiles {
 public:
  ~TeamFiles() { forget(); }

  // Their total run-queue time, or -1 (then the team is found again next time).
  int64_t run_delay() {
    if (fds_.empty()) find();
    int64_t total = 0;
    for (int fd : fds_) {
      const int64_t d = read_run_delay(fd);
      if (d < 0) {
        forget();
        return -1;
      }
      total += d;
    }
    return fds_.empty() ? -1 : total;
  }
  int members() const { return static_cast<int>(fds_.size()); }

 private:
  void find() {
    const int size = std::max(omp_get_max_threads(), ThreadPool::global().threads());
    std::vector<long> tids(static_cast<size_t>(size), 0);
#pragma omp parallel num_threads(size)
    tids[static_cast<size_t>(omp_get_thread_num())] = syscall(SYS_gettid);
    for (long tid : tids) {
      if (tid == 0) continue;  // a smaller team than asked for
      const int fd = open_schedstat(tid);
      if (fd >= 0) fds_.push_back(fd);
    }
  }
  void forget() {
    for (int fd : fds_) close(fd);
    fds_.clear();
  }
  std::vector<int> fds_;
};

thread_local TeamFiles t_team;
thread_local RunTeams* t_run = nullptr;  // the outermost run on this thread

struct Shared {
  std::mutex mutex;  // held by observe
  TeamPolicy policy;
  std::atomic<int64_t> solo_until{0};  // policy's, readable without the mutex
  std::atomic<int64_t> solo_runs{0}, measured_runs{0}, contended_runs{0};
};
Shared& shared() {
  static Shared s;
  return s;
}

bool adaptive_solo_now() {
  return team_choice() == TeamChoice::never ||
         (team_choice() == TeamChoice::adaptive && now_ns() < shared().solo_until.load(std::memory_order_relaxed));
}

}  // namespace

TeamChoice team_choice() {
  int c = g_choice.load(std::memory_order_relaxed);
  if (c < 0) {
    int expected = -1;
    g_choice.compare_exchange_strong(expected, static_cast<int>(parse_choice()));
    c = g_choice.load();
  }
  return static_cast<TeamChoice>(c);
}

TeamChoice set_team_choice(TeamChoice choice) {
  const TeamChoice old = team_choice();
  g_choice.store(static_cast<int>(choice));
  return old;
}

bool TeamPolicy::waited_for_cores(int64_t span_ns, int members, int64_t waited_ns) {
  return members > 0 && span_ns > 0 && waited_ns * 4 > span_ns * members;
}

bool TeamPolicy::solo_at(int64_t now) const { return now < solo_until_ns_; }

void TeamPolicy::observe(int64_t now, int64_t span_ns, int members, int64_t waited_ns) {
  if (!waited_for_cores(span_ns, members, waited_ns)) {
    backoff_ns_ = kFirstBackoffNs;
    return;
  }
  // A probe after a back-off waited again: wait longer before the next one.
  if (solo_until_ns_ != 0 && now - solo_until_ns_ < 4 * backoff_ns_)
    backoff_ns_ = std::min(backoff_ns_ * 2, kLastBackoffNs);
  solo_until_ns_ = now + backoff_ns_;
}

bool run_solo() {
  if (t_run) return t_run->solo();
  return adaptive_solo_now();
}

void team_starting() {
  RunTeams* run = t_run;
  if (!run || run->measuring_ || run->solo_ || team_choice() != TeamChoice::adaptive || !schedstat_available()) return;
  run->delay_before_ns_ = t_team.run_delay();
  if (run->delay_before_ns_ < 0) return;
  run->measuring_ = true;
  run->start_ns_ = now_ns();
}

RunTeams::RunTeams() {
  if (t_run) {
    inner_ = true;
    solo_ = t_run->solo_;
    return;
  }
  solo_ = adaptive_solo_now();
  if (solo_) shared().solo_runs.fetch_add(1, std::memory_order_relaxed);
  t_run = this;
}

RunTeams::~RunTeams() {
  if (inner_) return;
  t_run = nullptr;
  if (!measuring_) return;
  const int64_t after = t_team.run_delay();
  if (after < 0) return;
  const int64_t end = now_ns();
  const int64_t span = end - start_ns_, waited = after - delay_before_ns_;
  Shared& s = shared();
  s.measured_runs.fetch_add(1, std::memory_order_relaxed);
  if (TeamPolicy::waited_for_cores(span, t_team.members(), waited))
    s.contended_runs.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(s.mutex);
  s.policy.observe(end, span, t_team.members(), waited);
  s.solo_until.store(s.policy.solo_until_ns(), std::memory_order_relaxed);
}

TeamCounters team_counters() {
  const Shared& s = shared();
  return {s.solo_runs.load(), s.measured_runs.load(), s.contended_runs.load()};
}

int64_t thread_run_delay_ns() {
  const int fd = open_schedstat(syscall(SYS_gettid));
  if (fd < 0) return -1;
  const int64_t d = read_run_delay(fd);
  close(fd);
  return d;
}

}  // namespace ampfuse::runtime
