#include "netstack/sandbox/sandbox_init.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <grp.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace netstack::sandbox::init {

const char* StepName(int step) {
  switch (step) {
    case kSetns: return "enter the guest's network namespace";
    case kUnshareMount: return "make a mount namespace";
    case kPrivate: return "make / private in it";
    case kBind: return "bind-mount resolv.conf over /etc/resolv.conf";
    case kOverlayEtc: return "mount an overlay of /etc with resolv.conf";
    case kMountProc:
      return "mount a /proc of CMD's PID namespace (without it CMD would "
             "see the host's processes, netstackd's among them)";
    case kCover: return "cover the forward API's socket";
    case kJoinUserns: return "enter CMD's user namespace";
    case kBecomeRoot: return "become root of CMD's user namespace";
    case kLockMounts: return "make CMD's mount namespace (mounts locked)";
    case kSetsid: return "make a session for CMD";
    case kPty: return "open a pty for CMD";
    case kForkCommand: return "fork CMD in the PID namespace";
    case kControllingTty: return "make the pty CMD's controlling terminal";
    default: return "exec";
  }
}

pid_t CloneProcess(unsigned long flags) {
  return static_cast<pid_t>(
      ::syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr,
                nullptr));
}

namespace {

// What the kernel sends the init when netstackd dies (PR_SET_PDEATHSIG),
// and what netstackd sends to end it early: the init puts the user's
// terminal back and exits; the kernel then kills the rest of the
// namespace.
constexpr int kEnd = kEndSignal;
static_assert(kEndSignal == SIGUSR2);

void Report(int pipe_fd, int step) {
  const ChildReport r{step, errno};
  (void)!::write(pipe_fd, &r, sizeof(r));
}

[[noreturn]] void Fail(int pipe_fd, int step) {
  Report(pipe_fd, step);
  _exit(127);
}

// Whether nobody reads the start pipe any more: netstackd died before the
// child asked to die with it.
bool StartPipeOrphaned(int pipe_fd) {
  struct pollfd p = {.fd = pipe_fd, .events = POLLOUT, .revents = 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0;
}

void DieWithParent(int pipe_fd) {
  ::prctl(PR_SET_PDEATHSIG, kEnd);
  if (StartPipeOrphaned(pipe_fd)) _exit(127);
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// A path or option string built without malloc; false when it does not
// fit.
class Text {
 public:
  Text& Add(const char* s) {
    const size_t n = std::strlen(s);
    if (len_ + n >= sizeof(buf_)) {
      ok_ = false;
      return *this;
    }
    std::memcpy(buf_ + len_, s, n);
    len_ += n;
    buf_[len_] = '\0';
    return *this;
  }
  bool ok() const { return ok_; }
  const char* c_str() const { return buf_; }

 private:
  char buf_[PATH_MAX * 3] = {};
  size_t len_ = 0;
  bool ok_ = true;
};

// /etc/resolv.conf does not resolve, so there is nothing to bind over:
// CMD's /etc becomes an overlay whose upper layer, a tmpfs of this mount
// namespace, holds our resolv.conf. The host's /etc is not touched.
bool OverlayEtc(const InitPlan& plan) {
  if (::mount("tmpfs", plan.overlay_dir, "tmpfs", MS_NOSUID | MS_NODEV,
              "mode=0755") != 0) {
    return false;
  }
  Text upper, work, file, options;
  upper.Add(plan.overlay_dir).Add("/upper");
  work.Add(plan.overlay_dir).Add("/work");
  file.Add(upper.c_str()).Add("/resolv.conf");
  options.Add("lowerdir=/etc,upperdir=").Add(upper.c_str())
      .Add(",workdir=").Add(work.c_str());
  if (!upper.ok() || !work.ok() || !file.ok() || !options.ok()) {
    errno = ENAMETOOLONG;
    return false;
  }
  if (::mkdir(upper.c_str(), 0755) != 0 || ::mkdir(work.c_str(), 0755) != 0) {
    return false;
  }
  const int fd =
      ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool written = WriteAll(fd, plan.resolv_text, plan.resolv_len);
  ::close(fd);
  if (!written) return false;
  return ::mount("overlay", "/etc", "overlay", 0, options.c_str()) == 0;
}

// The mount namespace of the init's user namespace (netstackd's): /
// private, resolv.conf, and a /proc of the PID namespace over the host's.
// Mounted here, in a namespace CMD's user namespace does not own, they are
// locked in CMD's (LockMounts): CMD cannot unmount them.
void SetUpMounts(const InitPlan& plan) {
  if (::unshare(CLONE_NEWNS) != 0) Fail(plan.pipe_fd, kUnshareMount);
  // Private first: nothing mounted here may propagate to the host's.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    Fail(plan.pipe_fd, kPrivate);
  }
  if (plan.resolv_path != nullptr &&
      ::mount(plan.resolv_path, "/etc/resolv.conf", nullptr, MS_BIND,
              nullptr) != 0) {
    Fail(plan.pipe_fd, kBind);
  }
  if (plan.overlay_dir != nullptr && !OverlayEtc(plan)) {
    Report(plan.pipe_fd, kOverlayEtc);  // a note: CMD starts without it
  }
  if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              nullptr) != 0) {
    Fail(plan.pipe_fd, kMountProc);
  }
  for (const char* const* p = plan.cover; p != nullptr && *p != nullptr;
       ++p) {
    if (::mount("/dev/null", *p, nullptr, MS_BIND, nullptr) != 0) {
      Fail(plan.pipe_fd, kCover);
    }
  }
}

// CMD's user namespace, and a mount namespace of its own: copied into a
// namespace of a less privileged user namespace, every mount is locked
// (the kernel's MNT_LOCKED), so CMD cannot unmount /proc or resolv.conf.
void LockMounts(const InitPlan& plan) {
  if (plan.userns_fd < 0) return;
  if (::setns(plan.userns_fd, CLONE_NEWUSER) != 0) {
    Fail(plan.pipe_fd, kJoinUserns);
  }
  // setns keeps our ids: as root, kuid 0, which C maps to nothing unless
  // --runas 0. Root of C it is, then: no supplementary groups (root's
  // would stay), C's gid and uid 0 (the --runas ids outside). The saved
  // uid stays netstackd's, so that netstackd, whose capabilities are gone
  // after setup, may still signal the init; CMD's exec drops it.
  // (setgroups is denied in C when netstackd is not root: its groups are
  // the caller's own, as before.)
  if (::setgroups(0, nullptr) != 0 && errno != EPERM) {
    Fail(plan.pipe_fd, kBecomeRoot);
  }
  if (::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, -1) != 0) {
    Fail(plan.pipe_fd, kBecomeRoot);
  }
  // A change of ids may make a process dumpable again (fs.suid_dumpable).
  ::prctl(PR_SET_DUMPABLE, 0);
  if (::unshare(CLONE_NEWNS) != 0) Fail(plan.pipe_fd, kLockMounts);
  DieWithParent(plan.pipe_fd);  // again: credentials changed
}

void SignalSet(sigset_t* set) {
  sigemptyset(set);
  // Passed on to CMD: those netstackd passes on.
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  sigaddset(set, SIGHUP);
  // Handled here.
  sigaddset(set, SIGCHLD);
  sigaddset(set, SIGWINCH);
  sigaddset(set, kEnd);
}

// Closes every fd but those in keep[0..n) (each >= 0, ascending).
void CloseAllBut(const int* keep, int n) {
  unsigned first = 0;
  for (int i = 0; i < n; ++i) {
    const unsigned k = static_cast<unsigned>(keep[i]);
    if (k > first) ::close_range(first, k - 1, 0);
    first = k + 1;
  }
  ::close_range(first, ~0U, 0);
}

// The user's terminal, raw while CMD's pty is in use: every key (^C, ^Z,
// ^\ among them) goes to CMD's pty, whose line discipline makes it a
// signal for CMD's foreground job, once. Output processing stays on, so
// netstackd's own messages still start at the left margin.
struct Terminal {
  bool saved = false;
  struct termios before {};

  void MakeRaw() {
    if (::tcgetattr(0, &before) != 0) return;
    saved = true;
    struct termios raw = before;
    raw.c_iflag &= ~(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR |
                     ICRNL | IXON);
    raw.c_lflag &= ~(ECHO | ECHONL | ICANON | ISIG | IEXTEN);
    raw.c_cflag &= ~(CSIZE | PARENB);
    raw.c_cflag |= CS8;
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    ::tcsetattr(0, TCSADRAIN, &raw);
  }
  void Restore() {
    if (saved) ::tcsetattr(0, TCSADRAIN, &before);
    saved = false;
  }
};

// Pid 1's loop, on a signalfd: signals are passed on to CMD, children
// reaped, and with a pty, bytes relayed between the user's terminal and
// CMD's. When CMD ends, the init ends with its status (128 + N for signal
// N: the number netstackd reports either way), and the kernel kills
// everything left in the namespace.
class Init {
 public:
  Init(pid_t command, int signals, int master, bool relay_input,
       int tty_out)
      : command_(command), signals_(signals), master_(master),
        tty_in_(master >= 0 && relay_input ? 0 : -1), tty_out_(tty_out),
        master_open_(master >= 0) {
    if (master_ >= 0) {
      ::fcntl(master_, F_SETFL, ::fcntl(master_, F_GETFL) | O_NONBLOCK);
    }
    if (tty_in_ >= 0) terminal_.MakeRaw();
  }

  [[noreturn]] void Run() {
    for (;;) {
      struct pollfd p[3];
      int n = 0;
      p[n++] = {.fd = signals_, .events = POLLIN, .revents = 0};
      const int in_at = tty_in_ >= 0 && pending_ == 0 ? n++ : -1;
      if (in_at >= 0) p[in_at] = {.fd = tty_in_, .events = POLLIN,
                                  .revents = 0};
      // Once no process has the pty open, POLLHUP would wake us at once,
      // every time: the master is polled only while it may be read.
      const int master_at = master_open_ ? n++ : -1;
      if (master_at >= 0) {
        p[master_at] = {
            .fd = master_,
            .events = static_cast<short>(
                (master_open_ ? POLLIN : 0) | (pending_ > 0 ? POLLOUT : 0)),
            .revents = 0};
      }
      if (::poll(p, n, -1) < 0) continue;  // EINTR
      if (p[0].revents != 0) OnSignal();
      if (in_at >= 0 && p[in_at].revents != 0) FromUser();
      if (master_at >= 0 && p[master_at].revents != 0) {
        if (pending_ > 0) ToCommand();
        if (master_open_) FromCommand();
      }
    }
  }

 private:
  void OnSignal() {
    struct signalfd_siginfo si;
    if (::read(signals_, &si, sizeof(si)) != sizeof(si)) return;
    const int signo = static_cast<int>(si.ssi_signo);
    if (signo == SIGCHLD) {
      int status;
      pid_t r;
      while ((r = ::waitpid(-1, &status, WNOHANG)) > 0) {
        if (r != command_) continue;
        End(WIFEXITED(status)     ? WEXITSTATUS(status)
            : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                  : 1);
      }
    } else if (signo == SIGWINCH) {
      struct winsize ws;
      if (master_ >= 0 && ::ioctl(0, TIOCGWINSZ, &ws) == 0) {
        ::ioctl(master_, TIOCSWINSZ, &ws);  // CMD's job gets SIGWINCH
      }
    } else if (signo == kEnd) {
      End(128 + SIGKILL);
    } else {
      ::kill(command_, signo);
    }
  }

  void FromUser() {
    const ssize_t n = ::read(tty_in_, buf_, sizeof(buf_));
    if (n > 0) {
      pending_ = static_cast<size_t>(n);
      sent_ = 0;
      ToCommand();
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      tty_in_ = -1;  // the terminal hung up: nothing more to read
    }
  }

  void ToCommand() {
    const ssize_t w = ::write(master_, buf_ + sent_, pending_ - sent_);
    if (w > 0) sent_ += static_cast<size_t>(w);
    if ((w < 0 && errno != EAGAIN && errno != EINTR) || !master_open_) {
      sent_ = pending_;  // nobody will read it
    }
    if (sent_ == pending_) pending_ = sent_ = 0;
  }

  // Returns whether there was something to read.
  bool FromCommand() {
    char out[4096];
    const ssize_t n = ::read(master_, out, sizeof(out));
    if (n > 0) {
      if (tty_out_ >= 0) (void)WriteAll(tty_out_, out, static_cast<size_t>(n));
      return true;
    }
    // EIO: no process has the pty's other side open any more.
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) master_open_ = false;
    return false;
  }

  [[noreturn]] void End(int status) {
    // What CMD printed last, still in the pty: until 20 ms pass without
    // output, and 100 ms or 64 KiB at most, since a background process
    // of CMD's may keep writing (and would keep the init, and the
    // namespace, alive).
    struct timespec start;
    ::clock_gettime(CLOCK_MONOTONIC, &start);
    for (int chunks = 0; master_open_ && chunks < 16; ++chunks) {
      struct timespec now;
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      const long elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 +
                              (now.tv_nsec - start.tv_nsec) / 1'000'000;
      if (elapsed_ms >= 100) break;
      struct pollfd p = {.fd = master_, .events = POLLIN, .revents = 0};
      if (::poll(&p, 1, 20) != 1 || !FromCommand()) break;
    }
    terminal_.Restore();
    _exit(status);
  }

  const pid_t command_;
  const int signals_;
  const int master_;
  int tty_in_;
  const int tty_out_;
  // Whether the pty's master may still have something to read (none
  // without a pty: End() must not wait for it, 20 ms a start before).
  bool master_open_;
  Terminal terminal_;
  char buf_[4096];
  size_t pending_ = 0;
  size_t sent_ = 0;
};

// CMD's pty: the master to *master, the peer to *slave, the terminal's
// modes and size copied from the user's.
void OpenPty(const InitPlan& plan, int* master, int* slave) {
  *master = ::open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
  int unlock = 0;
  if (*master < 0 || ::ioctl(*master, TIOCSPTLCK, &unlock) != 0) {
    Fail(plan.pipe_fd, kPty);
  }
  *slave = ::ioctl(*master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (*slave < 0) Fail(plan.pipe_fd, kPty);
  // CMD's terminal starts as the user's: modes and size.
  struct termios t;
  if (::tcgetattr(0, &t) == 0) ::tcsetattr(*slave, TCSANOW, &t);
  struct winsize ws;
  if (::ioctl(0, TIOCGWINSZ, &ws) == 0) ::ioctl(*slave, TIOCSWINSZ, &ws);
}

// In CMD's process (pid 2): the pty as its terminal, if any, then CMD.
[[noreturn]] void ExecCommand(const InitPlan& plan, int slave) {
  if (slave >= 0) {
    // A session whose controlling terminal is the pty: CMD's shell has
    // job control, and TIOCSTI types into CMD's own input only.
    if (::setsid() < 0 || ::ioctl(slave, TIOCSCTTY, 0) != 0) {
      Fail(plan.pipe_fd, kControllingTty);
    }
    for (int fd = 0; fd <= 2; ++fd) {
      if (::isatty(fd)) ::dup2(slave, fd);
    }
  }
  // The event loop blocks the signals it handles; CMD starts clean.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execvp(plan.argv[0], plan.argv);
  Fail(plan.pipe_fd, kExec);
}

// The init keeps no fd of netstackd's (the TAP, its sockets), not the
// start pipe (netstackd reads to its end), not CMD's stdio; with a pty,
// only the user's terminal and the pty's master.
void CloseInheritedFds(const InitPlan& plan, int master, int signals) {
  if (master < 0) {
    const int keep[1] = {signals};
    CloseAllBut(keep, 1);
    return;
  }
  int keep[4] = {plan.relay_input ? 0 : -1, plan.tty_out, master, signals};
  int n = 0;
  // Ascending, unique, valid.
  for (int i = 0; i < 4; ++i) {
    if (keep[i] >= 0) keep[n++] = keep[i];
  }
  for (int i = 1; i < n; ++i) {
    for (int j = i; j > 0 && keep[j - 1] > keep[j]; --j) {
      const int t = keep[j];
      keep[j] = keep[j - 1];
      keep[j - 1] = t;
    }
  }
  int m = 0;
  for (int i = 0; i < n; ++i) {
    if (m == 0 || keep[m - 1] != keep[i]) keep[m++] = keep[i];
  }
  CloseAllBut(keep, m);
}

}  // namespace

void RunInit(const InitPlan& plan) {
  // The sanitizer runtimes' handlers (ASan builds) are netstackd's, not
  // the init's: a fault here, or a signal CMD sends, ends it the default
  // way, without running their report in a clone.
  const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
  for (int signo : faults) ::signal(signo, SIG_DFL);
  // CMD dies with netstackd: without us it has no network. The init's
  // death is CMD's, and its whole namespace's.
  DieWithParent(plan.pipe_fd);
  if (::setns(plan.netns_fd, CLONE_NEWNET) != 0) Fail(plan.pipe_fd, kSetns);
  SetUpMounts(plan);
  LockMounts(plan);
  // A session of its own: the terminal's signals (^C) reach netstackd,
  // which passes them on once, and CMD has no controlling terminal to
  // type into (TIOCSTI).
  if (::setsid() < 0) Fail(plan.pipe_fd, kSetsid);
  int master = -1;
  int slave = -1;
  if (plan.pty) OpenPty(plan, &master, &slave);
  // Blocked before CMD exists, so that none is lost before the loop.
  sigset_t waited;
  SignalSet(&waited);
  ::sigprocmask(SIG_SETMASK, &waited, nullptr);
  const int signals = ::signalfd(-1, &waited, SFD_CLOEXEC);
  if (signals < 0) Fail(plan.pipe_fd, kForkCommand);
  const pid_t command = CloneProcess(0);
  if (command < 0) Fail(plan.pipe_fd, kForkCommand);
  if (command == 0) ExecCommand(plan, slave);
  CloseInheritedFds(plan, master, signals);
  Init init(command, signals, master, plan.relay_input,
            master >= 0 ? plan.tty_out : -1);
  init.Run();
}

}  // namespace netstack::sandbox::init
