// Teams of threads or one thread, chosen per run from whether the last runs waited for cores.
//
// A parallel op (a fused kernel's parallel_for, a oneDNN primitive made for several threads)
// runs as an OpenMP team that meets at barriers. On a machine whose cores other processes
// keep busy, a team member loses its core now and then, and the whole team waits for it, a
// scheduler slice or more at each barrier: a cifar_resnet20 run of 1.5 ms took 128 ms once
// (bench/README.md, "Thread contention"). One thread never waits for another.
//
// So each run looks at how long its team's threads sat on a run queue (Linux's
// /proc/self/task/TID/schedstat) while its teams ran. When a member waited for more than a
// quarter of that time on average, the runs after it go solo: every parallel op on the
// calling thread, oneDNN primitives made for one thread. Results stay the same bits: fused
// kernels compute each element alike on any thread, and a oneDNN op whose one-thread
// primitive sums in another order than its team's (checked once, on a probe input; one
// with a bf16 or f16 output, whose rounding hides such differences, is not probed) keeps
// its team in solo runs. After a back-off (50 ms, doubling
// while the probes keep waiting, at most 2 s) one run tries teams again. A run that does
// not start a team costs nothing here: the readings are taken at its first team.
//
// AMPFUSE_TEAMS=adaptive (the default) | always | never fixes the choice instead; without
// schedstat (a kernel built without it) adaptive means always.
#pragma once

#include <cstdint>

namespace ampfuse::runtime {

enum class TeamChoice { adaptive, always, never };

// AMPFUSE_TEAMS, read once (or what set_team_choice set). An unknown value is an error
// naming the variable.
TeamChoice team_choice();

// Whether parallel work started now on this thread runs on the calling thread alone: inside a
// RunTeams scope, that run's choice; outside one, the process's current choice.
bool run_solo();

// Called by a parallel op just before it starts a team (not when it runs inline): the first
// call in a RunTeams scope reads the team's run-queue times.
void team_starting();

// One run's choice of teams or solo, for its lifetime, on the thread that runs it.
class RunTeams {
 public:
  RunTeams();
  // If teams ran, reads the run-queue times again and tells the policy what it saw.
  ~RunTeams();
  RunTeams(const RunTeams&) = delete;
  RunTeams& operator=(const RunTeams&) = delete;

  bool solo() const { return solo_; }

 private:
  friend void team_starting();
  bool solo_ = false;
  bool inner_ = false;     // inside another run's scope: that one decides and measures
  bool measuring_ = false;  // a team started: the readings below are taken
  int64_t start_ns_ = 0, delay_before_ns_ = 0;
};

// Overrides AMPFUSE_TEAMS for the rest of the process (an embedding application's setting,
// tests); returns the choice it replaces.
TeamChoice set_team_choice(TeamChoice choice);

// ---- The decision, apart from the clock and /proc (for tests) ----------------------------

// The adaptive state: when runs may use teams again, and the current back-off.
class TeamPolicy {
 public:
  static constexpr int64_t kFirstBackoffNs = 50'000'000;  // 50 ms
  static constexpr int64_t kLastBackoffNs = 2'000'000'000;  // 2 s

  // Whether a run starting at `now_ns` goes solo.
  bool solo_at(int64_t now_ns) const;
  // A run whose teams ran for `span_ns` of wall time, during which `members` threads sat on
  // run queues for `waited_ns` in all, ended at `now_ns`.
  void observe(int64_t now_ns, int64_t span_ns, int members, int64_t waited_ns);
  int64_t backoff_ns() const { return backoff_ns_; }
  int64_t solo_until_ns() const { return solo_until_ns_; }

  // Whether such a run waited for cores: its members waited for more than a quarter of the
  // teams' span on average. (Not less: waking a sleeping thread puts it on a run queue for
  // some microseconds, which adds up over a team of 16 and many short regions.)
  static bool waited_for_cores(int64_t span_ns, int members, int64_t waited_ns);

 private:
  int64_t solo_until_ns_ = 0;
  int64_t backoff_ns_ = kFirstBackoffNs;
};

// The process's policy counters (RunStats reports them per run; these are for tests).
struct TeamCounters {
  int64_t solo_runs = 0;       // runs that went solo
  int64_t measured_runs = 0;   // runs that started a team and were measured
  int64_t contended_runs = 0;  // of those, runs whose teams waited for cores
};
TeamCounters team_counters();

// This thread's total time on a run queue (ns), from schedstat; -1 where there is none.
int64_t thread_run_delay_ns();

}  // namespace ampfuse::runtime
